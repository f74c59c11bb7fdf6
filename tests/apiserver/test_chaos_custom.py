"""Chaos faults name custom resources by their plural, like any other resource, once their CRD is served."""

from __future__ import annotations

from chaoskit import running

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
FAULT = {"type": "request.error", "target": {"component": "my-operator"},
         "match": {"resources": ["widgets"], "verbs": ["create"]}, "params": {"code": 503}, "duration": 60}


async def test_a_fault_on_a_custom_resource_hits_that_resource_only() -> None:
    async with running() as mesh:
        before = await mesh.call("POST", "/chaos/v1/faults", body=FAULT)
        assert before.status == 422 and "unknown resource 'widgets'" in str(before.body), before.body

        assert (await mesh.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                body=CRD)).status == 201
        await mesh.add(FAULT)
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"a": 1}}
        hit = await mesh.call("POST", WIDGETS, component="my-operator", body=widget)
        assert hit.status == 503, hit.body
        other = await mesh.call("POST", WIDGETS, component="someone-else", body=widget)
        assert other.status == 201, other.body
        reads = await mesh.call("GET", f"{WIDGETS}/w", component="my-operator")
        assert reads.status == 200 and reads.body["spec"] == {"a": 1}
        pods = await mesh.call("POST", "/api/v1/namespaces/default/configmaps", component="my-operator",
                               body={"metadata": {"name": "c"}})
        assert pods.status == 201, pods.body
