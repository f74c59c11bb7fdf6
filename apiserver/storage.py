"""The store: one global revision, the current objects, and durable storage behind an interface.

Guarantees:

* One revision counter for the whole store, as etcd's: every write takes the next revision,
  an object's `metadata.resourceVersion` is the revision of its last write, and a list is
  read at the current revision. Revisions only go up, across restarts too, and across a
  `--repair` (which persists a revision floor above every revision the dropped records held).
* Writes are synchronous and happen on the event loop's thread, one at a time: a write, its
  log append and its publication to watchers happen with no `await` in between, so watchers
  see events in revision order and a list never sees half a write.
* A write is appended before it is applied: an append that fails (`ENOSPC`, `EIO`, `EROFS`)
  raises `StoreWriteError`, leaves the in-memory state, the revision and the log as they were
  (the log is cut back to its last whole record before anything else is written), and the
  write is answered with a 500, never acknowledged.
* Stored objects are never mutated after they are written. Readers may hand them out
  without copying; writers build a new dict for every write.
* With a `LogBackend`, the answer to a write waits for `Store.flush`: after a `kill -9` every
  acknowledged write is recovered. With `fsync=True` (the default of `--data-dir`), `flush`
  waits for an `fdatasync` of the log that covers the write, and one `fdatasync` covers every
  write appended before it started (group commit, as etcd's WAL), so acknowledged writes also
  survive a machine crash at a small cost per write. Watchers may see a write before it is
  synced; after a machine crash such a write (never acknowledged) may be gone.
* Every record and the snapshot carry a CRC-32 and their revision. Recovery cuts off a torn
  last record (it was never acknowledged) with a warning; any other damage (a record failing
  its checksum, a gap in revisions, a bad snapshot) raises `StoreCorrupt` naming the file, the
  byte offset and the last good revision, and nothing is changed until `repair` is asked for.

On-disk format (`store.snapshot`, `store.log`), version 2:

* log record: `<crc32 as 8 hex digits> <revision> <json>` and a newline, the CRC over `<revision> <json>`;
  the JSON (`{"resource", "key", "obj"}`, `obj` null for a removal) holds no raw newline, so a
  record is one line and a torn record is a last line without its newline.
* snapshot: a header line `KMSNAP2 <crc32> <revision> <length>`, then `length` bytes of JSON
  (`{"objects": [[resource, object], ...]}`), the CRC over `<revision> ` and the JSON. Written
  to a temporary file, fsynced, renamed over the old one, and the directory fsynced.
* The log's records are consecutive revisions; the first is at most the snapshot's revision
  plus one (records the snapshot already holds are skipped: a crash between the snapshot's
  rename and the log's truncation leaves them).

Data directories of the format before (`snapshot.json`, `log.jsonl`, no checksums) are
migrated on start: read as before (a torn last line dropped, any other bad line refused), written
as a version-2 snapshot, and the old files renamed to `*.pre-v2`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import heapq
import itertools
import os
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import orjson
import structlog

from kubemesh.services.model.kinds import PODS, Kind, Obj, key_of

_PODS: Final = PODS.resource
log = structlog.get_logger("apiserver.storage")

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

Publisher = Callable[[Kind, EventType, Obj, "Obj | None", int], None]
"""Called after every write: (kind, event type, object, previous object, revision)."""


@dataclass(slots=True)
class Staged:
    """A write the registry made in etcd mode, not applied yet: committed as one etcd transaction.

    `obj` None is a removal, `final` then the state the registry returned for it. `expected` is the
    mod_revision the key must still have (the resourceVersion of the object it replaces), 0 when
    the key must not exist (a create). `revision` is the write's revision once committed.
    """

    kind: Kind
    key: str
    obj: Obj | None
    expected: int
    final: Obj | None = None
    revision: int = 0
    after: Staged | None = None
    """An earlier staged write of the same key in the same request (or queue): this one is committed
    after it, comparing with the revision it got, not with `expected`."""


Stager = Callable[[Staged], None]


class StoreWriteError(Exception):
    """A write that could not be made durable: it was not applied and must not be acknowledged."""


class StoreCorrupt(Exception):
    """The data directory holds damage that recovery must not pass over silently."""

    def __init__(self, *, path: Path, offset: int, last_good: int, why: str) -> None:
        self.path = path
        self.offset = offset
        self.last_good = last_good
        self.why = why
        super().__init__(
            f"refusing to start: {path}: {why} at byte offset {offset}; the last good revision is {last_good}. "
            f"Nothing was changed. `--repair` (or `kubemesh store repair --data-dir {path.parent}`) truncates "
            f"the store there, keeps the dropped bytes beside it and never hands out a dropped revision again.")


class Backend(Protocol):
    """Where writes are made durable. The in-memory default keeps nothing."""

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """The recovered revision and objects (as `(resource, object)` pairs)."""
        ...

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Write one record before the write is applied (`obj=None` is a removal).

        Raises `StoreWriteError` and leaves no partial record when it cannot.
        """
        ...

    async def flush(self, rv: int) -> None:
        """Return once every write up to `rv` is as durable as the backend promises."""
        ...

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Offer a full state at `rv` so that the log can be shortened."""
        ...

    def close(self) -> None:
        """Flush and release files."""
        ...


class MemoryBackend:
    """No durability: state lives as long as the process."""

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """Nothing to recover."""
        return 0, []

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Nothing to do."""

    async def flush(self, rv: int) -> None:
        """Nothing to wait for."""

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing to do."""


class Files:
    """The file operations of a `LogBackend`: the seam through which tests inject faults.

    Every byte the log and the snapshot put on disk goes through these methods, so a subclass
    can tear a write, fail it with `ENOSPC` or `EIO`, or stop the process between two of them.
    """

    def read(self, path: Path) -> bytes | None:
        """A file's bytes, or None when it does not exist."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def open_append(self, path: Path) -> int:
        """Open (create) the log for appending."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """Write once (write(2)); returns how many bytes it wrote."""
        return os.write(fd, data)

    def open_rw(self, path: Path) -> int:
        """Open (create) a file for writing in place."""
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        """Write at an offset (pwrite(2)); returns how many bytes it wrote."""
        return os.pwrite(fd, data, offset)

    def sync(self, fd: int) -> None:
        """fdatasync(2): the file's data and size on stable storage."""
        os.fdatasync(fd)

    def truncate(self, fd: int, size: int) -> None:
        """ftruncate(2)."""
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        """Close a file descriptor."""
        os.close(fd)

    def replace(self, path: Path, data: bytes) -> None:
        """Put `data` at `path` atomically and durably: temporary file, fsync, rename, fsync of the directory."""
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                self.sync(fd)
            finally:
                os.close(fd)
        except OSError:
            tmp.unlink(missing_ok=True)  # on a full disk, a half-written copy must not keep the space
            raise
        os.replace(tmp, path)
        self.sync_dir(path.parent)

    def rename(self, src: Path, dst: Path) -> None:
        """Rename atomically, then fsync the directory."""
        os.replace(src, dst)
        self.sync_dir(dst.parent)

    def sync_dir(self, path: Path) -> None:
        """Sync a directory, so that a rename in it survives a machine crash."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------- format

SNAPSHOT_MAGIC: Final = b"KMSNAP2"


def encode_record(*, rv: int, resource: str, key: str, obj: Obj | None) -> bytes:
    """One log record: `<crc> <rv> <json>` and a newline, the CRC over `<rv> <json>`."""
    body = b"%d " % rv + orjson.dumps({"resource": resource, "key": key, "obj": obj})
    return b"%08x " % zlib.crc32(body) + body + b"\n"


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded log record."""

    rv: int
    resource: str
    key: str
    obj: Obj | None


