"""The process runtime's parts without a mesh: who runs, `$(VAR)`, paths, SPDY framing, group records."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from kubemesh.kubelet import spdy
from kubemesh.kubelet.processes import ConfigError, ProcessRuntime, expand, safe_relative
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import Kind, Obj
from kubemesh.services.process import groups


async def _no_get(kind: Kind, namespace: str, name: str) -> Obj:
    raise AssertionError("no API here")


def _runtime(tmp_path: Path, mode: str) -> ProcessRuntime:
    return ProcessRuntime(root=tmp_path, clock=ManualClock(), getter=_no_get, mode=mode,  # type: ignore[arg-type]
                          image_commands={"nginx:1": ("nginx", "-g", "daemon off;")})


def _pod(annotation: str | None = None, **container: object) -> Obj:
    md: Obj = {"name": "p", "namespace": "default"}
    if annotation is not None:
        md["annotations"] = {"kubemesh.io/runtime": annotation}
    return {"metadata": md, "spec": {"containers": [{"name": "c", **container}]}}


def test_who_runs_as_processes(tmp_path: Path) -> None:
    process, opt_in = _runtime(tmp_path, "process"), _runtime(tmp_path, "opt-in")
    assert process.wants(_pod(command=["sleep", "1"]))
    assert process.wants(_pod(image="nginx:1"))  # mapped to a local command
    assert not process.wants(_pod(image="registry.k8s.io/coredns/coredns:v1.11.3"))  # nothing to run: emulated
    assert not process.wants(_pod("emulated", command=["sleep", "1"]))
    assert process.wants(_pod("process", image="unmapped"))  # asked for: it fails to start, visibly
    assert not opt_in.wants(_pod(command=["sleep", "1"]))
    assert opt_in.wants(_pod("process", command=["sleep", "1"]))


def test_var_references_expand_as_upstream() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$(C)", env) == "$(C)"  # undefined: left as is
    assert expand("$$(A)", env) == "$(A)"  # escaped
    assert expand("$$$$", env) == "$$"


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "a/.."])
def test_paths_that_leave_their_base_are_refused(path: str) -> None:
    with pytest.raises(ConfigError, match=r"must be a relative path without '\.\.'"):
        safe_relative(path, what="subPath")


def test_spdy_header_blocks_round_trip_through_the_dictionary() -> None:
    headers = {"streamtype": "data", "port": "8080", "requestid": "0"}
    block = spdy.encode_headers(headers)
    assert struct.unpack_from(">I", block)[0] == 3
    deflate = zlib.compressobj(zdict=spdy.DICTIONARY)
    wire = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    assert wire[2:6] == struct.pack(">I", zlib.adler32(spdy.DICTIONARY))  # FDICT: the dictionary's id
    assert spdy.decode_headers(zlib.decompressobj(zdict=spdy.DICTIONARY).decompress(wire)) == headers
    assert len(spdy.DICTIONARY) == 1423


async def test_a_session_opens_streams_and_answers_pings() -> None:
    deflate = zlib.compressobj(zdict=spdy.DICTIONARY)
    block = deflate.compress(spdy.encode_headers({"streamType": "error"})) + deflate.flush(zlib.Z_SYNC_FLUSH)
    syn = struct.pack(">IIH", 1, 0, 0) + block
    frames = [struct.pack(">HHI", 0x8003, spdy.SYN_STREAM, len(syn)) + syn,
              struct.pack(">II", 1, (spdy.FLAG_FIN << 24) | 2) + b"hi",
              struct.pack(">HHI", 0x8003, spdy.PING, 4) + struct.pack(">I", 7)]
    incoming = [b"".join(frames)[i:i + 5] for i in range(0, len(b"".join(frames)), 5)]  # split anywhere
    sent: list[bytes] = []

    async def read() -> bytes:
        return incoming.pop(0) if incoming else b""

    async def write(data: bytes) -> None:
        sent.append(data)

    session = spdy.Session(read=read, write=write)
    await session.run()
    stream = await session.opened.get()
    assert stream is not None and stream.header("streamtype") == "error"
    assert [await stream.data.get(), await stream.data.get()] == [b"hi", None]
    assert struct.pack(">HHI", 0x8003, spdy.PING, 4) + struct.pack(">I", 7) in sent


def _until(check: Callable[[], bool], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.05)


def test_recorded_groups_are_reaped(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    try:
        groups.record(tmp_path / "kubelet-0" / "groups", proc.pid)
        _until(lambda: len(groups.members(proc.pid)) >= 2)  # the shell (unless it exec'd) and two sleeps
        assert groups.reap(tmp_path) >= 2
        _until(lambda: not groups.members(proc.pid))  # the leader is a zombie until waited: not a member
        assert not list((tmp_path / "kubelet-0" / "groups").iterdir())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
