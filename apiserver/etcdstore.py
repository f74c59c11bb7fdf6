"""Objects in etcd v3 with Kubernetes' etcd3 storage semantics: the building block of `--storage etcd`.

`kubemesh.apiserver.etcdcache` puts the apiserver on it (docs/design.md, "etcd storage layer").
This module talks to etcd over gRPC with the stubs `aetcd` ships (grpc.aio; chosen over etcd's JSON gateway by
`benchmarks/etcd_clients.py`: less client CPU per write, several times the throughput).

Semantics (those of k8s.io/apiserver's etcd3 store, written anew here):

* **Keys.** `/registry/<resource>/<namespace>/<name>`, or `/registry/<resource>/<name>` for a
  cluster-scoped object (`object_key`); the prefix `/registry` is `EtcdSettings.prefix`. A
  resource's keys, or one namespace's, are a prefix (`resource_prefix`, ending in "/").
* **Revisions.** etcd's revision is the resourceVersion: one counter over the whole store,
  raised by one by every successful write transaction. A kv's `mod_revision` is the revision of
  the write that made it; the revision a write returns is that write's `mod_revision`.
* **Values.** An object is stored as its JSON without `metadata.resourceVersion`
  (`encode_object`); reading sets it from the kv's `mod_revision` (`decode_object`), so a stored
  value never disagrees with its revision.
* **Writes are transactions comparing the key's state**: `create` puts only when the key's
  `create_revision` is 0 (absent), else `AlreadyExists`; `update` and `delete` act only when the
  key's `mod_revision` is the one the caller read, else `Conflict` carrying the key's current kv
  (read in the same transaction, so it is the state that made the compare fail), with which the
  caller retries as GuaranteedUpdate does. Two apiservers writing one key through two clients:
  exactly one of two writes from the same read wins.
* **Reads at one revision.** `list` reads at the header revision of its first page (or the
  revision asked for); later pages name that revision again and see the same snapshot whatever
  was written since. A revision older than the last compaction raises `Compacted` (-> 410 Gone),
  one newer than the store's raises `FutureRevision`.
* **Watch** (`EtcdStore.watch`): every change under a prefix from a start revision on, in
  revision order, each with the kv before it (`prev_kv`), and progress notifications
  (`Progress`, a bookmark: every event up to its revision has been delivered). A start revision
  older than the last compaction raises `Compacted` from the iterator. The watch ends with
  `Unavailable` when the connection is lost; `Watch.resume_revision` is where a new watch
  goes on without losing or repeating an event.
* **Failures** are typed (`StorageError` and its subclasses); a lost or refused connection is
  `Unavailable`, never a silent retry: the caller decides (a write may or may not have been
  applied when the connection dropped mid-call).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import os
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson

from kubemesh.services.model.kinds import Obj

if TYPE_CHECKING:
    import grpc
    from aetcd import rpc
else:
    grpc = None  # the modules behind `_load_grpc`, imported with the first client (see there)
    rpc = None


def _load_grpc() -> None:
    """Import gRPC and etcd's stubs (the `etcd` extra) when the first `EtcdStore` is made.

    The apiserver imports this module whatever its `--storage` (the errors, keys and settings),
    but only `--storage etcd` needs gRPC: importing it at start-up would cost every memory-mode
    start, and an install without the `etcd` extra could not start at all.
    """
    global grpc, rpc  # one lazy import for the module, at the first client
    if rpc is None:
        # gRPC's fork support restarts its poller threads in a forked child. A process that talks to
        # etcd and then spawns another with a preexec_fn (the launcher, for PR_SET_PDEATHSIG; a test
        # process that read etcd directly) forks, the child closes its file descriptors before exec,
        # and the restarted poller aborts it on EBADF (SIGABRT/SIGSEGV before the component even
        # starts; 3 starts in 8 in a reproduction). Nothing here uses gRPC across a fork: off,
        # unless the environment says otherwise. Read by gRPC when it is first imported.
        os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
        import grpc as grpc_module  # noqa: PLC0415 - deferred: see the docstring
        from aetcd import rpc as rpc_module  # noqa: PLC0415

        grpc, rpc = grpc_module, rpc_module

DEFAULT_PREFIX: Final = "/registry"

LIST_TOO_OLD_MESSAGE: Final = "The resourceVersion for the provided list is too old."
"""kube-apiserver's 410 message for a list at a compacted revision."""
WATCH_TOO_OLD_MESSAGE: Final = "The resourceVersion for the provided watch is too old."
"""kube-apiserver's 410 message for a watch from etcd at a compacted revision (its watch cache
words it `too old resource version: <rv> (<oldest>)`, `Compacted.watch_cache_message`)."""