def decode_record(line: bytes) -> Record | None:
    """A record from one line (without its newline); None when it fails its checksum or shape."""
    if len(line) < 12 or line[8:9] != b" ":
        return None
    crc = _hex8(line[:8])
    if crc is None:
        return None
    body = line[9:]
    if zlib.crc32(body) != crc:
        return None
    space = body.find(b" ")
    try:
        rv = int(body[:space])
        doc = orjson.loads(body[space + 1:])
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not (isinstance(doc, dict) and isinstance(doc.get("resource"), str) and isinstance(doc.get("key"), str)
            and (doc.get("obj") is None or isinstance(doc["obj"], dict))):
        return None
    return Record(rv, doc["resource"], doc["key"], doc.get("obj"))


_HEX: Final = frozenset(b"0123456789abcdef")


def _hex8(text: bytes) -> int | None:
    """Eight lowercase hex digits (as written: `int` alone would take `A` for `a`, a flipped bit)."""
    return int(text, 16) if len(text) == 8 and _HEX.issuperset(text) else None


def encode_snapshot(*, revision: int, objects: Iterable[tuple[str, Obj]]) -> bytes:
    """A snapshot: header line with CRC, revision and length, then the JSON."""
    body = orjson.dumps({"objects": list(objects)})
    crc = zlib.crc32(body, zlib.crc32(b"%d " % revision))
    return b"%s %08x %d %d\n" % (SNAPSHOT_MAGIC, crc, revision, len(body)) + body


