"""Built-in objects are decoded as kube-apiserver's typed decode does: unknown fields and nulls dropped.

Unknown fields are dropped in every `fieldValidation` mode (reported as `Warning` headers under
`Warn`, the default; a 400 under `Strict`; silently under `Ignore`), and a `null` is a field's
zero value, which is left out, so `kubectl rollout undo` (which sends a template with
`creationTimestamp: null`) finds the old ReplicaSet as upstream does. A value of the wrong JSON
type for its field is refused as Go's decoder refuses it (a 400, with encoding/json's wording),
and nothing is stored.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest
from restkit import Rest

from kubemesh.apiserver.validation import decode_typed
from kubemesh.services.model.kinds import CONFIGMAPS, DEPLOYMENTS, PODS

if TYPE_CHECKING:
    pass

CMS = "/api/v1/namespaces/default/configmaps"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"


def deployment(name: str, *, image: str = "nginx:1", template_md: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, **(template_md or {})},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


@pytest.mark.parametrize("mode", ["", "Warn", "Ignore"])
async def test_unknown_fields_are_dropped_in_every_lenient_mode(rest: Rest, mode: str) -> None:
    params = {"fieldValidation": mode} if mode else None
    name = f"c-{mode.lower() or 'default'}"
    body = {"metadata": {"name": name}, "data": {"a": "b"}, "bogus": 1, "status": {"x": 1}}
    created = await rest.ok("POST", CMS, body, params=params)
    assert "bogus" not in created and "status" not in created and created["data"] == {"a": "b"}
    if mode == "Ignore":
        assert rest.last_warnings == []
    else:
        assert rest.last_warnings == ['unknown field "bogus"', 'unknown field "status"']
    stored = await rest.ok("GET", f"{CMS}/{name}")
    assert "bogus" not in stored and "status" not in stored


async def test_warn_is_the_default_and_strict_refuses_with_every_field(rest: Rest) -> None:
    await rest.ok("POST", CMS, {"metadata": {"name": "w"}, "bogus": 1,
                                "data": {"a": "b"}, "status": {}})
    assert rest.last_warnings == ['unknown field "bogus"', 'unknown field "status"']
    status, doc = await rest.call("POST", CMS, {"metadata": {"name": "s"}, "bogus": 1, "spec": {}},
                                  params={"fieldValidation": "Strict"})
    assert status == 400 and doc["reason"] == "BadRequest", doc
    assert doc["message"] == 'strict decoding error: unknown field "bogus", unknown field "spec"'
    assert await rest.status_of("GET", f"{CMS}/s") == 404
    # Nested unknowns, in a patch too: dropped, and the stored object is the typed one.
    await rest.ok("POST", DEPLOYS, deployment("nested"))
    patched = await rest.ok("PATCH", f"{DEPLOYS}/nested", {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "nginx:2", "colour": "red"}]}}}},
        ctype="application/strategic-merge-patch+json")
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert "colour" not in patched["spec"]["template"]["spec"]["containers"][0]
    assert rest.last_warnings == ['unknown field "spec.template.spec.containers[0].colour"']


async def test_nulls_are_zero_values_and_leave_no_trace(rest: Rest) -> None:
    created = await rest.ok("POST", DEPLOYS, deployment("nulls", template_md={"creationTimestamp": None,
                                                                              "annotations": None}))
    assert created["spec"]["template"]["metadata"] == {"labels": {"app": "nulls"}}
    cm = await rest.ok("POST", CMS, {"metadata": {"name": "n", "labels": None}, "data": None})
    assert "labels" not in cm["metadata"] and "data" not in cm
    # A PUT whose template differs only by a null is no change at all: no new revision, same generation.
    again = copy.deepcopy(created)
    again["spec"]["template"]["metadata"]["creationTimestamp"] = None
    updated = await rest.ok("PUT", f"{DEPLOYS}/nulls", again)
    assert updated["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert updated["metadata"]["generation"] == created["metadata"]["generation"]


def test_decode_typed_copies_on_write_and_returns_a_clean_object_itself() -> None:
    pod = {"metadata": {"name": "p", "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "image": "i", "oops": 1}], "nodeName": None}}
    before = copy.deepcopy(pod)
    typed, unknown = decode_typed(PODS, pod)
    assert pod == before  # the input is never changed
    assert unknown == ["spec.containers[0].oops"]
    assert typed == {"metadata": {"name": "p", "labels": {"a": "b"}},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert typed["metadata"] is pod["metadata"]  # untouched parts are shared, not copied
    clean = {"metadata": {"name": "c"}, "data": {"k": "v"}}
    assert decode_typed(CONFIGMAPS, clean) == (clean, []) and decode_typed(CONFIGMAPS, clean)[0] is clean
    deploy = deployment("d", template_md={"creationTimestamp": None})
    assert decode_typed(DEPLOYMENTS, deploy)[0]["spec"]["template"]["metadata"] == {"labels": {"app": "d"}}


@pytest.mark.parametrize(("body", "message"), [
    ({"spec": {"containers": [{"name": "c", "image": "i", "stdin": "yes"}]}},
     "json: cannot unmarshal string into Go struct field Container.spec.containers.stdin of type bool"),
    ({"spec": {"containers": "nginx"}},
     "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container"),
    ({"spec": {"containers": [{"name": "c", "image": "i", "command": ["sh", True]}]}},
     "json: cannot unmarshal bool into Go struct field Container.spec.containers.command of type string"),
    ({"metadata": {"labels": {"on": True}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
     "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string"),
    ({"spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"podIPs": [True]}},
     "json: cannot unmarshal bool into Go struct field PodStatus.status.podIPs of type v1.PodIP"),
])
async def test_a_value_of_the_wrong_json_type_is_refused_as_gos_decoder_refuses_it(
        rest: Rest, body: dict[str, Any], message: str) -> None:
    metadata = {"name": "typed", **(body.get("metadata") or {})}
    status, doc = await rest.call("POST", "/api/v1/namespaces/default/pods", {**body, "metadata": metadata})
    assert (status, doc["reason"], doc["message"]) == (
        400, "BadRequest", f'Pod in version "v1" cannot be handled as a Pod: {message}')
    assert await rest.status_of("GET", "/api/v1/namespaces/default/pods/typed") == 404


async def test_a_status_update_of_the_wrong_type_is_refused_and_the_replica_count_too(rest: Rest) -> None:
    created = await rest.ok("POST", DEPLOYS, deployment("typed"))
    status, doc = await rest.call("PUT", f"{DEPLOYS}/typed", {**created, "spec": {**created["spec"], "replicas": "3"}})
    assert (status, doc["message"]) == (400, 'Deployment in version "v1" cannot be handled as a Deployment: json: '
                                             "cannot unmarshal string into Go struct field DeploymentSpec.spec."
                                             "replicas of type int32")
    status, _ = await rest.call("PUT", f"{DEPLOYS}/typed/status",
                                {**created, "status": {"replicas": "many"}})
    assert status == 400
    assert (await rest.ok("GET", f"{DEPLOYS}/typed"))["metadata"]["resourceVersion"] == \
        created["metadata"]["resourceVersion"]
