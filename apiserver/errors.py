"""metav1.Status errors: every failure the apiserver reports, in the shape clients parse.

Handlers raise `StatusError`; the HTTP layer renders it with its code. kubectl prints
`Error from server (<reason>): <message>` and the Python clients raise typed exceptions
from the same body, so reason, code and `details.kind` (the resource plural) matter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kubemesh.services.model.kinds import Kind, Obj


class StatusError(Exception):
    """A request that ends in a metav1.Status failure."""

    def __init__(self, code: int, reason: str, message: str, *, details: Obj | None = None,
                 retry_after: int | None = None, metadata: Obj | None = None) -> None:
        super().__init__(message)
        self.metadata = metadata
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> Obj:
        """The Status object for the response body, its fields in kube-apiserver's order.

        `kind, apiVersion, metadata, status, message, reason, details, code`; in `details`:
        `name, group` (left out for the core group), `kind` (the resource), `uid, causes,
        retryAfterSeconds`, as Go's encoder writes metav1.Status.
        """
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": dict(self.metadata or {}), "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # StatusReasonUnknown ("") is left out, as Go's omitempty does
            body["reason"] = self.reason
        details = dict(self.details) if self.details else {}
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if not details.get("group"):
            details.pop("group", None)
        if isinstance(details.get("causes"), list):
            details["causes"] = [{k: c[k] for k in _CAUSE_ORDER if k in c} if isinstance(c, dict) else c
                                 for c in details["causes"]]
        if details:
            body["details"] = {k: details[k] for k in _DETAILS_ORDER if k in details}
        body["code"] = self.code
        return body


_DETAILS_ORDER: Final = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_ORDER: Final = ("reason", "message", "field")


def success(code: int = 200, *, details: Obj | None = None) -> Obj:
    """A Status of success (binding, eviction, deletecollection)."""
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        body["details"] = details
    return body


def _details(kind: Kind | None, name: str | None) -> Obj:
    out: Obj = {}
    if name is not None:
        out["name"] = name
    if kind is not None:
        out["group"] = kind.group
        out["kind"] = kind.plural
    return out


def not_found(kind: Kind, name: str) -> StatusError:
    """404: `pods "x" not found`."""
    return StatusError(404, "NotFound", f'{kind.resource} "{name}" not found', details=_details(kind, name))


def namespace_not_found(namespace: str) -> StatusError:
    """404 for a missing namespace (creating into it)."""
    return StatusError(404, "NotFound", f'namespaces "{namespace}" not found',
                       details={"name": namespace, "kind": "namespaces"})


def already_exists(kind: Kind, name: str) -> StatusError:
    """409 AlreadyExists."""
    return StatusError(409, "AlreadyExists", f'{kind.resource} "{name}" already exists',
                       details=_details(kind, name))


def conflict(kind: Kind, name: str, why: str | None = None) -> StatusError:
    """409 Conflict: the optimistic-concurrency failure message clients recognise."""
    msg = why or "the object has been modified; please apply your changes to the latest version and try again"
    return StatusError(409, "Conflict", f'Operation cannot be fulfilled on {kind.resource} "{name}": {msg}',
                       details=_details(kind, name))


def invalid(kind: Kind, name: str, causes: list[Obj]) -> StatusError:
    """422 Invalid with field causes.

    Worded as kube-apiserver: the qualified kind (`Deployment.apps`, `Widget.example.com`),
    and the causes in brackets when there are several.
    """
    parts = [f"{c.get('field', '')}: {c.get('message', '')}" if c.get("field") else str(c.get("message", ""))
             for c in causes]
    text = parts[0] if len(parts) == 1 else f"[{', '.join(parts)}]"
    details = _details(kind, name)
    details["kind"] = kind.kind
    details["causes"] = causes
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {text}', details=details)


def options_invalid(options_kind: str, causes: list[Obj]) -> StatusError:
    """422 for a request's options (`CreateOptions`, `PatchOptions`...) as upstream words it.

    `CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ...`: the options have no
    name, their group is meta.k8s.io.
    """
    parts = [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes]
    text = parts[0] if len(parts) == 1 else f"[{', '.join(parts)}]"
    return StatusError(422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: {text}',
                       details={"group": "meta.k8s.io", "kind": options_kind, "causes": causes})


def bad_request(message: str) -> StatusError:
    """400 BadRequest."""
    return StatusError(400, "BadRequest", message)


def gone(message: str) -> StatusError:
    """410 Expired: a resourceVersion or continue token older than the server keeps."""
    return StatusError(410, "Expired", message)


def expired_continue(message: str, *, continue_token: str) -> StatusError:
    """410 Expired for a continue token whose revision is gone, with the token that goes on inconsistently."""
    return StatusError(410, "Expired", message, metadata={"continue": continue_token})


def too_large_resource_version(requested: int, current: int) -> StatusError:
    """504 Timeout: a list asked to be read at a revision the store has not reached (clients retry)."""
    return StatusError(504, "Timeout", f"Too large resource version: {requested}, current: {current}",
                       details={"causes": [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}]},
                       retry_after=1)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> StatusError:
    """405 MethodNotAllowed."""
    return StatusError(405, "MethodNotAllowed", message)


def unsupported_media_type(accepted: Sequence[str]) -> StatusError:
    """415 UnsupportedMediaType, listing the media types the request could have used (as upstream)."""
    return StatusError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                                    f"accepted media types include: {', '.join(accepted)}")


def forbidden(kind: Kind | None, name: str, message: str) -> StatusError:
    """403 Forbidden."""
    return StatusError(403, "Forbidden", message, details=_details(kind, name))


def unknown_resource() -> StatusError:
    """404 for a path that names no served resource."""
    return StatusError(404, "NotFound", "the server could not find the requested resource")


def too_large(limit: int) -> StatusError:
    """413 RequestEntityTooLarge."""
    return StatusError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def internal(message: str) -> StatusError:
    """500 InternalError: the message prefixed, and the bare message as the one cause (upstream's NewInternalError)."""
    return StatusError(500, "InternalError", f"Internal error occurred: {message}",
                       details={"causes": [{"message": message}]})


def storage_failure(message: str) -> StatusError:
    """500 for a write the store could not make durable: its error as the message, no reason.

    As kube-apiserver answers a storage error it has no Status for (an etcd failure such as
    `etcdserver: request timed out`): code 500, reason Unknown (left out of the body), the
    error's text as the message; kubectl prints `Error from server: <message>`.
    """
    return StatusError(500, "", message)
