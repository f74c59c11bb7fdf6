"""The protobuf decoder in process: real kubectl bodies, Go's JSON rules, every message, errors.

* Golden bodies: what kubectl 1.33 sent (protobuf) for `create namespace|configmap|deployment|
  secret|service clusterip|pdb|cronjob` decodes to exactly the JSON kubectl 1.30 sent for the
  same command (key order included), and encoding that JSON gives kubectl's bytes back.
* Property: for every kind the tables hold, an object drawn in Go's JSON form
  (`protobufkit.go_json`) survives encode -> decode unchanged.
* The rules one by one (omitempty, pointers, null, inlined structs, renamed fields, the
  hand-written forms), and every way a body can be malformed: a 400 with kube-apiserver's
  wording, or a 415 for a custom resource.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protobufkit import go_json, kind_message

from kubemesh.apiserver import errors
from kubemesh.apiserver.protobuf import decode_protobuf, encode_protobuf
from kubemesh.apiserver.protobuf import messages as tables
from kubemesh.apiserver.protobuf.decoding import ProtobufError, decode_message
from kubemesh.apiserver.protobuf.encoding import encode_message, wrap
from kubemesh.apiserver.protobuf.goformats import (
    format_duration,
    format_micro_time,
    format_time,
    parse_duration,
    parse_time,
)
from kubemesh.apiserver.protobuf.schema import compiled
from kubemesh.services.model.kinds import (
    CONFIGMAPS,
    DEPLOYMENTS,
    KINDS,
    NAMESPACES,
    PODS,
    SERVICEACCOUNTS,
    SERVICES,
    Kind,
)

# (kubectl 1.33's protobuf body, kubectl 1.30's JSON body for the same command), names aligned.
GOLDEN: list[tuple[str, str]] = [
    ("6b3873000a0f0a02763112094e616d657370616365121d0a150a056e7331333312001a0022002a0032003800420012001a020a001a"
     "002200",
     '{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"ns133","creationTimestamp":null},"spec":{},'
     '"status":{}}'),
    ("6b3873000a0f0a0276311209436f6e6669674d617012210a170a02636d12001a056e7331333322002a0032003800420012060a0161"
     "1201621a002200",
     '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns133","creationTimestamp":null},'
     '"data":{"a":"b"}}'),
    ("6b3873000a150a07617070732f7631120a4465706c6f796d656e7412a8010a200a016412001a056e7331333322002a003200380042"
     "005a080a0361707012016412760802120a0a080a036170701201641a5e0a1a0a0012001a0022002a003200380042005a080a036170"
     "70120164124012220a056e67696e7812056e67696e782a0042006a007200800100880100900100a201001a00320042004a00520058"
     "00600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200",
     '{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"ns133","creationTimestamp":'
     'null,"labels":{"app":"d"}},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"d"}},"template":{"metadata"'
     ':{"creationTimestamp":null,"labels":{"app":"d"}},"spec":{"containers":[{"name":"nginx","image":"nginx",'
     '"resources":{}}]}},"strategy":{}},"status":{}}'),
    ("6b3873000a0c0a027631120653656372657412280a160a0573312e333312001a016722002a0032003800420012060a017812017"
     "91a064f70617175651a002200",
     '{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s1.33","namespace":"g","creationTimestamp":null},'
     '"data":{"x":"eQ=="},"type":"Opaque"}'),
    ("6b3873000a0d0a02763112075365727669636512760a260a0673766331333312001a016722002a003200380042005a0d0a0361707"
     "0120673766331333312480a1e0a0738302d6874747012035443501850220a080110001a04687474702800120d0a036170701206737"
     "6633133331a002209436c757374657249503a00420052005a00600068001a020a001a002200",
     '{"kind":"Service","apiVersion":"v1","metadata":{"name":"svc133","namespace":"g","creationTimestamp":null,'
     '"labels":{"app":"svc133"}},"spec":{"ports":[{"name":"80-http","protocol":"TCP","port":80,"targetPort":'
     '"http"}],"selector":{"app":"svc133"},"type":"ClusterIP"},"status":{"loadBalancer":{}}}'),
    ("6b3873000a200a09706f6c6963792f76311213506f6444697372757074696f6e427564676574123f0a180a07706462312e33331200"
     "1a016722002a003200380042001217120a0a080a036170701201641a09080110001a033235251a0a080018002000280030001a0022"
     "00",
     '{"kind":"PodDisruptionBudget","apiVersion":"policy/v1","metadata":{"name":"pdb1.33","namespace":"g",'
     '"creationTimestamp":null},"spec":{"selector":{"matchLabels":{"app":"d"}},"maxUnavailable":"25%"},"status":'
     '{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}}'),
    ("6b3873000a130a0862617463682f7631120743726f6e4a6f6212bd010a170a06636a312e333312001a016722002a003200380042"
     "00129f010a0b2a2f31202a202a202a202a1a002a8d010a160a06636a312e333312001a0022002a00320038004200127332710a100a"
     "0012001a0022002a00320038004200125d12360a06636a312e3333120762757379626f781a0273681a022d631a076563686f206869"
     "2a0042006a007200800100880100900100a201001a094f6e4661696c757265320042004a0052005800600068008201008a01009a01"
     "00c201001a001a002200",
     '{"kind":"CronJob","apiVersion":"batch/v1","metadata":{"name":"cj1.33","namespace":"g","creationTimestamp":'
     'null},"spec":{"schedule":"*/1 * * * *","jobTemplate":{"metadata":{"name":"cj1.33","creationTimestamp":null},'
     '"spec":{"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":[{"name":"cj1.33","image":'
     '"busybox","command":["sh","-c","echo hi"],"resources":{}}],"restartPolicy":"OnFailure"}}}}},"status":{}}'),
]

BUILT_IN = [k for k in KINDS if k.custom is None]


def kind_of(api_version: str, kind: str) -> Kind:
    return next(k for k in KINDS if (k.api_version, k.kind) == (api_version, kind))


def message(api_version: str, kind: str) -> str:
    return kind_message(api_version, kind)


def roundtrip(api_version: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    name = message(api_version, kind)
    return decode_message(name, encode_message(name, obj))


def bad_request(exc: pytest.ExceptionInfo[errors.StatusError]) -> str:
    assert exc.value.code == 400, exc.value.status()
    return str(exc.value.status()["message"])


# ---------------------------------------------------------------------------------- what kubectl sends


@pytest.mark.parametrize(("body", "expected"), GOLDEN, ids=[orjson.loads(j)["kind"] for _, j in GOLDEN])
def test_kubectl_protobuf_bodies_decode_to_the_json_kubectl_sends(body: str, expected: str) -> None:
    raw = bytes.fromhex(body)
    doc = orjson.loads(expected)
    obj = decode_protobuf(kind_of(doc["apiVersion"], doc["kind"]), raw)
    assert orjson.dumps(obj) == expected.encode()  # the same keys in the same order
    assert encode_protobuf(doc) == raw  # and the encoder writes what client-go writes


# ---------------------------------------------------------------------------------- every message


QUERY_OPTIONS = frozenset({"PodExecOptions", "PodAttachOptions", "PodPortForwardOptions"})
"""Subresource kinds that come as query parameters, never as a body (pods/exec, attach, portforward)."""


def test_every_built_in_kind_and_subresource_body_has_a_message() -> None:
    for kind in BUILT_IN:
        assert (kind.api_version, kind.kind) in tables.KINDS, kind.kind
        for sub in kind.subresources:
            if sub.kind in QUERY_OPTIONS:
                continue
            group = sub.group if sub.group is not None else kind.group
            version = sub.version if sub.version is not None else kind.version
            assert (f"{group}/{version}" if group else version, sub.kind) in tables.KINDS, (kind.kind, sub.name)
    for name, fields in tables.MESSAGES.items():
        for _number, _json, typ, shape, _omitempty in fields:
            assert typ in compiled().slots or typ in ("string", "int32", "int64", "bool", "bytes", "double"), name
            assert shape in ("val", "ptr", "list", "map")


@pytest.mark.parametrize("key", sorted(tables.KINDS), ids=lambda k: f"{k[0]}:{k[1]}")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_objects_in_go_json_form_survive_encode_and_decode(key: tuple[str, str], data: st.DataObject) -> None:
    name = tables.KINDS[key]
    obj = data.draw(go_json(name, depth=3))
    assert decode_message(name, encode_message(name, obj)) == obj
    enveloped = {"kind": key[1], "apiVersion": key[0], **obj}
    # subresource bodies are decoded on their parent's path
    parent = {"Scale": DEPLOYMENTS, "Eviction": PODS, "TokenRequest": SERVICEACCOUNTS}.get(key[1])
    assert decode_protobuf(parent or kind_of(*key), encode_protobuf(enveloped)) == enveloped


# ---------------------------------------------------------------------------------- Go's JSON rules


def test_value_fields_follow_omitempty_and_pointers_keep_zero() -> None:
    pdb = roundtrip("policy/v1", "PodDisruptionBudget", {"status": {}})
    # PodDisruptionBudgetStatus: int32 fields without omitempty are written even when zero.
    assert pdb["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    deploy = roundtrip("apps/v1", "Deployment", {"spec": {"replicas": 0, "paused": False}})
    # replicas is *int32 (kept at 0), paused a bool with omitempty (dropped), structs always there.
    assert deploy["spec"] == {"replicas": 0, "selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                                           "spec": {"containers": None}},
                              "strategy": {}}
    assert deploy["metadata"] == {"creationTimestamp": None} and deploy["status"] == {}


def test_empty_lists_and_maps_are_left_out_or_null() -> None:
    role = roundtrip("rbac.authorization.k8s.io/v1", "ClusterRole", {"rules": [], "metadata": {"labels": {}}})
    assert role == {"metadata": {"creationTimestamp": None}, "rules": None}  # rules has no omitempty
    cm = roundtrip("v1", "ConfigMap", {"data": {}, "binaryData": {"b": "AAE="}})
    assert cm == {"metadata": {"creationTimestamp": None}, "binaryData": {"b": "AAE="}}


def test_inlined_structs_and_renamed_fields() -> None:
    pod = roundtrip("v1", "Pod", {"spec": {
        "volumes": [{"name": "v", "configMap": {"name": "cm", "optional": True}}],
        "containers": [{"name": "c", "image": "i", "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 3},
                        "resources": {"limits": {"memory": "1Gi", "cpu": "500m"}}}],
    }})
    spec = pod["spec"]
    assert spec["volumes"] == [{"name": "v", "configMap": {"name": "cm", "optional": True}}]
    container = spec["containers"][0]
    assert container["livenessProbe"] == {"exec": {"command": ["true"]}, "periodSeconds": 3}
    assert container["resources"] == {"limits": {"cpu": "500m", "memory": "1Gi"}}  # sorted as Go writes maps
    hook = roundtrip("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", {
        "webhooks": [{"name": "w.example.com", "clientConfig": {"caBundle": "AQI="},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                 "resources": ["pods"]}],
                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]})
    webhook = hook["webhooks"][0]
    assert webhook["rules"][0] == {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                   "resources": ["pods"]}
    assert webhook["clientConfig"] == {"caBundle": "AQI="}
    crd = roundtrip("apiextensions.k8s.io/v1", "CustomResourceDefinition", {"spec": {"versions": [{
        "name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True, "$ref": "#/x", "default": {"a": [1]},
            "items": [{"type": "string"}], "additionalProperties": False,
            "dependencies": {"a": ["b"], "c": {"type": "integer", "maximum": 5, "minimum": -1.5}},
            "enum": [1, "x", None]}}}]}})
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema == {"$ref": "#/x", "type": "object", "default": {"a": [1]}, "items": [{"type": "string"}],
                      "additionalProperties": False,
                      "dependencies": {"a": ["b"], "c": {"type": "integer", "maximum": 5, "minimum": -1.5}},
                      "enum": [1, "x", None], "x-kubernetes-preserve-unknown-fields": True}


def test_hand_written_forms() -> None:
    event = roundtrip("v1", "Event", {"firstTimestamp": "2024-05-01T10:00:00Z",
                                      "eventTime": "2024-05-01T10:00:00.123456Z", "involvedObject": {"kind": "Pod"}})
    assert event["firstTimestamp"] == "2024-05-01T10:00:00Z"
    assert event["lastTimestamp"] is None  # a zero Time value field
    assert event["eventTime"] == "2024-05-01T10:00:00.123456Z"
    pdb = roundtrip("policy/v1", "PodDisruptionBudget", {"spec": {"minAvailable": 2, "maxUnavailable": "10%"}})
    assert (pdb["spec"]["minAvailable"], pdb["spec"]["maxUnavailable"]) == (2, "10%")
    svc = roundtrip("v1", "Service", {"spec": {"ports": [{"port": 80}]}})
    assert svc["spec"]["ports"] == [{"port": 80, "targetPort": 0}]  # a zero IntOrString value field
    rev = roundtrip("apps/v1", "ControllerRevision", {"data": {"spec": {"x": [1, "y"]}}, "revision": 3})
    assert rev["data"] == {"spec": {"x": [1, "y"]}} and rev["revision"] == 3
    assert roundtrip("apps/v1", "ControllerRevision", {})["data"] is None
    review = roundtrip("authorization.k8s.io/v1", "SubjectAccessReview",
                       {"spec": {"user": "u", "extra": {"scopes": ["a", "b"], "none": None}}})
    assert review["spec"]["extra"] == {"none": None, "scopes": ["a", "b"]}


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited field, written by hand (text that is not UTF-8 cannot be set through the library)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_non_utf8_text_is_replaced_and_repeated_map_keys_keep_the_last_value() -> None:
    data = (ld(1, ld(1, b"n\xff"))  # metadata.name
            + ld(2, ld(1, b"k") + ld(2, b"first"))  # data["k"]
            + ld(2, ld(1, b"k") + ld(2, b"caf\xe9"))  # data["k"] again, not UTF-8: the last one wins, as in Go
            + ld(2, ld(1, b"a") + ld(2, b"x")))
    obj = decode_message(message("v1", "ConfigMap"), data)
    assert obj["data"] == {"a": "x", "k": "caf\ufffd"}
    assert list(obj["data"]) == ["a", "k"]  # sorted, as Go writes maps
    assert obj["metadata"]["name"] == "n\ufffd"
    with pytest.raises(ProtobufError, match="map key of a ConfigMap is not valid UTF-8"):
        decode_message(message("v1", "ConfigMap"), ld(2, ld(1, b"\xffz") + ld(2, b"x")))


def test_a_map_entry_without_value_is_the_zero_value() -> None:
    node = ld(3, ld(1, ld(1, b"cpu")))  # status.capacity["cpu"] with no value: Go's zero Quantity
    assert decode_message(message("v1", "Node"), node)["status"]["capacity"] == {"cpu": "0"}
    cm = ld(2, ld(1, b"k"))  # data["k"] with no value: ""
    assert decode_message(message("v1", "ConfigMap"), cm)["data"] == {"k": ""}


# ---------------------------------------------------------------------------------- Go formats


@pytest.mark.parametrize(("nanos", "text"), [
    (0, "0s"), (1, "1ns"), (1_100, "1.1µs"), (2_200_000, "2.2ms"), (1_500_000_000, "1.5s"), (60_000_000_000, "1m0s"),
    (3_600_000_000_000, "1h0m0s"), (4_000_000_000_000, "1h6m40s"), (-1_500_000_000, "-1.5s"),
    (3_723_004_000_000, "1h2m3.004s"), (9_223_372_036_854_775_807, "2562047h47m16.854775807s"),
    (-9_223_372_036_854_775_808, "-2562047h47m16.854775808s"),
])
def test_durations_are_written_as_go_writes_them(nanos: int, text: str) -> None:
    assert format_duration(nanos) == text
    assert parse_duration(text) == nanos


def test_times_are_rfc3339_in_utc() -> None:
    assert format_time(0) == "1970-01-01T00:00:00Z"
    assert format_time(-62135596800) is None  # Go's zero time
    assert format_time(253402300799) == "9999-12-31T23:59:59Z"
    assert format_micro_time(1714557600, 123456789) == "2024-05-01T10:00:00.123456Z"
    assert format_micro_time(0, -1500) == "1969-12-31T23:59:59.999999Z"  # truncated toward zero, then normalised
    assert parse_time("2024-05-01T12:00:00+02:00") == (1714557600, 0)
    with pytest.raises(ValueError, match="outside the years"):
        format_time(253402300800)


# ---------------------------------------------------------------------------------- failures


def test_malformed_bodies_are_400_with_kube_apiserver_wording() -> None:
    good = encode_protobuf({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}})
    cases = {
        b"{}": "provided data does not appear to be a protobuf message",
        good[:-3]: "malformed protobuf data",
        good[:4] + b"\x0a\xff": "malformed protobuf data",
        wrap("v1", "Frobnicator", b""): 'no kind "Frobnicator" is registered for version "v1"',
    }
    for raw, why in cases.items():
        with pytest.raises(errors.StatusError) as exc:
            decode_protobuf(CONFIGMAPS, raw)
        text = bad_request(exc)
        assert text.startswith("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: ") or \
            text.startswith("Frobnicator in version \"v1\" cannot be handled as a ConfigMap: "), text
        assert why in text


def test_values_go_cannot_carry_are_400() -> None:
    ios = compiled().classes[message("v1", "Service")]()
    port = ios.f2.f1.add()  # spec.ports[0]
    port.f4.f1 = 7  # targetPort.type: neither Int (0) nor String (1)
    with pytest.raises(errors.StatusError) as exc:
        decode_protobuf(SERVICES, wrap("v1", "Service", ios.SerializeToString()))
    assert "impossible IntOrString.Type 7" in bad_request(exc)
    node = compiled().classes[message("v1", "Node")]()
    node.f3.f1["cpu"].f1 = ""  # an empty Quantity string
    with pytest.raises(errors.StatusError) as exc:
        decode_protobuf(kind_of("v1", "Node"), wrap("v1", "Node", node.SerializeToString()))
    assert "quantities must match the regular expression" in bad_request(exc)
    rev = compiled().classes[message("apps/v1", "ControllerRevision")]()
    rev.f2.f1 = b"{not json"
    with pytest.raises(ProtobufError, match="not JSON"):
        decode_message(message("apps/v1", "ControllerRevision"), rev.SerializeToString())
    crd = compiled().classes[message("apiextensions.k8s.io/v1", "CustomResourceDefinition")]()
    version = crd.f2.f7.add()
    version.f4.f1.f9 = float("nan")  # schema.openAPIV3Schema.maximum
    with pytest.raises(ProtobufError, match="unsupported value: nan"):
        decode_message(message("apiextensions.k8s.io/v1", "CustomResourceDefinition"), crd.SerializeToString())


def test_custom_resources_have_no_protobuf_form() -> None:
    custom = Kind(group="example.com", version="v1", kind="Widget", plural="widgets", singular="widget",
                  namespaced=True, custom=object())
    with pytest.raises(errors.StatusError) as exc:
        decode_protobuf(custom, encode_protobuf({"kind": "ConfigMap", "apiVersion": "v1"}))
    assert exc.value.code == 415  # and the types a custom resource does take, as its negotiation lists them
    assert exc.value.status()["message"] == ("the body of the request was in an unknown format - accepted media "
                                             "types include: application/json, application/yaml")


def test_envelope_defaults_and_subresource_bodies() -> None:
    # A missing kind and apiVersion are the target's, as kube-apiserver's copyKindDefaults does.
    data = encode_message(message("v1", "Namespace"), {"metadata": {"name": "n"}})
    assert decode_protobuf(NAMESPACES, wrap("", "", data))["kind"] == "Namespace"
    scale = encode_message(message("autoscaling/v1", "Scale"), {"spec": {"replicas": 3}})
    body = decode_protobuf(DEPLOYMENTS, wrap("", "", scale), "scale")
    assert body == {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"creationTimestamp": None},
                    "spec": {"replicas": 3}, "status": {"replicas": 0}}
    options = encode_message("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions", {"propagationPolicy": "Orphan"})
    assert decode_protobuf(PODS, wrap("", "", options), delete=True) == {
        "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}
    eviction = encode_protobuf({"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": "p"},
                                "deleteOptions": {"gracePeriodSeconds": 0}})
    assert decode_protobuf(PODS, eviction, "eviction")["deleteOptions"] == {"gracePeriodSeconds": 0}


def test_bytes_fields_distinguish_nil_and_empty() -> None:
    name = message("apiregistration.k8s.io/v1", "APIService")
    assert "caBundle" not in decode_message(name, encode_message(name, {"spec": {"caBundle": ""}}))["spec"]
    obj = decode_message(name, encode_message(name, {"spec": {"caBundle": base64.b64encode(b"\x00").decode()}}))
    assert obj["spec"]["caBundle"] == "AA=="
