"""Protobuf and JSON bodies of the same object create the same stored object (a real apiserver process).

For each kind, hypothesis draws an object in Go's JSON form from the message tables
(`protobufkit.go_json`: the form kubectl and every client-go client send), adjusted where the
apiserver validates (names, selectors, enums, ranges) so that it is accepted. The same object
is then POSTed twice, once as JSON and once as the protobuf body kubectl 1.32+ would send; both
must be created, and the two stored objects must be equal once what the server assigns (name,
uid, times, resourceVersion, allocated IPs and ports) is set aside.

Also here: malformed protobuf bodies are 400s that store nothing, custom resources answer 415,
and protobuf reaches the subresources and the other verbs that take a body (PUT, status,
scale, binding, eviction, DELETE's options, the reviews).
"""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protobufkit import PROTOBUF, go_json, kind_message, protobuf_body

from kubemesh.apiserver.protobuf.decoding import decode_message
from kubemesh.apiserver.protobuf.encoding import encode_message, wrap

if TYPE_CHECKING:
    from conftest import ApiServer, LaunchApiServer

Json = dict[str, Any]
NS = "pb"
_names = itertools.count()


# ---------------------------------------------------------------------------------- a small client


class Client:
    """Blocking JSON/protobuf requests to one server (hypothesis tests are synchronous)."""

    def __init__(self, server: ApiServer) -> None:
        self.base = server.url

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             ctype: str = "application/json") -> tuple[int, Json]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": ctype, "Accept": f"{PROTOBUF},application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                assert resp.headers["Content-Type"].startswith("application/json")
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        status, doc = self.call(method, path, body, **kw)
        assert status in (200, 201), (method, path, status, doc)
        return doc

    def revision(self) -> str:
        return str(self.ok("GET", "/api/v1/namespaces")["metadata"]["resourceVersion"])


@pytest.fixture(scope="module")
def client(apiserver_launcher: LaunchApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    server = apiserver_launcher(Path(tmp_path_factory.mktemp("protobuf")))
    try:
        c = Client(server)
        c.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield c
    finally:
        server.terminate()


# ---------------------------------------------------------------------------------- making objects valid


def _labels() -> st.SearchStrategy[dict[str, str]]:
    key = st.from_regex(r"\A([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)?[a-z]([-a-z0-9]{0,8}[a-z0-9])?\Z")
    value = st.from_regex(r"\A([a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?)?\Z")
    return st.dictionaries(key, value, max_size=3).map(lambda d: dict(sorted(d.items())))


def _fix_metadata(draw: st.DrawFn, obj: Json, namespaced: bool) -> None:
    meta: Json = {"namespace": NS} if namespaced else {}
    meta["creationTimestamp"] = None
    labels = draw(_labels())
    annotations = draw(st.dictionaries(st.from_regex(r"\A[a-z]{1,8}(/[a-z]{1,8})?\Z"), st.text(max_size=8),
                                       max_size=2))
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    obj["metadata"] = meta


def _nonneg(obj: Json, key: str, minimum: int = 0) -> None:
    if obj.get(key) is not None and obj[key] < minimum:
        obj[key] = abs(obj[key]) + minimum if abs(obj[key]) + minimum < 2 ** 31 else minimum


def _fix_containers(containers: list[Json] | None, prefix: str) -> None:
    for i, c in enumerate(containers or ()):
        c["name"] = f"{prefix}{i}"
        c["image"] = "registry.example/app:1"
        for port in c.get("ports") or ():
            port["containerPort"] = 1 + abs(port["containerPort"]) % 65535
            port["protocol"] = "TCP"
        for var in c.get("env") or ():
            var["name"] = var["name"] or "VAR"


def _fix_pod_spec(spec: Json, *, restart: str | None) -> None:
    if not spec.get("containers"):
        spec["containers"] = [{"name": "", "image": "", "resources": {}}]
    _fix_containers(spec["containers"], "c")
    _fix_containers(spec.get("initContainers"), "init")
    spec.pop("ephemeralContainers", None)
    spec.pop("tolerations", None)
    spec.pop("priorityClassName", None)
    spec.pop("priority", None)
    if restart is not None:
        spec["restartPolicy"] = restart
    elif "restartPolicy" in spec:
        spec["restartPolicy"] = "Never"
    if "dnsPolicy" in spec:
        spec["dnsPolicy"] = "ClusterFirst"
    _nonneg(spec, "terminationGracePeriodSeconds")
    _nonneg(spec, "activeDeadlineSeconds", 1)


def _fix_template(template: Json, labels: dict[str, str] | None, *, restart: str | None) -> None:
    meta = template["metadata"] = {"creationTimestamp": None}
    if labels:
        meta["labels"] = labels
    _fix_pod_spec(template["spec"], restart=restart)


SELECTOR: Json = {"matchLabels": {"app": "pb"}}


def fix_pod(obj: Json) -> None:
    _fix_pod_spec(obj["spec"], restart=None)
    status = obj["status"]
    if "phase" in status:
        status["phase"] = "Pending"
    for cond in status.get("conditions") or ():
        cond["type"], cond["status"] = "Ready", "True"


def fix_workload(obj: Json) -> None:
    spec = obj["spec"]
    spec["selector"] = json.loads(json.dumps(SELECTOR))
    _fix_template(spec["template"], {"app": "pb"}, restart="Always")
    _nonneg(spec, "replicas")
    _nonneg(spec, "minReadySeconds")
    if spec.get("minReadySeconds") == 0:
        del spec["minReadySeconds"]
    if isinstance(spec.get("strategy"), dict) and "type" in spec["strategy"]:
        spec["strategy"]["type"] = "RollingUpdate"


def _fix_job_spec(spec: Json) -> None:
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    _fix_template(spec["template"], None, restart="Never")


def fix_job(obj: Json) -> None:
    _fix_job_spec(obj["spec"])


def fix_cronjob(obj: Json) -> None:
    spec = obj["spec"]
    spec["schedule"] = "*/5 * * * *"
    spec.pop("timeZone", None)
    template = spec["jobTemplate"]
    template["metadata"] = {"creationTimestamp": None}
    _fix_job_spec(template["spec"])


def fix_service(obj: Json) -> None:
    spec = obj["spec"]
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort", "externalName",
                "loadBalancerIP", "externalTrafficPolicy", "internalTrafficPolicy", "allocateLoadBalancerNodePorts",
                "loadBalancerClass", "trafficDistribution", "sessionAffinity", "sessionAffinityConfig"):
        spec.pop(key, None)
    if "type" in spec:
        spec["type"] = "ClusterIP"
    ports = spec.get("ports") or [{"port": 80, "targetPort": 0}]
    for i, port in enumerate(ports):
        port["name"] = f"p{i}"
        port["port"] = 1 + i
        port["protocol"] = "TCP"
        port.pop("nodePort", None)
    spec["ports"] = ports


