"""What a mesh leaves on disk for other processes, and the process checks that read it.

A mesh started by `kubemesh up` (or `Mesh` with a `state_dir`) describes itself in its state
folder, so that `kubemesh status|down|chaos`, kubectl and the Python clients in another
terminal can find it:

* `mesh.json` (`STATE_FILE`): `apiserver` (URL), `tokenFile`, `caFile`, `kubeconfig`, the
  launcher's pid and every process (pid, start ticks, port, admin URL, log, argv, nodes);
* `kubeconfig`: one cluster (server, CA), one user (the token), one context;
* `token` (mode 0600): the bearer token;
* `pki/ca.crt`: the CA that signed the apiserver's certificate;
* `logs/<instance>.log`: stdout and stderr of every process.

The compose stack's state folder (`.kubemesh/compose`) holds `kubeconfig`, `token` and
`pki/ca.crt` but no `mesh.json`: `kubemesh.services.mesh.endpoint.MeshEndpoint` reads either.

Process checks use the start time in /proc, so that a pid reused by another process after a
crash is never taken for a mesh process.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

STATE_FILE: Final = "mesh.json"
KUBECONFIG_FILE: Final = "kubeconfig"
TOKEN_FILE: Final = "token"
LOG_DIR: Final = "logs"
CA_FILE: Final = "pki/ca.crt"

_LOG_TAIL_LINES: Final = 40


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on `host` right now (bind port 0, read it, close).

    Another process may take it before the caller binds it: callers that can retry do.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def process_start_ticks(pid: int) -> int | None:
    """The start time of a process (clock ticks since boot, Linux), to tell a reused pid apart.

    None when the process does not exist, is a zombie, or the platform has no /proc.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Whether `pid` is a live (non-zombie) process, and the same one if `start_ticks` is given."""
    if pid <= 0:
        return False
    if Path("/proc").is_dir():
        ticks = process_start_ticks(pid)
        return ticks is not None and (start_ticks is None or ticks == start_ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last lines of a log file ("" if there is none)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The mesh.json of a mesh started from `state_dir`, or None if there is none."""
    try:
        doc = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_state(state_dir: Path, doc: Mapping[str, Any]) -> None:
    """Write mesh.json atomically (readers never see half a file)."""
    path = state_dir / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def state_pids(doc: Mapping[str, Any]) -> list[tuple[int, int | None]]:
    """(pid, startTicks) of the launcher (first) and every process recorded in a mesh.json."""
    out: list[tuple[int, int | None]] = []
    launcher = doc.get("launcher") or {}
    for entry in [launcher, *(doc.get("processes") or [])]:
        pid = entry.get("pid") if isinstance(entry, dict) else None
        if isinstance(pid, int):
            ticks = entry.get("startTicks")
            out.append((pid, ticks if isinstance(ticks, int) else None))
    return out


def render_kubeconfig(*, server: str, token: str | None, ca_pem: bytes | None = None,
                      name: str = "kubemesh") -> str:
    """A kubeconfig YAML with one cluster (and its CA), one user (the bearer token), one context."""
    user: dict[str, Any] = {"token": token} if token else {}
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": f"{name}-admin", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin",
                                                 "namespace": "default"}}],
        "current-context": name,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only, atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class MeshError(RuntimeError):
    """The mesh (or one of its processes) did not do what was asked; the message says why."""


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node object's Ready condition is "True"."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def describe_nodes(nodes: Sequence[Mapping[str, Any]], *, limit: int = 5, expected: int | None = None) -> str:
    """`3 Ready (node-1, ...), 1 not Ready: node-4, 2 not registered`, naming at most `limit` nodes of each kind.

    Counts first and a few names: at ten thousand nodes the message stays one readable line.
    """
    if not nodes:
        return "no Node objects" + (f" ({expected} expected)" if expected else "")

    def names(items: list[str]) -> str:
        shown = ", ".join(items[:limit]) or "-"
        return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")

    ready = [str((n.get("metadata") or {}).get("name")) for n in nodes if node_is_ready(n)]
    not_ready = [str((n.get("metadata") or {}).get("name")) for n in nodes if not node_is_ready(n)]
    out = f"{len(ready)} Ready ({names(ready)})"
    if not_ready:
        out += f", {len(not_ready)} not Ready: {names(not_ready)}"
    if expected is not None and expected > len(nodes):
        out += f", {expected - len(nodes)} not registered"
    return out