# ---------------------------------------------------------------------------------- errors


class StorageError(Exception):
    """Something etcd refused or could not do."""


class AlreadyExists(StorageError):
    """`create` of a key that exists; `current` is the kv there (read in the same transaction)."""

    def __init__(self, *, key: bytes, current: KeyValue | None) -> None:
        super().__init__(f"key exists: {key.decode(errors='replace')}")
        self.key = key
        self.current = current


class Conflict(StorageError):
    """`update`/`delete` whose expected mod_revision is not the key's.

    `current` is the key's kv at the transaction (None: the key is gone; the caller answers
    NotFound), read atomically with the failed compare: retry from it.
    """

    def __init__(self, *, key: bytes, expected_mod_revision: int, current: KeyValue | None) -> None:
        now = current.mod_revision if current is not None else "absent"
        super().__init__(f"{key.decode(errors='replace')}: expected mod_revision {expected_mod_revision}, is {now}")
        self.key = key
        self.expected_mod_revision = expected_mod_revision
        self.current = current


class Compacted(StorageError):
    """A read or watch at a revision etcd has compacted away (410 Gone upstream).

    `compact_revision` is the oldest revision still readable when etcd said it (0 when etcd's
    answer did not say: ranges only name the error).
    """

    def __init__(self, *, revision: int, compact_revision: int = 0) -> None:
        super().__init__(f"revision {revision} has been compacted"
                         + (f" (compacted at {compact_revision})" if compact_revision else ""))
        self.revision = revision
        self.compact_revision = compact_revision

    def watch_cache_message(self) -> str:
        """The watch cache's 410 message for a watch from `revision` (a resourceVersion one below it)."""
        return f"too old resource version: {self.revision - 1} ({max(self.compact_revision - 1, 0)})"


class FutureRevision(StorageError):
    """A read at a revision newer than the store's (upstream: 504 `Too large resource version`)."""

    def __init__(self, *, revision: int) -> None:
        super().__init__(f"revision {revision} is newer than the store's")
        self.revision = revision


class Unavailable(StorageError):
    """etcd could not be reached, or the connection was lost (a write's outcome is then unknown)."""


def _translate(exc: grpc.aio.AioRpcError, *, revision: int = 0) -> StorageError:
    details = exc.details() or ""
    code = exc.code()
    if code == grpc.StatusCode.OUT_OF_RANGE and "compacted" in details:
        return Compacted(revision=revision)
    if code == grpc.StatusCode.OUT_OF_RANGE and "future revision" in details:
        return FutureRevision(revision=revision)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return Unavailable(f"etcd: {code.name}: {details}")
    return StorageError(f"etcd: {code.name}: {details}")