def fix_config_map(obj: Json) -> None:
    for part in ("data", "binaryData"):
        if obj.get(part):
            obj[part] = {f"key-{i}": v for i, v in enumerate(obj[part].values())}


def fix_pdb(obj: Json) -> None:
    spec = obj["spec"]
    spec["selector"] = json.loads(json.dumps(SELECTOR))
    if "minAvailable" in spec:
        spec.pop("maxUnavailable", None)


def fix_priority_class(obj: Json) -> None:
    obj["value"] = obj["value"] % 1_000_000_000
    obj.pop("globalDefault", None)
    if obj.get("preemptionPolicy") is not None:
        obj["preemptionPolicy"] = "Never"


def fix_node(obj: Json) -> None:
    obj["spec"].pop("taints", None)
    status = obj["status"]
    for cond in status.get("conditions") or ():
        cond["type"], cond["status"] = "Ready", "True"
    for addr in status.get("addresses") or ():
        addr["type"], addr["address"] = "InternalIP", "10.0.0.1"


def fix_event(obj: Json) -> None:
    _nonneg(obj, "count")
    if obj.get("count") == 0:
        del obj["count"]


def fix_lease(obj: Json) -> None:
    spec = obj["spec"]
    if spec.get("leaseDurationSeconds") is not None:
        spec["leaseDurationSeconds"] = 1 + abs(spec["leaseDurationSeconds"]) % 3600
    _nonneg(spec, "leaseTransitions")


def fix_nothing(obj: Json) -> None:
    """The apiserver checks nothing below the metadata of this kind."""


