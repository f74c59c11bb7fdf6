"""kopf, in its own virtualenv, running a real operator on a custom resource against a real mesh.

The mesh runs the apiserver and the controller-manager (its garbage collector), over HTTPS with
a token. The operator (`kopf_widgets_operator.py`) runs as `kopf run --all-namespaces` and as
`kopf run --namespace=shop`, each with `--peering=NAME` and KUBECONFIG naming the mesh: not
standalone, so kopf's peering uses its CRDs (`ClusterKopfPeering` cluster-wide, `KopfPeering`
in the namespace; installed here, as kopf's documentation has users install them, from
definitions written for this test), and naming the peering makes it mandatory. The test drives
Widgets with kubectl and checks, through kubectl and kubernetes_asyncio:

* kopf registers itself in the peering object and removes itself when it stops;
* create: kopf adds its finalizer, the handler creates a child ConfigMap owned by the Widget
  and writes `status` (the status subresource) through `patch.status`, the handler's result in
  `status.create_widget`; kopf posts the Event the handler asks for;
* a `@kopf.timer` keeps counting `status.ticks`;
* update of the spec: the update handler runs (only it), the ConfigMap and `status` follow;
* delete: kopf's finalizer holds the Widget (deletionTimestamp set, child still there) while
  its delete handler fails temporarily and is retried; once it succeeds, kopf removes the
  finalizer and the Widget goes; the garbage collector deletes the child ConfigMap;
* kopf exits 0 on SIGINT and logged no error but the delete handler's wanted ones.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from clientkit import HERE, Child, Json, ak8s, client_tools, k8s_api, kubeconfig_env, start_mesh
from waits import eventually

from kubemesh.services.mesh.kubectl import Kubectl, KubectlError
from kubemesh.services.mesh.launching import Mesh

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

GROUP = "kopf.clients.kubemesh.io"
VERSION = "v1"
PLURAL = "widgets"
WIDGETS = f"{PLURAL}.{GROUP}"
NS = "shop"
PEERING = "clients-test"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
WAIT = 60.0
"""Wall seconds for one thing the operator should do (kopf and the GC both run on wall time here)."""


def peering_crd(*, cluster: bool) -> Json:
    """kopf's peering resource (`kopf.dev/v1`): peers write themselves into `status` by merge patch."""
    kind = "ClusterKopfPeering" if cluster else "KopfPeering"
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {"group": "kopf.dev", "scope": "Cluster" if cluster else "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    }


WIDGET_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": WIDGETS},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "Widget", "plural": PLURAL, "singular": "widget", "shortNames": ["wdg"]},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "additionalPrinterColumns": [
                               {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                               {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}],
                           "schema": {"openAPIV3Schema": {
                               "type": "object",
                               "properties": {
                                   "spec": {"type": "object", "required": ["size"],
                                            "properties": {"size": {"type": "integer", "minimum": 1},
                                                           "message": {"type": "string"}}},
                                   # kopf keeps its progress and the handlers' results here.
                                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}


def manifests(*docs: Json) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with start_mesh(components=("apiserver", "controller_manager")) as m:
        yield m


@dataclass(frozen=True)
class Scope:
    """How kopf runs: cluster-wide (a ClusterKopfPeering) or in one namespace (a KopfPeering there)."""

    flag: str
    peering_kind: str
    peering_namespace: str | None

    def peering_args(self) -> list[str]:
        """kubectl arguments naming the peering object."""
        return [self.peering_kind.lower(), PEERING, *(["-n", self.peering_namespace] if self.peering_namespace else [])]


SCOPES = {"all-namespaces": Scope("--all-namespaces", "ClusterKopfPeering", None),
          "namespace": Scope(f"--namespace={NS}", "KopfPeering", NS)}


@pytest.fixture(params=list(SCOPES))
def scope(request: pytest.FixtureRequest) -> Scope:
    return SCOPES[request.param]


@pytest.fixture
async def operator(mesh: Mesh, scope: Scope, tmp_path: Path) -> AsyncIterator[Child]:
    """The CRDs and the peering object installed, then `kopf run` started; stopped on teardown."""
    tools = client_tools()
    kubectl = Kubectl(mesh.kubeconfig_path)
    await kubectl("apply", "-f", "-", input=manifests(peering_crd(cluster=True), peering_crd(cluster=False),
                                                      WIDGET_CRD))
    await kubectl("wait", "--for", "condition=established", "crd/clusterkopfpeerings.kopf.dev",
                  "crd/kopfpeerings.kopf.dev", f"crd/{WIDGETS}", "--timeout=60s")
    peering: Json = {"apiVersion": "kopf.dev/v1", "kind": scope.peering_kind, "metadata": {"name": PEERING}}
    if scope.peering_namespace:
        peering["metadata"]["namespace"] = scope.peering_namespace
    await kubectl("apply", "-f", "-", input=manifests({"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": NS}}, peering))
    child = Child(argv=[str(tools.kopf), "run", scope.flag, f"--peering={PEERING}", "--verbose",
                        str(HERE / "kopf_widgets_operator.py")],
                  log_path=tmp_path / "kopf.log", env=kubeconfig_env(mesh.kubeconfig_path), cwd=tmp_path)
    await child.start()
    try:
        yield child
    finally:
        await child.stop(signal.SIGINT)


async def test_kopf_operator_handles_a_custom_resource(mesh: Mesh, scope: Scope, operator: Child) -> None:
    kubectl = Kubectl(mesh.kubeconfig_path)

    async def widget(name: str) -> Json | None:
        try:
            found: Json = await kubectl.json("get", "widget", name, "-n", NS)
        except KubectlError as exc:
            if "NotFound" in exc.stderr:
                return None
            raise
        return found

    async def peers() -> dict[str, Any]:
        status: dict[str, Any] = (await kubectl.json("get", *scope.peering_args())).get("status") or {}
        return status

    # kopf joins the peering: its entry in the peering object's status.
    joined = await eventually(peers, within=WAIT, what=f"kopf's entry in the {scope.peering_kind}")
    [(peer_id, entry)] = joined.items()
    assert {"priority", "lifetime", "lastseen"} <= entry.keys(), entry

    # create -> finalizer, child ConfigMap owned by the Widget, status.
    await kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": "w1", "namespace": NS},
         "spec": {"size": 3, "message": "hello"}}))

    async def created() -> Json | None:
        w = await widget("w1")
        return w if w and (w.get("status") or {}).get("phase") == "Created" else None

    w1 = await eventually(created, within=WAIT, what="status.phase Created on w1")
    assert FINALIZER in w1["metadata"].get("finalizers", []), w1["metadata"]
    assert w1["status"]["observedSize"] == 3
    assert w1["status"]["create_widget"] == {"configMap": "w1-data"}, w1["status"]
    async with k8s_api(mesh.kubeconfig_path) as api:
        core = ak8s.CoreV1Api(api)
        cm = await core.read_namespaced_config_map("w1-data", NS)
        assert cm.data == {"size": "3", "message": "hello"}
        [ref] = cm.metadata.owner_references
        assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
            f"{GROUP}/{VERSION}", "Widget", "w1", w1["metadata"]["uid"], True, True)
        table = await kubectl("get", "wdg", "-n", NS, "--no-headers")
        assert table.split()[:3] == ["w1", "3", "Created"], table

        # The timer keeps ticking.
        async def ticks() -> int:
            w = await widget("w1")
            return int(((w or {}).get("status") or {}).get("ticks", 0))

        first = await eventually(ticks, within=WAIT, what="status.ticks from the timer")
        await eventually(lambda: _above(ticks, first + 1), within=WAIT, what=f"status.ticks above {first + 1}")

        # update of the spec -> the update handler, the ConfigMap follows.
        await kubectl("patch", "widget", "w1", "-n", NS, "--type=merge", "-p", '{"spec": {"size": 5}}')

        async def updated() -> Json | None:
            w = await widget("w1")
            status = (w or {}).get("status") or {}
            return w if status.get("phase") == "Updated" and status.get("observedSize") == 5 else None

        await eventually(updated, within=WAIT, what="status.phase Updated with observedSize 5")
        cm = await core.read_namespaced_config_map("w1-data", NS)
        assert cm.data == {"size": "5", "message": "hello"}

        # The create handler's Event (`kopf.info`), posted by kopf for the Widget.
        async def child_events() -> list[Any]:
            events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=w1")
            return [e for e in events.items if e.reason == "ChildCreated"]

        [event] = await eventually(child_events, within=WAIT, what="kopf's Event for w1")
        assert event.message == "created ConfigMap w1-data" and event.type == "Normal"
        assert (event.involved_object.kind, event.involved_object.uid) == ("Widget", w1["metadata"]["uid"])

        # delete -> kopf's finalizer holds the Widget while its delete handler fails (temporarily) ...
        await kubectl("delete", "widget", "w1", "-n", NS, "--wait=false")
        await operator.wait_line(lambda line: "Handler 'delete_widget' failed temporarily" in line, within=WAIT,
                                 what="kopf retrying the delete handler")
        held = await widget("w1")
        assert held is not None and held["metadata"].get("deletionTimestamp"), held
        assert held["metadata"]["finalizers"] == [FINALIZER], held["metadata"]
        assert (await core.read_namespaced_config_map("w1-data", NS)).data["size"] == "5"
        # ... until it succeeds: then kopf removes its finalizer, the Widget goes, and (GC) its child.
        await core.create_namespaced_config_map(NS, {"metadata": {"name": "w1-release"}})
        await kubectl("wait", "--for=delete", "widget/w1", "-n", NS, "--timeout=60s")
        assert await widget("w1") is None
        record = await core.read_namespaced_config_map("w1-deleted", NS)
        assert record.data == {"size": "5", "message": "hello"}
        assert not record.metadata.owner_references

        async def child_gone() -> bool:
            names = [c.metadata.name for c in (await core.list_namespaced_config_map(NS)).items]
            return "w1-data" not in names

        await eventually(child_gone, within=WAIT, what="the garbage collector deleting w1-data")

    # kopf leaves on SIGINT: exit 0, its peering entry removed, and no error in its log.
    assert await operator.stop(signal.SIGINT, grace=30) == 0, operator.output()
    assert peer_id not in await peers()
    errors = [line for line in operator.lines if ("[ERROR" in line or "Traceback" in line)
              and "failed temporarily: waiting for ConfigMap w1-release" not in line]  # the one failure wanted
    assert errors == [], "\n".join(errors)
    # Each handler succeeded once: the timer's and the handlers' own status writes made none run again.
    succeeded = [line.split("Handler ")[1] for line in operator.lines if "Handler '" in line and "succeeded" in line]
    assert sorted(succeeded) == ["'create_widget' succeeded.", "'delete_widget' succeeded.",
                                 "'update_widget/spec' succeeded."], succeeded


async def _above(read: Callable[[], Awaitable[int]], value: int) -> bool:
    return await read() > value
