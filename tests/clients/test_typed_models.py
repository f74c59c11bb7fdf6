"""Every response and every watch event reads into the official clients' typed models (issue #28).

One real mesh (apiserver, controller-manager, scheduler, kubelets with three nodes; HTTPS and
a token, as `kubemesh up`), and one walk over every kind it serves (`KINDS`, not a chosen
subset: a kind with no sample in `tests/kindsamples.py` fails the test): each sample is
created, read, listed, patched, replaced, its status read and written back and its scale read,
as clients do; the controllers then drive the workloads through their states (pods scheduled
and running; the Deployment, ReplicaSet and StatefulSet scaled through their scale
subresource; the Deployment, DaemonSet and StatefulSet rolled to a new image; the Job
completed; the CronJob fired), and everything is deleted (the Deployment in the foreground,
the namespace last: Terminating, then gone). A custom resource definition, an object of it and
their lists and watch events go through the same walk.

From before the first create to after the last delete, one watch per kind over all namespaces
records every event. Every body the server answers (create, get, list, patch, update, status,
scale, delete) and every watch event's object is deserialized with the `kubernetes` client's
models (37.x, pydantic) and with `kubernetes_asyncio`'s (client-side validation on), through
the path their API methods take; any refusal fails the test, naming the kind, the verb, the
client and the field (`DaemonSet watch MODIFIED: kubernetes V1DaemonSet at
status.numberReady: ...`). A custom resource's typed model is the plain dict; its definition
must read as V1CustomResourceDefinition.

Waits are bounded in wall seconds only; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import kubernetes.client.models as k8s_models
import kubernetes_asyncio.client.models as ak8s_models
import pytest
from clientkit import start_mesh
from kindsamples import IMAGE_ROLLED, custom_resource, sample, unscheduled_pod
from typedmodels import Refusal, TypedModels, model_name

from kubemesh.services.mesh.launching import Mesh
from kubemesh.services.model.kinds import (
    BINDINGS,
    CRONJOBS,
    CUSTOMRESOURCEDEFINITIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    KINDS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    REVIEWS,
    STATEFULSETS,
    Kind,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

T = TypeVar("T")
Json = dict[str, Any]
NS = "typed"
RATE = 20.0
NODES = 3
WAIT = 90.0
"""Wall seconds any one state may take to arrive (a bound, never an expectation)."""
CREATE_ONLY = REVIEWS | {BINDINGS}


@dataclass
class Custom:
    """The custom resource kind the sample CRD makes (not a `Kind` of the table: served at run time)."""

    group: str
    version: str
    plural: str
    kind: str

    def url(self, ns: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}"
        path = f"{base}/namespaces/{ns}/{self.plural}" if ns is not None else f"{base}/{self.plural}"
        return f"{path}/{name}" if name is not None else path


@dataclass
class Walk:
    """Requests that check what they get back, and the findings."""

    session: aiohttp.ClientSession
    base: str
    models: TypedModels
    problems: list[str] = field(default_factory=list)
    checked: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(kind, verb) -> documents read by both clients (verbs: create, get, list, watch ADDED, ...)."""

    def check(self, doc: Any, model: str | None, *, kind: str, verb: str) -> None:
        """Deserialize `doc` as `model` (a Status as V1Status; None: a custom resource, the plain dict)."""
        self.checked[(kind, verb)] += 1
        if not isinstance(doc, dict):
            self.problems.append(f"{kind} {verb}: not a JSON object: {doc!r:.200}")
            return
        if doc.get("kind") == "Status":
            model = "V1Status"
        if model is None:
            if not doc.get("kind") or not doc.get("apiVersion"):
                self.problems.append(f"{kind} {verb}: no kind or apiVersion: {doc!r:.200}")
            return
        refusals: list[Refusal] = self.models.problems(doc, model)
        self.problems.extend(f"{kind} {verb}: {r}" for r in refusals)

    async def call(self, method: str, path: str, body: Any = None, *, kind: str, verb: str, model: str | None,
                   ok: tuple[int, ...] = (200, 201, 202), ctype: str = "application/json",
                   params: dict[str, str] | None = None) -> Json:
        """One request; its body, checked. A status outside `ok` fails at once (the walk depends on it)."""
        data = json.dumps(body).encode() if body is not None else None
        async with self.session.request(method, self.base + path, data=data, params=params,
                                        headers={"Content-Type": ctype, "Accept": "application/json"},
                                        timeout=aiohttp.ClientTimeout(total=30)) as resp:
            text = await resp.text()
            if resp.status not in ok:
                raise AssertionError(f"{kind} {verb}: {method} {path} answered {resp.status}: {text[:500]}")
        doc = json.loads(text)
        self.check(doc, model, kind=kind, verb=verb)
        return doc  # type: ignore[no-any-return]

    async def update(self, path: str, change: Callable[[Json], None], *, kind: str, verb: str,
                     model: str | None) -> Json:
        """GET, change, PUT; again on a 409 (a controller wrote in between)."""
        for _ in range(20):
            current = await self.call("GET", path, kind=kind, verb=f"get before {verb}", model=model)
            change(current)
            data = json.dumps(current).encode()
            async with self.session.put(self.base + path, data=data,
                                        headers={"Content-Type": "application/json"},
                                        timeout=aiohttp.ClientTimeout(total=30)) as resp:
                text = await resp.text()
                if resp.status == 409:
                    continue
                if resp.status != 200:
                    raise AssertionError(f"{kind} {verb}: PUT {path} answered {resp.status}: {text[:500]}")
            doc = json.loads(text)
            self.check(doc, model, kind=kind, verb=verb)
            return doc  # type: ignore[no-any-return]
        raise AssertionError(f"{kind} {verb}: 20 conflicts in a row on {path}")

    async def watch(self, path: str, rv: str, *, kind: str, model: str | None) -> None:
        """Read a watch until cancelled, checking every event's object."""
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with self.session.get(self.base + path, params=params, headers={"Accept": "application/json"},
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
            if resp.status != 200:
                self.problems.append(f"{kind} watch: answered {resp.status}: {(await resp.text())[:300]}")
                return
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                etype = event.get("type")
                if etype not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
                    self.problems.append(f"{kind} watch: an event of type {etype!r}")
                if etype == "BOOKMARK":
                    # Neither client deserializes a bookmark (it carries only a resourceVersion).
                    self.checked[(kind, "watch BOOKMARK")] += 1
                    continue
                self.check(event.get("object"), "V1Status" if etype == "ERROR" else model, kind=kind,
                           verb=f"watch {etype}")


async def eventually(check: Callable[[], Awaitable[T | None]], *, what: str) -> T:
    """Poll until `check` returns something truthy (bounded by WAIT wall seconds)."""
    last: T | None = None
    try:
        async with asyncio.timeout(WAIT):
            while True:
                last = await check()
                if last:
                    return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT:.0f} s: {what}; last: {last!r:.1500}") from None


