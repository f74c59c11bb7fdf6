"""The store: one global revision, the current objects, and durable storage behind an interface.

Guarantees:

* One revision counter for the whole store, as etcd's: every write takes the next revision,
  an object's `metadata.resourceVersion` is the revision of its last write, and a list is
  read at the current revision. Revisions only go up, across restarts too.
* Writes are synchronous and happen on the event loop's thread, one at a time: a write, its
  log append and its publication to watchers happen with no `await` in between, so watchers
  see events in revision order and a list never sees half a write.
* Stored objects are never mutated after they are written. Readers may hand them out
  without copying; writers build a new dict for every write.
* With a `LogBackend`, a write is appended to the log before it is acknowledged, so after a
  `kill -9` every acknowledged write is recovered on restart (`fsync=True` also survives a
  machine crash, at a cost per write).
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import orjson

from kubemesh.services.model.kinds import PODS, Kind, Obj, key_of

_PODS: Final = PODS.resource

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

Publisher = Callable[[Kind, EventType, Obj, "Obj | None", int], None]
"""Called after every write: (kind, event type, object, previous object, revision)."""


class Backend(Protocol):
    """Where writes are made durable. The in-memory default keeps nothing."""

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """The recovered revision and objects (as `(resource, object)` pairs)."""
        ...

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Make one write durable before it is acknowledged (`obj=None` is a removal)."""
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

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing to do."""


class LogBackend:
    """An append-only log of writes plus periodic snapshots in a data directory.

    Layout: `snapshot.json` (state at a revision, replaced atomically by rename) and
    `log.jsonl` (every write after the snapshot, one JSON line each). Recovery loads the
    snapshot and replays the log; a torn last line (the process died mid-append, so the
    write was never acknowledged) is dropped.
    """

    SNAPSHOT: Final = "snapshot.json"
    LOG: Final = "log.jsonl"

    def __init__(self, data_dir: str | Path, *, fsync: bool = False, compact_every: int = 20_000) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.compact_every = compact_every
        self._appended = 0
        self._fd: int | None = None

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """Read the snapshot, replay the log and open the log for appending."""
        revision = 0
        state: dict[tuple[str, str], Obj] = {}
        snap = self.dir / self.SNAPSHOT
        if snap.exists():
            doc = orjson.loads(snap.read_bytes())
            revision = int(doc["revision"])
            for resource, obj in doc["objects"]:
                state[(resource, key_of(obj))] = obj
        log = self.dir / self.LOG
        valid_bytes = 0
        if log.exists():
            data = log.read_bytes()
            pos = 0
            while pos < len(data):
                end = data.find(b"\n", pos)
                if end < 0:
                    break  # torn final line: never acknowledged
                try:
                    rec = orjson.loads(data[pos:end])
                except orjson.JSONDecodeError:
                    break
                pos = end + 1
                valid_bytes = pos
                rv = int(rec["rv"])
                if rv <= revision and snap.exists():
                    continue  # already in the snapshot
                revision = max(revision, rv)
                if rec["obj"] is None:
                    state.pop((rec["resource"], rec["key"]), None)
                else:
                    state[(rec["resource"], rec["key"])] = rec["obj"]
            if valid_bytes < len(data):
                with open(log, "r+b") as f:
                    f.truncate(valid_bytes)
        self._fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return revision, [(res, obj) for (res, _), obj in state.items()]

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Append one write with a single write(2) so that a crash never interleaves records."""
        assert self._fd is not None, "load() first"
        line = orjson.dumps({"rv": rv, "resource": resource, "key": key, "obj": obj}) + b"\n"
        os.write(self._fd, line)
        if self.fsync:
            os.fsync(self._fd)
        self._appended += 1

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Write a snapshot and start an empty log once enough writes have accumulated."""
        if self._appended < self.compact_every or self._fd is None:
            return
        tmp = self.dir / (self.SNAPSHOT + ".tmp")
        tmp.write_bytes(orjson.dumps({"revision": rv, "objects": list(objects)}))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / self.SNAPSHOT)
        # The snapshot now holds everything up to rv; records <= rv in the old log are
        # skipped on replay, so truncating after the rename is safe even if we die here.
        os.ftruncate(self._fd, 0)
        self._appended = 0

    def close(self) -> None:
        """Close the log."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


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

        `obj` must be a dict the caller will never touch again.
        """
        self.revision += 1
        rv = self.revision
        obj["metadata"]["resourceVersion"] = str(rv)
        key = key_of(obj)
        resource = kind.resource
        prev = self._objects[resource].get(key)
        self.backend.append(rv=rv, resource=resource, key=key, obj=obj)
        self._put(resource, key, obj, prev)
        self._publish(kind, event, obj, prev, rv)
        return obj

    def remove(self, kind: Kind, key: str) -> Obj | None:
        """Remove an object; the DELETED event carries its final state at the new revision."""
        resource = kind.resource
        prev = self._objects[resource].get(key)
        if prev is None:
            return None
        self.revision += 1
        rv = self.revision
        final = dict(prev)
        final["metadata"] = {**prev["metadata"], "resourceVersion": str(rv)}
        self.backend.append(rv=rv, resource=resource, key=key, obj=None)
        del self._objects[resource][key]
        if resource == _PODS:
            self._unindex_pod(key, prev)
        self._publish(kind, "DELETED", final, prev, rv)
        return final

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


def _node_of(pod: Obj) -> str:
    spec: Any = pod.get("spec") or {}
    return str(spec.get("nodeName") or "")
