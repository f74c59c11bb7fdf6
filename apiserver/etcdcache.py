"""`--storage etcd`: etcd holds the objects, the in-memory `Store` is the watch cache in front of it.

How the parts meet (kube-apiserver's cacher and GuaranteedUpdate, written anew here):

* **Start-up.** `load` reads every key under the prefix at one revision (paged); the `Store` starts
  with those objects at that revision, and `start` watches the prefix from the next revision on.
* **The cache changes only through the watch.** Each PUT or DELETE is applied to the `Store` in
  revision order (`Store.apply`) and published through the same path as a memory-mode write (the
  watch hub, history, RBAC invalidation, chaos); `metadata.resourceVersion` is the event's
  mod_revision. Progress notifications raise the store's revision too (`Store.advance`).
* **Writes are staged, then committed.** In etcd mode `Store.write`/`Store.remove` hand a `Staged`
  write to `stage` instead of applying it: into the list of the request being committed
  (`STAGE`, set by the server around a write handler), or, for a write made outside any request
  (start-up installers), into a queue a background task commits in order. `commit` sends each
  staged write as one transaction (create: the key must not exist; update and delete: its
  mod_revision must still be the one the registry read), then waits until the watch has applied
  its revision, so the answer is rendered from the committed object and a read after it sees it.
* **Conflicts.** When the compare fails (another apiserver, or a concurrent request of this one,
  wrote the key since the cache showed it), `commit` raises `Retry` with the revision that made
  it fail; the server waits for the cache to apply it and runs the whole request again against
  the new state, a bounded number of times. A client's stale resourceVersion then fails in the
  registry as it does in memory mode (409).

Limits (docs/design.md, "etcd storage layer"): the staged writes of one request are committed one
transaction each, in order, not as one atomic transaction; a write queued outside a request that
loses a race is dropped with a warning (nothing can re-run it); registry hooks (service IP
allocation) run when a write is staged on this apiserver, not when another apiserver's write
arrives through the watch (the CRD lifecycle also follows committed changes:
`Establishing.applied`). A watch compacted past (the cache fell behind) relists.

* **Consistent reads.** A list without a resourceVersion must see every write committed before
  it, whichever apiserver made it (`consistent_list`): it reads etcd's current revision R; a
  cache that has applied R serves it, else the list is read from etcd at R. That is
  kube-apiserver's behaviour on an etcd older than 3.4.31/3.5.13 (Debian's 3.4.23 here), where
  consistent reads are not served from the cache (ConsistentListFromCache needs etcd's fixed
  progress notifications). A list with resourceVersion "0" is whatever the cache holds.
* **A lagging cache (chaos).** `set_lag` makes the cache apply etcd's changes (progress
  notifications included, in order) a number of cluster seconds after they arrive, or not at
  all until the lag ends: the `apiserver.watchCacheLag` fault, an HA control plane's apiserver
  whose watch fell behind (kubernetes#59848). While it lags, this apiserver's writes are answered
  from etcd's result without waiting for the cache to apply them (as kube-apiserver always
  answers), so a read through it may not see its own write; lists with resourceVersion "0" and
  watches serve the old state, consistent lists do not. A write that loses its compare against
  the stale cache runs again reading that key from etcd (`FRESH`), as GuaranteedUpdate re-reads
  the current state from etcd on a conflict, instead of waiting for the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Final

import structlog

from kubemesh.apiserver.etcdstore import (
    AlreadyExists,
    Compacted,
    Conflict,
    EtcdStore,
    KeyValue,
    Progress,
    StorageError,
    Unavailable,
    WatchEvent,
    decode_object,
    encode_object,
)
from kubemesh.apiserver.storage import Staged, Store
from kubemesh.services.machinery.clock import Clock, ClusterClock, wait_event
from kubemesh.services.model.kinds import Kind, KindTable, Obj, key_of

log = structlog.get_logger("apiserver.etcdcache")

STAGE: ContextVar[list[Staged] | None] = ContextVar("kubemesh_etcd_stage", default=None)
"""The staged writes of the request being handled (None outside a committing request)."""

RETRIES: Final = 100
"""Runs of a request whose commit met a conflict, before it is answered 409. kube's GuaranteedUpdate
retries without a bound; every round has a winner, so N writers racing for one key need at most
N rounds: the bound only keeps a pathological loop from holding a request forever."""

LIST_PAGE: Final = 1000


FRESH: ContextVar[dict[tuple[str, str], Obj | None] | None] = ContextVar("kubemesh_etcd_fresh", default=None)
"""For a request run again after a conflict while the cache lags: the keys read from etcd instead of the
cache ((resource, key) -> the object, None when it is gone), as GuaranteedUpdate re-reads them."""


class Retry(Exception):
    """A staged write lost its compare: run the request again once the cache has applied `revision`."""

    def __init__(self, *, staged: Staged, revision: int, current: KeyValue | None = None) -> None:
        super().__init__(f"{staged.kind.resource} {staged.key}: changed at revision {revision}")
        self.staged = staged
        self.revision = revision
        self.current = current
        """The key's kv in etcd that made the compare fail (None: the key is gone)."""


