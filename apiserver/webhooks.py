"""Admission webhooks called as kube-apiserver calls them: AdmissionReview v1 over HTTPS.

A write of any kind (custom resources included) is offered, in this order, to the webhooks of
every MutatingWebhookConfiguration that match it, then validated by the registry as usual, then
offered to the webhooks of every ValidatingWebhookConfiguration that match it, and only then
committed. A webhook **matches** a request when one of its `rules` names the operation
(CREATE, UPDATE, DELETE; `*` for all), the API group, the version and the resource (`*`,
`pods/status` for a subresource, `*/status`, `pods/*`) within its `scope` (Cluster, Namespaced
or `*`), when its `namespaceSelector` selects the object's namespace (a Namespace: its own
labels; cluster-scoped objects always pass) and its `objectSelector` selects the object (or,
for a delete, the old one). Under `matchPolicy: Equivalent` (the default) a rule also matches
the same resource at another served version of its group (HPA autoscaling/v1 and v2, the
versions of a CRD); the object is sent as the request has it.

**The call.** `clientConfig.url`, or `clientConfig.service` resolved to the loopback address
(`https://127.0.0.1:<port><path>`, default port 443, with the TLS server name
`<name>.<namespace>.svc` that the webhook's certificate carries: kubemesh runs no Service
network), trusted with `caBundle` (else the system roots), with `?timeout=<timeoutSeconds>s`
appended and `timeoutSeconds` (default 10) as the deadline. The request is an AdmissionReview
v1 with a fresh uid, kind/resource/requestKind/requestResource, subResource, name, namespace,
operation, userInfo, object/oldObject, dryRun and options.

**The answer.** `allowed: false` is a rejection worded as upstream's (`<resource> "<name>" is
forbidden: admission webhook "<webhook>" denied the request: <message>`, code 403 unless the
webhook gives one); a mutating webhook's base64 JSONPatch is applied to the object; `warnings`
reach the client as `Warning` headers. A webhook that cannot be called, times out, answers
something other than an AdmissionReview with its request's uid, or sends a patch that does not
apply is a failure: under `failurePolicy: Fail` (the default) the request is refused with a 500
(`Internal error occurred: failed calling webhook "<webhook>": ...`), under `Ignore` it goes on
as if the webhook had allowed it. A dry run is refused (400) by a webhook whose `sideEffects`
is neither None nor NoneOnDryRun, as upstream.

**Faults and the record.** The chaos front door's webhook faults (`webhook.latency`,
`webhook.error`, `webhook.unreachable`; `kubemesh.apiserver.chaos.webhookfaults`) act on the
calls through `faults`: a latency is spent inside the call's deadline (so it times a call out
exactly as a slow webhook would), an error is the webhook answering HTTP 500, unreachable is a
refused connection; `failurePolicy` then decides, as for a real failure. Every call is recorded
through `record` (the apiserver's history: type `webhook`, with the configuration, webhook,
operation, resource, key, wall-clock latency and outcome: allowed, denied, patched, failed or
ignored).

Not yet: `reinvocationPolicy: IfNeeded`, `matchConditions` (CEL), `admissionReviewVersions`
other than v1, and webhooks on the scale, eviction and binding subresources.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ssl
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

import aiohttp
import orjson
import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.patching import PatchError, apply_json_patch
from kubemesh.apiserver.storage import Store
from kubemesh.services.model.kinds import (
    MUTATINGWEBHOOKCONFIGURATIONS,
    NAMESPACES,
    VALIDATINGWEBHOOKCONFIGURATIONS,
    Kind,
    KindTable,
    Obj,
    labels_of,
)
from kubemesh.services.model.selectors import label_selector_from_dict

_log = structlog.get_logger("apiserver.webhooks")

MAX_RESPONSE_BYTES: Final = 3 * 1024 * 1024
"""An AdmissionReview answer larger than this is a failed call (a misbehaving webhook)."""
DEFAULT_TIMEOUT: Final = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Attributes:
    """What is being admitted: upstream's admission.Attributes."""

    kind: Kind
    operation: str
    """CREATE, UPDATE or DELETE."""
    namespace: str | None
    name: str
    subresource: str | None = None
    obj: Obj | None = None
    old: Obj | None = None
    dry_run: bool = False
    user: str = "kubemesh-admin"
    user_info: Obj | None = None
    """The request's `userInfo` (username, uid, groups, extra) as authentication found it; None: `user`
    as a member of system:masters (the apiserver's own writes)."""
    options: Obj = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFault:
    """What a chaos fault does to one webhook call."""

    effect: Literal["latency", "error", "unreachable"]
    delay: float = 0.0
    """For latency: cluster seconds spent before the call (inside its deadline)."""
    code: int = 500
    """For error: the HTTP status the webhook answers."""