# ---------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key's state at a revision, as etcd reports it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    """Writes to the key since its creation (1 after the create); 0 for a deleted key's tombstone."""

    @classmethod
    def of(cls, kv: Any) -> KeyValue:
        """From etcd's `mvccpb.KeyValue`."""
        return cls(key=bytes(kv.key), value=bytes(kv.value), create_revision=int(kv.create_revision),
                   mod_revision=int(kv.mod_revision), version=int(kv.version))


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list, read at `revision`.

    `continue_from` is the key the next page starts at (None: the list is complete); ask for it
    with `revision=` this page's revision. `remaining` counts the keys after this page at that
    revision (etcd's count of the rest of the range).
    """

    kvs: tuple[KeyValue, ...]
    revision: int
    continue_from: bytes | None
    remaining: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change of one key: PUT (created or updated) or DELETE, at `kv.mod_revision`.

    A DELETE's `kv` has the key and the deletion's revision, no value; `prev_kv` is the state
    before the change (None for a create, or when etcd compacted it before sending).
    """

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev_kv: KeyValue | None

    @property
    def revision(self) -> int:
        """The revision of the change."""
        return self.kv.mod_revision


@dataclass(frozen=True, slots=True)
class Progress:
    """A bookmark: the watch has delivered every event up to `revision` (etcd's header revision)."""

    revision: int


def encode_object(obj: Obj) -> bytes:
    """The value stored for an object: its JSON without `metadata.resourceVersion` (the input is not changed)."""
    md = obj.get("metadata")
    if isinstance(md, dict) and "resourceVersion" in md:
        obj = {**obj, "metadata": {k: v for k, v in md.items() if k != "resourceVersion"}}
    return orjson.dumps(obj)


def decode_object(kv: KeyValue) -> Obj:
    """The object a kv holds, its `metadata.resourceVersion` set from the kv's mod_revision."""
    obj: Obj = orjson.loads(kv.value)
    md = obj.setdefault("metadata", {})
    md["resourceVersion"] = str(kv.mod_revision)
    return obj


# ---------------------------------------------------------------------------------- keys


def object_key(*, resource: str, namespace: str | None, name: str, prefix: str = DEFAULT_PREFIX) -> bytes:
    """`<prefix>/<resource>/<namespace>/<name>`, or without the namespace for a cluster-scoped object."""
    parts = [prefix.rstrip("/"), resource, *([namespace] if namespace else []), name]
    for part in parts[1:]:
        if not part or "/" in part:
            raise ValueError(f"invalid key segment {part!r}")
    return "/".join(parts).encode()


def resource_prefix(*, resource: str, namespace: str | None = None, prefix: str = DEFAULT_PREFIX) -> bytes:
    """The prefix of every key of a resource (of one namespace, when given), ending in "/"."""
    parts = [prefix.rstrip("/"), resource, *([namespace] if namespace else [])]
    return ("/".join(parts) + "/").encode()


def range_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (etcd's range end for a prefix)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key


# ---------------------------------------------------------------------------------- the store


@dataclass(frozen=True, kw_only=True)
class EtcdSettings:
    """Where etcd is and how to talk to it.

    `endpoints`: http://host:port URLs of the members (TLS is not supported yet). With several,
    every host must be an IP address: gRPC connects to one and fails over to the next.
    """

    endpoints: tuple[str, ...]
    prefix: str = DEFAULT_PREFIX
    timeout: float = 10.0
    """Seconds a unary call (a read, a write, a compaction) may take before `Unavailable`."""


def channel_target(endpoints: Sequence[str]) -> str:
    """The gRPC target for etcd client URLs."""
    hosts: list[tuple[str, int]] = []
    for url in endpoints:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http":
            raise ValueError(f"etcd endpoint {url!r}: only http:// is supported")
        if parsed.hostname is None or parsed.port is None:
            raise ValueError(f"etcd endpoint {url!r}: needs a host and a port")
        hosts.append((parsed.hostname, parsed.port))
    if not hosts:
        raise ValueError("no etcd endpoint")
    if len(hosts) == 1:
        host, port = hosts[0]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        versions = {ipaddress.ip_address(host).version for host, _ in hosts}
    except ValueError:
        raise ValueError("several etcd endpoints must be IP addresses (one host name may stand alone)") from None
    if versions == {4}:
        return "ipv4:" + ",".join(f"{h}:{p}" for h, p in hosts)
    if versions == {6}:
        return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in hosts)
    raise ValueError("several etcd endpoints must all be IPv4 or all IPv6")


class EtcdStore:
    """A connection to etcd and Kubernetes' storage operations over it (see the module docstring).

    Each instance has its own gRPC channel: two instances behave as two apiservers. Use
    `await EtcdStore.open(settings=...)`, and `close()` (or `async with`).
    """

    def __init__(self, *, settings: EtcdSettings) -> None:
        _load_grpc()
        self.settings = settings
        self.prefix = settings.prefix
        self._channel = grpc.aio.insecure_channel(channel_target(settings.endpoints))
        self._kv = rpc.KVStub(self._channel)
        self._watch = rpc.WatchStub(self._channel)
        self._timeout = settings.timeout
        self.cut: str | None = None
        """Chaos (`apiserver.etcdPartition`): while set, every call fails with `Unavailable` carrying this text."""
        self.cut_blackhole = False
        """With `cut`: each call first hangs for the request timeout, as over a network that drops packets."""

    @classmethod
    async def open(cls, *, settings: EtcdSettings) -> EtcdStore:
        """Connect, and check etcd answers (`Unavailable` when it does not within the timeout)."""
        store = cls(settings=settings)
        try:
            await store.current_revision()
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        """Close the channel: calls and watches in flight end with `Unavailable`."""
        await self._channel.close()

    async def __aenter__(self) -> EtcdStore:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def key(self, *, resource: str, namespace: str | None, name: str) -> bytes:
        """The key of an object in this store (`object_key` under the configured prefix)."""
        return object_key(resource=resource, namespace=namespace, name=name, prefix=self.prefix)

    def resource_prefix(self, *, resource: str, namespace: str | None = None) -> bytes:
        """The prefix of a resource's keys in this store (`resource_prefix` under the configured prefix)."""
        return resource_prefix(resource=resource, namespace=namespace, prefix=self.prefix)

    async def _reachable(self) -> None:
        """Raise `Unavailable` while chaos cuts this client off etcd (after the timeout, for a black hole)."""
        if self.cut is None:
            return
        reason = self.cut
        if self.cut_blackhole:
            await asyncio.sleep(self._timeout)
        raise Unavailable(reason)

    async def _txn(self, request: Any) -> Any:
        await self._reachable()
        try:
            return await self._kv.Txn(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc) from exc

    async def _range(self, request: Any, *, revision: int = 0) -> Any:
        await self._reachable()
        try:
            return await self._kv.Range(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, revision=revision) from exc

    @staticmethod
    def _current(response: Any) -> KeyValue | None:
        """The kv of a failed transaction's else-branch range (None: the key is absent)."""
        kvs = response.responses[0].response_range.kvs if response.responses else ()
        return KeyValue.of(kvs[0]) if kvs else None

    async def create(self, *, key: bytes, value: bytes) -> int:
        """Put a new key: its revision. `AlreadyExists` (with the kv there) when the key exists."""
        response = await self._txn(rpc.TxnRequest(
            compare=[rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0)],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))]))
        if not response.succeeded:
            raise AlreadyExists(key=key, current=self._current(response))
        return int(response.header.revision)

    async def update(self, *, key: bytes, value: bytes, expected_mod_revision: int) -> int:
        """Replace a key's value if its mod_revision is `expected_mod_revision`: the new revision.

        `Conflict` with the current kv otherwise (`current` None: the key does not exist).
        """
        if expected_mod_revision <= 0:
            # mod_revision 0 compares equal for an absent key: the put would create it.
            raise ValueError("update needs the mod_revision of an existing key (> 0)")
        response = await self._compare_and(key=key, expected_mod_revision=expected_mod_revision,
                                           op=rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value)))
        return int(response.header.revision)

    async def delete(self, *, key: bytes, expected_mod_revision: int) -> tuple[int, KeyValue]:
        """Delete a key if its mod_revision is `expected_mod_revision`: (the deletion's revision, the deleted kv).

        `Conflict` with the current kv otherwise (`current` None: the key does not exist).
        """
        if expected_mod_revision <= 0:
            raise ValueError("delete needs the mod_revision of an existing key (> 0)")
        response = await self._compare_and(
            key=key, expected_mod_revision=expected_mod_revision,
            op=rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, prev_kv=True)))
        # The compare saw the key at expected_mod_revision > 0 and the delete ran in the same
        # transaction: it deleted exactly that kv.
        prev = response.responses[0].response_delete_range.prev_kvs
        return int(response.header.revision), KeyValue.of(prev[0])

    async def put(self, *, key: bytes, value: bytes) -> int:
        """Put a key whatever its state: the write's revision (for kubemesh's own keys, never objects)."""
        response = await self._txn(rpc.TxnRequest(success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key,
                                                                                                    value=value))]))
        return int(response.header.revision)

    async def remove(self, *, key: bytes) -> int:
        """Delete a key whatever its state (absent is fine): the store's revision after it."""
        response = await self._txn(rpc.TxnRequest(
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))]))
        return int(response.header.revision)

    async def _compare_and(self, *, key: bytes, expected_mod_revision: int, op: Any) -> Any:
        """Run `op` if the key's mod_revision is `expected_mod_revision`; the txn response.

        `Conflict` otherwise, carrying the current kv (read in the same transaction).
        """
        response = await self._txn(rpc.TxnRequest(
            compare=[rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL,
                                 mod_revision=expected_mod_revision)],
            success=[op],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))]))
        if not response.succeeded:
            raise Conflict(key=key, expected_mod_revision=expected_mod_revision, current=self._current(response))
        return response

    async def get(self, *, key: bytes, revision: int | None = None) -> KeyValue | None:
        """A key's kv at the current revision (or at `revision`); None when absent."""
        response = await self._range(rpc.RangeRequest(key=key, revision=revision or 0), revision=revision or 0)
        return KeyValue.of(response.kvs[0]) if response.kvs else None

    async def list(self, *, prefix: bytes, revision: int | None = None, limit: int = 0,
                   continue_from: bytes | None = None) -> ListPage:
        """The keys under `prefix` in key order, read at one revision: a page of at most `limit` (0: all).

        With `revision` None the read is at the current revision, which the page names. A later
        page passes `continue_from` and `revision` of the page before. `Compacted` when the
        revision is older than the last compaction, `FutureRevision` when it is newer than the
        store's.
        """
        start = continue_from if continue_from is not None else prefix
        if not start.startswith(prefix):
            raise ValueError("continue_from is not under the prefix")
        rev = revision or 0
        response = await self._range(rpc.RangeRequest(key=start, range_end=range_end(prefix), revision=rev,
                                                      limit=limit), revision=rev)
        kvs = tuple(KeyValue.of(kv) for kv in response.kvs)
        more = bool(response.more)
        return ListPage(kvs=kvs, revision=rev or int(response.header.revision),
                        continue_from=kvs[-1].key + b"\x00" if more and kvs else None,
                        remaining=int(response.count) - len(kvs) if more else 0)

    def watch(self, *, prefix: bytes, start_revision: int, progress_notify: bool = True,
              prev_kv: bool = True) -> Watch:
        """Changes under `prefix` with mod_revision ≥ `start_revision` (see `Watch`).

        `start_revision` 0 means "from now". A resourceVersion R the client has seen is
        `start_revision` R + 1.
        """
        return Watch(stub=self._watch, prefix=prefix, start_revision=start_revision,
                     progress_notify=progress_notify, prev_kv=prev_kv)

    async def compact(self, *, revision: int, physical: bool = False) -> None:
        """Forget every revision before `revision`: reads and watches below it raise `Compacted` from now on.

        `physical` waits until the space is freed too. `Compacted` when `revision` is already
        compacted, `FutureRevision` when it is newer than the store's.
        """
        await self._reachable()
        try:
            await self._kv.Compact(rpc.CompactionRequest(revision=revision, physical=physical),
                                   timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, revision=revision) from exc

    async def current_revision(self) -> int:
        """The store's revision now (that of its latest write)."""
        response = await self._range(rpc.RangeRequest(key=self.prefix.encode(), count_only=True))
        return int(response.header.revision)


