"""What several apiservers over one etcd share besides the objects: the clock, the signing key, the registry.

With `--storage etcd` any number of apiserver processes serve one cluster (`kubemesh up --store etcd
--apiservers N`). Objects are shared by etcd already (`kubemesh.apiserver.etcdcache`); three more
things must agree between the apiservers, or a component that talks to one and a client that
talks to another see two clusters:

* **The cluster clock.** Its epoch and rate (`ClusterClock.document`) live at
  `<prefix>.kubemesh/clock`. The first apiserver to start writes it (a create that only one of
  several racing apiservers wins); every later one, and every restart, reads it and runs the
  same clock, so timestamps, lease expiries and clock-based chaos agree whichever apiserver
  served them. An apiserver started with another `--clock-rate` than the stored one refuses to
  start and says so: running two rates over one cluster would be two clocks.
* **The service-account signing key** (`<prefix>.kubemesh/service-account-signing-key`), created
  the same way: a token issued by one apiserver is accepted by every other, as with
  kube-apiserver's shared `--service-account-key-file`.
* **The component registry** (`kubemesh.apiserver.components`). Components register with the
  apiserver they talk to; each entry is copied to `<prefix>.kubemesh/components/<instance>`
  and every apiserver follows that prefix (a list, then a watch), so each knows every
  component's admin URL: chaos forwards node faults and `kubectl logs` reaches a kubelet that
  registered elsewhere. An entry names the apiserver it registered with (`apiserver`). Only
  the apiserver a component registered with tells its listeners (the mirror pods): one writer
  per mirror pod. A copy is written only when the entry changed beyond its `registeredAt`, so the
  periodic re-registrations cost etcd nothing.

* **The apiservers themselves** (`<prefix>.kubemesh/apiservers/<name>`: name and URL), written
  at start and removed at a clean stop, listed by `GET /kubemesh/v1/apiservers` on any of them:
  how a client or a scenario finds the other apiservers (to create a fault on one, or to send a
  restarted component to it).

`<prefix>.kubemesh/` is beside the objects' prefix (`/registry.kubemesh/` for `/registry`), not
under it: the watch cache never sees these keys. Writes there still raise etcd's revision, as
kube-apiserver's own leases and events do; watchers learn the new revision from progress
notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any, Final

import orjson
import structlog

from kubemesh.apiserver.components import ComponentRegistry, Entry
from kubemesh.apiserver.etcdstore import AlreadyExists, Compacted, EtcdStore, Progress, StorageError, Unavailable
from kubemesh.services.machinery.clock import ClusterClock

log = structlog.get_logger("kubemesh.apiserver.sharedstate")

CLOCK: Final = "clock"
SIGNING_KEY: Final = "service-account-signing-key"
COMPONENTS: Final = "components/"
APISERVERS: Final = "apiservers/"
_RETRY_SECONDS: Final = 0.5


def shared_prefix(etcd: EtcdStore) -> str:
    """`<prefix>.kubemesh/`: where the shared state lives, beside the objects (see the module docstring)."""
    return etcd.prefix.rstrip("/") + ".kubemesh/"


async def _create_or_read(etcd: EtcdStore, name: str, value: bytes) -> bytes:
    """The value at `<shared>/<name>`: `value` if this call created it, else what another apiserver stored."""
    key = (shared_prefix(etcd) + name).encode()
    try:
        await etcd.create(key=key, value=value)
        return value
    except AlreadyExists as exc:
        if exc.current is not None:
            return exc.current.value
    kv = await etcd.get(key=key)  # deleted between the compare and the read: written again by someone
    if kv is None:
        raise StorageError(f"{key.decode()} vanished while it was being read; start again")
    return kv.value


async def shared_clock(etcd: EtcdStore, *, rate: float) -> ClusterClock:
    """The cluster clock every apiserver over this etcd runs (see the module docstring).

    `StorageError` when the stored clock runs at another rate than `rate`.
    """
    fresh = ClusterClock(rate=rate)
    doc = orjson.loads(await _create_or_read(etcd, CLOCK, orjson.dumps(fresh.document())))
    stored_rate = float(doc.get("rate", 0))
    if stored_rate != rate:
        raise StorageError(
            f"the cluster clock stored in etcd ({shared_prefix(etcd)}{CLOCK}) runs at rate {stored_rate:g}, and this "
            f"apiserver was started with --clock-rate {rate:g}: every apiserver of a cluster runs one clock. Start "
            f"it with --clock-rate {stored_rate:g}, or give another --etcd-prefix for a new cluster")
    return ClusterClock.from_document(doc)


async def shared_signing_key(etcd: EtcdStore) -> bytes:
    """The service-account token signing key every apiserver over this etcd uses."""
    return bytes.fromhex((await _create_or_read(etcd, SIGNING_KEY, secrets.token_bytes(32).hex().encode())).decode())


class SharedRegistry:
    """Copies this apiserver's registrations to etcd and others' into its registry (see the module docstring)."""

    def __init__(self, *, etcd: EtcdStore, registry: ComponentRegistry, apiserver: str, url: str) -> None:
        self._etcd = etcd
        self._url = url
        self._registry = registry
        self._apiserver = apiserver
        self._prefix = shared_prefix(etcd) + COMPONENTS
        self._written: dict[str, bytes | None] = {}
        """Per instance, the last copy written to etcd (None: deleted); what is unchanged is not written."""
        self._dirty: dict[str, Entry | None] = {}
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        registry.apiserver = apiserver
        registry.publish = self._published

    async def announce(self) -> None:
        """Put this apiserver in the list of apiservers (`apiservers`)."""
        await self._etcd.put(key=self._self_key(), value=orjson.dumps({"name": self._apiserver, "url": self._url}))

    def _self_key(self) -> bytes:
        return (shared_prefix(self._etcd) + APISERVERS + self._apiserver).encode()

    async def apiservers(self) -> list[dict[str, Any]]:
        """Every apiserver of the cluster (`{"name", "url"}`), by name."""
        page = await self._etcd.list(prefix=(shared_prefix(self._etcd) + APISERVERS).encode())
        docs = [orjson.loads(kv.value) for kv in page.kvs]
        return sorted((d for d in docs if isinstance(d, dict)), key=lambda d: str(d.get("name")))

    def start(self) -> None:
        """Follow the other apiservers' registrations and write this one's in the background."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(), name="shared-registry-follow"),
                       loop.create_task(self._write(), name="shared-registry-write")]

    async def close(self) -> None:
        """Stop both tasks (what was not written yet is lost: components register again); leave the list."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(StorageError):
            await self._etcd.remove(key=self._self_key())

    def _published(self, instance: str, entry: Entry | None) -> None:
        self._dirty[instance] = entry
        self._kick.set()

    @staticmethod
    def _copy(entry: Entry | None) -> bytes | None:
        if entry is None:
            return None
        return orjson.dumps({k: v for k, v in entry.items() if k != "registeredAt"}, option=orjson.OPT_SORT_KEYS)

    async def _write(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._dirty:
                instance, entry = self._dirty.popitem()
                value = self._copy(entry)
                if instance in self._written and self._written[instance] == value:
                    continue
                key = (self._prefix + instance).encode()
                try:
                    if value is None:
                        await self._etcd.remove(key=key)
                    else:
                        await self._etcd.put(key=key, value=value)
                    self._written[instance] = value
                except StorageError as exc:
                    # Lost for now; the component's next periodic registration writes it again.
                    log.warning("copying a registration to etcd failed", instance=instance, error=str(exc))
                    self._written.pop(instance, None)
                    await asyncio.sleep(_RETRY_SECONDS)

    async def _follow(self) -> None:
        prefix = self._prefix.encode()
        while True:
            try:
                page = await self._etcd.list(prefix=prefix)
                seen = set()
                for kv in page.kvs:
                    seen.add(self._apply(kv.key, kv.value))
                for instance, entry in list(self._registry.entries.items()):
                    if instance not in seen and entry.get("apiserver") not in (None, self._apiserver):
                        del self._registry.entries[instance]
                async with self._etcd.watch(prefix=prefix, start_revision=page.revision + 1) as watch:
                    async for item in watch:
                        if isinstance(item, Progress):
                            continue
                        self._apply(item.kv.key, item.kv.value if item.type == "PUT" else None)
            except (Unavailable, Compacted, StorageError) as exc:
                log.warning("following the shared registry failed; listing again", error=str(exc))
                await asyncio.sleep(_RETRY_SECONDS)

    def _apply(self, key: bytes, value: bytes | None) -> str:
        """Take another apiserver's copy into the registry (this apiserver's own are its already); the instance."""
        instance = key[len(self._prefix):].decode()
        local = self._registry.entries.get(instance)
        if value is None:
            if local is not None and local.get("apiserver") != self._apiserver:
                del self._registry.entries[instance]
            return instance
        entry: Any = orjson.loads(value)
        if not isinstance(entry, dict) or entry.get("apiserver") == self._apiserver:
            return instance
        # The instance now registers elsewhere (a restarted component pinned to another
        # apiserver): the other apiserver's entry is the current one.
        self._registry.entries[instance] = entry
        self._written.pop(instance, None)
        return instance