class Preloaded:
    """The `Store` backend in etcd mode: starts the store with what `EtcdCache.load` read, and keeps nothing.

    Nothing is appended: in etcd mode the store never applies a write of its own (`Store.stager`).
    """

    def __init__(self, *, revision: int, objects: list[tuple[str, Obj]]) -> None:
        self._loaded: tuple[int, list[tuple[str, Obj]]] | None = (revision, objects)

    def load(self) -> tuple[int, list[tuple[str, Obj]]]:
        """What was read from etcd (handed over once)."""
        loaded, self._loaded = self._loaded, None
        return loaded if loaded is not None else (0, [])

    def append(self, *, rv: int, resource: str, key: str, obj: Obj | None) -> None:
        """Never called in etcd mode."""
        raise AssertionError("etcd mode stages writes; the store appends nothing")

    async def flush(self, rv: int) -> None:
        """A write is acknowledged once etcd committed it (`EtcdCache.commit`): nothing more to wait for."""

    def compact(self, *, rv: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Nothing to do: etcd keeps the objects."""

    def close(self) -> None:
        """Nothing to release."""


class CacheStore(Store):
    """The store in etcd mode: the watch cache, whose `get` also sees the writes staged and not yet committed.

    A registry operation may write a key and read it again before anything is committed (an
    APIService created, then its status written; a start-up step creating what the next line
    reads): `get` answers from the writes staged by the current request (`STAGE`), or, outside a
    request, from the queue of writes made outside requests, before the cache. Lists (`items`)
    see committed state only.
    """

    pending: Callable[[], list[Staged]] = staticmethod(lambda: [])

    def get(self, kind: Kind, key: str) -> Obj | None:
        """The object at `key` as this apiserver's uncommitted writes leave it, else as the cache has it.

        (Or, in a request run again after a conflict while the cache lags, as etcd has it: `FRESH`.)
        """
        pending = self.pending()
        if pending:
            resource = kind.resource
            for s in reversed(pending):
                if s.key == key and s.kind.resource == resource:
                    return s.obj
        fresh = FRESH.get()
        if fresh is not None and (kind.resource, key) in fresh:
            return fresh[(kind.resource, key)]
        return super().get(kind, key)

    def basis(self, kind: Kind, key: str) -> Obj | None:
        """The cache's state of `key`, or etcd's in a request run again after a conflict while the cache lags."""
        fresh = FRESH.get()
        if fresh is not None and (kind.resource, key) in fresh:
            return fresh[(kind.resource, key)]
        return super().basis(kind, key)


class EtcdCache:
    """Feeds a `Store` from an etcd watch and commits the writes it stages (see the module docstring)."""

    def __init__(self, *, etcd: EtcdStore, store: Store, revision: int, compaction_interval: float = 300.0,
                 clock: Clock | None = None) -> None:
        self.etcd = etcd
        self.clock: Clock = clock if clock is not None else ClusterClock()
        self._lag: float | None = 0.0
        """Cluster seconds between a change's arrival and its application (None: held until the lag ends)."""
        self._held: deque[tuple[float, WatchEvent | Progress]] = deque()
        """Changes waiting for their time under a lag, with when they arrived (cluster time), in order."""
        self._held_kick = asyncio.Event()
        self.compaction_interval = compaction_interval
        self.store = store
        self._from = revision + 1
        self._kinds: KindTable | None = None
        self._queue: list[Staged] = []
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._prefix = etcd.prefix.rstrip("/") + "/"
        store.stager = self.stage
        if isinstance(store, CacheStore):
            store.pending = self._pending

    @staticmethod
    async def load(etcd: EtcdStore) -> tuple[int, list[tuple[str, Obj]]]:
        """Every object under the prefix, read at one revision: (that revision, (resource, object) pairs)."""
        prefix = (etcd.prefix.rstrip("/") + "/").encode()
        out: list[tuple[str, Obj]] = []
        page = await etcd.list(prefix=prefix, limit=LIST_PAGE)
        revision = page.revision
        while True:
            for kv in page.kvs:
                resource, _ = _split(kv.key[len(prefix):].decode())
                out.append((resource, decode_object(kv)))
            if page.continue_from is None:
                return revision, out
            page = await etcd.list(prefix=prefix, limit=LIST_PAGE, revision=revision, continue_from=page.continue_from)

    def start(self, kinds: KindTable) -> None:
        """Follow etcd from the loaded revision on, and commit queued writes in the background."""
        self._kinds = kinds
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(), name="etcd-watch"),
                       loop.create_task(self._commit_queued(), name="etcd-queued-writes"),
                       loop.create_task(self._release_held(), name="etcd-watch-lag")]
        if self.compaction_interval > 0:
            self._tasks.append(loop.create_task(self._compact(), name="etcd-compactor"))

    async def close(self) -> None:
        """Stop following and close the connection."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.etcd.close()

    # ------------------------------------------------------------------------------ writes

    def _pending(self) -> list[Staged]:
        target = STAGE.get()
        return target if target is not None else self._queue

    def stage(self, staged: Staged) -> None:
        """Take a write of `Store.write`/`remove`: into the current request's list, else the background queue.

        A second write to a key already staged in the same list is committed after the first,
        comparing with the revision the first got (`Staged.after`): both happen, in order, as
        they would in memory mode (a client's write, then a hook's correction of it).
        """
        target = STAGE.get()
        if target is None:
            target = self._queue
            self._idle.clear()
            self._kick.set()
        for prior in reversed(target):
            if prior.key == staged.key and prior.kind.resource == staged.kind.resource:
                staged.after = prior
                break
        target.append(staged)

    async def commit(self, staged: list[Staged]) -> list[Retry]:
        """Commit staged writes in order, each one transaction; return once the cache has applied them all.

        `Retry` when the first write's compare fails (nothing is committed then). A later write
        whose compare fails (a hook's write racing another writer of its key, once the first is
        committed) is skipped, the others still committed, and returned, for the caller to report.
        `StorageError` when etcd fails.
        """
        last = 0
        lost: list[Retry] = []
        for i, s in enumerate(staged):
            key = self._key(s)
            expected = s.expected
            if s.after is not None:  # after an earlier write of the key: compare with what it committed
                if not s.after.revision:  # that one was skipped: so is this one
                    lost.append(Retry(staged=s, revision=0))
                    continue
                expected = 0 if s.after.obj is None else s.after.revision
            try:
                if s.obj is None:
                    s.revision, _ = await self.etcd.delete(key=key, expected_mod_revision=expected)
                elif expected == 0:
                    s.revision = await self.etcd.create(key=key, value=encode_object(s.obj))
                else:
                    s.revision = await self.etcd.update(key=key, value=encode_object(s.obj),
                                                        expected_mod_revision=expected)
            except (Conflict, AlreadyExists) as exc:
                current = exc.current
                # A key gone since: its deletion is at or below etcd's current revision.
                revision = current.mod_revision if current is not None else await self.etcd.current_revision()
                if i > 0:
                    lost.append(Retry(staged=s, revision=revision, current=current))
                    continue
                raise Retry(staged=s, revision=revision, current=current) from exc
            last = s.revision
        if not self.lagging:  # a lagging cache (chaos) may not have it for long: answered from etcd's result
            await self.applied(last)
        return lost

    async def applied(self, revision: int) -> None:
        """Wait until the cache has applied `revision`; `Unavailable` when it has not within etcd's timeout.

        (A watch that stopped, or lags that far, must fail the request rather than hold it.)
        """
        try:
            await asyncio.wait_for(self.store.wait_applied(revision), self.etcd.settings.timeout)
        except TimeoutError:
            raise Unavailable(f"the watch cache has not applied revision {revision} after "
                              f"{self.etcd.settings.timeout:g} s") from None

    async def drain(self) -> None:
        """Return once every write queued outside a request has been committed (or dropped) and applied."""
        await self._idle.wait()

    async def _commit_queued(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._queue:
                # Committed from the head of the queue and taken off it only once applied: until
                # then `CacheStore.get` still answers from it.
                s = self._queue[0]
                try:
                    try:
                        for miss in await self.commit([s]):  # after a write of its key that was dropped
                            log.warning("a write made outside a request followed a dropped one and is dropped",
                                        resource=miss.staged.kind.resource, key=miss.staged.key)
                    except Retry as exc:
                        log.warning("a write made outside a request lost a race and is dropped",
                                    resource=s.kind.resource, key=s.key, changed_at=exc.revision)
                    except StorageError as exc:
                        log.error("a write made outside a request failed in etcd and is dropped",
                                  resource=s.kind.resource, key=s.key, error=str(exc))
                finally:
                    self._queue.pop(0)
            self._idle.set()

    async def _compact(self) -> None:
        """Compact etcd every interval to the revision it had one interval before (kube-apiserver's compactor).

        History younger than one interval stays readable, so watchers that fell behind by less
        can resume. With several apiservers each compacts so; a revision another one compacted
        already is no error.
        """
        previous = 0
        while True:
            await asyncio.sleep(self.compaction_interval)
            try:
                current = await self.etcd.current_revision()
                if previous:
                    with contextlib.suppress(Compacted):
                        await self.etcd.compact(revision=previous)
                    log.info("etcd compacted", revision=previous)
                previous = current
            except StorageError as exc:
                log.warning("etcd compaction failed; retried next interval", error=str(exc))

    # ------------------------------------------------------------------------------ consistent reads

    async def consistent_list(self, *, kind: Kind, namespace: str | None) -> tuple[int, list[Obj] | None]:
        """A list that sees every committed write: (etcd's revision R, objects read from etcd at R, or None).

        None: the cache has applied R and serves the list; else the objects of `kind` (in
        `namespace`) as etcd has them at R. `StorageError` when etcd fails.
        """
        revision = await self.etcd.current_revision()
        if self.store.revision >= revision and not self.lagging:
            return revision, None
        return revision, await self.read(kind=kind, namespace=namespace, revision=revision)

    async def read_one(self, *, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        """One object as etcd has it now (None: absent)."""
        key = f"{self._prefix}{kind.resource}/{namespace + '/' if namespace and kind.namespaced else ''}{name}"
        kv = await self.etcd.get(key=key.encode())
        return decode_object(kv) if kv is not None else None

    async def read(self, *, kind: Kind, namespace: str | None, revision: int) -> list[Obj]:
        """Every object of `kind` (in `namespace`) as etcd had it at `revision`, read from etcd (paged)."""
        prefix = f"{self._prefix}{kind.resource}/{namespace + '/' if namespace and kind.namespaced else ''}".encode()
        out: list[Obj] = []
        page = await self.etcd.list(prefix=prefix, revision=revision, limit=LIST_PAGE)
        while True:
            out.extend(decode_object(kv) for kv in page.kvs)
            if page.continue_from is None:
                return out
            page = await self.etcd.list(prefix=prefix, revision=revision, limit=LIST_PAGE,
                                        continue_from=page.continue_from)

    # ------------------------------------------------------------------------------ lag (chaos)

    @property
    def lagging(self) -> bool:
        """Whether the cache is made to lag (or still holds changes from a lag that ended)."""
        return self._lag != 0.0 or bool(self._held)

    def set_lag(self, seconds: float | None) -> None:
        """Apply changes `seconds` of cluster time after they arrive (None: hold them; 0: at once).

        Held changes are applied in order once their time comes, or at once when the lag is set
        back to 0.
        """
        self._lag = seconds
        self._held_kick.set()

    def _arrived(self, item: WatchEvent | Progress) -> None:
        if self._lag == 0.0 and not self._held:
            self._apply(item)
            return
        self._held.append((self.clock.now(), item))
        self._held_kick.set()

    async def _release_held(self) -> None:
        while True:
            await self._held_kick.wait()
            self._held_kick.clear()
            while self._held and self._lag is not None:
                arrived, item = self._held[0]
                wait = arrived + self._lag - self.clock.now()
                if wait > 0:
                    if await wait_event(self.clock, self._held_kick, at_most=wait):
                        self._held_kick.clear()  # the lag changed, or more arrived: look again
                    continue
                self._held.popleft()
                self._apply(item)

    def _apply(self, item: WatchEvent | Progress) -> None:
        if isinstance(item, Progress):
            self.store.advance(item.revision)
            return
        resource, key = _split(item.kv.key[len(self._prefix):].decode())
        assert self._kinds is not None
        kind = self._kinds.by_resource(resource)
        obj = decode_object(item.kv) if item.type == "PUT" else None
        self.store.apply(kind=kind, resource=resource, key=key, obj=obj, rv=item.revision)

    # ------------------------------------------------------------------------------ the watch

    async def _follow(self) -> None:
        start = self._from
        while True:
            watch = self.etcd.watch(prefix=self._prefix.encode(), start_revision=start)
            try:
                async for item in watch:
                    self._arrived(item)
            except Unavailable as exc:
                log.warning("etcd watch lost; resuming", resume=watch.resume_revision, error=str(exc))
                await asyncio.sleep(0.5)
            except Compacted as exc:
                # The cache fell behind a compaction: the changes it missed are gone from etcd's
                # history. List again and go on from the list's revision.
                log.warning("etcd watch compacted past the cache: relisting", error=str(exc))
                await watch.close()
                try:
                    start = await self._relist() + 1
                except StorageError as failed:
                    log.warning("relisting failed; retried", error=str(failed))
                    await asyncio.sleep(0.5)
                continue
            finally:
                await watch.close()
            start = watch.resume_revision or start

    async def _relist(self) -> int:
        """Bring the cache to etcd's current state by a list at one revision; that revision.

        What changed is applied and published as events, so watchers of this apiserver see every
        difference: the objects created or modified since (at their mod_revision, in order), then
        those gone (at the list's revision). Intermediate states the compaction took are not seen,
        as with any relist.
        """
        revision, objects = await self.load(self.etcd)
        assert self._kinds is not None
        self._held.clear()  # what a lag held is older than the list
        fresh = {(resource, key_of(obj)): obj for resource, obj in objects}
        changed = [(int(obj["metadata"]["resourceVersion"]), resource, key, obj)
                   for (resource, key), obj in fresh.items()
                   if (old := self.store.at(resource, key)) is None
                   or old["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]]
        gone = [(resource, key_of(obj)) for resource, obj in list(self.store.entries())
                if (resource, key_of(obj)) not in fresh]
        for rv, resource, key, obj in sorted(changed, key=lambda c: c[0]):
            self.store.apply(kind=self._kinds.by_resource(resource), resource=resource, key=key, obj=obj, rv=rv)
        for resource, key in gone:
            self.store.apply(kind=self._kinds.by_resource(resource), resource=resource, key=key, obj=None,
                             rv=revision)
        self.store.advance(revision)
        log.info("relisted from etcd", revision=revision, changed=len(changed), gone=len(gone))
        return revision

    def _key(self, s: Staged) -> bytes:
        return f"{self._prefix}{s.kind.resource}/{s.key}".encode()


def _split(rest: str) -> tuple[str, str]:
    """`<resource>/<key>` (key `ns/name` or `name`, the Store's key) from a key below the prefix."""
    resource, _, key = rest.partition("/")
    return resource, key