class CallFaults(Protocol):
    """The chaos engine's webhook faults, as the dispatcher asks them."""

    def for_call(self, *, configuration: str, webhook: str, attrs: Attributes) -> list[CallFault]:
        """The effects of the active faults that hit this call (each fault's probability drawn once)."""
        ...


class CallRecorder(Protocol):
    """Where every webhook call is recorded (the apiserver's history)."""

    def __call__(self, **fields: Any) -> object:
        """Record one call."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """A mutating pass's result: the object as patched, and the webhooks' warnings."""

    obj: Obj | None
    warnings: list[str]


class Webhooks:
    """Finds the webhooks that match a request and calls them (see the module docstring)."""

    def __init__(self, *, store: Store, kinds: KindTable, sleep: Callable[[float], Awaitable[None]],
                 wall: Callable[[], float], record: CallRecorder | None = None) -> None:
        self.store = store
        self.kinds = kinds
        self.sleep = sleep
        """Sleeps cluster seconds (an injected latency)."""
        self.wall = wall
        """Monotonic wall seconds (a call's latency in the record)."""
        self.record = record
        self.faults: CallFaults | None = None
        """Set by the chaos front door when it is installed."""
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    def configured(self) -> bool:
        """Whether any webhook configuration exists (if not, writes skip admission entirely)."""
        store = self.store
        return bool(store.count(MUTATINGWEBHOOKCONFIGURATIONS) or store.count(VALIDATINGWEBHOOKCONFIGURATIONS))

    async def close(self) -> None:
        """Close the HTTP client (the server's shutdown)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the two passes -------------------------------------------------------------------------

    async def mutate(self, attrs: Attributes) -> Verdict:
        """Offer the object to every matching mutating webhook, in order; the object as they patched it."""
        obj = attrs.obj
        warnings: list[str] = []
        for config_name, hook in self._matching(MUTATINGWEBHOOKCONFIGURATIONS, attrs):
            current = Attributes(**{**_fields(attrs), "obj": obj})
            answer = await self._call(config_name, hook, current)
            if answer is None:
                continue
            warnings += answer.get("warnings") or []
            patch = answer.get("patch")
            if patch and obj is not None:
                obj = self._patched(hook, current, obj, patch, answer.get("patchType"))
        return Verdict(obj, warnings)

    async def validate(self, attrs: Attributes) -> list[str]:
        """Offer the object to every matching validating webhook (concurrently, as upstream); their warnings."""
        matching = list(self._matching(VALIDATINGWEBHOOKCONFIGURATIONS, attrs))
        answers = await asyncio.gather(*(self._call(c, h, attrs) for c, h in matching), return_exceptions=True)
        warnings: list[str] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            if answer is not None:
                warnings += answer.get("warnings") or []
        return warnings

    # -- matching -------------------------------------------------------------------------------

    def _matching(self, config_kind: Kind, attrs: Attributes) -> Iterable[tuple[str, Obj]]:
        if attrs.kind in (MUTATINGWEBHOOKCONFIGURATIONS, VALIDATINGWEBHOOKCONFIGURATIONS):
            return  # never called for their own configurations (a broken webhook could not be removed)
        configs = sorted(self.store.items(config_kind), key=lambda c: str(c["metadata"]["name"]))
        for config in configs:
            for hook in config.get("webhooks") or []:
                if isinstance(hook, dict) and self._matches(hook, attrs):
                    yield str(config["metadata"]["name"]), hook

    def _matches(self, hook: Obj, attrs: Attributes) -> bool:
        equivalent = (hook.get("matchPolicy") or "Equivalent") == "Equivalent"
        if not any(_rule_matches(rule, attrs, equivalent=equivalent) for rule in hook.get("rules") or []
                   if isinstance(rule, dict)):
            return False
        target = attrs.obj if attrs.obj is not None else attrs.old
        if attrs.kind.namespaced or attrs.kind is NAMESPACES:
            if attrs.kind is NAMESPACES:
                ns_labels = labels_of(target or {})
            else:
                ns_obj = self.store.get(NAMESPACES, attrs.namespace or "")
                ns_labels = labels_of(ns_obj or {})
            if not label_selector_from_dict(hook.get("namespaceSelector") or {}).matches(ns_labels):
                return False
        object_selector = label_selector_from_dict(hook.get("objectSelector") or {})
        candidates = [o for o in (attrs.obj, attrs.old) if o is not None]
        return any(object_selector.matches(labels_of(o)) for o in candidates) if candidates else True

    # -- calling --------------------------------------------------------------------------------

    async def _call(self, config_name: str, hook: Obj, attrs: Attributes) -> Obj | None:
        """The webhook's AdmissionReview response (allowed), or None when a failure is ignored; raises a refusal."""
        name = str(hook.get("name") or config_name)
        if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{name}" does not support dry run')
        started = self.wall()
        try:
            response = await self._post(config_name, name, hook, attrs)
        except _CallFailed as exc:
            ignored = (hook.get("failurePolicy") or "Fail") == "Ignore"
            self._record(config_name, name, attrs, started, "ignored" if ignored else "failed", error=str(exc))
            if ignored:
                _log.warning("webhook call failed; ignored (failurePolicy: Ignore)", webhook=name, error=str(exc))
                return None
            raise errors.internal(f'failed calling webhook "{name}": {exc}') from None
        if not response.get("allowed"):
            self._record(config_name, name, attrs, started, "denied")
            raise _denied(attrs, name, response.get("status"))
        self._record(config_name, name, attrs, started, "patched" if response.get("patch") else "allowed")
        return response

    def _record(self, configuration: str, webhook: str, attrs: Attributes, started: float, outcome: str,
                **extra: Any) -> None:
        if self.record is None:
            return
        key = f"{attrs.namespace}/{attrs.name}" if attrs.kind.namespaced and attrs.namespace else attrs.name
        resource = f"{attrs.kind.plural}/{attrs.subresource}" if attrs.subresource else attrs.kind.plural
        self.record(configuration=configuration, webhook=webhook, operation=attrs.operation, resource=resource,
                    key=key, latency=round(self.wall() - started, 6), outcome=outcome, **extra)

    async def _post(self, config_name: str, name: str, hook: Obj, attrs: Attributes) -> Obj:
        timeout = hook.get("timeoutSeconds") or DEFAULT_TIMEOUT
        client = hook.get("clientConfig") or {}
        url, server_name = _target(client, timeout)
        faults = self.faults.for_call(configuration=config_name, webhook=name, attrs=attrs) if self.faults else []
        uid = str(uuid.uuid4())
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": _request(uid, attrs)}
        try:
            ssl_context = self._context(client.get("caBundle"))
        except (ValueError, ssl.SSLError) as exc:
            raise _CallFailed(f"failed to call webhook: invalid caBundle: {exc}") from None
        session = self._session_now()
        try:
            async with asyncio.timeout(float(timeout)):
                for fault in faults:  # chaos: what a slow, broken or unreachable webhook would do
                    if fault.effect == "latency":
                        await self.sleep(fault.delay)
                    elif fault.effect == "unreachable":
                        raise _CallFailed(f'failed to call webhook: Post "{url}": dial tcp: connect: '
                                          "connection refused")
                    else:
                        raise _CallFailed(f"failed to call webhook: the server responded with the status code "
                                          f"{fault.code} but did not return more information")
                async with session.post(url, data=orjson.dumps(review), ssl=ssl_context,
                                        server_hostname=server_name, allow_redirects=False,
                                        headers={"Content-Type": "application/json",
                                                 "Accept": "application/json"}) as resp:
                    status = resp.status
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in resp.content.iter_chunked(1 << 16):
                        size += len(chunk)
                        if size > MAX_RESPONSE_BYTES:  # read no further: a webhook must not grow our memory
                            raise _CallFailed(f"failed to call webhook: the response is larger than "
                                              f"{MAX_RESPONSE_BYTES} bytes")
                        chunks.append(chunk)
                    body = b"".join(chunks)
        except TimeoutError:
            raise _CallFailed(f'failed to call webhook: Post "{url}": context deadline exceeded') from None
        except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise _CallFailed(f'failed to call webhook: Post "{url}": {exc}') from None
        if not 200 <= status < 300:
            raise _CallFailed(f"failed to call webhook: the server responded with the status code {status} "
                              "but did not return more information")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise _CallFailed("failed to call webhook: the response is not an AdmissionReview (not JSON)") from None
        response = doc.get("response") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview" or not isinstance(response, dict):
            raise _CallFailed("failed to call webhook: the response is not an AdmissionReview with a response")
        if response.get("uid") != uid:
            raise _CallFailed(f"expected response.uid=\"{uid}\", got \"{response.get('uid')}\"")
        return response

    def _patched(self, hook: Obj, attrs: Attributes, obj: Obj, patch: Any, patch_type: Any) -> Obj:
        name = str(hook.get("name") or "")
        try:
            if patch_type not in (None, "JSONPatch"):
                raise ValueError(f"unsupported patch type {patch_type!r}")
            ops = orjson.loads(base64.b64decode(str(patch), validate=True))
            patched = apply_json_patch(obj, ops)
            if not isinstance(patched, dict):
                raise ValueError("the patch did not leave an object")
            return patched
        except (ValueError, binascii.Error, PatchError, orjson.JSONDecodeError) as exc:
            if (hook.get("failurePolicy") or "Fail") == "Ignore":
                _log.warning("webhook patch failed; ignored (failurePolicy: Ignore)", webhook=name, error=str(exc))
                return obj
            raise errors.internal(f'failed calling webhook "{name}": the patch does not apply: {exc}') from None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
        return self._session

    def _context(self, ca_bundle: Any) -> ssl.SSLContext:
        key = str(ca_bundle or "")
        ctx = self._contexts.get(key)
        if ctx is None:
            if key:  # only the bundle is trusted, as upstream (not the system roots, nor SSL_CERT_FILE's CA)
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.load_verify_locations(cadata=base64.b64decode(key, validate=True).decode())
            else:
                ctx = ssl.create_default_context()
            self._contexts[key] = ctx
        return ctx


class _CallFailed(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides)."""


def _fields(attrs: Attributes) -> dict[str, Any]:
    return {f: getattr(attrs, f) for f in Attributes.__dataclass_fields__}


def _rule_matches(rule: Obj, attrs: Attributes, *, equivalent: bool) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and attrs.operation not in ops:
        return False
    kind = attrs.kind
    if not _names(rule.get("apiGroups"), kind.group):
        return False
    if not equivalent and not _names(rule.get("apiVersions"), kind.version):
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and kind.namespaced) or (scope == "Namespaced" and not kind.namespaced):
        return False
    wanted = f"{kind.plural}/{attrs.subresource}" if attrs.subresource else kind.plural
    for resource in rule.get("resources") or []:
        if resource in ("*/*", wanted):
            return True
        if resource == "*" and not attrs.subresource:
            return True
        main, _, sub = str(resource).partition("/")
        if sub and attrs.subresource and (main in ("*", kind.plural)) and sub in ("*", attrs.subresource):
            return True
    return False


def _names(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def _target(client: Obj, timeout: Any) -> tuple[str, str | None]:
    """(URL to post to, TLS server name) for a webhook's clientConfig."""
    suffix = f"timeout={int(timeout)}s"
    if client.get("url"):
        url = str(client["url"])
        return f"{url}{'&' if '?' in url else '?'}{suffix}", None
    service = client.get("service") or {}
    path = str(service.get("path") or "/")
    port = int(service.get("port") or 443)
    host = f"{service.get('name')}.{service.get('namespace')}.svc"
    return f"https://127.0.0.1:{port}{path}{'&' if '?' in path else '?'}{suffix}", host


def _request(uid: str, attrs: Attributes) -> Obj:
    kind = attrs.kind
    gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
    gvr = {"group": kind.group, "version": kind.version, "resource": kind.plural}
    request: Obj = {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                    "name": attrs.name, "operation": attrs.operation,
                    "userInfo": attrs.user_info or {"username": attrs.user,
                                                    "groups": ["system:masters", "system:authenticated"]},
                    "object": attrs.obj, "oldObject": attrs.old, "dryRun": attrs.dry_run,
                    "options": attrs.options or None}
    if attrs.subresource:
        request["subResource"] = attrs.subresource
    if kind.namespaced and attrs.namespace:
        request["namespace"] = attrs.namespace
    return request


def _denied(attrs: Attributes, webhook: str, status: Any) -> errors.StatusError:
    """A webhook's rejection, worded as kube-apiserver words it."""
    result = status if isinstance(status, dict) else {}
    raw_code = result.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) and raw_code else 403
    message = str(result.get("message") or "")
    reason = str(result.get("reason") or "")
    denied_by = f'admission webhook "{webhook}" denied the request'
    text = f"{denied_by}: {message}" if message else f"{denied_by}: {reason}" if reason else \
        f"{denied_by} without explanation"
    name = attrs.name or "Unknown"
    resource = attrs.kind.resource
    prefix = "Internal error occurred" if code == 500 else f'{resource} "{name}" is forbidden'
    details = result.get("details") if isinstance(result.get("details"), dict) else None
    if details is None:
        details = ({"causes": [{"message": text}]} if code == 500 else
                   {"name": name, "group": attrs.kind.group, "kind": attrs.kind.plural})
    return errors.StatusError(code, reason or ("InternalError" if code == 500 else "Forbidden"),
                              f"{prefix}: {text}", details=details)
