"""Crash consistency of the store's log: never a silent loss, never a reused revision.

A storage layer (`FaultyFiles`, the store's own `Files` seam with faults injected; the store,
its log and its recovery are the real ones) tears the last record at every byte offset, flips
bits in the middle of the log and in the snapshot, fails appends with `ENOSPC`, `EIO` and
`EROFS`, fails an fdatasync, and stops the process between the snapshot's rename and the log's
truncation. After each case the store is opened again, and the invariant is checked: every
acknowledged write is there, or the store refuses to start and says where and why (and
`repair` then keeps every revision above all that were handed out); never a silent loss,
never a reused revision. Each test prints how many cases it ran.

`test_real_full_disk` does the same with a real apiserver process on a real full file system
(a small tmpfs, mounted when the test runs as root).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import pytest

from kubemesh.apiserver.storage import (
    Files,
    LogBackend,
    Store,
    StoreCorrupt,
    StoreWriteError,
    encode_record,
)
from kubemesh.services.model.kinds import CONFIGMAPS, Kind, Obj

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import StartApiServer

Json = dict[str, Any]


class Crash(BaseException):
    """The process stops at this point (nothing after it runs; what is on disk stays)."""


@dataclass
class FaultyFiles(Files):
    """The store's file operations with faults at chosen moments.

    `write_fault`: on the write call numbered `at` (from 1), write the first `keep` bytes, then
    raise `error` (an errno) or, with `error=None`, `Crash`. `sync_error`, `truncate_error`:
    those calls fail with that errno while set. `crash_after_replace`: `Crash` at the first
    truncation after a snapshot was renamed in place. `synced` tracks, per log descriptor, the
    size the last fdatasync covered, for `power_loss`.
    """

    write_fault: tuple[int, int, int | None] | None = None
    writes: int = 0
    sync_error: int | None = None
    truncate_error: int | None = None
    crash_after_replace: bool = False
    replaced: bool = False
    replace_error: int | None = None
    pwrite_error: int | None = None
    synced: dict[int, int] = field(default_factory=dict)
    paths: dict[int, Path] = field(default_factory=dict)
    quick: bool = False
    """Skip the real fsyncs (cases about damage, not durability: hundreds of them stay fast)."""

    def open_append(self, path: Path) -> int:
        fd = super().open_append(path)
        self.paths[fd] = path
        self.synced[fd] = os.fstat(fd).st_size
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.writes += 1
        if self.write_fault is not None and self.write_fault[0] == self.writes:
            _, keep, error = self.write_fault
            if keep:
                os.write(fd, bytes(data[:keep]))
            if error is None:
                raise Crash
            raise OSError(error, os.strerror(error))
        return super().write(fd, data)

    def sync(self, fd: int) -> None:
        if self.sync_error is not None:
            raise OSError(self.sync_error, os.strerror(self.sync_error))
        size = os.fstat(fd).st_size  # what a write racing this sync adds is not covered
        if not self.quick:
            super().sync(fd)
        self.synced[fd] = max(self.synced.get(fd, 0), size)

    def sync_dir(self, path: Path) -> None:
        if not self.quick:
            super().sync_dir(path)

    def truncate(self, fd: int, size: int) -> None:
        if self.crash_after_replace and self.replaced:
            raise Crash
        if self.truncate_error is not None:
            raise OSError(self.truncate_error, os.strerror(self.truncate_error))
        super().truncate(fd, size)
        self.synced[fd] = min(self.synced.get(fd, size), size)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.pwrite_error is not None:
            raise OSError(self.pwrite_error, os.strerror(self.pwrite_error))
        return super().pwrite(fd, data, offset)

    def replace(self, path: Path, data: bytes) -> None:
        if self.replace_error is not None:
            raise OSError(self.replace_error, os.strerror(self.replace_error))
        super().replace(path, data)
        self.replaced = True

    def power_loss(self) -> None:
        """What a machine crash may leave: each log cut back to what its last fdatasync covered."""
        for fd, path in self.paths.items():
            with open(path, "r+b") as f:
                f.truncate(min(self.synced.get(fd, 0), os.path.getsize(path)))


def cm(name: str, i: int) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"},
            "data": {"i": str(i), "pad": "x" * (i % 7)}}


@dataclass
class Run:
    """A store under test and what was acknowledged to its clients."""

    dir: Path
    files: FaultyFiles
    store: Store
    acked: dict[str, int] = field(default_factory=dict)
    """Key -> revision of its last acknowledged write."""
    handed_out: int = 0
    """The highest revision any write was given (acknowledged or not)."""

    def write(self, name: str, i: int) -> int:
        """One write; acknowledged when it returns (the backend here does not fsync)."""
        obj = self.store.write(CONFIGMAPS, cm(name, i), event="ADDED")
        rv = int(obj["metadata"]["resourceVersion"])
        self.handed_out = max(self.handed_out, rv)
        self.acked[f"ns/{name}"] = rv
        return rv


def quick() -> FaultyFiles:
    return FaultyFiles(quick=True)


def open_run(path: Path, files: FaultyFiles | None = None, *, fsync: bool = False, compact_every: int = 20_000) -> Run:
    files = files or quick()
    return Run(dir=path, files=files,
               store=Store(backend=LogBackend(path, fsync=fsync, compact_every=compact_every, files=files)))


def fresh(path: Path, writes: int, **kw: Any) -> Run:
    path.mkdir(parents=True, exist_ok=True)
    run = open_run(path, **kw)
    for i in range(writes):
        run.write(f"c{i}", i)
    return run


def check_restart(run: Run, *, refused_ok: bool = False) -> StoreCorrupt | None:
    """The invariant after a restart on `run.dir`; returns the refusal, if the store refused."""
    try:
        store = Store(backend=LogBackend(run.dir, fsync=False, files=quick()))
    except StoreCorrupt as exc:
        assert refused_ok, f"refused to start: {exc}"
        assert str(exc.path) in str(exc) and f"byte offset {exc.offset}" in str(exc), str(exc)
        assert f"last good revision is {exc.last_good}" in str(exc)
        check_repair(run)
        return exc
    for key, rv in run.acked.items():
        got = store.get(CONFIGMAPS, key)
        assert got is not None, f"acknowledged write of {key} at {rv} lost"
        assert int(got["metadata"]["resourceVersion"]) >= rv
    # Never a reused revision: the next write is above every revision handed out.
    new = store.write(CONFIGMAPS, cm("after-restart", 0), event="ADDED")
    assert int(new["metadata"]["resourceVersion"]) > run.handed_out
    store.close()
    return None


def check_repair(run: Run) -> None:
    """After a refusal: repair truncates, reports, and revisions continue above all handed out."""
    report = LogBackend(run.dir, fsync=False, files=quick()).repair()
    assert report is not None
    assert report.floor >= run.handed_out, (report, run.handed_out)
    assert report.saved_as.exists()
    store = Store(backend=LogBackend(run.dir, fsync=False, files=quick()))
    assert store.revision == report.floor
    new = store.write(CONFIGMAPS, cm("after-repair", 0), event="ADDED")
    assert int(new["metadata"]["resourceVersion"]) > run.handed_out
    # Every object kept is at or below the last good revision.
    assert all(int(o["metadata"]["resourceVersion"]) <= report.last_good
               for o in store.items(CONFIGMAPS) if o["metadata"]["name"] != "after-repair")
    store.close()
    assert Store(backend=LogBackend(run.dir, fsync=False, files=quick())).revision == report.floor + 1


def _note_rv(seen: list[int], kind: Kind, event: str, obj: Obj, prev: Obj | None, rv: int) -> None:
    seen.append(rv)


def report_cases(capsys: pytest.CaptureFixture[str], what: str, n: int) -> None:
    with capsys.disabled():
        print(f"\nstore integrity: {what}: {n} cases")


def record_spans(path: Path) -> list[tuple[int, int]]:
    """(start, end) of every record of the log, end after its newline."""
    data = path.read_bytes()
    spans, pos = [], 0
    while pos < len(data):
        end = data.index(b"\n", pos) + 1
        spans.append((pos, end))
        pos = end
    return spans


# ---------------------------------------------------------------------------------- torn writes


def test_torn_last_record_at_every_byte_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The process dies while appending: every prefix of the record is cut off (or kept whole)."""
    obj = cm("c5", 5)
    obj["metadata"]["resourceVersion"] = "6"
    record = encode_record(rv=6, resource=CONFIGMAPS.resource, key="ns/c5", obj=obj)
    cases = 0
    for keep in range(len(record) + 1):
        case = tmp_path / f"k{keep}"
        run = fresh(case, 5)
        run.files.write_fault = (run.files.writes + 1, keep, None)
        with pytest.raises(Crash):
            run.write("c5", 5)
        # Revision 6 was never handed out: the write died in its append, before publication.
        assert check_restart(run) is None
        reopened = Store(backend=LogBackend(case, fsync=False, files=quick()))
        # A record missing only its newline is whole: kept (the newline is added); shorter ones are cut.
        assert (reopened.get(CONFIGMAPS, "ns/c5") is not None) == (keep >= len(record) - 1)
        cases += 1
    report_cases(capsys, "torn last record", cases)


