r"""Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the built-in kinds.

kubectl 1.32+ and every typed client-go client send creates and updates of built-in kinds as
protobuf: `k8s\x00` + a `runtime.Unknown` envelope {typeMeta, raw, ...} whose `raw` is the
object's message from k8s.io/api's `generated.proto`. `decode_protobuf` turns such a body into
exactly the JSON-like dict the same client's JSON body would have been (the Go JSON form,
`decoding`'s docstring lists the rules), so the rest of the server never sees the difference.

Guarantees:

* every kind of `KINDS` that is built in (not a custom resource) decodes, as do the bodies of
  its subresources (autoscaling/v1 Scale, policy/v1 Eviction, v1 Binding) and DeleteOptions;
  the message is the one the envelope names (defaulted from the target as kube-apiserver does),
  so a mismatch with the path is caught by the same checks as a JSON body's;
* a custom resource answers 415, as upstream (CRDs have no protobuf form);
* a malformed body (no magic, bad wire data, an unknown kind, a value Go's JSON cannot carry)
  is a 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: <why>`, never a 500;
* responses are never protobuf: clients that send it also accept JSON.

The message tables are generated (`messages.py`, by scripts/gen_protobuf.py); the wire bytes
are parsed by the `protobuf` library. `encode_protobuf` is the inverse, for tests and
benchmarks.
"""

from __future__ import annotations

from typing import Final

from kubemesh.apiserver import errors
from kubemesh.apiserver.protobuf.decoding import ProtobufError, decode_message, unwrap
from kubemesh.apiserver.protobuf.encoding import encode_protobuf
from kubemesh.apiserver.protobuf.schema import message_for
from kubemesh.services.model.kinds import Kind, Obj

__all__ = ["MEDIA_TYPE", "ProtobufError", "decode_protobuf", "encode_protobuf"]

MEDIA_TYPE: Final = "application/vnd.kubernetes.protobuf"


def expected_kind(kind: Kind, subresource: str | None = None, *, delete: bool = False) -> tuple[str, str]:
    """(apiVersion, kind) a body sent to `kind` (or its subresource, or a delete) is by default."""
    if delete:
        return "v1", "DeleteOptions"
    sub = kind.subresource(subresource) if subresource is not None else None
    if sub is None:
        return kind.api_version, kind.kind
    group = sub.group if sub.group is not None else kind.group
    version = sub.version if sub.version is not None else kind.version
    return (f"{group}/{version}" if group else version), sub.kind


def decode_protobuf(kind: Kind, raw: bytes, subresource: str | None = None, *, delete: bool = False) -> Obj:
    """The JSON-like object a protobuf body sent to `kind` carries (415 for a custom resource, 400 if malformed).

    `subresource` names the path's subresource (its body kind is the default); `delete` says
    the body is a DELETE's (DeleteOptions by default). The object's `kind` and `apiVersion` are
    the envelope's.
    """
    if kind.custom is not None:
        raise errors.unsupported_media_type(("application/json", "application/yaml"))
    return _real(kind, raw, subresource, delete=delete)


def _real(kind: Kind, raw: bytes, subresource: str | None = None, *, delete: bool = False) -> Obj:
    default_version, default_kind = expected_kind(kind, subresource, delete=delete)
    api_version, obj_kind = default_version, default_kind
    try:
        envelope_version, envelope_kind, data = unwrap(raw)
        obj_kind = envelope_kind or default_kind
        if envelope_version:  # as copyKindDefaults: a missing version takes the default group too
            api_version = envelope_version
        name = message_for(api_version, obj_kind)
        if name is None:
            raise ProtobufError(f'no kind "{obj_kind}" is registered for version "{api_version}" in scheme '
                                '"pkg/api/legacyscheme/scheme.go:30"')
        obj = decode_message(name, data)
    except ProtobufError as exc:
        version = api_version.rsplit("/", 1)[-1]
        raise errors.bad_request(f'{obj_kind} in version "{version}" cannot be handled as a {default_kind}: '
                                 f"{exc}") from None
    return {"kind": obj_kind, "apiVersion": api_version, **obj}
