"""Zone disruption at cluster scale, with real processes, at a fast cluster clock (races.md §2.4).

Each test starts its own mesh (apiserver, kubelet processes, a controller-manager running only
the node-lifecycle controller), powers nodes off through the chaos API and checks what the
controller did, in cluster time, through the API objects and the controller-manager's
`/debug/controller-manager` document:

* `test_large_zone_partial_disruption_slows_to_secondary_rate`: one zone of 60 nodes, 34 off
  (57 %, more than 2 and at least 55 %): PartialDisruption, and since the zone has more than
  50 nodes the tainting rate drops to `--secondary-node-eviction-rate` (0.01 nodes/s): from the
  state change on, consecutive NoExecute taints are about 100 cluster s apart (3-4 gaps seen);
* `test_small_zone_partial_disruption_stops_evictions`: one zone of 20 nodes, 12 off (60 %):
  PartialDisruption with 20 <= 50 nodes stops tainting (rate 0): no NoExecute taint is added
  after the state change, the rest of the powered-off nodes wait in the zone queue;
* `test_all_zones_down_is_master_disruption`: two zones of 30; zone a off is tainted at the
  healthy rate, then zone b off too: every zone is FullDisruption, the controller enters
  master disruption mode, removes every NoExecute taint (zone a's included) and adds none.

The two-zones-of-30 case with only zone a off (0.1 nodes/s, zone b untouched) is
`test_cm_integration.py::TestZoneDisruption`.

Timing: every duration asserted is a difference of cluster timestamps the components wrote
(taints' `timeAdded`, whole seconds; the zone's `stateSince` from the controller's clock), never
wall time. The clock runs at `RATE` cluster s per wall s, chosen so that the three meshes take
well under 90 wall s together (about 1,030 cluster s of waiting, some 50 wall s with the mesh
starts) while the 50 s grace period (1.7 wall s) stays far above the lag a loaded two-core
machine adds to heartbeats.

Note on the first taint: a zone's token bucket starts full and, when the zone's rate is
swapped, keeps a token it still had; so one node may be tainted at once when its zone changes
state. The rate is measured on the gaps between consecutive taints after the state change.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import pytest

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import ClusterClock, parse_time
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import NODES, Obj

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

T = TypeVar("T")

RATE = 30.0
"""Cluster seconds per wall second."""
GRACE = 50.0
"""`--node-monitor-grace-period` (current profile)."""
HEARTBEAT_SPREAD = 15.0
"""Powered-off nodes last renewed their leases up to 10 s apart, plus one monitor period."""
SLACK = 20.0
"""Cluster seconds of tolerance on deadlines (a loaded machine lags)."""
HEALTHY_RATE = 0.1
SECONDARY_RATE = 0.01
ZONE_LABEL = "topology.kubernetes.io/zone"
CONTROLLER_TAINTS = frozenset({"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"})


# ------------------------------------------------------------------------------------ helpers


@dataclass
class ZoneEnv:
    """A running mesh, an API client, chaos, the cluster clock and the controller-manager's debug page."""

    mesh: Mesh
    client: ApiClient
    chaos: Chaos
    http: aiohttp.ClientSession
    clock: ClusterClock
    cm_url: str

    def now(self) -> float:
        """Cluster time (from the apiserver's clock document)."""
        return self.clock.now()

    async def until(self, check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
        """Poll `check` until it returns something truthy; fail after `within` cluster seconds."""
        deadline = self.now() + within
        while True:
            last = await check()
            if last:
                return last
            if self.now() > deadline:
                raise AssertionError(f"not within {within:.0f} cluster s: {what}; last: {last!r}")
            await asyncio.sleep(0.1)

    async def sleep_until(self, cluster_time: float) -> None:
        await self.clock.sleep(max(0.0, cluster_time - self.now()))

    async def lifecycle(self) -> dict[str, Any]:
        """The node-lifecycle part of `/debug/controller-manager`."""
        async with self.http.get(f"{self.cm_url}/debug/controller-manager") as resp:
            assert resp.status == 200, await resp.text()
            doc: dict[str, Any] = await resp.json(content_type=None)
        nl: dict[str, Any] = doc["nodeLifecycle"]
        return nl

    async def zone(self, name: str) -> dict[str, Any]:
        """One zone of the debug page (its key there is `region/zone`)."""
        return zone_of(await self.lifecycle(), name)

    async def nodes(self) -> list[Obj]:
        return list((await self.client.list(NODES))["items"])

    async def zones(self) -> dict[str, list[str]]:
        """Node names by zone label."""
        out: dict[str, list[str]] = {}
        for n in await self.nodes():
            out.setdefault(n["metadata"]["labels"][ZONE_LABEL], []).append(n["metadata"]["name"])
        return {z: sorted(names) for z, names in out.items()}

    async def taints(self) -> dict[str, float]:
        """`timeAdded` (cluster s) of each node's controller NoExecute taint."""
        out: dict[str, float] = {}
        for n in await self.nodes():
            for t in (n.get("spec") or {}).get("taints") or []:
                if t.get("effect") == "NoExecute" and t.get("key") in CONTROLLER_TAINTS:
                    out[n["metadata"]["name"]] = parse_time(t["timeAdded"])
        return out

    async def ready(self) -> dict[str, str]:
        """Each node's Ready status."""
        out: dict[str, str] = {}
        for n in await self.nodes():
            c: dict[str, Any] = next(
                (c for c in (n.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
            out[n["metadata"]["name"]] = str(c.get("status"))
        return out

    async def zone_in(self, name: str, state: str, *, size: int, within: float) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            z = await self.zone(name)
            return z if z.get("state") == state and z.get("size") == size else None

        return await self.until(check, within=within, what=f"zone {name} {state} with {size} nodes")

    def power_off(self, nodes: list[str], name: str) -> Any:
        return self.chaos.fault({"type": "node.powerOff", "target": {"node": nodes}, "name": name})


@contextlib.asynccontextmanager
async def zone_mesh(*, nodes: int, zones: tuple[str, ...]) -> AsyncIterator[ZoneEnv]:
    """A mesh of `nodes` nodes spread over `zones` (one kubelet process each), node-lifecycle only."""
    spec = MeshSpec(nodes=nodes, zones=zones, kubelets=len(zones), clock_rate=RATE, seed=5, start_timeout=120.0,
                    components=("apiserver", "kubelet", "controller_manager"), log_level="warning",
                    extra_args={"controller_manager": ["--controllers", "node-lifecycle"],
                                "kubelet": ["--node-status-report-frequency", "300"]})
    async with Mesh(spec) as mesh, mesh.client("zone-test") as client:
        cm = next(p for p in mesh.processes if p.component == "controller_manager")
        assert cm.url, "the controller-manager registered no admin URL"
        chaos = mesh.endpoint.chaos()
        async with aiohttp.ClientSession(headers=mesh.endpoint.headers(component="test"),
                                         timeout=aiohttp.ClientTimeout(total=10)) as http:
            try:
                clock = ClusterClock.from_document(await client.get_clock())
                yield ZoneEnv(mesh=mesh, client=client, chaos=chaos, http=http, clock=clock,
                              cm_url=cm.url.rstrip("/"))
            finally:
                await chaos.close()


def zone_of(lifecycle: dict[str, Any] | None, name: str) -> dict[str, Any]:
    # None: the node-lifecycle controller has not started yet (its caches are still syncing)
    zones: dict[str, dict[str, Any]] = (lifecycle or {}).get("zones") or {}
    return next((z for key, z in zones.items() if key == name or key.endswith(f"/{name}")), {})


def gaps(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sorted(stamps))]


# -------------------------------------------------------------------------------------- tests


async def test_large_zone_partial_disruption_slows_to_secondary_rate() -> None:
    async with zone_mesh(nodes=60, zones=("zone-a",)) as env:
        names = (await env.zones())["zone-a"]
        assert len(names) == 60
        dead, alive = names[:34], names[34:]  # 34/60 = 57 % >= 55 %, and more than 2
        await env.zone_in("zone-a", "Normal", size=60, within=SLACK)
        async with env.power_off(dead, "large-zone-34-off"):
            off = env.now()
            z = await env.zone_in("zone-a", "PartialDisruption", size=60, within=GRACE + HEARTBEAT_SPREAD + SLACK)
            partial = float(z["stateSince"])
            assert z["qps"] == SECONDARY_RATE, z  # 60 > --large-cluster-size-threshold 50
            # Four tokens at 0.01/s after the state change (the first may come at once).
            await env.sleep_until(partial + 4 / SECONDARY_RATE + 10)
            added = await env.taints()
            ready = await env.ready()
            z = await env.zone("zone-a")
        assert set(added) <= set(dead), f"healthy nodes tainted: {sorted(set(added) - set(dead))}"
        assert all(ready[n] == "True" for n in alive), {n: ready[n] for n in alive if ready[n] != "True"}
        assert all(ready[n] == "Unknown" for n in dead)
        assert z["state"] == "PartialDisruption" and z["notReady"] == 34 and z["qps"] == SECONDARY_RATE, z
        before = sorted(t for t in added.values() if t < partial - 1)  # timeAdded is whole seconds
        after = sorted(t for t in added.values() if t >= partial - 1)
        g = gaps(after)
        print(f"[large zone] power-off t=0, PartialDisruption at +{partial - off:.1f} s; taints at the healthy "
              f"rate before it: {[round(t - off) for t in before]}; after it: {[round(t - off) for t in after]}; "
              f"gaps {[round(x) for x in g]} (expected {1 / SECONDARY_RATE:.0f})")
        # While the zone was still Normal (the first nodes to go Unknown), at most a few at 0.1/s.
        assert len(before) <= 3, before
        assert 4 <= len(after) <= 5, after
        assert all(85 <= x <= 125 for x in g), g
        assert 95 <= statistics.median(g) <= 110, g


async def test_small_zone_partial_disruption_stops_evictions() -> None:
    async with zone_mesh(nodes=20, zones=("zone-a",)) as env:
        names = (await env.zones())["zone-a"]
        assert len(names) == 20
        dead, alive = names[:12], names[12:]  # 60 %: PartialDisruption in a zone of 20 <= 50
        await env.zone_in("zone-a", "Normal", size=20, within=SLACK)
        async with env.power_off(dead, "small-zone-12-off"):
            off = env.now()
            z = await env.zone_in("zone-a", "PartialDisruption", size=20, within=GRACE + HEARTBEAT_SPREAD + SLACK)
            partial = float(z["stateSince"])
            assert z["qps"] == 0.0, z
            hold_end = partial + 200  # 2 taints at 0.01/s, 20 at 0.1/s
            at_partial = await env.taints()
            while env.now() < hold_end:
                await asyncio.sleep(0.5)
                now_tainted = await env.taints()
                assert now_tainted == at_partial or all(t <= partial + 1 for t in now_tainted.values()), (
                    f"tainted after the zone stopped: {now_tainted}")
            added = await env.taints()
            ready = await env.ready()
            z = await env.zone("zone-a")
        print(f"[small zone] power-off t=0, PartialDisruption at +{partial - off:.1f} s (rate 0); taints: "
              f"{[round(t - off) for t in sorted(added.values())]}; none in the {hold_end - partial:.0f} s after")
        assert set(added) <= set(dead)
        assert all(t <= partial + 1 for t in added.values()), (partial, added)
        assert len(added) <= 3, added  # only while the zone was still Normal (0.1/s)
        assert all(ready[n] == "True" for n in alive)
        assert z["state"] == "PartialDisruption" and z["notReady"] == 12 and z["qps"] == 0.0, z
        # the other powered-off nodes wait in the zone's queue; nothing drains it
        assert {q["node"] for q in z["queue"]} == set(dead) - set(added), z["queue"]


async def test_all_zones_down_is_master_disruption() -> None:
    async with zone_mesh(nodes=60, zones=("zone-a", "zone-b")) as env:
        by_zone = await env.zones()
        a, b = by_zone["zone-a"], by_zone["zone-b"]
        assert len(a) == len(b) == 30
        await env.zone_in("zone-b", "Normal", size=30, within=SLACK)
        async with env.power_off(a, "zone-a-off"):
            off = env.now()
            z = await env.zone_in("zone-a", "FullDisruption", size=30, within=GRACE + HEARTBEAT_SPREAD + SLACK)
            assert z["qps"] == HEALTHY_RATE, z

            async def two_tainted() -> dict[str, float] | None:
                t = await env.taints()
                assert set(t) <= set(a), f"zone b tainted: {sorted(set(t) - set(a))}"
                return t if len(t) >= 2 else None

            tainted_a = await env.until(two_tainted, within=1 / HEALTHY_RATE + SLACK, what="two of zone a tainted")
            async with env.power_off(b, "zone-b-off"):
                b_off = env.now()

                seen: dict[str, float] = dict(tainted_a)

                async def master() -> dict[str, Any] | None:
                    seen.update(await env.taints())  # zone a keeps being tainted at 0.1/s meanwhile
                    nl = await env.lifecycle()
                    return nl if nl["masterDisruption"] else None

                nl = await env.until(master, within=GRACE + HEARTBEAT_SPREAD + SLACK, what="master disruption")
                entered = float(nl["masterDisruptionSince"])
                # The mode is on as soon as the zone states say so; the taints go one write each.

                async def untainted() -> bool:
                    left = await env.taints()
                    assert all(t <= entered + 1 for t in left.values()), f"tainted after entering: {left}"
                    return not left

                await env.until(untainted, within=10, what="every NoExecute taint removed")
                hold_end = entered + 150
                while env.now() < hold_end:
                    await asyncio.sleep(0.5)
                    assert await env.taints() == {}, "a node was tainted in master disruption mode"
                nl = await env.lifecycle()
                ready = await env.ready()
        print(f"[master] zone a off at t=0, tainted at {[round(t - off) for t in sorted(seen.values())]}; "
              f"zone b off at +{b_off - off:.0f}; master disruption at +{entered - off:.1f}: every NoExecute "
              f"taint removed, none added in the {hold_end - entered:.0f} s after")
        # (zone b's first nodes to go Unknown may be tainted too, while b is still Normal)
        assert len(seen) >= 2 and all(t <= entered + 1 for t in seen.values()), seen
        assert nl["masterDisruption"] is True
        assert all(ready[n] == "Unknown" for n in a + b)
        for name in ("zone-a", "zone-b"):
            z = zone_of(nl, name)
            assert z["state"] == "FullDisruption" and z["qps"] == 0.0 and z["notReady"] == 30, (name, z)