def _walked_kinds() -> list[Kind]:
    # The namespace first: everything else lives in it; the CRD before the custom resource.
    return sorted(KINDS, key=lambda k: k is not NAMESPACES)


@contextlib.asynccontextmanager
async def _session(mesh: Mesh) -> AsyncIterator[aiohttp.ClientSession]:
    assert mesh.ca_path is not None and mesh.token
    ctx = ssl.create_default_context(cafile=str(mesh.ca_path))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                     headers={"Authorization": f"Bearer {mesh.token}"}) as session:
        yield session


def _has_sub(kind: Kind, name: str) -> bool:
    return kind.subresource(name) is not None


async def test_every_response_and_watch_event_reads_into_both_clients_typed_models() -> None:
    async with start_mesh(components=("apiserver", "controller_manager", "scheduler", "kubelet"), nodes=NODES,
                          clock_rate=RATE) as mesh, _session(mesh) as session:
        models = TypedModels()
        walk = Walk(session=session, base=mesh.apiserver_url, models=models)
        watches: list[asyncio.Task[None]] = []
        try:
            await _walk_everything(walk, watches)
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await models.aclose()

    unique = list(dict.fromkeys(walk.problems))
    assert not unique, f"{len(unique)} responses the official clients' typed models refuse:\n" + "\n".join(unique)
    # The walk reached every kind (a kind it skipped would pass vacuously).
    for kind in KINDS:
        verbs = {verb for (k, verb) in walk.checked if k == f"{kind.api_version} {kind.kind}"}
        assert "create" in verbs, (kind.kind, sorted(verbs))
        if kind not in CREATE_ONLY:
            assert {"get", "list", "watch ADDED"} <= verbs, (kind.kind, sorted(verbs))


