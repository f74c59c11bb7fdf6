from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest
import yaml
from documents import openapi_v2_protobuf, openapi_v3_document, openapi_v3_index, served_group_versions

from kubemesh.apiserver.openapi import OPENAPI_V2_CONTENT_TYPE
from kubemesh.services.model.kinds import KINDS, Obj

PATCHABLE = {(k.group, k.version, k.kind) for k in KINDS if "patch" in k.verbs}


# -- v3 ----------------------------------------------------------------------------------------


def test_v3_index_lists_every_served_group_version() -> None:
    index = openapi_v3_index()
    expected = {
        (f"apis/{g}/{v}" if g else f"api/{v}") for g, versions in served_group_versions().items() for v in versions
    }
    assert set(index["paths"]) == expected
    for key, entry in index["paths"].items():
        url = entry["serverRelativeURL"]
        assert url.startswith(f"/openapi/v3/{key}?hash=")
        assert len(url.split("hash=")[1]) == 128
    hashes = [e["serverRelativeURL"].split("hash=")[1] for e in index["paths"].values()]
    assert len(set(hashes)) == len(hashes)


def test_v3_document_paths() -> None:
    doc = openapi_v3_document("api/v1")
    assert doc is not None
    assert doc["openapi"].startswith("3.")
    assert doc["info"]["version"] == "v1.30.0"
    # A schema per built-in model reached from the group/version's kinds (test_openapi_schemas.py).
    assert "io.k8s.kubemesh.models.v1.Pod" in doc["components"]["schemas"]
    pods = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert pods["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    params = {p["name"]: p for p in pods["parameters"]}
    assert params["fieldValidation"]["in"] == "query"
    nodes = doc["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert nodes["x-kubernetes-group-version-kind"]["kind"] == "Node"
    # bindings cannot be patched: only created, like the access reviews
    assert not any("patch" in item for p, item in doc["paths"].items() if "bindings" in p)
    reviews = openapi_v3_document("apis/authorization.k8s.io/v1")
    assert reviews is not None
    assert reviews["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]["post"][
        "x-kubernetes-group-version-kind"]["kind"] == "SelfSubjectAccessReview"
    apps = openapi_v3_document("/apis/apps/v1/")
    assert apps is not None
    assert "/apis/apps/v1/namespaces/{namespace}/deployments/{name}" in apps["paths"]
    assert openapi_v3_document("apis/nope/v1") is None
    assert openapi_v3_document("apis/autoscaling/v2beta2") is None


def test_v3_documents_cover_every_patchable_kind_once() -> None:
    seen: list[tuple[str, str, str]] = []
    for key in openapi_v3_index()["paths"]:
        doc = openapi_v3_document(key)
        assert doc is not None
        for path, item in doc["paths"].items():
            if "patch" not in item:
                continue
            gvk = item["patch"]["x-kubernetes-group-version-kind"]
            seen.append((gvk["group"], gvk["version"], gvk["kind"]))
            assert path.endswith("/{name}")
            assert any(p["name"] == "fieldValidation" for p in item["patch"]["parameters"])
    assert sorted(seen) == sorted(PATCHABLE)


def test_v3_hash_is_stable_and_documents_are_json() -> None:
    assert openapi_v3_index() == openapi_v3_index()
    doc = openapi_v3_document("api/v1")
    assert orjson.loads(orjson.dumps(doc)) == doc


# -- v2 protobuf -------------------------------------------------------------------------------


def test_v2_content_type_has_no_at_sign() -> None:
    assert OPENAPI_V2_CONTENT_TYPE == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert "@" not in OPENAPI_V2_CONTENT_TYPE


@dataclass
class PbField:
    number: int
    wire: int
    value: int | bytes


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def parse_message(data: bytes) -> list[PbField]:
    """Decode one protobuf message's fields; raises ValueError unless the bytes are exactly fields."""
    fields: list[PbField] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = _read_varint(data, pos)
            fields.append(PbField(number, wire, value))
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            fields.append(PbField(number, wire, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ValueError("truncated fixed field")
            fields.append(PbField(number, wire, data[pos : pos + size]))
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return fields


def _one(fields: list[PbField], number: int) -> bytes:
    matches = [f.value for f in fields if f.number == number]
    assert len(matches) == 1, f"field {number}: {len(matches)} occurrences"
    value = matches[0]
    assert isinstance(value, bytes)
    return value


def _all(fields: list[PbField], number: int) -> list[bytes]:
    out = []
    for f in fields:
        if f.number == number:
            assert isinstance(f.value, bytes)
            out.append(f.value)
    return out


def test_protobuf_reader_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_message(b"\x0a\x05ab")  # length 5, only 2 bytes
    with pytest.raises(ValueError):
        parse_message(b"\x0b")  # wire type 3 (groups) is not used
    assert parse_message(b"\x08\x96\x01") == [PbField(1, 0, 150)]


def _decode_document() -> Obj:
    """The v2 document decoded per gnostic's OpenAPIv2.proto field numbers."""
    doc = parse_message(openapi_v2_protobuf())
    assert {f.wire for f in doc} == {2}
    info = parse_message(_one(doc, 2))
    paths: dict[str, Obj] = {}
    for named in _all(parse_message(_one(doc, 8)), 2):  # Paths.path: NamedPathItem
        item = parse_message(named)
        name = _one(item, 1).decode()
        path_item = parse_message(_one(item, 2))
        assert [f.number for f in path_item] == [8]  # only PATCH
        op = parse_message(_one(path_item, 8))
        params = []
        for p in _all(op, 8):  # Operation.parameters: ParametersItem
            parameter = parse_message(_one(parse_message(p), 1))  # ParametersItem.parameter
            non_body = parse_message(_one(parameter, 2))  # Parameter.non_body_parameter
            query = parse_message(_one(non_body, 3))  # NonBodyParameter.query_parameter_sub_schema
            params.append(
                {
                    "in": _one(query, 2).decode(),
                    "name": _one(query, 4).decode(),
                    "type": _one(query, 6).decode(),
                }
            )
        extensions = {}
        for ext in _all(op, 13):  # Operation.vendor_extension: NamedAny
            named_any = parse_message(ext)
            any_value = parse_message(_one(named_any, 2))
            extensions[_one(named_any, 1).decode()] = yaml.safe_load(_one(any_value, 2).decode())
        paths[name] = {"operationId": _one(op, 5).decode(), "parameters": params, "extensions": extensions}
    return {
        "swagger": _one(doc, 1).decode(),
        "info": {"title": _one(info, 1).decode(), "version": _one(info, 2).decode()},
        "paths": paths,
    }


def test_v2_protobuf_decodes_as_gnostic_document() -> None:
    doc = _decode_document()
    assert doc["swagger"] == "2.0"
    assert doc["info"] == {"title": "Kubernetes", "version": "v1.30.0"}
    pod = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert pod["operationId"] == "patchNamespacedPod"
    assert pod["parameters"] == [{"in": "query", "name": "fieldValidation", "type": "string"}]
    assert pod["extensions"] == {"x-kubernetes-group-version-kind": {"group": "", "kind": "Pod", "version": "v1"}}
    assert doc["paths"]["/api/v1/nodes/{name}"]["operationId"] == "patchNode"
    gvks = {
        (
            p["extensions"]["x-kubernetes-group-version-kind"]["group"],
            p["extensions"]["x-kubernetes-group-version-kind"]["version"],
            p["extensions"]["x-kubernetes-group-version-kind"]["kind"],
        )
        for p in doc["paths"].values()
    }
    assert gvks == PATCHABLE
    assert len(doc["paths"]) == len(PATCHABLE)


def test_v2_protobuf_is_cached_bytes() -> None:
    assert openapi_v2_protobuf() is openapi_v2_protobuf()
    assert isinstance(openapi_v2_protobuf(), bytes)