@dataclass(frozen=True)
class Case:
    """A kind under test: where it is created and how a drawn object is made valid."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool
    fix: Callable[[Json], None]

    def collection(self) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{base}/namespaces/{NS}/{self.plural}" if self.namespaced else f"{base}/{self.plural}"


CASES = [
    Case("v1", "Pod", "pods", True, fix_pod),
    Case("apps/v1", "Deployment", "deployments", True, fix_workload),
    Case("apps/v1", "StatefulSet", "statefulsets", True, fix_workload),
    Case("apps/v1", "ReplicaSet", "replicasets", True, fix_workload),
    Case("apps/v1", "DaemonSet", "daemonsets", True, fix_workload),
    Case("v1", "Service", "services", True, fix_service),
    Case("v1", "ConfigMap", "configmaps", True, fix_config_map),
    Case("v1", "Secret", "secrets", True, fix_nothing),
    Case("batch/v1", "Job", "jobs", True, fix_job),
    Case("batch/v1", "CronJob", "cronjobs", True, fix_cronjob),
    Case("v1", "Namespace", "namespaces", False, fix_nothing),
    Case("rbac.authorization.k8s.io/v1", "Role", "roles", True, fix_nothing),
    Case("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True, fix_nothing),
    Case("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False, fix_nothing),
    Case("networking.k8s.io/v1", "Ingress", "ingresses", True, fix_nothing),
    Case("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True, fix_nothing),
    Case("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True, fix_pdb),
    Case("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False, fix_priority_class),
    Case("v1", "ServiceAccount", "serviceaccounts", True, fix_nothing),
    Case("v1", "Node", "nodes", False, fix_node),
    Case("v1", "Event", "events", True, fix_event),
    Case("coordination.k8s.io/v1", "Lease", "leases", True, fix_lease),
    Case("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, fix_nothing),
    Case("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, fix_nothing),
    Case("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", True, fix_nothing),
    Case("storage.k8s.io/v1", "StorageClass", "storageclasses", False, fix_nothing),
]


@st.composite
def valid_objects(draw: st.DrawFn, case: Case) -> Json:
    """An object of the case's kind in Go's JSON form that the apiserver accepts (name left out)."""
    message = kind_message(case.api_version, case.kind)
    obj: Json = draw(go_json(message, depth=3))
    _fix_metadata(draw, obj, case.namespaced)
    case.fix(obj)
    # The adjustments keep Go's JSON form: encoding and decoding give the same object back.
    assert decode_message(message, encode_message(message, obj)) == obj
    return {"kind": case.kind, "apiVersion": case.api_version, **obj}


# ---------------------------------------------------------------------------------- comparing


ASSIGNED = ("uid", "creationTimestamp", "resourceVersion", "generation")


def comparable(obj: Json, name: str) -> Json:
    """The stored object with what the server assigns set aside, and its own name and uid blanked."""
    uid = obj["metadata"]["uid"]
    text = json.dumps(obj).replace(uid, "UID").replace(json.dumps(name)[1:-1], "NAME")
    out: Json = json.loads(text)
    meta = out["metadata"]
    for key in ASSIGNED:
        meta.pop(key, None)
    for entry in meta.get("managedFields") or ():
        entry.pop("time", None)
    spec = out.get("spec")
    if out["kind"] == "Service" and isinstance(spec, dict):
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
        for port in spec.get("ports") or ():
            port.pop("nodePort", None)
    return out


def create_both(client: Client, case: Case, obj: Json) -> tuple[Json, Json]:
    """POST `obj` as JSON and as protobuf under two fresh names; both stored objects."""
    n = next(_names)
    stored = []
    for how, name in (("json", f"pj-{n}"), ("protobuf", f"pp-{n}")):
        body = {**obj, "metadata": {**obj["metadata"], "name": name}}
        if how == "json":
            status, doc = client.call("POST", case.collection(), body)
        else:
            status, doc = client.call("POST", case.collection(), raw=protobuf_body(body), ctype=PROTOBUF)
        assert status == 201, (how, status, doc, body)
        got = client.ok("GET", f"{case.collection()}/{name}")
        assert comparable(got, name) == comparable(doc, name)  # the response is what was stored
        stored.append(comparable(got, name))
    return stored[0], stored[1]


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_protobuf_and_json_bodies_store_the_same_object(client: Client, case: Case, data: st.DataObject) -> None:
    obj = data.draw(valid_objects(case))
    from_json, from_protobuf = create_both(client, case, obj)
    assert from_protobuf == from_json


# ---------------------------------------------------------------------------------- failures


def test_malformed_protobuf_is_400_and_stores_nothing(client: Client) -> None:
    cm = {"metadata": {"name": "bad"}, "data": {"a": "b"}}
    inner = encode_message(kind_message("v1", "ConfigMap"), cm)
    good = wrap("v1", "ConfigMap", inner)
    before = client.revision()
    path = f"/api/v1/namespaces/{NS}/configmaps"
    for raw in (b"k8s\x00\x0a", b'{"kind": "ConfigMap"}', good[:-1], good[:6] + b"\xff" * 4,
                wrap("v1", "ConfigMap", inner[:-1]), wrap("v1", "Gadget", b""),
                wrap("v1", "ConfigMap", b"\x0a\x05\x0a")):
        status, doc = client.call("POST", path, raw=raw, ctype=PROTOBUF)
        assert status == 400, (raw, doc)
        assert doc["reason"] == "BadRequest"
        assert " in version \"v1\" cannot be handled as a ConfigMap: " in doc["message"]
    status, doc = client.call("PUT", f"{path}/bad", raw=good[:-1], ctype=PROTOBUF)
    assert status == 400, doc
    assert client.revision() == before
    assert client.call("GET", f"{path}/bad")[0] == 404


def test_a_body_of_another_kind_is_refused_as_json_would_be(client: Client) -> None:
    cm = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "other", "namespace": NS}}
    as_json = client.call("POST", f"/api/v1/namespaces/{NS}/secrets", cm)
    as_protobuf = client.call("POST", f"/api/v1/namespaces/{NS}/secrets", raw=protobuf_body(cm), ctype=PROTOBUF)
    assert as_json[0] == 400
    assert as_protobuf == as_json


def test_custom_resources_answer_415(client: Client) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.pb.example.com"},
           "spec": {"group": "pb.example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    client.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", raw=protobuf_body(crd),
              ctype=PROTOBUF)
    path = f"/apis/pb.example.com/v1/namespaces/{NS}/widgets"
    for _ in range(100):
        status, doc = client.call("POST", path, raw=protobuf_body({"kind": "ConfigMap", "apiVersion": "v1"}),
                                  ctype=PROTOBUF)
        if status != 404:  # until the CRD is established and served
            break
    assert status == 415, doc
    assert doc["reason"] == "UnsupportedMediaType"
    created = client.ok("POST", path, {"apiVersion": "pb.example.com/v1", "kind": "Widget",
                                       "metadata": {"name": "w"}})
    assert created["metadata"]["name"] == "w"


# ---------------------------------------------------------------------------------- verbs and subresources


def test_protobuf_updates_subresources_deletes_and_reviews(client: Client) -> None:
    deploy = {"kind": "Deployment", "apiVersion": "apps/v1",
              "metadata": {"name": "web", "namespace": NS, "creationTimestamp": None},
              "spec": {"replicas": 1, "selector": SELECTOR, "template": {
                  "metadata": {"labels": {"app": "pb"}, "creationTimestamp": None},
                  "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]}}, "strategy": {}},
              "status": {}}
    base = f"/apis/apps/v1/namespaces/{NS}/deployments"
    created = client.ok("POST", base, raw=protobuf_body(deploy), ctype=PROTOBUF)
    # PUT (update) as protobuf, with the resourceVersion it read.
    created["metadata"]["labels"] = {"tier": "front"}
    updated = client.ok("PUT", f"{base}/web", raw=protobuf_body(_go_form(created)), ctype=PROTOBUF)
    assert updated["metadata"]["labels"] == {"tier": "front"}
    # status
    status_body = _go_form({**updated, "status": {"replicas": 1, "observedGeneration": 1}})
    got = client.ok("PUT", f"{base}/web/status", raw=protobuf_body(status_body), ctype=PROTOBUF)
    assert got["status"]["replicas"] == 1
    # scale (an autoscaling/v1 Scale)
    scale = client.ok("GET", f"{base}/web/scale")
    scale["spec"]["replicas"] = 4
    client.ok("PUT", f"{base}/web/scale", raw=protobuf_body(_go_form(scale)), ctype=PROTOBUF)
    assert client.ok("GET", f"{base}/web")["spec"]["replicas"] == 4
    # binding and eviction of a pod
    pods = f"/api/v1/namespaces/{NS}/pods"
    client.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pb-node"}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound", "namespace": NS},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    client.ok("POST", pods, pod)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound", "namespace": NS},
               "target": {"kind": "Node", "name": "pb-node"}}
    client.ok("POST", f"{pods}/bound/binding", raw=protobuf_body(binding), ctype=PROTOBUF)
    assert client.ok("GET", f"{pods}/bound")["spec"]["nodeName"] == "pb-node"
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "bound", "namespace": NS},
                "deleteOptions": {"gracePeriodSeconds": 0}}
    client.ok("POST", f"{pods}/bound/eviction", raw=protobuf_body(eviction), ctype=PROTOBUF)
    # DELETE with DeleteOptions as protobuf (client-go's typed Delete): dryRun=All keeps the object.
    options = wrap("v1", "DeleteOptions", encode_message("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                                                         {"dryRun": ["All"], "propagationPolicy": "Foreground"}))
    client.ok("DELETE", f"{base}/web", raw=options, ctype=PROTOBUF)
    assert client.call("GET", f"{base}/web")[0] == 200
    client.ok("DELETE", f"{base}/web", raw=wrap("v1", "DeleteOptions", b""), ctype=PROTOBUF)
    # A review, as kubectl auth can-i sends it.
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "metadata": {"creationTimestamp": None},
              "spec": {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "pods"}}, "status": {
                  "allowed": False}}
    answer = client.ok("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", raw=protobuf_body(review),
                       ctype=PROTOBUF)
    assert answer["status"]["allowed"] is True
    assert answer["spec"]["resourceAttributes"] == {"namespace": NS, "verb": "get", "resource": "pods"}


def _go_form(obj: Json) -> Json:
    """A stored object as a Go client re-sends it: through the tables' Go JSON form."""
    message = kind_message(obj["apiVersion"], obj["kind"])
    body = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    return {"kind": obj["kind"], "apiVersion": obj["apiVersion"],
            **decode_message(message, encode_message(message, body))}
