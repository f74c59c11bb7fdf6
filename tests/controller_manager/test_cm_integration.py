"""The controller-manager as a real process in a real mesh, at a fast cluster clock.

Four meshes, each shared by the tests of one class (`scope="class"`, one event loop for the
module), torn down before the next class starts:

* `TestPowerOff` (3 nodes, fixed behaviour): a powered-off node goes Unknown after the grace
  period, is tainted `unreachable:NoExecute`, its pods are deleted after their 300 s toleration
  and stay Terminating forever; an updated Recreate Deployment then never creates its new pod;
  the `node.kubernetes.io/out-of-service` taint (KEP-2268) lets PodGC force-delete the stuck pod
  and the rollout completes (races.md §2.3, §2.4).
* `TestPowerOffLegacy` (`no-out-of-service-gc`): the same taint changes nothing; deleting the
  Node object lets PodGC's orphan pass (40 s quarantine) remove the pods instead.
* `TestWorkloads` (slow clock, `--leader-elect`): a RollingUpdate rolls through within its
  surge/unavailable bounds, `kubectl rollout status` and `kubectl scale` work, and killing the
  leading controller-manager hands the lease to a standby that resumes without duplicates.
* `TestZoneDisruption` (2 zones x 30 nodes): powering off all of zone a taints it at the
  healthy rate (0.1 nodes/s) while zone b is untouched.

Every deadline is in cluster seconds (converted to wall time through the clock rate); every
assertion on durations is on cluster timestamps written by the components, never on wall time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from kubemesh.services.machinery.client import ApiClient, NotFoundError
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import DEPLOYMENTS, LEASES, NODES, PODS, REPLICASETS, Obj

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

T = TypeVar("T")

GRACE = 50.0
"""`--node-monitor-grace-period` of the `current` profile."""
MONITOR_PERIOD = 5.0
TOLERATION = 300.0
"""DefaultTolerationSeconds for not-ready / unreachable."""
POD_GRACE = 30.0
PODGC_PERIOD = 20.0
QUARANTINE = 40.0
SLACK = 20.0
"""Cluster seconds of tolerance on upper bounds: the machine is loaded and processes lag."""
UNREACHABLE = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
NS = "default"
KCM_LEASE = "kube-controller-manager"
REPO_ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------ helpers


def make_chaos(mesh: Mesh) -> Chaos:
    """A chaos client for the mesh.

    `Mesh.chaos` cannot be used: it raises NameError (see `test_mesh_chaos_property`).
    """
    return mesh.endpoint.chaos()


@dataclass
class Env:
    """One running mesh, a client, a chaos client and the cluster clock."""

    mesh: Mesh
    client: ApiClient
    chaos: Chaos
    rate: float
    _mono0: float = 0.0
    _cluster0: float = 0.0
    notes: list[str] = field(default_factory=list)

    async def sync_clock(self) -> None:
        clock = await self.client.get_clock()
        self._mono0, self._cluster0 = time.monotonic(), float(clock["now"])

    def now(self) -> float:
        """The cluster time, extrapolated from the last sync through the clock rate."""
        return self._cluster0 + (time.monotonic() - self._mono0) * self.rate

    async def until(self, check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
        """Poll `check` until it returns something truthy; fail after `within` cluster seconds."""
        deadline = self.now() + within
        last: T | None = None
        while True:
            last = await check()
            if last:
                return last
            if self.now() > deadline:
                raise AssertionError(f"not within {within:.0f} cluster s: {what}; last: {last!r}")
            await asyncio.sleep(max(0.05, min(0.5, 2.0 / self.rate)))

    async def holds(self, check: Callable[[], Awaitable[bool]], *, during: float, what: str) -> None:
        """Assert that `check` stays true for `during` cluster seconds."""
        end = self.now() + during
        while self.now() < end:
            assert await check(), f"no longer true: {what}"
            await asyncio.sleep(max(0.05, min(0.5, 2.0 / self.rate)))

    async def sleep(self, cluster_seconds: float) -> None:
        await asyncio.sleep(cluster_seconds / self.rate)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text)

    async def pods(self, app: str) -> list[Obj]:
        return list((await self.client.list(PODS, namespace=NS, label_selector=f"app={app}"))["items"])

    async def pod(self, name: str) -> Obj | None:
        try:
            return await self.client.get(PODS, name, namespace=NS)
        except NotFoundError:
            return None

    async def node(self, name: str) -> Obj | None:
        try:
            return await self.client.get(NODES, name)
        except NotFoundError:
            return None


@dataclass(frozen=True)
class MeshParams:
    nodes: int
    rate: float
    bugs: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    kubelets: int = 1
    components: tuple[str, ...] | None = None
    extra_args: dict[str, list[str]] = field(default_factory=dict)


async def start_env(p: MeshParams) -> AsyncIterator[Env]:
    spec = MeshSpec(nodes=p.nodes, clock_rate=p.rate, bugs=p.bugs, zones=p.zones, kubelets=p.kubelets,
                    components=p.components, extra_args=p.extra_args, seed=11, start_timeout=120.0)
    async with Mesh(spec) as mesh, mesh.client() as client:
        chaos = make_chaos(mesh)
        try:
            env = Env(mesh=mesh, client=client, chaos=chaos, rate=p.rate)
            await env.sync_clock()
            yield env
        finally:
            await chaos.close()


def conditions(node: Obj) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}


def taints(node: Obj) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def is_terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def phase(pod: Obj) -> str | None:
    return (pod.get("status") or {}).get("phase")


def is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def running(pod: Obj) -> bool:
    return phase(pod) == "Running" and not is_terminating(pod)


def node_of(pod: Obj) -> str:
    return str(pod["spec"].get("nodeName") or "")


def template_hash(pod: Obj) -> str:
    return str(pod["metadata"].get("labels", {}).get("pod-template-hash", ""))


def deployment(name: str, *, replicas: int, strategy: str, version: str) -> Obj:
    labels = {"app": name}
    container = {"name": "main", "image": "registry.k8s.io/pause:3.9", "env": [{"name": "VERSION", "value": version}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "strategy": {"type": strategy},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}


async def set_version(env: Env, name: str, version: str) -> None:
    patch: Obj = {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "registry.k8s.io/pause:3.9", "env": [{"name": "VERSION", "value": version}]}]}}}}
    await env.client.patch(DEPLOYMENTS, name, patch, namespace=NS, patch_type="merge")


async def add_taint(env: Env, node: str, taint: dict[str, Any]) -> None:
    current = await env.client.get(NODES, node)
    body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"taints": [*taints(current), taint]}}
    await env.client.patch(NODES, node, body)


# ----------------------------------------------------------------------------- the story


class PowerOffStory:
    """Recreate Deployment `cron` (1 replica), its node powered off, step by step, memoized.

    Each `ensure_*` runs the steps before it once, so every test can run on its own (`-k`).
    """

    def __init__(self, env: Env) -> None:
        self.env = env
        self.victim = ""
        self.old_pod = ""
        self.power: Any = None
        self.last_probe = 0.0
        self.unknown_at = 0.0
        self.tainted_at = 0.0
        self.delete_requested_at = 0.0
        self.replacement = ""
        self.updated = False
        self.pods_before_update: set[str] = set()
        self.orphan = ""

    async def ensure_running(self) -> None:
        if self.victim:
            return
        env = self.env
        await env.client.create(DEPLOYMENTS, deployment("cron", replicas=1, strategy="Recreate", version="1"))

        async def first() -> Obj | None:
            return next((p for p in await env.pods("cron") if running(p)), None)

        pod = await env.until(first, within=60, what="the Deployment's pod Running")
        self.victim, self.old_pod = node_of(pod), pod["metadata"]["name"]
        # A pod that tolerates `unreachable` forever: never evicted, only PodGC removes it.
        forever = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
        body: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tolerant", "namespace": NS},
                     "spec": {"nodeName": self.victim, "tolerations": [forever],
                              "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}
        await env.client.create(PODS, body)

        async def tolerant_running() -> bool:
            p = await env.pod("tolerant")
            return p is not None and running(p)

        await env.until(tolerant_running, within=60, what="pod tolerant Running")
        self.orphan = "tolerant"

    async def ensure_powered_off(self) -> None:
        await self.ensure_running()
        if self.power is not None:
            return
        self.power = self.env.chaos.power_off(self.victim)
        await self.power.__aenter__()
        self.env.note(f"[{','.join(self.env.mesh.spec.bugs) or 'fixed'}] powered off {self.victim} at "
                      f"t={self.env.now():.1f}")

    async def close(self) -> None:
        if self.power is not None:
            await self.power.__aexit__(None, None, None)
            self.power = None

    async def ensure_unknown(self) -> None:
        await self.ensure_powered_off()
        if self.unknown_at:
            return
        env = self.env

        async def unknown() -> Obj | None:
            n = await env.node(self.victim)
            return n if n is not None and conditions(n)["Ready"]["status"] == "Unknown" else None

        node = await env.until(unknown, within=GRACE + MONITOR_PERIOD + 10 + SLACK, what=f"{self.victim} Unknown")
        lease = await env.client.get(LEASES, self.victim, namespace="kube-node-lease")
        ready = conditions(node)["Ready"]
        self.last_probe = max(parse_time(lease["spec"]["renewTime"]), parse_time(ready["lastHeartbeatTime"]))
        self.unknown_at = parse_time(ready["lastTransitionTime"])
        env.note(f"  {self.victim} Ready=Unknown at +{self.unknown_at - self.last_probe:.1f} s after its last "
                 f"heartbeat (expected {GRACE:.0f}..{GRACE + MONITOR_PERIOD:.0f})")

    async def ensure_tainted(self) -> None:
        await self.ensure_unknown()
        if self.tainted_at:
            return
        env = self.env

        async def tainted() -> dict[str, Any] | None:
            n = await env.node(self.victim)
            return next((t for t in taints(n or {}) if t["key"] == UNREACHABLE and t["effect"] == "NoExecute"), None)

        taint = await env.until(tainted, within=MONITOR_PERIOD + SLACK, what=f"{self.victim} tainted unreachable")
        self.tainted_at = parse_time(taint["timeAdded"])
        env.note(f"  unreachable:NoExecute timeAdded +{self.tainted_at - self.unknown_at:.1f} s after Unknown "
                 f"(expected about one monitor period, {MONITOR_PERIOD:.0f} s: the taint follows the observed Ready)")

    async def ensure_terminating(self) -> None:
        await self.ensure_tainted()
        if self.delete_requested_at:
            return
        env = self.env

        async def deleted() -> Obj | None:
            p = await env.pod(self.old_pod)
            return p if p is not None and is_terminating(p) else None

        pod = await env.until(deleted, within=TOLERATION + SLACK, what=f"{self.old_pod} deleted")
        md = pod["metadata"]
        self.delete_requested_at = parse_time(md["deletionTimestamp"]) - float(md.get("deletionGracePeriodSeconds", 0))
        env.note(f"  {self.old_pod} DELETE +{self.delete_requested_at - self.tainted_at:.1f} s after the taint "
                 f"(expected {TOLERATION:.0f}), grace {md.get('deletionGracePeriodSeconds')}")

        async def replacement() -> Obj | None:
            return next((p for p in await env.pods("cron") if p["metadata"]["name"] != self.old_pod and running(p)),
                        None)

        rep = await env.until(replacement, within=60 + SLACK, what="a replacement pod Running")
        self.replacement = rep["metadata"]["name"]

    async def ensure_updated(self) -> None:
        await self.ensure_terminating()
        if self.updated:
            return
        self.pods_before_update = {p["metadata"]["name"] for p in await self.env.pods("cron")}
        await set_version(self.env, "cron", "2")
        self.updated = True

    async def new_pods(self) -> list[Obj]:
        return [p for p in await self.env.pods("cron") if p["metadata"]["name"] not in self.pods_before_update]

    async def old_pod_stuck(self) -> bool:
        p = await self.env.pod(self.old_pod)
        return p is not None and is_terminating(p) and phase(p) == "Running"

    async def check_stuck_after_update(self) -> None:
        """The replacement goes away, the old pod stays Terminating, no new pod appears."""
        await self.ensure_updated()
        env = self.env

        async def replacement_gone() -> bool:
            return await env.pod(self.replacement) is None

        await env.until(replacement_gone, within=POD_GRACE + 30 + SLACK, what=f"{self.replacement} terminated")

        async def still_stuck() -> bool:
            return await self.old_pod_stuck() and not await self.new_pods()

        await env.holds(still_stuck, during=60, what="old pod Terminating and no new pod")
        deploy = await env.client.get(DEPLOYMENTS, "cron", namespace=NS)
        assert (deploy.get("status") or {}).get("updatedReplicas", 0) == 0

    async def taint_out_of_service(self) -> float:
        await self.ensure_updated()
        node = await self.env.node(self.victim)
        assert node is not None
        if not any(t["key"] == OUT_OF_SERVICE for t in taints(node)):
            await add_taint(self.env, self.victim,
                            {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"})
        return self.env.now()


def assert_timeline(story: PowerOffStory) -> None:
    """The §2.4 timeline, on cluster timestamps written by the components (1 s resolution)."""
    assert GRACE - 1 <= story.unknown_at - story.last_probe <= GRACE + MONITOR_PERIOD + SLACK
    assert -1 <= story.tainted_at - story.unknown_at <= MONITOR_PERIOD + SLACK
    assert TOLERATION - 1 <= story.delete_requested_at - story.tainted_at <= TOLERATION + SLACK


# ------------------------------------------------------------------------ TestPowerOff (fixed)


POWER_RATE = 25.0


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def fixed_story() -> AsyncIterator[PowerOffStory]:
    async for env in start_env(MeshParams(nodes=3, rate=POWER_RATE)):
        story = PowerOffStory(env)
        try:
            yield story
        finally:
            await story.close()


class TestPowerOff:
    async def test_mesh_chaos_property(self, fixed_story: PowerOffStory) -> None:
        chaos = fixed_story.env.mesh.chaos
        assert chaos.base_url == fixed_story.env.mesh.apiserver_url

    async def test_powered_off_node_goes_unknown_after_grace(self, fixed_story: PowerOffStory) -> None:
        story = fixed_story
        await story.ensure_unknown()
        node = await story.env.node(story.victim)
        assert node is not None
        conds = conditions(node)
        for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
            assert conds[t]["status"] == "Unknown", t
            assert conds[t]["reason"] == "NodeStatusUnknown"
        assert GRACE - 1 <= story.unknown_at - story.last_probe <= GRACE + MONITOR_PERIOD + SLACK
        others = [n for n in (await story.env.client.list(NODES))["items"] if n["metadata"]["name"] != story.victim]
        assert all(conditions(n)["Ready"]["status"] == "True" for n in others)

    async def test_unknown_node_is_tainted_unreachable(self, fixed_story: PowerOffStory) -> None:
        story = fixed_story
        await story.ensure_tainted()
        node = await story.env.node(story.victim)
        assert node is not None
        keys = {(t["key"], t["effect"]) for t in taints(node)}
        assert {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")} <= keys
        assert -1 <= story.tainted_at - story.unknown_at <= MONITOR_PERIOD + SLACK
        # The pod was marked NotReady on the Ready -> Unknown transition.
        pod = await story.env.pod(story.old_pod)
        assert pod is not None and not is_ready(pod)

    async def test_pods_deleted_after_toleration_then_stuck_terminating(self, fixed_story: PowerOffStory) -> None:
        story = fixed_story
        await story.ensure_terminating()
        assert_timeline(story)
        pod = await story.env.pod(story.old_pod)
        assert pod is not None
        assert any(c.get("type") == "DisruptionTarget" and c.get("reason") == "DeletionByTaintManager"
                   for c in pod["status"].get("conditions") or [])
        # Long past its 30 s grace period nobody finishes the deletion: Terminating, phase Running.
        await story.env.holds(story.old_pod_stuck, during=POD_GRACE + 30,
                              what=f"{story.old_pod} Terminating with phase Running")
        rep = await story.env.pod(story.replacement)
        assert rep is not None and node_of(rep) != story.victim
        tolerant = await story.env.pod(story.orphan)
        assert tolerant is not None and not is_terminating(tolerant), "a pod tolerating forever is never evicted"

    async def test_recreate_update_never_creates_new_pods(self, fixed_story: PowerOffStory) -> None:
        await fixed_story.check_stuck_after_update()

    async def test_out_of_service_taint_resolves(self, fixed_story: PowerOffStory) -> None:
        story = fixed_story
        await story.check_stuck_after_update()
        tainted = await story.taint_out_of_service()
        env = story.env

        async def old_gone() -> bool:
            return await env.pod(story.old_pod) is None

        await env.until(old_gone, within=PODGC_PERIOD + SLACK, what=f"PodGC force-deleted {story.old_pod}")
        gone = env.now()

        async def new_running() -> Obj | None:
            return next((p for p in await story.new_pods() if running(p)), None)

        new = await env.until(new_running, within=60 + SLACK, what="a pod of the new ReplicaSet Running")
        env.note(f"  out-of-service: old pod gone +{gone - tainted:.1f} s (PodGC period {PODGC_PERIOD:.0f}), new pod "
                 f"{new['metadata']['name']} Running on {node_of(new)} +{env.now() - tainted:.1f} s")
        assert node_of(new) != story.victim

        async def rolled_out() -> bool:
            d = await env.client.get(DEPLOYMENTS, "cron", namespace=NS)
            st = d.get("status") or {}
            return bool(st.get("updatedReplicas") == 1 and st.get("availableReplicas") == 1
                        and st.get("observedGeneration") == d["metadata"].get("generation"))

        await env.until(rolled_out, within=30 + SLACK, what="Deployment cron rolled out")


# --------------------------------------------------------------- TestPowerOffLegacy (buggy)


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def legacy_story() -> AsyncIterator[PowerOffStory]:
    async for env in start_env(MeshParams(nodes=3, rate=POWER_RATE, bugs=("no-out-of-service-gc",))):
        story = PowerOffStory(env)
        try:
            yield story
        finally:
            await story.close()


class TestPowerOffLegacy:
    async def test_out_of_service_taint_does_nothing(self, legacy_story: PowerOffStory) -> None:
        story = legacy_story
        await story.check_stuck_after_update()
        assert_timeline(story)
        await story.taint_out_of_service()
        await story.env.holds(story.old_pod_stuck, during=3 * PODGC_PERIOD + 10,
                              what=f"{story.old_pod} stuck Terminating despite out-of-service")
        assert not await story.new_pods()

    async def test_deleting_the_node_lets_podgc_remove_orphans(self, legacy_story: PowerOffStory) -> None:
        story = legacy_story
        await story.check_stuck_after_update()
        env = story.env
        orphans = {story.old_pod, story.orphan}
        await env.client.delete(NODES, story.victim)
        deleted_at = env.now()

        async def orphans_gone() -> bool:
            return all([await env.pod(n) is None for n in orphans])

        await env.holds(lambda: _not(orphans_gone), during=QUARANTINE - 10, what="orphans kept during quarantine")
        await env.until(orphans_gone, within=PODGC_PERIOD + 10 + SLACK, what=f"PodGC removed {sorted(orphans)}")
        gone = env.now()
        env.note(f"  node {story.victim} deleted: orphans gone +{gone - deleted_at:.1f} s (quarantine "
                 f"{QUARANTINE:.0f} + period {PODGC_PERIOD:.0f})")
        assert gone - deleted_at >= QUARANTINE - 1

        async def new_running() -> Obj | None:
            return next((p for p in await story.new_pods() if running(p)), None)

        await env.until(new_running, within=60 + SLACK, what="the Recreate rollout goes on")


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()


# ----------------------------------------------------------- TestWorkloads (leader election)


WORK_RATE = 5.0
"""Slow: the leader-election renew deadline (10 cluster s) must outlast a stall of the loaded machine."""


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def work_env() -> AsyncIterator[Env]:
    params = MeshParams(nodes=3, rate=WORK_RATE, extra_args={"controller_manager": ["--leader-elect"]})
    async for env in start_env(params):
        yield env


async def kubectl(env: Env, *args: str, wall_limit: float = 60.0) -> tuple[int, str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed")
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")
    try:
        proc = await asyncio.create_subprocess_exec(
            binary, "--kubeconfig", str(env.mesh.kubeconfig_path), "--cache-dir", cache, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "HOME": cache})
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), wall_limit)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return proc.returncode or 0, out.decode(errors="replace")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


async def wait_replicas(env: Env, app: str, count: int, *, within: float = 60.0) -> list[Obj]:
    async def settled() -> list[Obj] | None:
        pods = await env.pods(app)
        live = [p for p in pods if running(p) and is_ready(p)]
        return live if len(live) == count and len(pods) == count else None

    return await env.until(settled, within=within, what=f"exactly {count} {app} pods Running")


def holder(lease: dict[str, Any]) -> str:
    """The instance that holds a lease (identities are `<instance>_<pid>_<random>`)."""
    return str(lease["spec"]["holderIdentity"]).split("_", 1)[0]


async def kcm_lease(env: Env) -> Obj:
    return await env.client.get(LEASES, KCM_LEASE, namespace="kube-system")


class TestWorkloads:
    async def test_rolling_update_rolls_through(self, work_env: Env) -> None:
        env = work_env
        await env.client.create(DEPLOYMENTS, deployment("web", replicas=3, strategy="RollingUpdate", version="1"))
        first = await wait_replicas(env, "web", 3)
        old_hash = template_hash(first[0])
        await set_version(env, "web", "2")
        # 25 % of 3: maxSurge rounds up to 1, maxUnavailable down to 0.
        most, least = 0, 3

        async def done() -> bool:
            nonlocal most, least
            pods = await env.pods("web")
            active = [p for p in pods if not is_terminating(p)]
            most = max(most, len(active))
            least = min(least, sum(1 for p in active if running(p) and is_ready(p)))
            new = [p for p in pods if template_hash(p) != old_hash]
            return len(pods) == 3 and len(new) == 3 and all([running(p) and is_ready(p) for p in new])

        await env.until(done, within=120, what="every web pod on the new template")
        assert most <= 4, f"more than replicas + maxSurge pods at once: {most}"
        assert least >= 3, f"fewer than replicas - maxUnavailable pods available: {least}"
        rss = (await env.client.list(REPLICASETS, namespace=NS, label_selector="app=web"))["items"]
        assert sorted(rs["spec"]["replicas"] for rs in rss) == [0, 3]

        async def status_done() -> bool:
            d = await env.client.get(DEPLOYMENTS, "web", namespace=NS)
            st = d.get("status") or {}
            return bool(st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == 3
                        and st.get("observedGeneration") == d["metadata"]["generation"])

        await env.until(status_done, within=30, what="Deployment web status complete")

    async def test_kubectl_rollout_status_and_scale(self, work_env: Env) -> None:
        env = work_env
        try:
            await env.client.get(DEPLOYMENTS, "web", namespace=NS)
        except NotFoundError:
            await env.client.create(DEPLOYMENTS, deployment("web", replicas=3, strategy="RollingUpdate",
                                                            version="1"))
        rc, out = await kubectl(env, "rollout", "status", "deployment/web", "--timeout=60s")
        assert rc == 0 and "successfully rolled out" in out, out
        # `rollout status` follows a rollout in progress until it completes.
        await set_version(env, "web", "3")
        rc, out = await kubectl(env, "rollout", "status", "deployment/web", "--timeout=90s")
        assert rc == 0 and "successfully rolled out" in out, out
        assert len({template_hash(p) for p in await env.pods("web") if not is_terminating(p)}) == 1
        rc, out = await kubectl(env, "scale", "deployment/web", "--replicas=5")
        assert rc == 0 and "scaled" in out, out
        await wait_replicas(env, "web", 5)
        rc, out = await kubectl(env, "scale", "deployment/web", "--replicas=2")
        assert rc == 0, out
        await wait_replicas(env, "web", 2)
        rc, out = await kubectl(env, "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}")
        assert rc == 0 and out.strip() == "2", out

    async def test_controller_manager_failover_resumes(self, work_env: Env, tmp_path: Path) -> None:
        env = work_env
        try:
            await env.client.get(DEPLOYMENTS, "web", namespace=NS)
        except NotFoundError:
            await env.client.create(DEPLOYMENTS, deployment("web", replicas=2, strategy="RollingUpdate",
                                                            version="1"))
        await env.client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 2}}, namespace=NS)
        await wait_replicas(env, "web", 2)
        lease = await kcm_lease(env)
        assert holder(lease) == "controller-manager"
        rs_before = {rs["metadata"]["uid"] for rs in
                     (await env.client.list(REPLICASETS, namespace=NS, label_selector="app=web"))["items"]}

        # A standby controller-manager: same flags, its own identity.
        kcm = next(p for p in env.mesh.processes if p.component == "controller_manager")
        argv = list(kcm.argv)
        argv[argv.index("--instance") + 1] = "controller-manager-2"
        child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KUBEMESH_BUGS": ""}
        if env.mesh.ca_path is not None:
            child_env["SSL_CERT_FILE"] = child_env["KUBEMESH_CA_FILE"] = str(env.mesh.ca_path)
        log = (tmp_path / "controller-manager-2.log").open("wb")
        standby = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=asyncio.subprocess.STDOUT,
                                                       stdin=asyncio.subprocess.DEVNULL, env=child_env,
                                                       cwd=str(env.mesh.state_dir))
        try:
            async def standby_waits() -> bool:
                return bool(holder(await kcm_lease(env)) == "controller-manager"
                            and standby.returncode is None)

            await env.holds(standby_waits, during=20, what="the standby waits while the leader renews")
            transitions = int(lease["spec"].get("leaseTransitions") or 0)

            await env.mesh.kill("controller-manager")
            killed = env.now()

            async def taken_over() -> Obj | None:
                spec = (await kcm_lease(env))["spec"]
                return spec if holder({"spec": spec}) == "controller-manager-2" else None

            spec = await env.until(taken_over, within=15 + 10 + SLACK, what="the standby acquires the lease")
            acquired = parse_time(spec["acquireTime"])
            env.note(f"[leader election] standby acquired {acquired - killed:+.1f} s after the kill "
                     f"(lease duration 15 s, observed expiry)")
            assert int(spec.get("leaseTransitions") or 0) == transitions + 1

            # The new leader resumes: scale up and a new Deployment, without duplicating anything.
            await env.client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 4}}, namespace=NS)
            await wait_replicas(env, "web", 4)
            await env.client.create(DEPLOYMENTS, deployment("after", replicas=2, strategy="Recreate", version="1"))
            await wait_replicas(env, "after", 2)
            rs_after = {rs["metadata"]["uid"] for rs in
                        (await env.client.list(REPLICASETS, namespace=NS, label_selector="app=web"))["items"]}
            assert rs_after == rs_before, "the new leader created ReplicaSets for an unchanged template"

            async def exactly_four() -> bool:
                return len(await env.pods("web")) == 4

            await env.holds(exactly_four, during=20, what="no extra web pods after the failover")
        finally:
            if standby.returncode is None:
                standby.kill()
            await standby.wait()
            log.close()

        # The standby dies too; the mesh's controller-manager, started again, takes the lease back.
        await env.mesh.restart("controller-manager")

        async def back() -> bool:
            return bool(holder(await kcm_lease(env)) == "controller-manager")

        await env.until(back, within=15 + 10 + SLACK, what="the restarted controller-manager leads")
        await env.client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 1}}, namespace=NS)
        await wait_replicas(env, "web", 1)
        assert not env.mesh.crashed()


# ------------------------------------------------------------------------ TestZoneDisruption


ZONE_RATE = 20.0
ZONE_NODES = 30
EVICTION_RATE = 0.1


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def zone_env() -> AsyncIterator[Env]:
    params = MeshParams(nodes=2 * ZONE_NODES, rate=ZONE_RATE, zones=("zone-a", "zone-b"), kubelets=2,
                        components=("apiserver", "kubelet", "controller_manager"),
                        extra_args={"controller_manager": ["--controllers", "node-lifecycle"],
                                    "kubelet": ["--node-status-report-frequency", "300"]})
    async for env in start_env(params):
        yield env


class TestZoneDisruption:
    async def test_zone_a_off_is_tainted_at_the_healthy_rate(self, zone_env: Env) -> None:
        env = zone_env
        nodes = (await env.client.list(NODES))["items"]
        by_zone: dict[str, list[str]] = {}
        for n in nodes:
            by_zone.setdefault(n["metadata"]["labels"]["topology.kubernetes.io/zone"], []).append(n["metadata"]["name"])
        zone_a, zone_b = sorted(by_zone["zone-a"]), sorted(by_zone["zone-b"])
        assert len(zone_a) == len(zone_b) == ZONE_NODES
        spec = {"type": "node.powerOff", "target": {"node": zone_a}, "name": "zone-a-off"}
        async with env.chaos.fault(spec):
            off = env.now()

            async def all_tainted() -> dict[str, float] | None:
                out: dict[str, float] = {}
                for n in (await env.client.list(NODES))["items"]:
                    t = next((t for t in taints(n) if t["key"] == UNREACHABLE and t["effect"] == "NoExecute"), None)
                    if t is not None:
                        out[n["metadata"]["name"]] = parse_time(t["timeAdded"])
                assert not set(out) & set(zone_b), f"zone b tainted: {sorted(set(out) & set(zone_b))}"
                return out if set(zone_a) <= set(out) else None

            expected_span = (ZONE_NODES - 1) / EVICTION_RATE
            added = await env.until(all_tainted, within=GRACE + 10 + expected_span + 2 * SLACK,
                                    what="all of zone a tainted")
            nodes = (await env.client.list(NODES))["items"]
        unknown_a = [parse_time(conditions(n)["Ready"]["lastTransitionTime"]) for n in nodes
                     if n["metadata"]["name"] in zone_a]
        stamps = sorted(added[n] for n in zone_a)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        env.note(f"[zones] power-off at t=0; zone a Unknown from +{min(unknown_a) - off:.1f} to "
                 f"+{max(unknown_a) - off:.1f} s; taints timeAdded (s after power-off): "
                 f"{[round(s - off, 1) for s in stamps]}")
        env.note(f"[zones] first taint {stamps[0] - min(unknown_a):+.1f} s after the first and "
                 f"{stamps[0] - max(unknown_a):+.1f} s after the last node went Unknown; "
                 f"span {stamps[-1] - stamps[0]:.1f} s for {ZONE_NODES} nodes (expected {expected_span:.0f}); "
                 f"gaps median {statistics.median(gaps):.1f} min {min(gaps):.1f} max {max(gaps):.1f}")
        assert 0.8 * expected_span <= stamps[-1] - stamps[0] <= 1.2 * expected_span + SLACK
        assert 9 <= statistics.median(gaps) <= 11
        for n in nodes:
            if n["metadata"]["name"] in zone_b:
                assert conditions(n)["Ready"]["status"] == "True", n["metadata"]["name"]
                assert not any(t["key"] == UNREACHABLE for t in taints(n)), n["metadata"]["name"]