def decode_snapshot(data: bytes, *, path: Path) -> tuple[int, list[tuple[str, Obj]]]:
    """The revision and objects of a snapshot; `StoreCorrupt` when it is damaged."""
    end = data.find(b"\n")
    header = data[:end].split(b" ") if end > 0 else []

    def bad(why: str, offset: int = 0) -> StoreCorrupt:
        return StoreCorrupt(path=path, offset=offset, last_good=0, why=why)

    if len(header) != 4 or header[0] != SNAPSHOT_MAGIC:
        raise bad("the snapshot's header is damaged")
    try:
        crc, revision, length = _hex8(header[1]), int(header[2]), int(header[3])
    except ValueError:
        raise bad("the snapshot's header is damaged") from None
    if crc is None:
        raise bad("the snapshot's header is damaged")
    body = data[end + 1:]
    if len(body) != length:
        raise bad(f"the snapshot holds {len(body)} bytes where its header says {length}", end + 1)
    if zlib.crc32(body, zlib.crc32(b"%d " % revision)) != crc:
        raise bad(f"the snapshot (revision {revision}) fails its checksum", end + 1)
    try:
        objects = orjson.loads(body)["objects"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise bad(f"the snapshot (revision {revision}) does not parse", end + 1) from None
    return revision, [(str(resource), obj) for resource, obj in objects]


@dataclass(kw_only=True)
class Scan:
    """What recovery found: the state at the last good record, and what follows it."""

    revision: int = 0
    """The revision of the last good record (or of the snapshot)."""
    state: dict[tuple[str, str], Obj] = field(default_factory=dict)
    log_end: int = 0
    """Bytes of the log that hold whole, good records."""
    torn: int = 0
    """Bytes of a torn last record after `log_end` (cut off with a warning)."""
    add_newline: bool = False
    """The last record is whole but for its newline (kept: the newline is added)."""
    damage: StoreCorrupt | None = None
    """Damage recovery must not pass: where and why."""


def scan(*, snapshot: bytes | None, log_data: bytes, snapshot_path: Path, log_path: Path) -> Scan:
    """Check and replay a snapshot and a log (see the module docstring for what is damage)."""
    out = Scan()
    snap_rev = 0
    if snapshot is not None:
        try:
            snap_rev, objects = decode_snapshot(snapshot, path=snapshot_path)
        except StoreCorrupt as exc:
            out.damage = exc
            return out
        out.revision = snap_rev
        for resource, obj in objects:
            out.state[(resource, key_of(obj))] = obj
    prev: int | None = None
    pos = 0
    size = len(log_data)
    while pos < size:
        end = log_data.find(b"\n", pos)
        whole = end >= 0
        rec = decode_record(log_data[pos:end] if whole else log_data[pos:])
        if rec is None and not whole and (rec := decode_record(log_data[pos:-1])) is not None:
            size -= 1  # a whole last record whose newline is damaged: kept, the newline written again
        if rec is None:
            if not whole:  # a torn last record: the process died appending it, it was never acknowledged
                out.torn = size - pos
                break
            out.damage = StoreCorrupt(path=log_path, offset=pos, last_good=out.revision,
                                      why="a record fails its checksum")
            break
        expected = snap_rev + 1 if prev is None else prev + 1
        floor = rec.resource == ""  # a revision floor: revisions jump to it (see `LogBackend.load`)
        if (rec.rv < expected if floor else rec.rv != expected) and not (prev is None and rec.rv <= snap_rev):
            out.damage = StoreCorrupt(path=log_path, offset=pos, last_good=out.revision,
                                      why=f"a gap in revisions (revision {rec.rv} where {expected} was due)")
            break
        prev = rec.rv
        if rec.rv > snap_rev:  # older records are already in the snapshot
            if floor:
                out.revision = rec.rv
            elif rec.obj is None:
                out.state.pop((rec.resource, rec.key), None)
            else:
                out.state[(rec.resource, rec.key)] = rec.obj
            out.revision = rec.rv
        if not whole:
            out.add_newline = True
            pos = size
        else:
            pos = end + 1
        out.log_end = pos
    return out


def _floor_after(damaged: bytes, last_good: int) -> int:
    """A revision at or above every revision the damaged bytes may have held.

    Every record is one line, so the damaged bytes held at most one revision per line beyond
    `last_good`; intact records among them name theirs.
    """
    lines = [line for line in damaged.split(b"\n") if line]
    intact = [rec.rv for line in lines if (rec := decode_record(line)) is not None]
    return max([last_good + len(lines), *intact])


def _claimed_revision(snapshot: bytes) -> int:
    """The revision a damaged snapshot's header claims, if it can be read at all (else 0)."""
    header = snapshot[:snapshot.find(b"\n")].split(b" ")
    with contextlib.suppress(IndexError, ValueError):
        return int(header[2])
    return 0


_SLOT: Final = 32
"""Bytes of one slot of `store.lease`: `<crc32> <revision as 22 digits>` and a newline."""


def _lease_record(revision: int) -> bytes:
    text = b"%022d" % revision
    return b"%08x %s\n" % (zlib.crc32(text), text)


def _lease_value(slot: bytes) -> int | None:
    if len(slot) != _SLOT or slot[8:9] != b" " or slot[-1:] != b"\n":
        return None
    crc, text = _hex8(slot[:8]), slot[9:-1]
    return int(text) if crc is not None and text.isdigit() and zlib.crc32(text) == crc else None


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}"


# ---------------------------------------------------------------------------------- the log


@dataclass(frozen=True, kw_only=True)
class RepairReport:
    """What `repair` did."""

    path: Path
    """The damaged file."""
    offset: int
    """Where the damage starts (bytes from that offset were dropped)."""
    last_good: int
    """The last revision kept."""
    floor: int
    """The revision floor: the next write gets `floor + 1`."""
    dropped_bytes: int
    dropped_records: int
    """Lines dropped (each a record, or what is left of one)."""
    kept_objects: int
    saved_as: Path
    """Where the dropped bytes were kept."""

    def summary(self) -> str:
        """The report, as `--repair` prints it."""
        return (f"repaired {self.path}: damage at byte offset {self.offset}; kept everything up to revision "
                f"{self.last_good} ({self.kept_objects} objects); dropped {self.dropped_bytes} bytes "
                f"({self.dropped_records} records), saved in {self.saved_as}; the next revision is "
                f"{self.floor + 1} (no revision handed out before is handed out again)")