class Watch:
    """One etcd watch: an async iterator of `WatchEvent` and `Progress`, in revision order.

    Guarantees: every change under the prefix with mod_revision ≥ the start revision, each once,
    in order (etcd's watch guarantee); a `Progress` is sent by etcd only when the watch has caught
    up (every event up to its revision delivered). Iteration raises `Compacted` when the start
    revision (or, for a watch fallen behind, the next revision it needed) has been compacted,
    and `Unavailable` when the connection is lost; `resume_revision` is then where a new watch
    must start to go on exactly. Close it with `close()` or `async with`.
    """

    def __init__(self, *, stub: Any, prefix: bytes, start_revision: int, progress_notify: bool,
                 prev_kv: bool) -> None:
        self._stub = stub
        self._create = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
            key=prefix, range_end=range_end(prefix), start_revision=start_revision,
            progress_notify=progress_notify, prev_kv=prev_kv))
        self._call: Any = None
        self._pending: collections.deque[WatchEvent | Progress] = collections.deque()
        # The revision up to which everything has been delivered; unknown (None) for a watch
        # from now until etcd's creation answer names "now".
        self._last: int | None = start_revision - 1 if start_revision > 0 else None
        self._closed = False

    @property
    def resume_revision(self) -> int:
        """The start revision of a watch that goes on from here: one past the last event or bookmark seen.

        0 ("from now") only for a watch started from now that has seen nothing yet.
        """
        return self._last + 1 if self._last is not None else 0

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[WatchEvent | Progress]:
        return self

    async def _open(self) -> None:
        self._call = self._stub.Watch()
        try:
            await self._call.write(self._create)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc) from exc

    async def __anext__(self) -> WatchEvent | Progress:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            if self._call is None:
                await self._open()
            try:
                response = await self._call.read()
            except grpc.aio.AioRpcError as exc:
                if self._closed:
                    raise StopAsyncIteration from None
                raise _translate(exc) from exc
            except asyncio.CancelledError:
                # grpc.aio raises CancelledError from a call cancelled locally: by `close()`, by
                # the store's channel closing under the watch, or by our own task's cancellation
                # (which must propagate).
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                if self._closed:
                    raise StopAsyncIteration from None
                raise Unavailable("the etcd channel was closed under the watch") from None
            if response is grpc.aio.EOF:
                if self._closed:
                    raise StopAsyncIteration
                raise Unavailable("etcd ended the watch stream")
            self._take(response)
        item = self._pending.popleft()
        # Advanced as items are handed out, not as they are buffered: a watch abandoned with
        # buffered items resumes at the first one it did not deliver.
        self._last = max(item.revision, self._last or 0)
        return item

    def _take(self, response: Any) -> None:
        if response.compact_revision:
            self._closed = True
            self._call.cancel()
            raise Compacted(revision=self.resume_revision, compact_revision=int(response.compact_revision))
        if response.canceled:
            self._closed = True
            self._call.cancel()
            raise StorageError(f"etcd canceled the watch: {response.cancel_reason}")
        if response.events:
            for ev in response.events:
                kv = KeyValue.of(ev.kv)
                prev = KeyValue.of(ev.prev_kv) if ev.HasField("prev_kv") else None
                self._pending.append(WatchEvent(type="DELETE" if ev.type == rpc.Event.DELETE else "PUT",
                                                kv=kv, prev_kv=prev))
        elif not response.created:
            # No events and not the creation's answer: a progress notification. etcd sends it
            # once the watch has caught up, so its header revision is at least every event's.
            self._pending.append(Progress(revision=int(response.header.revision)))
        elif self._last is None:
            # A watch from now: the creation's header revision is "now"; events follow it.
            self._last = int(response.header.revision)

    async def request_progress(self) -> None:
        """Ask etcd for a progress notification now (it answers only once the watch has caught up).

        Caution for consistent reads built on it: etcd before 3.4.31 and 3.5.13 could answer a
        progress request ahead of events still queued for the stream (etcd issue 15220), which
        is why kube-apiserver serves consistent lists from its cache only on etcd at or above
        those versions; Debian's 3.4.23 here is below. Periodic notifications are not affected.
        """
        if self._call is None:
            await self._open()
        try:
            await self._call.write(rpc.WatchRequest(progress_request=rpc.WatchProgressRequest()))
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc) from exc

    async def close(self) -> None:
        """End the watch (iteration then stops)."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()
