"""Reviews: the kinds a client creates to ask the apiserver a question, answered at once and never stored.

Each is answered by the RBAC authorizer (`kubemesh.apiserver.rbac`) for the user who asks, or
for the user a SubjectAccessReview names:

* `SelfSubjectAccessReview` and `SubjectAccessReview` (`kubectl auth can-i`): allowed or not,
  with the binding and role that allow it as the reason (upstream's RBAC wording);
* `SelfSubjectRulesReview` (`kubectl auth can-i --list`): the rules the user holds in the
  namespace asked about;
* `SelfSubjectReview` (`kubectl auth whoami`): the user, its uid, groups and extra.

The answer is the request with its `status` filled in, as kube-apiserver answers (201).

kubectl 1.30+ sends these reviews as protobuf (`application/vnd.kubernetes.protobuf`); the
serving layer decodes them as it does every built-in kind (`apiserver.protobuf`), so `answer`
sees the JSON form either way. The answer goes back as JSON, which client-go accepts.
"""

from __future__ import annotations

from typing import Any

from kubemesh.apiserver import errors
from kubemesh.apiserver.rbac import Attributes, Authorizer, User
from kubemesh.services.model.kinds import (
    SELFSUBJECTACCESSREVIEWS,
    SELFSUBJECTREVIEWS,
    SELFSUBJECTRULESREVIEWS,
    SUBJECTACCESSREVIEWS,
    Kind,
    Obj,
)


def _attributes(spec: dict[str, Any]) -> Attributes:
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(verb=str(res.get("verb") or ""), group=str(res.get("group") or ""),
                          resource=str(res.get("resource") or ""), subresource=str(res.get("subresource") or ""),
                          namespace=str(res.get("namespace") or ""), name=str(res.get("name") or ""))
    non = spec.get("nonResourceAttributes") or {}
    return Attributes(verb=str(non.get("verb") or ""), path=str(non.get("path") or ""), resource_request=False)


def _subject(spec: dict[str, Any]) -> User:
    extra = spec.get("extra") if isinstance(spec.get("extra"), dict) else {}
    return User(name=str(spec.get("user") or ""), groups=tuple(str(g) for g in spec.get("groups") or []),
                uid=str(spec.get("uid") or ""), extra={str(k): tuple(str(x) for x in v or [])
                                                       for k, v in (extra or {}).items()})


def answer(kind: Kind, body: Any, *, user: User, authorizer: Authorizer) -> Obj:
    """The review `body` with its status, as `user` asks it; 400 for a body that is no object."""
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
        subject = user if kind is SELFSUBJECTACCESSREVIEWS else _subject(spec)
        if kind is SUBJECTACCESSREVIEWS and not (subject.name or subject.groups):
            raise errors.StatusError(422, "Invalid", 'SubjectAccessReview.authorization.k8s.io "" is invalid: '
                                     'spec.user: Invalid value: "": at least one of user or group must be specified')
        out["spec"] = spec
        allowed, reason = authorizer.decide(subject, _attributes(spec))
        status: Obj = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        out["status"] = status
    elif kind is SELFSUBJECTRULESREVIEWS:
        out["spec"] = spec
        rules = authorizer.rules_of(user, str(spec.get("namespace") or ""))
        out["status"] = {
            "resourceRules": [r.document() for r in rules if not r.urls],
            "nonResourceRules": [r.document() for r in rules if r.urls],
            "incomplete": False,
        }
    elif kind is SELFSUBJECTREVIEWS:
        out["status"] = {"userInfo": user.info()}
    else:
        raise errors.method_not_allowed(f"create is not supported on {kind.resource}")
    return out