# ---------------------------------------------------------------------------------- bit flips


def test_bit_flips_in_the_log_refuse_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Damage in any acknowledged record is refused with the record's offset, then repaired."""
    base = tmp_path / "base"
    run = fresh(base, 12)
    run.store.close()
    spans = record_spans(base / LogBackend.LOG)
    cases = 0
    for index in (5, len(spans) - 1):  # one in the middle, and the last (acknowledged) one
        start, end = spans[index]
        for offset in range(start, end):
            case = tmp_path / f"r{index}-{offset}"
            shutil.copytree(base, case)
            data = bytearray((case / LogBackend.LOG).read_bytes())
            data[offset] ^= 1 << (offset % 8)
            (case / LogBackend.LOG).write_bytes(bytes(data))
            copy = Run(dir=case, files=run.files, store=run.store, acked=dict(run.acked), handed_out=run.handed_out)
            refused = check_restart(copy, refused_ok=True)
            if offset == end - 1 and index == len(spans) - 1:
                assert refused is None  # the last newline only: the record is whole and kept
            else:
                assert refused is not None, f"bit flip at {offset} passed silently"
                assert refused.offset == start and refused.last_good == index, (refused, start, index)
            cases += 1
    report_cases(capsys, "bit flips in the log", cases)


def test_bit_flips_in_the_snapshot_refuse_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    run = fresh(base, 6, compact_every=5)
    run.store.compact()
    run.write("c6", 6)
    run.store.close()
    snap = (base / LogBackend.SNAPSHOT).read_bytes()
    cases = 0
    for offset in range(0, len(snap), max(1, len(snap) // 150)):
        case = tmp_path / f"s{offset}"
        shutil.copytree(base, case)
        data = bytearray(snap)
        data[offset] ^= 1 << (offset % 8)
        (case / LogBackend.SNAPSHOT).write_bytes(bytes(data))
        copy = Run(dir=case, files=run.files, store=run.store, acked=dict(run.acked), handed_out=run.handed_out)
        refused = check_restart(copy, refused_ok=True)
        assert refused is not None and refused.path.name == LogBackend.SNAPSHOT, offset
        cases += 1
    report_cases(capsys, "bit flips in the snapshot", cases)


def test_a_missing_record_is_a_revision_gap(tmp_path: Path) -> None:
    run = fresh(tmp_path, 8)
    run.store.close()
    log = tmp_path / LogBackend.LOG
    spans = record_spans(log)
    data = log.read_bytes()
    start, end = spans[3]
    log.write_bytes(data[:start] + data[end:])
    with pytest.raises(StoreCorrupt, match=r"a gap in revisions \(revision 5 where 4 was due\)") as refused:
        Store(backend=LogBackend(tmp_path))
    assert refused.value.offset == start and refused.value.last_good == 3
    check_repair(run)


# ---------------------------------------------------------------------------------- failed appends


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EROFS])
def test_failed_append_is_not_applied_and_leaves_no_partial_record(
        tmp_path: Path, error: int, capsys: pytest.CaptureFixture[str]) -> None:
    obj = cm("c4", 4)
    obj["metadata"]["resourceVersion"] = "5"
    record = encode_record(rv=5, resource=CONFIGMAPS.resource, key="ns/c4", obj=obj)
    cases = 0
    for keep in (0, 1, len(record) // 2, len(record) - 1):
        for cut_fails in (False, True):
            case = tmp_path / f"k{keep}-{cut_fails}"
            run = fresh(case, 4)
            before = run.store.revision
            watched: list[int] = []
            run.store.subscribe(functools.partial(_note_rv, watched))
            run.files.write_fault = (run.files.writes + 1, keep, error)
            run.files.truncate_error = errno.EIO if cut_fails else None
            with pytest.raises(StoreWriteError, match=os.strerror(error)):
                run.write("c4", 4)
            # Not applied: no revision taken, no object, no event.
            assert run.store.revision == before and run.store.get(CONFIGMAPS, "ns/c4") is None and not watched
            if cut_fails:  # the cut back could not be made: the next write is refused until it can
                with pytest.raises(StoreWriteError):
                    run.write("c4", 4)
                run.files.truncate_error = None
            # Space returns: the next write succeeds, at the next revision.
            assert run.write("c4", 4) == before + 1
            assert record_spans(case / LogBackend.LOG)[-1][1] == (case / LogBackend.LOG).stat().st_size
            run.store.close()
            assert check_restart(run) is None
            cases += 1
    report_cases(capsys, f"failed appends ({errno.errorcode[error]})", cases)


async def test_group_commit_acknowledges_after_fdatasync(tmp_path: Path) -> None:
    """fsync mode: one fdatasync covers a batch; acknowledged writes survive a power loss."""
    run = fresh(tmp_path, 0, fsync=True, files=FaultyFiles())
    backend = run.store.backend
    assert isinstance(backend, LogBackend)

    async def client(i: int) -> None:
        obj = run.store.write(CONFIGMAPS, cm(f"g{i}", i), event="ADDED")
        rv = int(obj["metadata"]["resourceVersion"])
        run.handed_out = max(run.handed_out, rv)
        await run.store.flush(rv)
        run.acked[f"ns/g{i}"] = rv  # acknowledged only now

    await asyncio.gather(*(client(i) for i in range(200)))
    assert 1 <= backend.syncs < 100, backend.syncs  # batches, not one fdatasync per write
    run.write("unsynced", 0)  # written, never flushed: not acknowledged in fsync mode
    del run.acked["ns/unsynced"]
    run.files.power_loss()
    assert check_restart(run) is None


async def test_failed_fdatasync_answers_500_and_refuses_writes_until_restart(tmp_path: Path) -> None:
    run = fresh(tmp_path, 3, fsync=True, files=FaultyFiles())
    run.store.backend.sync() if isinstance(run.store.backend, LogBackend) else None
    run.files.sync_error = errno.EIO
    obj = run.store.write(CONFIGMAPS, cm("x", 1), event="ADDED")
    with pytest.raises(StoreWriteError, match="could not be synced"):
        await run.store.flush(int(obj["metadata"]["resourceVersion"]))
    with pytest.raises(StoreWriteError, match="refused until the apiserver restarts"):
        run.write("y", 2)
    assert run.store.get(CONFIGMAPS, "ns/c0") is not None  # reads go on
    run.files.sync_error = None
    run.handed_out = int(obj["metadata"]["resourceVersion"])
    assert check_restart(run) is None


# ---------------------------------------------------------------------------------- snapshots


def test_crash_between_snapshot_rename_and_log_truncation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = 0
    for writes_before in (5, 6, 11):
        case = tmp_path / f"w{writes_before}"
        run = fresh(case, writes_before, compact_every=5)
        run.files.crash_after_replace = True
        with pytest.raises(Crash):
            run.store.compact()
        assert (case / LogBackend.LOG).stat().st_size > 0  # the old records are still there
        assert check_restart(run) is None
        # The records the snapshot holds are skipped, and the log goes on after them.
        again = open_run(case)
        again.acked, again.handed_out = dict(run.acked), run.handed_out + 1
        again.write("more", 1)
        again.store.close()
        assert check_restart(again) is None
        cases += 1
    report_cases(capsys, "crash between snapshot rename and log truncation", cases)


def test_no_room_for_a_snapshot_keeps_the_log(tmp_path: Path) -> None:
    run = fresh(tmp_path, 6, compact_every=5)
    run.files.replace_error = errno.ENOSPC
    run.store.compact()  # logged, not raised: the log goes on
    assert not (tmp_path / LogBackend.SNAPSHOT).exists()
    run.files.replace_error = None
    run.write("c6", 6)
    assert check_restart(run) is None


def test_no_room_for_the_revision_lease_fails_the_write(tmp_path: Path) -> None:
    run = fresh(tmp_path, 0, fsync=True, files=FaultyFiles(quick=True))
    backend = run.store.backend
    assert isinstance(backend, LogBackend)
    backend.lease = 3
    run.write("a", 1)
    run.files.pwrite_error = errno.ENOSPC
    for i, name in enumerate("bcd"):  # revision 1 leased up to 4
        run.write(name, i)
    with pytest.raises(StoreWriteError, match="No space left on device"):
        run.write("e", 5)  # revision 5 is past the lease, which cannot be extended
    assert run.store.revision == 4 and run.store.get(CONFIGMAPS, "ns/e") is None
    run.files.pwrite_error = None
    assert run.write("e", 5) == 5
    assert check_restart(run) is None


def test_restart_after_a_crash_on_a_full_disk(tmp_path: Path) -> None:
    """The floor record a restart owes cannot be appended: the store opens, reads work, and the
    first write appends the floor before itself once there is room."""
    run = fresh(tmp_path, 3, fsync=True, files=FaultyFiles(quick=True))  # not closed: an unclean stop
    files = FaultyFiles(quick=True, write_fault=(1, 0, errno.ENOSPC))
    store = Store(backend=LogBackend(tmp_path, files=files, lease=100))
    assert store.revision > run.handed_out and store.get(CONFIGMAPS, "ns/c2") is not None
    files.write_fault = (files.writes + 1, 5, errno.ENOSPC)
    with pytest.raises(StoreWriteError, match="No space left on device"):
        store.write(CONFIGMAPS, cm("x", 1), event="ADDED")
    files.write_fault = None
    obj = store.write(CONFIGMAPS, cm("x", 1), event="ADDED")
    run.acked["ns/x"] = run.handed_out = int(obj["metadata"]["resourceVersion"])
    assert check_restart(run) is None


def test_a_snapshot_taken_while_the_floor_waits_for_room(tmp_path: Path) -> None:
    run = fresh(tmp_path, 3, fsync=True, files=FaultyFiles(quick=True))  # an unclean stop
    files = FaultyFiles(quick=True, write_fault=(1, 0, errno.ENOSPC))
    store = Store(backend=LogBackend(tmp_path, files=files, lease=100, compact_every=0))
    store.compact()  # the snapshot (at the floor) makes the floor record needless
    obj = store.write(CONFIGMAPS, cm("x", 1), event="ADDED")
    store.close()
    run.acked["ns/x"] = run.handed_out = int(obj["metadata"]["resourceVersion"])
    assert check_restart(run) is None


def test_a_torn_lease_extension_keeps_the_other_slot(tmp_path: Path) -> None:
    run = fresh(tmp_path, 0, fsync=True, files=FaultyFiles(quick=True))
    backend = run.store.backend
    assert isinstance(backend, LogBackend)
    backend.lease = 2
    for i in range(7):  # extensions at revisions 1, 4 and 7
        run.write(f"c{i}", i)
    lease = (tmp_path / LogBackend.LEASE).read_bytes()
    assert len(lease) == 64
    older = min((0, 32), key=lambda at: int(lease[at + 9:at + 31]))
    torn = bytearray(lease)
    torn[older + 3:older + 32] = b"\0" * 29  # the overwrite of the older slot died half-way
    (tmp_path / LogBackend.LEASE).write_bytes(bytes(torn))
    assert check_restart(run) is None
    (tmp_path / LogBackend.LEASE).write_bytes(b"x" * 64)  # both slots damaged: refused
    with pytest.raises(StoreCorrupt, match="the revision lease is damaged"):
        Store(backend=LogBackend(tmp_path))


def test_crash_while_writing_the_snapshot_keeps_the_old_one(tmp_path: Path) -> None:
    class Failing(FaultyFiles):
        def replace(self, path: Path, data: bytes) -> None:
            path.with_name(path.name + ".tmp").write_bytes(data[: len(data) // 2])
            raise Crash

    run = fresh(tmp_path, 6, files=Failing(), compact_every=5)
    with pytest.raises(Crash):
        run.store.compact()
    assert check_restart(run) is None


def test_old_format_is_migrated(tmp_path: Path) -> None:
    objs = [cm(f"o{i}", i) for i in range(3)]
    for i, obj in enumerate(objs):
        obj["metadata"]["resourceVersion"] = str(i + 1)
    lines = [orjson.dumps({"rv": i + 1, "resource": "configmaps", "key": f"ns/o{i}", "obj": o})
             for i, o in enumerate(objs)]
    (tmp_path / "log.jsonl").write_bytes(b"\n".join(lines) + b"\n" + b'{"rv": 4, "resou')
    store = Store(backend=LogBackend(tmp_path))
    assert store.revision == 3 and store.count(CONFIGMAPS) == 3
    assert (tmp_path / "log.jsonl.pre-v2").exists() and not (tmp_path / "log.jsonl").exists()
    store.write(CONFIGMAPS, cm("new", 9), event="ADDED")
    store.close()
    assert Store(backend=LogBackend(tmp_path)).revision == 4


def test_old_format_with_a_bad_line_in_the_middle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "log.jsonl").write_bytes(b'{"rv": 1, "resource": "configmaps", "key": "ns/a", "obj": null}\n'
                                         b'{"rv": 2, "resou#####\n'
                                         b'{"rv": 3, "resource": "x", "key": "y", "obj": null}\n')
    with pytest.raises(StoreCorrupt, match=r"log\.jsonl: an old-format record does not parse at byte offset 64"):
        Store(backend=LogBackend(tmp_path))


# ---------------------------------------------------------------------------------- real processes


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, mounted for the test (root only)."""
    if os.geteuid() != 0 and not _in_ci():
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def test_real_full_disk(start_apiserver: StartApiServer, small_tmpfs: Path) -> None:
    """A real apiserver on a real full file system: clean 500s, reads served, no acknowledged write lost.

    Killed while the disk is full, it starts again on the full disk and serves every
    acknowledged write; once space is freed, writes are accepted again.
    """
    data = small_tmpfs / "data"
    ballast = small_tmpfs / "ballast"
    args = ("--no-system-pods",)
    srv = await start_apiserver(data_dir=data, extra_args=args)
    # Most of the space taken by a file the test frees later.
    stat = os.statvfs(small_tmpfs)
    ballast.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - 48 * 1024))
    acked: dict[str, str] = {}
    path = "/api/v1/namespaces/default/configmaps"

    async def create(session: aiohttp.ClientSession, url: str, name: str) -> tuple[int, Json]:
        body = {"metadata": {"name": name}, "data": {"v": "x" * 1500}}
        async with session.post(url + path, json=body) as resp:
            doc: Json = await resp.json(content_type=None)
            if resp.status == 201:
                acked[name] = doc["metadata"]["resourceVersion"]
            return resp.status, doc

    async def stored(session: aiohttp.ClientSession, url: str) -> dict[str, str]:
        async with session.get(url + path) as resp:  # reads go on
            assert resp.status == 200
            return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in (await resp.json())["items"]}

    def clean_500(status: int, doc: Json) -> None:
        assert status == 500 and doc["kind"] == "Status" and doc["status"] == "Failure", doc
        assert doc["message"] == "store: write failed: No space left on device (ENOSPC)" and "reason" not in doc, doc

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        failures: list[tuple[int, Json]] = []
        i = 0
        while len(failures) < 5 and i < 400:
            status, doc = await create(session, srv.url, f"cm-{i}")
            if status != 201:
                failures.append((status, doc))
            i += 1
        assert acked and failures, (len(acked), failures[:1])
        for status, doc in failures:
            clean_500(status, doc)
        assert "unhandled error" not in srv.log()
        assert await stored(session, srv.url) == acked
    srv.kill()  # killed while the disk is full
    srv = await start_apiserver(data_dir=data, extra_args=args)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        assert await stored(session, srv.url) == acked
        clean_500(*await create(session, srv.url, "still-full"))
        ballast.unlink()  # space returns: writes are accepted again, by the same process
        status, doc = await create(session, srv.url, "after-space")
        assert status == 201, doc
    srv.kill()
    srv = await start_apiserver(data_dir=data, extra_args=args)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        assert await stored(session, srv.url) == acked
        status, doc = await create(session, srv.url, "after-restart")
        assert status == 201
        assert int(doc["metadata"]["resourceVersion"]) > max(int(v) for k, v in acked.items() if k != "after-restart")
    assert "unhandled error" not in srv.log()


async def test_damaged_log_refuses_start_then_repair(tmp_path: Path, start_apiserver: StartApiServer) -> None:
    """The apiserver process: a damaged record stops it (exit 1, the reason on stderr); --repair goes on."""
    data = tmp_path / "data"
    path = "/api/v1/namespaces/default/configmaps"
    run = fresh(data, 20)  # the store's own code writes the data directory the process reads
    run.store.close()
    seen = run.handed_out
    log = data / LogBackend.LOG
    raw = bytearray(log.read_bytes())
    middle = raw.index(b"\n", len(raw) // 2) + 5
    raw[middle:middle + 7] = b"XXXXXXX"
    log.write_bytes(bytes(raw))
    args = [sys.executable, "-m", "kubemesh.apiserver", "--port", "0", "--data-dir", str(data)]
    refused = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1, refused
    assert f"refusing to start: {log}: a record fails its checksum at byte offset" in refused.stderr, refused.stderr
    assert "the last good revision is" in refused.stderr
    repaired = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "kubemesh", "store", "repair",
                                                        "--data-dir", str(data)],
                                       capture_output=True, text=True, timeout=60, check=False)
    assert repaired.returncode == 0 and f"repaired {log}: damage at byte offset" in repaired.stderr, repaired
    assert "dropped" in repaired.stderr and list(data.glob("store.log.damaged-*")), repaired.stderr
    srv2 = await start_apiserver(data_dir=data, extra_args=("--no-system-pods",))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session, \
            session.post(srv2.url + path, json={"metadata": {"name": "after-repair"}}) as resp:
        assert resp.status == 201
        assert int((await resp.json())["metadata"]["resourceVersion"]) > seen


def test_a_clean_close_gives_the_lease_back(tmp_path: Path) -> None:
    run = fresh(tmp_path, 5, fsync=True, files=FaultyFiles(quick=True))
    run.store.close()
    again = Store(backend=LogBackend(tmp_path, files=FaultyFiles(quick=True)))
    assert again.revision == 5  # no jump after a clean stop
    again.close()