class LogBackend:
    """An append-only, checksummed log of writes plus periodic snapshots in a data directory.

    Layout: `store.snapshot` (state at a revision, replaced atomically by rename) and `store.log`
    (every write after the snapshot, one record a line); see the module docstring for the
    format, what recovery accepts and what it refuses.
    """

    SNAPSHOT: Final = "store.snapshot"
    LOG: Final = "store.log"
    LEASE: Final = "store.lease"
    OLD_SNAPSHOT: Final = "snapshot.json"
    OLD_LOG: Final = "log.jsonl"

    def __init__(self, data_dir: str | Path, *, fsync: bool = True, compact_every: int = 20_000,
                 files: Files | None = None, lease: int = 10_000) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.compact_every = compact_every
        self.files = files or Files()
        self._appended = 0
        self._fd: int | None = None
        self._size = 0
        """Bytes of whole records in the log: where a failed append is cut back to."""
        self._cut_pending = False
        """A failed append could not be cut back yet: the next append cuts first."""
        self._written = 0
        """The revision of the last record written to the log."""
        self._durable = 0
        """The revision up to which the log is synced (`fsync`) or written (otherwise)."""
        self._syncing: asyncio.Future[None] | None = None
        self._sync_failed: OSError | None = None
        self.syncs = 0
        """fdatasync calls made by group commit (each covers a batch of writes)."""
        self.lease = lease
        """Revisions reserved at a time in `store.lease` (fsync mode; see `load`)."""
        self._leased = 0
        """The highest revision `store.lease` allows to be handed out."""
        self._lease_fd: int | None = None
        self._lease_slot = 0
        """The slot of `store.lease` the next extension overwrites (the one with the smaller value)."""
        self._floor_pending: int | None = None
        """A floor record `load` could not append (a full disk): appended before the next record."""

    @property
    def snapshot_path(self) -> Path:
        """The snapshot file."""
        return self.dir / self.SNAPSHOT

    @property
    def log_path(self) -> Path:
        """The log file."""
        return self.dir / self.LOG

    @property
    def lease_path(self) -> Path:
        """The revision lease."""
        return self.dir / self.LEASE

    def _read_lease(self, last_good: int) -> int | None:
        """The revision lease (None when there is none): the larger of its two slots.

        Each extension overwrites the slot holding the smaller value, so a torn write leaves the
        other, and no revision above it was handed out before the write was synced. With one
        slot damaged, the lease is taken to be the other plus one extension, which covers both
        cases; with both damaged, the store refuses to start.
        """
        raw = self.files.read(self.lease_path)
        if not raw:  # none, or created by a run that stopped before writing it
            return None
        slots = [_lease_value(raw[i:i + _SLOT]) for i in (0, _SLOT)]
        valid = [v for v in slots if v is not None]
        if not valid:
            raise StoreCorrupt(path=self.lease_path, offset=0, last_good=last_good,
                               why="the revision lease is damaged")
        self._lease_slot = 1 - slots.index(max(valid))  # the next extension overwrites the other slot
        return max(valid) if len(valid) == 2 else valid[0] + self.lease + 1

    def _write_lease(self, revision: int, *, give_back: bool = False) -> None:
        """Reserve revisions up to `revision`, durably, in place (no new blocks: it works on a full disk).

        `give_back` (a clean close) lowers the lease: both slots are written, since the larger
        one counts (torn, either slot is still at or above every revision handed out).
        """
        if self._lease_fd is None:
            fd = self.files.open_rw(self.lease_path)
            try:
                if os.fstat(fd).st_size < 2 * _SLOT:
                    self._pwrite_all(fd, _lease_record(revision) * 2, 0)
                    self.files.sync(fd)
                    self.files.sync_dir(self.dir)
                    self._lease_slot = 0
            except OSError:
                self.files.close(fd)
                raise
            self._lease_fd = fd
        if give_back:
            self._pwrite_all(self._lease_fd, _lease_record(revision) * 2, 0)
        else:
            self._pwrite_all(self._lease_fd, _lease_record(revision), self._lease_slot * _SLOT)
        self.files.sync(self._lease_fd)
        self._lease_slot = 1 - self._lease_slot
        self._leased = revision

    def _pwrite_all(self, fd: int, data: bytes, offset: int) -> None:
        while data:
            n = self.files.pwrite(fd, data, offset)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data, offset = data[n:], offset + n

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """Check the snapshot and the log, replay them, and open the log for appending.

        Raises `StoreCorrupt` (changing nothing) on damage other than a torn last record.
        """
        self._migrate()
        data = self.files.read(self.log_path) or b""
        found = scan(snapshot=self.files.read(self.snapshot_path), log_data=data,
                     snapshot_path=self.snapshot_path, log_path=self.log_path)
        if found.damage is not None:
            raise found.damage
        fd = self.files.open_append(self.log_path)
        self._fd = fd
        if found.torn:
            log.warning("cut off a torn last record (the process stopped while appending it; it was never "
                        "acknowledged)", path=str(self.log_path), offset=found.log_end, bytes=found.torn,
                        last_good_revision=found.revision)
        if found.log_end < len(data):
            self.files.truncate(fd, found.log_end)
        self._size = found.log_end
        if found.add_newline:
            self._write_all(fd, b"\n")
            self._size += 1
        revision = found.revision
        leased = self._read_lease(revision)
        if leased is not None and leased > revision:
            # The last run did not close cleanly, and in fsync mode a write is published to
            # watchers before its fdatasync: revisions up to the lease may have been seen in
            # writes a machine crash took back. A floor record jumps past all of them, durably,
            # before any new revision is handed out.
            log.warning("the last run did not stop cleanly: revisions continue above its revision lease",
                        path=str(self.log_path), recovered_revision=revision, next_revision=leased + 1)
            self._floor_pending = leased
            try:
                self._append_floor(fd)
            except OSError as exc:  # no room: the next append writes it first (or fails cleanly)
                log.warning("the floor record waits for room in the log", error=_describe(exc))
            revision = leased
        if found.torn or found.add_newline or revision != found.revision:
            with contextlib.suppress(OSError):
                self.files.sync(fd)
        self._leased = max(leased or 0, revision)
        self._written = self._durable = revision
        return revision, [(res, obj) for (res, _), obj in found.state.items()]

    def repair(self) -> RepairReport | None:
        """Truncate the store at its first damage (None when there is none).

        The dropped bytes are kept beside the file (`<file>.damaged-<offset>`); a new snapshot
        holds the good state at a revision floor above every revision the dropped bytes may
        have held, and the log starts empty.
        """
        self._migrate()
        data = self.files.read(self.log_path) or b""
        snapshot = self.files.read(self.snapshot_path)
        found = scan(snapshot=snapshot, log_data=data, snapshot_path=self.snapshot_path, log_path=self.log_path)
        damage = found.damage
        try:
            leased = self._read_lease(found.revision) or 0
        except StoreCorrupt as exc:
            if damage is None:
                damage = exc
            leased = -1  # unreadable: every revision it may have reserved is skipped below
        if damage is None:
            return None
        if damage.path == self.lease_path:
            floor = found.revision + self.lease
            kept_state = [(res, obj) for (res, _), obj in found.state.items()]
            self.files.replace(self.snapshot_path, encode_snapshot(revision=floor, objects=kept_state))
            self.files.replace(self.log_path, b"")
            self.files.replace(self.lease_path, _lease_record(floor) * 2)
            report = RepairReport(path=damage.path, offset=0, last_good=found.revision, floor=floor, dropped_bytes=0,
                                  dropped_records=0, kept_objects=len(kept_state), saved_as=self.lease_path)
            log.warning("store repaired", report=report.summary())
            return report
        if damage.path == self.snapshot_path:
            assert snapshot is not None
            # Nothing in a damaged snapshot can be trusted, nor the log that continues it.
            floor = max(_claimed_revision(snapshot), _floor_after(data, 0))
            saved = self.dir / f"{self.SNAPSHOT}.damaged"
            self.files.replace(saved, snapshot)
            if data:
                self.files.replace(self.dir / f"{self.LOG}.damaged", data)
            dropped, records, kept, offset = len(snapshot) + len(data), data.count(b"\n"), 0, 0
            state: list[tuple[str, Obj]] = []
        else:
            offset = damage.offset
            tail = data[offset:]
            floor = _floor_after(tail, found.revision)
            saved = self.dir / f"{self.LOG}.damaged-{offset}"
            self.files.replace(saved, tail)
            dropped, records = len(tail), len([line for line in tail.split(b"\n") if line])
            state = [(res, obj) for (res, _), obj in found.state.items()]
            kept = len(state)
        floor = max(floor, leased) if leased >= 0 else floor + self.lease
        # The snapshot first: once it is in place, the log's records are all at or below its
        # revision (skipped on replay), so a crash before the truncation below loses nothing.
        self.files.replace(self.snapshot_path, encode_snapshot(revision=floor, objects=state))
        self.files.replace(self.log_path, b"")
        if self.files.read(self.lease_path):
            self.files.replace(self.lease_path, _lease_record(floor) * 2)
        report = RepairReport(path=damage.path, offset=offset, last_good=damage.last_good, floor=floor,
                              dropped_bytes=dropped, dropped_records=records, kept_objects=kept, saved_as=saved)
        log.warning("store repaired", report=report.summary())
        return report

    def _migrate(self) -> None:
        """Turn a data directory of the format before checksums into a version-2 one (see the module docstring)."""
        old_snap, old_log = self.dir / self.OLD_SNAPSHOT, self.dir / self.OLD_LOG
        if not (old_snap.exists() or old_log.exists()):
            return
        if not (self.snapshot_path.exists() or self.log_path.exists()):
            revision, state = self._read_old(old_snap, old_log)
            self.files.replace(self.snapshot_path, encode_snapshot(revision=revision, objects=state))
            log.warning("migrated a data directory to the checksummed format", dir=str(self.dir), revision=revision,
                        objects=len(state))
        # Written (or written by a run that stopped before this): the old files are kept aside.
        for old in (old_snap, old_log):
            if old.exists():
                self.files.rename(old, old.with_name(old.name + ".pre-v2"))

    def _read_old(self, snap: Path, old_log: Path) -> tuple[int, list[tuple[str, Obj]]]:
        revision = 0
        state: dict[tuple[str, str], Obj] = {}
        raw = self.files.read(snap)
        if raw is not None:
            try:
                doc = orjson.loads(raw)
                revision = int(doc["revision"])
                objects = doc["objects"]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                raise StoreCorrupt(path=snap, offset=0, last_good=0, why="the old-format snapshot does not parse") \
                    from None
            for resource, obj in objects:
                state[(resource, key_of(obj))] = obj
        data = self.files.read(old_log) or b""
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break  # torn final line: never acknowledged
            try:
                rec = orjson.loads(data[pos:end])
                rv, resource, key, obj = int(rec["rv"]), rec["resource"], rec["key"], rec["obj"]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                raise StoreCorrupt(path=old_log, offset=pos, last_good=revision,
                                   why="an old-format record does not parse") from None
            pos = end + 1
            if rv <= revision and raw is not None:
                continue  # already in the snapshot
            revision = max(revision, rv)
            if obj is None:
                state.pop((resource, key), None)
            else:
                state[(resource, key)] = obj
        return revision, [(res, obj) for (res, _), obj in state.items()]

    def _append_floor(self, fd: int) -> None:
        """Append the pending floor record, or cut a partial one back and raise."""
        if self._floor_pending is None:
            return
        floor = encode_record(rv=self._floor_pending, resource="", key="", obj=None)
        try:
            self._write_all(fd, floor)
        except OSError:
            try:
                self.files.truncate(fd, self._size)
            except OSError:
                self._cut_pending = True
            raise
        self._size += len(floor)
        self._floor_pending = None

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self.files.write(fd, view)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[n:]

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Append one record; on failure cut the log back to its last whole record and raise `StoreWriteError`."""
        fd = self._fd
        assert fd is not None, "load() first"
        if self._sync_failed is not None:
            # After a failed fdatasync the kernel may have dropped pages of the log: nothing
            # written after it could be promised durable. Reads go on; writes wait for a restart.
            raise StoreWriteError(f"store: the log could not be synced ({_describe(self._sync_failed)}); "
                                  "writes are refused until the apiserver restarts")
        if self._cut_pending:
            try:
                self.files.truncate(fd, self._size)
            except OSError as exc:
                raise StoreWriteError(f"store: write failed: {_describe(exc)}") from exc
            self._cut_pending = False
        try:
            self._append_floor(fd)
            if self.fsync and rv > self._leased:
                self._write_lease(rv + self.lease)  # reserve the next revisions before handing any out (`load`)
        except OSError as exc:
            raise StoreWriteError(f"store: write failed: {_describe(exc)}") from exc
        record = encode_record(rv=rv, resource=resource, key=key, obj=obj)
        try:
            self._write_all(fd, record)
        except OSError as exc:
            try:
                self.files.truncate(fd, self._size)
            except OSError:
                self._cut_pending = True
            log.warning("append failed: the write is not applied", path=str(self.log_path), rv=rv,
                        error=_describe(exc), cut_back=not self._cut_pending)
            raise StoreWriteError(f"store: write failed: {_describe(exc)}") from exc
        self._size += len(record)
        self._written = rv
        if not self.fsync:
            self._durable = rv
        self._appended += 1

    async def flush(self, rv: int) -> None:
        """Wait until the log is synced up to `rv` (group commit: one fdatasync covers a batch)."""
        while self._durable < rv:
            if self._sync_failed is not None:
                raise StoreWriteError(f"store: the log could not be synced: {_describe(self._sync_failed)}")
            if self._syncing is None:
                self._syncing = asyncio.ensure_future(self._sync_batch())
            await asyncio.shield(self._syncing)

    async def _sync_batch(self) -> None:
        # Every record written before the fdatasync starts is covered by it; writes that arrive
        # while it runs wait for the next one, which covers them all together.
        try:
            target, fd = self._written, self._fd
            if fd is None:
                raise OSError(errno.EBADF, "the log is closed")
            await asyncio.get_running_loop().run_in_executor(None, self.files.sync, fd)
            self.syncs += 1
            self._durable = max(self._durable, target)
        except OSError as exc:
            self._sync_failed = exc
            log.error("fdatasync of the log failed: writes are refused until a restart", path=str(self.log_path),
                      error=_describe(exc))
        finally:
            self._syncing = None

    def sync(self) -> None:
        """Sync the log now, synchronously (tests and shutdown)."""
        if self._fd is not None and self._sync_failed is None:
            self.files.sync(self._fd)
            self._durable = self._written

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Write a snapshot and start an empty log once enough writes have accumulated."""
        if self._appended < self.compact_every or self._fd is None:
            return
        try:
            self.files.replace(self.snapshot_path, encode_snapshot(revision=rv, objects=objects))
        except OSError as exc:  # no room for a snapshot: the log goes on, the next compaction retries
            log.warning("snapshot failed; the log is kept", path=str(self.snapshot_path), error=_describe(exc))
            return
        # The snapshot (synced) now holds everything up to rv; records <= rv in the old log are
        # skipped on replay, so truncating after the rename is safe even if we die here.
        try:
            self.files.truncate(self._fd, 0)
        except OSError as exc:
            log.warning("truncating the log after a snapshot failed; it is kept", path=str(self.log_path),
                        error=_describe(exc))
            return
        self._size = 0
        self._cut_pending = False
        self._floor_pending = None  # the snapshot's revision is at or above it
        self._durable = max(self._durable, rv)
        self._appended = 0

    def close(self) -> None:
        """Sync and close the log; a clean close gives the unused part of the revision lease back."""
        if self._fd is not None:
            try:
                self.files.sync(self._fd)
                if self._sync_failed is None and not self._cut_pending and self._leased > self._written:
                    self._write_lease(self._written, give_back=True)
            except OSError as exc:
                log.warning("closing the log: sync failed", path=str(self.log_path), error=_describe(exc))
            self.files.close(self._fd)
            self._fd = None
        if self._lease_fd is not None:
            self.files.close(self._lease_fd)
            self._lease_fd = None