async def _walk_everything(walk: Walk, watches: list[asyncio.Task[None]]) -> None:
    name_of_kind = {k: f"{k.api_version} {k.kind}" for k in KINDS}

    # 1. A list and a watch of every kind, over all namespaces, before anything is created.
    for kind in KINDS:
        if "watch" not in kind.verbs:
            continue
        model = model_name(kind)
        listed = await walk.call("GET", kind.url(), kind=name_of_kind[kind], verb="list", model=f"{model}List")
        rv = listed["metadata"]["resourceVersion"]
        watches.append(asyncio.create_task(walk.watch(kind.url(), rv, kind=name_of_kind[kind], model=model)))

    nodes = (await walk.call("GET", "/api/v1/nodes", kind="v1 Node", verb="list", model="V1NodeList"))["items"]
    host = nodes[0]["metadata"]["name"]

    # 2. Every kind: created, read, patched, replaced; its status and scale read and written back.
    created: list[tuple[Kind, Json]] = []
    for kind in _walked_kinds():
        label, model = name_of_kind[kind], model_name(kind)
        manifest = sample(kind, NS)
        ns = NS if kind.namespaced else None
        if kind is BINDINGS:
            await walk.call("POST", PODS.url(namespace=NS), unscheduled_pod(NS), kind="v1 Pod", verb="create",
                            model="V1Pod")
            manifest["target"]["name"] = host
            await walk.call("POST", kind.url(namespace=NS), manifest, kind=label, verb="create", model=model)
            continue
        if kind in REVIEWS:
            await walk.call("POST", kind.url(), manifest, kind=label, verb="create", model=model)
            continue
        obj = await walk.call("POST", kind.url(namespace=ns), manifest, kind=label, verb="create", model=model)
        name = obj["metadata"]["name"]
        url = kind.url(namespace=ns, name=name)
        created.append((kind, obj))
        await walk.call("GET", url, kind=label, verb="get", model=model)
        await walk.call("PATCH", url, {"metadata": {"labels": {"conformance/patched": "yes"}}}, kind=label,
                        verb="patch", model=model, ctype="application/merge-patch+json")
        await walk.update(url, lambda o: o["metadata"].setdefault("annotations", {}).update(walked="yes"),
                          kind=label, verb="update", model=model)
        if _has_sub(kind, "status"):
            await walk.call("GET", f"{url}/status", kind=label, verb="get status", model=model)
            await walk.update(f"{url}/status", lambda o: None, kind=label, verb="update status", model=model)
        if _has_sub(kind, "scale"):
            await walk.call("GET", f"{url}/scale", kind=label, verb="get scale", model="V1Scale")
        if kind is CUSTOMRESOURCEDEFINITIONS:
            await _walk_custom_resource(walk, obj, watches)

    # 3. The controllers at work: running, scaled, rolled, completed, fired.
    await _drive_workloads(walk)
    for kind in KINDS:
        if "list" in kind.verbs and kind.namespaced:
            await walk.call("GET", kind.url(namespace=NS), kind=name_of_kind[kind], verb="list",
                            model=f"{model_name(kind)}List")

    # 4. Deleted: the Deployment in the foreground, every other object as it comes, the namespace last.
    for kind, obj in reversed(created):
        ns = NS if kind.namespaced else None
        url = kind.url(namespace=ns, name=obj["metadata"]["name"])
        if kind is NAMESPACES:
            continue
        params = {"propagationPolicy": "Foreground"} if kind is DEPLOYMENTS else None
        await walk.call("DELETE", url, kind=name_of_kind[kind], verb="delete", model=model_name(kind),
                        params=params, ok=(200, 202, 404))
    await walk.call("DELETE", NAMESPACES.url(name=NS), kind="v1 Namespace", verb="delete", model="V1Namespace")

    async def namespace_gone() -> bool:
        async with walk.session.get(walk.base + NAMESPACES.url(name=NS)) as resp:
            return resp.status == 404

    await eventually(namespace_gone, what=f"namespace {NS} deleted with everything in it")
    for kind in KINDS:
        if "list" in kind.verbs:
            await walk.call("GET", kind.url(), kind=name_of_kind[kind], verb="list", model=f"{model_name(kind)}List")
    await asyncio.sleep(1.0)  # the last watch events on their way


