"""Reviews: the kinds a client creates to ask the apiserver a question, answered at once and never stored.

Every bearer token of a mesh is a cluster admin (the `system:masters` group), as the admin
credentials of a kubeadm cluster are, so every question about what it may do is answered yes:

* `SelfSubjectAccessReview` and `SubjectAccessReview` (`kubectl auth can-i`): allowed;
* `SelfSubjectRulesReview` (`kubectl auth can-i --list`): every verb on every resource and URL;
* `SelfSubjectReview` (`kubectl auth whoami`): the admin user and its groups.

The answer is the request with its `status` filled in, as kube-apiserver answers (201).

kubectl 1.30+ sends these reviews as protobuf (`application/vnd.kubernetes.protobuf`); the
serving layer decodes them as it does every built-in kind (`apiserver.protobuf`), so `answer`
sees the JSON form either way. The answer goes back as JSON, which client-go accepts.
"""

from __future__ import annotations

from typing import Any, Final

from kubemesh.apiserver import errors
from kubemesh.services.model.kinds import (
    SELFSUBJECTACCESSREVIEWS,
    SELFSUBJECTREVIEWS,
    SELFSUBJECTRULESREVIEWS,
    SUBJECTACCESSREVIEWS,
    Kind,
    Obj,
)

ADMIN_USER: Final = "kubernetes-admin"
ADMIN_GROUPS: Final = ("system:masters", "system:authenticated")
_REASON: Final = "kubemesh: every token of this mesh is a cluster admin (system:masters)"


def answer(kind: Kind, body: Any) -> Obj:
    """The review `body` with its status; 400 for a body that is no object."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"a {kind.kind} must be an object")
    raw_spec = body.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    out: Obj = {"kind": kind.kind, "apiVersion": kind.api_version,
                "metadata": {"creationTimestamp": None, **(body.get("metadata") or {})}}
    if kind in (SELFSUBJECTACCESSREVIEWS, SUBJECTACCESSREVIEWS):
        if not (spec.get("resourceAttributes") or spec.get("nonResourceAttributes")):
            raise errors.StatusError(422, "Invalid", f"{kind.kind}.authorization.k8s.io \"\" is invalid: "
                                     "spec.resourceAttributes: Invalid value: \"null\": exactly one of "
                                     "nonResourceAttributes or resourceAttributes must be specified")
        out["spec"] = spec
        out["status"] = {"allowed": True, "reason": _REASON}
    elif kind is SELFSUBJECTRULESREVIEWS:
        out["spec"] = spec
        out["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    elif kind is SELFSUBJECTREVIEWS:
        out["status"] = {"userInfo": {"username": ADMIN_USER, "groups": list(ADMIN_GROUPS)}}
    else:
        raise errors.method_not_allowed(f"create is not supported on {kind.resource}")
    return out