class Store:
    """Current objects per resource, the revision counter, and the pods-by-node index.

    Objects are kept by resource (`Kind.resource`, `plural.group`), not by kind: every served
    version of a resource shares one bucket, and the objects of a custom resource loaded from
    the data directory wait in theirs until its definition is served again.
    """

    def __init__(self, *, backend: Backend | None = None) -> None:
        self.backend: Backend = backend or MemoryBackend()
        self._objects: defaultdict[str, dict[str, Obj]] = defaultdict(dict)
        self._pods_by_node: dict[str, dict[str, Obj]] = {}
        self._publishers: list[Publisher] = []
        self._last_write: defaultdict[str, int] = defaultdict(int)
        self.stager: Stager | None = None
        """Set in etcd mode (`kubemesh.apiserver.etcdcache`): `write`/`remove` stage instead of applying,
        and the store changes only through `apply`, fed by the etcd watch."""
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        revision, objects = self.backend.load()
        self.revision = revision
        for resource, obj in objects:
            self._put(resource, key_of(obj), obj, None)

    def subscribe(self, publisher: Publisher) -> None:
        """Be told of every write, synchronously, in revision order."""
        self._publishers.append(publisher)

    # ------------------------------------------------------------------------------ reads

    def get(self, kind: Kind, key: str) -> Obj | None:
        """The current object at `key`, or None."""
        return self._objects[kind.resource].get(key)

    def items(self, kind: Kind, *, namespace: str | None = None) -> Iterator[Obj]:
        """The current objects of a kind (of one namespace if given), unordered."""
        bucket = self._objects[kind.resource]
        if not namespace:
            return iter(bucket.values())
        prefix = namespace + "/"
        return (o for k, o in bucket.items() if k.startswith(prefix))

    def pods_on_node(self, node: str) -> Iterator[Obj]:
        """Pods whose spec.nodeName is `node` ("" for unscheduled pods), from the index."""
        return iter(self._pods_by_node.get(node, {}).values())

    def count(self, kind: Kind) -> int:
        """How many objects of a kind exist."""
        return len(self._objects[kind.resource])

    def last_write(self, kind: Kind) -> int:
        """The revision of the last write to a kind."""
        return self._last_write[kind.resource]

    # ------------------------------------------------------------------------------ writes

    def write(self, kind: Kind, obj: Obj, *, event: EventType) -> Obj:
        """Store a new version of an object (ADDED or MODIFIED); returns it with its new rv.

        `obj` must be a dict the caller will never touch again. In etcd mode the write is staged
        (`stager`) and `obj` returned as it is: its resourceVersion comes with the commit.
        """
        if self.stager is not None:
            key = key_of(obj)
            prev = self.basis(kind, key)
            expected = _rv_of(prev) if prev is not None else 0
            # Until the commit names its revision the object carries the one it replaces ("0":
            # none), so that the operation's own later reads of it compare as they would.
            obj["metadata"]["resourceVersion"] = str(expected)
            self.stager(Staged(kind=kind, key=key, obj=obj, expected=expected))
            return obj
        rv = self.revision + 1
        obj["metadata"]["resourceVersion"] = str(rv)
        key = key_of(obj)
        resource = kind.resource
        prev = self._objects[resource].get(key)
        # Appended first: when the append fails (StoreWriteError) nothing has changed here.
        self.backend.append(rv=rv, resource=resource, key=key, obj=obj)
        self.revision = rv
        self._put(resource, key, obj, prev)
        self._publish(kind, event, obj, prev, rv)
        return obj

    def basis(self, kind: Kind, key: str) -> Obj | None:
        """In etcd mode, the state a staged write of `key` is compared with: the cache's (see `CacheStore`)."""
        return self._objects[kind.resource].get(key)

    def remove(self, kind: Kind, key: str) -> Obj | None:
        """Remove an object; the DELETED event carries its final state at the new revision."""
        resource = kind.resource
        if self.stager is not None:  # etcd mode: staged; `final` keeps the removed object's revision
            seen = self.get(kind, key)  # with this request's own staged writes (etcdcache.CacheStore)
            if seen is None:
                return None
            staged_final = dict(seen)
            staged_final["metadata"] = dict(seen["metadata"])
            self.stager(Staged(kind=kind, key=key, obj=None, expected=_rv_of(seen), final=staged_final))
            return staged_final
        prev = self._objects[resource].get(key)
        if prev is None:
            return None
        rv = self.revision + 1
        final = dict(prev)
        final["metadata"] = {**prev["metadata"], "resourceVersion": str(rv)}
        self.backend.append(rv=rv, resource=resource, key=key, obj=None)  # first, as in `write`
        self.revision = rv
        del self._objects[resource][key]
        if resource == _PODS:
            self._unindex_pod(key, prev)
        self._publish(kind, "DELETED", final, prev, rv)
        return final

    async def flush(self, rv: int | None = None) -> None:
        """Return once every write up to `rv` (default: the current revision) may be acknowledged.

        Raises `StoreWriteError` when the backend cannot make them durable.
        """
        await self.backend.flush(self.revision if rv is None else rv)

    # ------------------------------------------------------------------------------ etcd mode

    def apply(self, *, kind: Kind | None, resource: str, key: str, obj: Obj | None, rv: int) -> None:
        """Apply one change the etcd watch delivered (at revision `rv`, in revision order) and publish it.

        `obj` None is a deletion: the DELETED event carries the last state at revision `rv`, as
        `remove` does. `kind` None (a resource no served kind has, such as a custom resource whose
        definition is not served yet) keeps the object without publishing.
        """
        bucket = self._objects[resource]
        prev = bucket.get(key)
        if obj is None:
            if prev is not None:
                final = dict(prev)
                final["metadata"] = {**prev["metadata"], "resourceVersion": str(rv)}
                del bucket[key]
                if resource == _PODS:
                    self._unindex_pod(key, prev)
                self.revision = max(self.revision, rv)
                if kind is not None:
                    self._publish(kind, "DELETED", final, prev, rv)
                else:
                    self._last_write[resource] = rv
        else:
            self.revision = max(self.revision, rv)
            self._put(resource, key, obj, prev)
            if kind is not None:
                self._publish(kind, "ADDED" if prev is None else "MODIFIED", obj, prev, rv)
        self.advance(rv)

    def entries(self) -> Iterator[tuple[str, Obj]]:
        """Every stored object as (resource, object) (etcd mode: what a relist compares with)."""
        return self._all()

    def at(self, resource: str, key: str) -> Obj | None:
        """The object at `key` of a resource given by name (etcd mode: the kind may not be served)."""
        return self._objects[resource].get(key)

    def advance(self, rv: int) -> None:
        """Every change up to `rv` has been applied (a progress notification): wake who waits for it."""
        self.revision = max(self.revision, rv)
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.revision:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    async def wait_applied(self, rv: int) -> None:
        """Return once the store has applied every change up to revision `rv`."""
        if self.revision >= rv:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (rv, next(self._waiter_ids), fut))
        await fut

    def compact(self) -> None:
        """Let the backend snapshot the state if its log has grown."""
        self.backend.compact(rv=self.revision, objects=self._all())

    def close(self) -> None:
        """Release durable storage."""
        self.backend.close()

    # ------------------------------------------------------------------------------ internals

    def _all(self) -> Iterator[tuple[str, Obj]]:
        for resource, objs in self._objects.items():
            for obj in objs.values():
                yield resource, obj

    def _put(self, resource: str, key: str, obj: Obj, prev: Obj | None) -> None:
        self._objects[resource][key] = obj
        self._last_write[resource] = max(self._last_write[resource], int(obj["metadata"].get("resourceVersion") or 0))
        if resource == _PODS:
            if prev is not None:
                self._unindex_pod(key, prev)
            node = _node_of(obj)
            self._pods_by_node.setdefault(node, {})[key] = obj

    def _unindex_pod(self, key: str, pod: Obj) -> None:
        node = _node_of(pod)
        bucket = self._pods_by_node.get(node)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._pods_by_node[node]

    def _publish(self, kind: Kind, event: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        self._last_write[kind.resource] = rv
        for publish in self._publishers:
            publish(kind, event, obj, prev, rv)


def _rv_of(obj: Obj) -> int:
    rv = str(obj["metadata"].get("resourceVersion") or "0")
    return int(rv) if rv.isdigit() else 0


def _node_of(pod: Obj) -> str:
    spec: Any = pod.get("spec") or {}
    return str(spec.get("nodeName") or "")