async def _walk_custom_resource(walk: Walk, crd: Json, watches: list[asyncio.Task[None]]) -> None:
    """The sample CRD's custom resource: established, created, read, listed, watched, deleted."""
    crd_url = CUSTOMRESOURCEDEFINITIONS.url(name=crd["metadata"]["name"])

    async def established() -> Json | None:
        doc = await walk.call("GET", crd_url, kind="apiextensions.k8s.io/v1 CustomResourceDefinition",
                              verb="get", model="V1CustomResourceDefinition")
        conditions = (doc.get("status") or {}).get("conditions") or []
        return doc if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions) else None

    await eventually(established, what="the sample CRD Established")
    spec = crd["spec"]
    custom = Custom(group=spec["group"], version=spec["versions"][0]["name"], plural=spec["names"]["plural"],
                    kind=spec["names"]["kind"])
    label = f"{custom.group}/{custom.version} {custom.kind}"
    listed = await walk.call("GET", custom.url(), kind=label, verb="list", model=None)
    watches.append(asyncio.create_task(walk.watch(custom.url(), listed["metadata"]["resourceVersion"], kind=label,
                                                  model=None)))
    obj = await walk.call("POST", custom.url(NS), custom_resource(crd, NS), kind=label, verb="create", model=None)
    url = custom.url(NS, obj["metadata"]["name"])
    await walk.call("GET", url, kind=label, verb="get", model=None)
    await walk.call("PATCH", f"{url}/status", {"status": {"phase": "Ready"}}, kind=label, verb="patch status",
                    model=None, ctype="application/merge-patch+json")
    await walk.call("GET", custom.url(NS), kind=label, verb="list", model=None)
    await walk.call("DELETE", url, kind=label, verb="delete", model=None)


