"""Where a server's time goes: py-spy samples of a running process, split into stages.

`Sampler(pid)` attaches py-spy (`record --format raw`, non-blocking, so the process under test
is never paused) for the duration of a `with` block; `split(raw)` reads the collapsed stacks
it wrote and assigns every sample to one stage by its innermost frame that a rule of `STAGES`
names (the rules are ordered: the first rule matching the innermost named frame wins). A
sample whose stack names no rule is `other`; one whose leaf is the event loop waiting for
I/O is `idle` and left out of the split, so the split is of the time the server was busy.

Stages (the split the performance issue asks for):

* `decode`: reading the body and turning bytes into the typed object (JSON, msgpack,
  protobuf, the type checks of the typed decode);
* `validate`: field validation and field rules, names, quantities;
* `admission`: defaulting, admission plugins and webhooks;
* `fields`: managedFields (server-side apply's bookkeeping);
* `store`: the registry's write, the store, the history;
* `encode`: rendering the response body;
* `fan-out`: events built, encoded and written to the watchers (everything under the watch
  flusher's flush, the connection writes included: those frames are the sink's `write` in
  `serving.py`, which the innermost-frame rules would count as `http`);
* `http`: aiohttp's parsing, routing, response writing and the apiserver's middleware.

The split is a sampled estimate (200 samples/s by default): a stage under 1 % is noise.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

# (stage, pattern over one frame "function (path:line)"), tried in order on the innermost
# frame that any pattern matches.
STAGES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple((stage, re.compile(p)) for stage, p in (
    ("fan-out", r"apiserver/watching\.py|TransportSink|apiserver/chaos/watch\.py|record_delivery|on_delivered"),
    ("fields", r"apiserver/fieldmanager\.py"),
    ("admission", r"apiserver/admission\.py|apiserver/admitting\.py|apiserver/webhooks\.py|establishing\.py"
                  r"|Api\._admitting"),
    ("validate", r"apiserver/validation\.py(?!.*decode_typed)|apiserver/fieldrules\.py|apiserver/names\.py"
                 r"|_field_validation|_check_body|_time_causes|structural/|customresources/objects\.py"
                 r"|model/quantities\.py"),
    ("decode", r"read_body|decode_body|read_raw|decode_typed|protobuf/(?!gojson)|codec\.py"),
    ("encode", r"render_written|_response \(|gojson\.py|encode_body|response_encoding"),
    ("store", r"apiserver/storage\.py|Registry\._write|apiserver/history\.py|record_write|registry\.py"),
    ("http", r"aiohttp/|apiserver/server\.py|apiserver/serving\.py|services/process/metrics\.py"
             r"|apiserver/chaos/"),
))
WITHIN: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("fan-out", re.compile(r"^flush \(kubemesh/apiserver/watching\.py|^_flush \(.*bare_server\.py")),
)
"""Stages that claim a whole sample when any frame of its stack matches, before the rules above."""
IDLE: Final = re.compile(r"\((asyncio|uvloop)/|^select |^poll |Runner\.run|run_until_complete|run_forever")
ORDER: Final = ("decode", "validate", "admission", "fields", "store", "encode", "fan-out", "http", "other")


def available() -> str | None:
    """The py-spy binary (in the same virtualenv as this Python, or on PATH), or None."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


@dataclass
class Sampler:
    """py-spy attached to `pid` for the duration of a `with` block (see the module docstring)."""

    pid: int
    out: Path
    rate: int = 200
    _proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        spy = available()
        if spy is None:
            raise RuntimeError("py-spy is not installed (scripts/setup installs it into .venv)")
        self._proc = subprocess.Popen(
            [spy, "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", "raw",
             "--nonblocking", "--output", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        assert self._proc is not None
        # py-spy writes its output when interrupted (SIGINT), as on Ctrl-C.
        self._proc.send_signal(2)
        try:
            _, err = self._proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        if not self.out.exists():
            msg = err.decode(errors="replace").strip()[-500:]
            raise RuntimeError(f"py-spy wrote no profile ({msg}); it needs ptrace (root, or ptrace_scope 0)")


def stage_of(frames: list[str]) -> str | None:
    """The stage of one sample (innermost frame first), None when the server was idle."""
    if frames and IDLE.search(frames[-1]):
        return None
    for stage, pattern in WITHIN:
        if any(pattern.search(frame) for frame in frames):
            return stage
    for frame in reversed(frames):
        for stage, pattern in STAGES:
            if pattern.search(frame):
                return stage
    return "other"


def split(raw: Path) -> dict[str, float]:
    """Shares of busy samples per stage (summing to 1), plus `samples` (busy) and `idle`."""
    counts: Counter[str] = Counter()
    idle = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        stage = stage_of(stack.split(";"))
        if stage is None:
            idle += int(n)
        else:
            counts[stage] += int(n)
    busy = sum(counts.values())
    shares: dict[str, float] = {s: counts[s] / busy if busy else 0.0 for s in ORDER}
    shares["samples"] = float(busy)
    shares["idle"] = float(idle)
    return shares


def merge_splits(splits: list[dict[str, float]]) -> dict[str, float]:
    """Several rounds' splits as one, each round weighted by its busy samples."""
    total = sum(s.get("samples", 0.0) for s in splits)
    merged = {stage: sum(s.get(stage, 0.0) * s.get("samples", 0.0) for s in splits) / total if total else 0.0
              for stage in ORDER}
    merged["samples"] = total
    merged["idle"] = sum(s.get("idle", 0.0) for s in splits)
    return merged


def format_split(shares: dict[str, float]) -> str:
    """One line: `decode 12% validate 20% ...` (busy samples)."""
    parts = [f"{s} {shares.get(s, 0.0):.0%}" for s in ORDER]
    return "  ".join(parts) + f"  ({int(shares.get('samples', 0))} samples)"


@contextlib.contextmanager
def maybe_sample(pid: int, out: Path | None) -> Iterator[None]:
    """Sample when `out` is given, else do nothing."""
    if out is None:
        yield
        return
    with Sampler(pid=pid, out=out):
        yield
