"""The kubelet process: many emulated nodes over one connection pool.

`KubeletHost` builds one `EmulatedNode` per node name of the settings, each with two API
clients of its own (as a real kubelet has):

* the **heartbeat client** (Lease and NodeStatus): no client-side retries (the loops retry as
  upstream does), a timeout equal to the status update frequency (in wall time at the
  cluster clock's rate, floored at `min_wall_timeout`), no throttling;
* the **pod client** (pod watch, status writes, final deletes): the default retries.

Every client identifies itself as component `kubelet` with the node's name as instance, so
the apiserver's history and chaos rules can tell nodes apart. All clients share one
`aiohttp.TCPConnector` without a connection limit: one node's stalled request never holds a
pooled slot another node needs.

Start-up: every node boots at once, but at most `register_concurrency` registrations are in
flight, so ten thousand nodes register in waves; each node's loops then spread themselves over
their period (see `heartbeating`).
"""

from __future__ import annotations

import asyncio
import functools
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import structlog

from kubemesh.kubelet.heartbeating import LEASE_NAMESPACE
from kubemesh.kubelet.nodes import EmulatedNode, NodeIdentity, PodSource
from kubemesh.kubelet.processes import ProcessRuntime
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.kubelet.watching import NodePodWatch, SharedPodWatch
from kubemesh.services.machinery.client import AlreadyExistsError, ApiClient, ApiError, RetrySettings
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.informing import Informer, InformerSettings
from kubemesh.services.model.codec import Encoding
from kubemesh.services.model.kinds import NAMESPACES, NODES, Kind, Obj

IDLE_CONNECTION_TIMEOUT: Final = 90.0
"""Wall seconds an idle keep-alive connection stays in the process's pool (client-go's
`IdleConnTimeout`; aiohttp's default is 15 s, the apiserver keeps them for an hour). The nodes'
clients share one pool, which a burst (a rollout's status writes, all nodes at once) grows and
a quiet spell shrinks: connections dropped after 15 s made the next burst open new ones, and a
new connection waits for its TLS handshake on a busy apiserver for seconds, where a request on
a kept one takes milliseconds (deployment_startup's status writes)."""

log = structlog.get_logger("kubelet.hosting")


@dataclass(kw_only=True)
class KubeletHost:
    """Every node of one kubelet process, and the resources they share."""

    settings: KubeletSettings
    base_url: str
    instance: str
    clock: Clock
    rng: random.Random
    admin_port: int
    token: str | None = None
    encoding: Encoding = "msgpack"
    nodes: dict[str, EmulatedNode] = field(default_factory=dict)
    shared: SharedPodWatch | None = None
    node_view: Informer | None = None
    """One informer over the Nodes for the whole process, when an unchanged status is posted
    only every report period: each node's status loop reads its Node here between reports
    instead of a GET per node and period (`StatusReporter._server_differs`)."""
    processes: ProcessRuntime | None = None
    """The process runtime shared by the nodes (only with `--runtime process` or `opt-in`)."""
    _connector: aiohttp.TCPConnector | None = None
    _clients: list[ApiClient] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def _client(self, *, instance: str, timeout: float | None = None,
                retry: RetrySettings | None = None, rng: random.Random) -> ApiClient:
        client = ApiClient(self.base_url, component="kubelet", instance=instance, token=self.token,
                           encoding=self.encoding, timeout=timeout if timeout is not None else 30.0,
                           retry=retry, connector=self._connector, rng=rng, clock=self.clock)
        self._clients.append(client)
        return client

    def build(self) -> None:
        """Create the connector, the clients and the nodes (nothing runs yet)."""
        self._connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=IDLE_CONNECTION_TIMEOUT)
        s = self.settings
        hb_timeout = max(self.clock.to_wall(s.node_status_update_frequency), s.min_wall_timeout)
        pod_informers = InformerSettings(first_list_from_cache=s.pods_first_list_from_cache)
        if s.pod_watch == "shared":
            self.shared = SharedPodWatch(client=self._client(instance=self.instance, rng=self.rng),
                                         clock=self.clock, rng=random.Random(self.rng.getrandbits(64)),
                                         settings=pod_informers)
        if s.node_status_report_frequency is not None and \
                s.node_status_report_frequency > s.node_status_update_frequency:
            self.node_view = Informer(self._client(instance=self.instance, rng=self.rng), NODES, clock=self.clock,
                                      name="nodes@kubelet", rng=random.Random(self.rng.getrandbits(64)))
        view = self.node_view
        readers: dict[str, ApiClient] = {}
        if s.runtime != "emulated":
            fallback = self._client(instance=self.instance, rng=self.rng)

            async def get(kind: Kind, namespace: str, name: str, node: str) -> Obj:
                # as the pod's node: the node authorizer lets it read what that node's pods refer to
                return await readers.get(node, fallback).get(kind, name, namespace=namespace)

            base = Path(s.runtime_dir) if s.runtime_dir else Path(tempfile.gettempdir()) / "kubemesh-pods"
            self.processes = ProcessRuntime(root=base / self.instance, clock=self.clock, getter=get, mode=s.runtime,
                                            image_commands=dict(s.image_commands))
            self.processes.open()  # reap what a killed predecessor of this instance left behind
        gate = asyncio.Semaphore(max(1, s.register_concurrency))
        first = s.node_offset + 1
        for index in range(first, first + s.nodes):
            name = s.node_name(index)
            node_rng = random.Random(self.rng.getrandbits(64))
            heartbeat = self._client(instance=name, timeout=hb_timeout, retry=RetrySettings(max_attempts=1),
                                     rng=node_rng)
            pods = self._client(instance=name, rng=node_rng)
            readers[name] = pods
            source: PodSource = self.shared.for_node(name) if self.shared is not None else \
                NodePodWatch(client=pods, node=name, clock=self.clock, rng=node_rng, settings=pod_informers)
            self.nodes[name] = EmulatedNode(
                identity=NodeIdentity(name=name, index=index, instance=self.instance,
                                      admin_port=self.admin_port),
                settings=s, clock=self.clock, rng=node_rng, heartbeat_api=heartbeat, pod_api=pods,
                pods=source, register_gate=gate,
                observed=functools.partial(view.get, name) if view is not None else None)
            self.nodes[name].pods.processes = self.processes

    async def ensure_lease_namespace(self) -> None:
        """Create `kube-node-lease` if the apiserver has not (ignored when it exists)."""
        if self.settings.no_node_lease or not self._clients:
            return
        try:
            await self._clients[0].create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": LEASE_NAMESPACE}})
        except AlreadyExistsError:
            pass
        except ApiError as exc:
            log.warning("could not create the node lease namespace", error=str(exc))

    async def start(self) -> None:
        """Power every node on (registrations proceed in the background)."""
        if not self.nodes and self._connector is None:
            self.build()
        await self.ensure_lease_namespace()
        if self.shared is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self.shared.run(), name="pods@kubelet"))
        if self.node_view is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self.node_view.run(), name="nodes@kubelet"))
        for node in self.nodes.values():
            node.power_on()

    async def stop(self) -> None:
        """Stop every node and close the clients and the connector."""
        for node in self.nodes.values():
            node.power_off()
        if self.processes is not None:
            self.processes.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*(n.wait_stopped() for n in self.nodes.values()), *self._tasks,
                             return_exceptions=True)
        for client in self._clients:
            await client.close()
        if self._connector is not None:
            await self._connector.close()

    def ready_count(self) -> int:
        """How many nodes have registered."""
        return sum(1 for n in self.nodes.values() if n.registered)