async def _drive_workloads(walk: Walk) -> None:
    """Wait for each workload's states, scaling and rolling them on the way."""

    async def get(kind: Kind, name: str) -> Json:
        return await walk.call("GET", kind.url(namespace=NS, name=name), kind=f"{kind.api_version} {kind.kind}",
                               verb="get", model=model_name(kind))

    def condition(obj: Json, ctype: str) -> bool:
        return any(c.get("type") == ctype and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or [])

    async def scale(kind: Kind, name: str, replicas: int) -> None:
        await walk.update(kind.url(namespace=NS, name=name, sub="scale"),
                          lambda s: s["spec"].update(replicas=replicas), kind=f"{kind.api_version} {kind.kind}",
                          verb="update scale", model="V1Scale")

    async def roll(kind: Kind, name: str) -> None:
        def change(o: Json) -> None:
            o["spec"]["template"]["spec"]["containers"][0]["image"] = IMAGE_ROLLED
        await walk.update(kind.url(namespace=NS, name=name), change, kind=f"{kind.api_version} {kind.kind}",
                          verb="update (roll)", model=model_name(kind))

    async def settled(kind: Kind, name: str, ready: Callable[[Json], bool]) -> Json | None:
        obj = await get(kind, name)
        st = obj.get("status") or {}
        return obj if st.get("observedGeneration") == obj["metadata"].get("generation") and ready(obj) else None

    def deployment_done(replicas: int) -> Callable[[Json], bool]:
        return lambda d: (d["status"].get("updatedReplicas") == replicas == d["status"].get("availableReplicas")
                          and d["status"].get("replicas") == replicas)

    async def pod_running() -> Json | None:
        pod = await get(PODS, "solo")
        return pod if pod["status"].get("phase") == "Running" else None

    await eventually(pod_running, what="pod solo Running")
    await eventually(lambda: settled(DEPLOYMENTS, "web", deployment_done(2)), what="deployment web available")
    await scale(DEPLOYMENTS, "web", 3)
    await scale(REPLICASETS, "cache", 2)
    await scale(REPLICATIONCONTROLLERS, "legacy", 2)
    await scale(STATEFULSETS, "db", 3)
    await roll(DEPLOYMENTS, "web")
    await roll(DAEMONSETS, "agent")
    await eventually(lambda: settled(DEPLOYMENTS, "web", deployment_done(3)), what="deployment web scaled and rolled")
    await eventually(lambda: settled(REPLICASETS, "cache", lambda r: r["status"].get("readyReplicas") == 2),
                     what="replicaset cache scaled to 2")
    await eventually(lambda: settled(REPLICATIONCONTROLLERS, "legacy",
                                     lambda r: r["status"].get("readyReplicas") == 2),
                     what="replicationcontroller legacy running and scaled to 2")
    await eventually(lambda: settled(DAEMONSETS, "agent", lambda d: d["status"].get("updatedNumberScheduled")
                                     == d["status"].get("numberAvailable") == NODES),
                     what="daemonset agent rolled on every node")
    await eventually(lambda: settled(STATEFULSETS, "db", lambda s: s["status"].get("readyReplicas") == 3),
                     what="statefulset db scaled to 3")
    await roll(STATEFULSETS, "db")
    await eventually(lambda: settled(STATEFULSETS, "db", lambda s: s["status"].get("updatedReplicas") == 3
                                     and s["status"].get("currentRevision") == s["status"].get("updateRevision")),
                     what="statefulset db rolled")

    async def job_complete() -> Json | None:
        job = await get(JOBS, "migrate")
        return job if condition(job, "Complete") else None

    await eventually(job_complete, what="job migrate complete")

    async def cronjob_fired() -> Json | None:
        cj = await get(CRONJOBS, "report")
        return cj if (cj.get("status") or {}).get("lastSuccessfulTime") else None

    await eventually(cronjob_fired, what="cronjob report fired and one of its jobs succeeded")


async def test_both_clients_have_a_model_for_every_kind_and_refuse_missing_required_fields() -> None:
    """The walk is not vacuous: both clients know every kind's class, and refuse what the issue saw."""
    models = TypedModels()
    try:
        for kind in KINDS:
            for client_models in (k8s_models, ak8s_models):
                assert hasattr(client_models, model_name(kind)), (kind.kind, model_name(kind))
        daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                     "spec": {"selector": {"matchLabels": {"app": "agent"}},
                              "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
                     "status": {"numberReady": 0}}
        refused = models.problems(daemonset, "V1DaemonSet")
        assert [(r.client, r.field.split(",")[0]) for r in refused] == [
            ("kubernetes", "status.currentNumberScheduled"),
            ("kubernetes_asyncio", "status.currentNumberScheduled")], refused
        listed = {"apiVersion": "apps/v1", "kind": "DaemonSetList", "metadata": {}, "items": [daemonset]}
        assert {r.field.split(",")[0] for r in models.problems(listed, "V1DaemonSetList")} == {
            "items[0].status.currentNumberScheduled"}
        daemonset["status"] = {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                               "numberReady": 0}
        assert models.problems(daemonset, "V1DaemonSet") == []
    finally:
        await models.aclose()
