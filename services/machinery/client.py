"""The asynchronous API client every component talks to the apiserver through.

One `ApiClient` is one identity: every request carries `X-Kubemesh-Component`,
`X-Kubemesh-Instance` and a User-Agent `kubemesh-<component>/<version> (<instance>)`, so that
the apiserver can log it, record it in the history and match chaos rules against it.

Guarantees and choices:

* **Encodings.** Bodies and watch frames are msgpack (components) or JSON (anything else),
  see `kubemesh.services.model.codec`. Responses are decoded by their own `Content-Type`, so a server that
  answers JSON to a msgpack client is still understood. Patch bodies are always JSON: their
  media type names the patch flavour.
* **Errors are typed.** A non-2xx answer raises an `ApiError` subclass chosen by HTTP code and
  Status reason (`NotFoundError`, `ConflictError`, `AlreadyExistsError`, ...). When no answer
  came, `ApiConnectionError` is raised; its `maybe_applied` says whether the request may have
  reached the server (a timed-out write has an unknown outcome).
* **Retries follow client-go.** Reads (GET) retry on connection errors, 429 and 5xx. Writes
  retry on 429 (the server refused to process them) and when the connection could not be
  established (the request never left this process); a write that timed out, was reset or got
  a 5xx is *not* retried, because it may have been applied. Backoff is exponential with
  jitter drawn from the injected `rng`; a 429's `Retry-After` replaces the computed delay.
* **Backoff is wall time.** Retrying is a network concern: a server that needs half a second
  to recover needs it whatever the cluster clock's rate is. The delays are therefore wall
  seconds. An optional `clock` only supplies the timer (the client sleeps `clock.sleep(d *
  clock.rate)`, i.e. `d` wall seconds on a `ClusterClock`), so that tests can drive retries
  from a `ManualClock`; without a clock the client uses `asyncio.sleep`.
* **Watches** (`watch()`) are async iterators over `WatchEvent`s. The client reads the socket
  only as fast as the consumer iterates: a slow consumer leaves bytes in the kernel's socket
  buffers (TCP backpressure, then the apiserver closes a watcher that cannot keep up), never in
  an unbounded buffer here. An `ERROR` event (for example a 410 "too old resource version"
  Status) is yielded as a `WatchEvent` of type `ERROR`; an HTTP error at request time raises
  (`GoneError` for 410). The watch itself is never retried: that is the reflector's job
  (`kubemesh.services.machinery.informing`), which knows from where to resume.
* **Connections.** By default each client owns a connector without a connection limit (each
  long-lived watch holds one connection; a limit would let watches starve requests). A caller
  may pass a shared `aiohttp.BaseConnector` instead (the client then does not close it), so
  that a kubelet hosting thousands of nodes gives each node its own client (own timeouts, own
  retry state) over one connection pool. **A shared connector must have no connection limit**
  (`aiohttp.TCPConnector(limit=0, limit_per_host=0)`): all nodes talk to the same host, and
  with a limit one node's stalled request would hold a slot and delay every other node's.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import importlib.metadata
import random
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, cast

import aiohttp
import msgpack
import structlog

from kubemesh.services.machinery.certs import client_context
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model import codec
from kubemesh.services.model.codec import Encoding
from kubemesh.services.model.kinds import Kind, Obj, name_of, namespace_of

log = structlog.get_logger("kubemesh.services.machinery.client")

PatchType = Literal["merge", "strategic", "json", "apply"]
"""Patch flavours, as Kubernetes names them by media type."""

PATCH_MEDIA_TYPES: Final[Mapping[PatchType, str]] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
EVENT_TYPES: Final[frozenset[str]] = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

_IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def _package_version() -> str:
    try:
        return importlib.metadata.version("kubemesh")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


VERSION: Final = _package_version()


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream."""

    type: EventType
    """ADDED, MODIFIED, DELETED, BOOKMARK (only `metadata.resourceVersion` is meaningful) or
    ERROR (the object is a `metav1.Status`)."""
    object: Obj


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySettings:
    """How the client retries failed requests (see the module docstring for which ones)."""

    max_attempts: int = 5
    """Attempts in total, the first included; 1 disables retries."""
    base_backoff: float = 0.1
    """Delay before the first retry, in wall seconds; doubled on each further retry."""
    max_backoff: float = 5.0
    """Upper bound of the computed delay, in wall seconds."""
    jitter: float = 0.5
    """Fraction of each delay removed at random (0 = none, 1 = anywhere in [0, delay]), so
    that clients that failed together do not retry together."""
    max_retry_after: float = 30.0
    """Upper bound on a server's Retry-After, in wall seconds."""

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The delay before retry number `retry` (1 for the first retry)."""
        delay = min(self.max_backoff, self.base_backoff * (2.0 ** max(0, retry - 1)))
        return delay * (1.0 - self.jitter * rng.random())


# ---------------------------------------------------------------------------------------------
# Errors.


class ApiError(Exception):
    """The apiserver answered with an error: a `metav1.Status`.

    Attributes:
        status: The Status object as received (or synthesized when the body was not one).
        code: The HTTP status code (0 when no answer came).
        reason: The Status reason (`NotFound`, `Conflict`, `Expired`, ...), or "".
        message: The Status message.
        retry_after: Seconds the server asked the client to wait (429), if any.
    """

    def __init__(self, status: Obj, *, retry_after: float | None = None) -> None:
        self.status: Obj = status
        code = status.get("code")
        self.code: int = code if isinstance(code, int) else 0
        self.reason: str = str(status.get("reason") or "")
        self.message: str = str(status.get("message") or "")
        details = status.get("details")
        if retry_after is None and isinstance(details, dict):
            ras = details.get("retryAfterSeconds")
            if isinstance(ras, int | float) and ras > 0:
                retry_after = float(ras)
        self.retry_after: float | None = retry_after
        super().__init__(f"{self.code} {self.reason}: {self.message}" if self.reason
                         else f"{self.code}: {self.message}")

    @staticmethod
    def from_status(status: Obj, *, http_status: int | None = None,
                    retry_after: float | None = None) -> ApiError:
        """The `ApiError` subclass for a Status (by HTTP code, else the Status code)."""
        code = http_status if http_status is not None else status.get("code")
        if not isinstance(code, int):
            code = 500
        if not isinstance(status.get("code"), int):
            status = {**status, "code": code}
        cls = _error_class(code, str(status.get("reason") or ""))
        return cls(status, retry_after=retry_after)


class BadRequestError(ApiError):
    """400 BadRequest."""


class UnauthorizedError(ApiError):
    """401 Unauthorized."""


class ForbiddenError(ApiError):
    """403 Forbidden."""


class NotFoundError(ApiError):
    """404 NotFound."""


class ConflictError(ApiError):
    """409 Conflict: a stale resourceVersion (optimistic concurrency)."""


class AlreadyExistsError(ApiError):
    """409 AlreadyExists: create of an object that exists (not a subclass of ConflictError)."""


class GoneError(ApiError):
    """410 Gone/Expired: the resourceVersion is older than the server's window; relist."""


class InvalidError(ApiError):
    """422 Invalid: validation failed (`status["details"]["causes"]` says why)."""


class TooManyRequestsError(ApiError):
    """429 TooManyRequests (still raised once the retries are exhausted)."""


class ServerError(ApiError):
    """5xx: the server failed; for a write the outcome is unknown."""


class ApiConnectionError(ApiError):
    """No answer came: connection refused, reset, or timed out.

    Attributes:
        maybe_applied: False only when the request certainly never reached the server
            (the connection could not be established); True when it may have been applied.
    """

    def __init__(self, message: str, *, maybe_applied: bool) -> None:
        super().__init__({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "reason": "ConnectionError", "message": message, "code": 0})
        self.maybe_applied = maybe_applied


_BY_CODE: Final[Mapping[int, type[ApiError]]] = {
    400: BadRequestError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
    409: ConflictError, 410: GoneError, 422: InvalidError, 429: TooManyRequestsError,
}


def _error_class(code: int, reason: str) -> type[ApiError]:
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExistsError
    if code >= 500:
        return ServerError
    return _BY_CODE.get(code, ApiError)


def _is_status(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == "Status"


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: not used by Kubernetes servers
    return seconds if seconds >= 0 else None


def _decode_body(data: bytes, content_type: str | None) -> Any:
    """Decode a response body by its media type (JSON when it names neither encoding)."""
    if not data:
        return None
    return codec.decode(data, codec.encoding_of(content_type) or "json")


def _error_from_response(http_status: int, data: bytes, content_type: str | None,
                         retry_after: str | None) -> ApiError:
    try:
        body = _decode_body(data, content_type)
    except codec.DecodeError:
        body = None
    if _is_status(body):
        status: Obj = body
    else:
        text = data[:512].decode("utf-8", "replace").strip()
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": text or f"the server responded with HTTP {http_status}", "code": http_status}
    return ApiError.from_status(status, http_status=http_status,
                                retry_after=_parse_retry_after(retry_after))


# ---------------------------------------------------------------------------------------------
# The client.


def make_connector(*, ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None) -> aiohttp.TCPConnector:
    """An unlimited connector, trusting `ssl_context` (or `ca_file`) for https when given.

    Unlimited on purpose: a kubelet shares one connector among thousands of node clients, and
    a connection limit would let one node's stalled request delay another's.
    """
    ssl_ctx: ssl.SSLContext | bool = ssl_context or (client_context(ca_file) if ca_file else True)
    return aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=ssl_ctx)


class ApiClient:
    """An identified, retrying client of the kubemesh apiserver (Kubernetes REST API)."""

    def __init__(self, base_url: str, *, component: str, instance: str, token: str | None = None,
                 encoding: Encoding = "msgpack", timeout: float = 30.0,
                 retry: RetrySettings | None = None, connector: aiohttp.BaseConnector | None = None,
                 rng: random.Random | None = None, clock: Clock | None = None,
                 ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        """Create a client; the HTTP session is opened lazily on the first request.

        Args:
            base_url: The apiserver's URL, e.g. `http://127.0.0.1:6443`.
            component: The component name sent in `X-Kubemesh-Component` and the User-Agent.
            instance: The instance name sent in `X-Kubemesh-Instance` and the User-Agent.
            token: A bearer token, sent when given.
            encoding: The encoding of request bodies and of the requested responses.
            timeout: Wall seconds one request attempt may take (connect to last byte). For a
                watch it bounds the connection and, with `timeout_seconds`, the stream.
            retry: Retry settings; the defaults of `RetrySettings` when None.
            connector: A shared connector (not closed by this client); it must have no
                connection limit, see the module docstring.
            rng: Source of backoff jitter (a fresh OS-seeded one when None).
            clock: The timer for backoff sleeps (durations stay wall seconds); asyncio's when None.
            ca_file: The CA that signed an https apiserver's certificate (a mesh's own CA);
                the system trust store when None. A shared connector brings its own TLS setup.
            ssl_context: TLS settings for the client's own connector, instead of `ca_file`.
        """
        self.base_url = base_url.rstrip("/")
        self.component = component
        self.instance = instance
        self.encoding: Encoding = encoding
        self.timeout = timeout
        self.retry = retry or RetrySettings()
        # An instance, never the module-level functions: jitter must be reproducible when the
        # component passes its seeded rng.
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._connector = connector
        self.ca_file = ca_file
        self._ssl_context = ssl_context
        self.gate: Callable[[], Awaitable[None]] | None = None
        """Awaited before every request and every watch event: chaos pauses a component by
        closing it (a paused process neither sends nor reads, as under SIGSTOP)."""
        if connector is not None and (connector.limit or connector.limit_per_host):
            log.warning("shared connector has a connection limit; one stalled request may delay "
                        "other clients", component=component, instance=instance,
                        limit=connector.limit, limit_per_host=connector.limit_per_host)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._headers: dict[str, str] = {
            "X-Kubemesh-Component": component,
            "X-Kubemesh-Instance": instance,
            "User-Agent": f"kubemesh-{component}/{VERSION} ({instance})",
            "Accept": self._accept(),
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._extra: dict[str, str] = {}
        """Headers of this view only (`acting_for`), added to each request."""

    def acting_for(self, controller: str) -> ApiClient:
        """A view of this client whose requests say they are made for `controller` (`X-Kubemesh-Controller`).

        It shares the session, connections, retry settings, rng and chaos gate; closing the
        original closes both. With the apiserver's component identities the controller-manager's
        controllers then act as their own ServiceAccounts (upstream's
        `--use-service-account-credentials`), while the process's informers, events and leader
        election stay the controller-manager's own.
        """
        twin = copy.copy(self)
        twin._session = self._get_session()
        twin._extra = {**self._extra, "X-Kubemesh-Controller": controller}
        return twin

    def _accept(self) -> str:
        if self.encoding == "msgpack":
            return f"{codec.MSGPACK}, {codec.JSON};q=0.9"
        return codec.JSON

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session (and the connector unless it was passed in)."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("ApiClient is closed")
        if self._session is None:
            if self._connector is not None:
                self._session = aiohttp.ClientSession(
                    connector=self._connector, connector_owner=False,
                    cookie_jar=aiohttp.DummyCookieJar(), headers=self._headers)
            else:
                self._session = aiohttp.ClientSession(
                    connector=make_connector(ca_file=self.ca_file, ssl_context=self._ssl_context),
                    cookie_jar=aiohttp.DummyCookieJar(), headers=self._headers)
        return self._session

    async def _sleep(self, wall_seconds: float) -> None:
        if self._clock is None:
            await asyncio.sleep(wall_seconds)
        else:
            await self._clock.sleep(wall_seconds * self._clock.rate)

    # -- generic request ---------------------------------------------------------------------

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str | None = None,
                      attempt_timeout: float | None = None, idempotent: bool | None = None,
                      accept: str | None = None) -> Any:
        """Send one request (with retries) and return the decoded response body.

        Args:
            method: The HTTP method.
            path: The path below the base URL, e.g. `/api/v1/nodes`.
            params: Query parameters.
            body: A JSON-like value (encoded in the client's encoding, or in JSON when
                `content_type` is a JSON media type), raw `bytes`, or None for no body.
            content_type: The body's media type; the client's encoding's when None.
            attempt_timeout: Wall seconds for each attempt; the client's `timeout` when None.
            idempotent: Whether retrying after an ambiguous failure is safe; by default only
                GET, HEAD and OPTIONS are.
            accept: An `Accept` header instead of the client's encoding (e.g. aggregated discovery).

        Returns:
            The decoded body, or None when it was empty.

        Raises:
            ApiError: A subclass by status; `ApiConnectionError` when no answer came.
        """
        if self.gate is not None:
            await self.gate()
        method = method.upper()
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        else:
            enc = codec.encoding_of(content_type) if content_type else self.encoding
            data = codec.encode(body, enc or "json")
        headers: dict[str, str] = dict(self._extra)
        if accept is not None:
            headers["Accept"] = accept
        if data is not None:
            headers["Content-Type"] = content_type or codec.content_type(self.encoding)
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS
        client_timeout = aiohttp.ClientTimeout(
            total=attempt_timeout if attempt_timeout is not None else self.timeout)
        url = self.base_url + path
        session = self._get_session()
        attempt = 0
        while True:
            attempt += 1
            err: ApiError
            try:
                async with session.request(method, url, params=params, data=data, headers=headers,
                                           timeout=client_timeout) as resp:
                    payload = await resp.read()
                    http_status = resp.status
                    resp_type = resp.headers.get("Content-Type")
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # The connection was never established: the request cannot have been applied,
                # so even a write may be retried.
                err = ApiConnectionError(f"{method} {path}: cannot connect: {exc}", maybe_applied=False)
                retryable = True
            except (aiohttp.ClientError, TimeoutError) as exc:
                # Sent (or partly sent) and no complete answer: for a write, the outcome is
                # unknown; never retry it blindly.
                err = ApiConnectionError(f"{method} {path}: {type(exc).__name__}: {exc}",
                                         maybe_applied=True)
                retryable = idempotent
            else:
                if http_status < 400:
                    return _decode_body(payload, resp_type)
                err = _error_from_response(http_status, payload, resp_type, retry_after)
                retryable = http_status == 429 or (idempotent and http_status >= 500)
            if not retryable or attempt >= self.retry.max_attempts:
                raise err
            if isinstance(err, TooManyRequestsError) and err.retry_after is not None:
                delay = min(err.retry_after, self.retry.max_retry_after)
            else:
                delay = self.retry.backoff(attempt, self._rng)
            log.debug("retrying request", method=method, path=path, attempt=attempt, delay=delay,
                      error=str(err), component=self.component, instance=self.instance)
            await self._sleep(delay)

    # -- typed verbs -------------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> Obj:
        """GET one object (or one of its subresources, e.g. `scale`)."""
        return cast(Obj, await self.request("GET", kind.url(namespace=namespace, name=name, sub=subresource)))

    async def list(self, kind: Kind, *, namespace: str | None = None, label_selector: str | None = None,
                   field_selector: str | None = None, resource_version: str | None = None) -> Obj:
        """LIST a collection; returns the List object (`items`, `metadata.resourceVersion`)."""
        params = _selector_params(label_selector=label_selector, field_selector=field_selector)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        return cast(Obj, await self.request("GET", kind.url(namespace=namespace), params=params))

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        """POST a new object; the namespace defaults to the body's."""
        ns = namespace if namespace is not None else (namespace_of(body) or None)
        return cast(Obj, await self.request("POST", kind.url(namespace=ns), body=body))

    async def update(self, kind: Kind, body: Obj, *, subresource: str | None = None) -> Obj:
        """PUT an object (or its status); 409 ConflictError when its resourceVersion is stale."""
        url = kind.url(namespace=namespace_of(body) or None, name=name_of(body), sub=subresource)
        return cast(Obj, await self.request("PUT", url, body=body))

    async def patch(self, kind: Kind, name: str, patch: Obj | builtins.list[Obj], *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        """PATCH an object; the body is JSON whatever the client's encoding."""
        params: dict[str, str] = {}
        if patch_type == "apply":
            params["fieldManager"] = self.component
        url = kind.url(namespace=namespace, name=name, sub=subresource)
        return cast(Obj, await self.request("PATCH", url, params=params, body=codec.encode(patch, "json"),
                                            content_type=PATCH_MEDIA_TYPES[patch_type]))

    async def delete(self, kind: Kind, name: str, *, namespace: str | None = None,
                     grace_period_seconds: int | None = None, propagation_policy: str | None = None,
                     preconditions: Obj | None = None) -> Obj | None:
        """DELETE an object, with DeleteOptions in the body.

        Returns:
            The object as the server returned it (for a graceful pod deletion: still there,
            with `deletionTimestamp`), or None when the server answered a success Status.
        """
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if preconditions is not None:
            options["preconditions"] = preconditions
        result = await self.request("DELETE", kind.url(namespace=namespace, name=name), body=options)
        if result is None or (_is_status(result) and result.get("status") == "Success"):
            return None
        return cast(Obj, result)

    async def delete_collection(self, kind: Kind, *, namespace: str | None = None, label_selector: str | None = None,
                                propagation_policy: str | None = None) -> Obj | None:
        """DELETE a collection (every matching object, each as its own DELETE would be).

        Retried like a read: deleting what is already being deleted changes nothing.
        """
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        params = _selector_params(label_selector=label_selector, field_selector=None)
        result = await self.request("DELETE", kind.url(namespace=namespace), params=params, body=options,
                                    idempotent=True)
        return cast(Obj, result) if isinstance(result, dict) else None

    async def bind(self, *, namespace: str, pod: str, node: str, uid: str | None = None) -> None:
        """Bind a pod to a node (POST a v1 Binding to the pod's `binding` subresource).

        With `uid`, the server refuses the binding if the pod was replaced by another of the
        same name.
        """
        metadata: Obj = {"name": pod, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        body: Obj = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                     "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body=body)

    async def evict(self, *, namespace: str, pod: str, grace_period_seconds: int | None = None) -> None:
        """Evict a pod (POST a policy/v1 Eviction); 429 when a disruption budget forbids it."""
        body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction",
                     "metadata": {"name": pod, "namespace": namespace}}
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"apiVersion": "v1", "kind": "DeleteOptions",
                                     "gracePeriodSeconds": grace_period_seconds}
        await self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)

    async def stream_lines(self, path: str, *, params: Mapping[str, str] | None = None) -> AsyncGenerator[bytes, None]:
        """GET a stream of JSON lines (e.g. `/chaos/v1/history?follow=true`), one line at a time.

        Read as fast as the consumer iterates (the same backpressure as `watch`); never retried.

        Raises:
            ApiError: At request time; `ApiConnectionError` when the connection fails or breaks.
        """
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(total=None, connect=self.timeout, sock_connect=self.timeout)
        try:
            resp = await session.get(self.base_url + path, params=params, timeout=timeout,
                                     headers={**self._extra, "Accept": "application/jsonl"})
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"GET {path}: {type(exc).__name__}: {exc}", maybe_applied=False) from exc
        try:
            if resp.status >= 400:
                raise _error_from_response(resp.status, await resp.read(), resp.headers.get("Content-Type"),
                                           resp.headers.get("Retry-After"))
            async for line in resp.content:
                if line.strip():
                    yield line
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"GET {path}: stream broken: {type(exc).__name__}: {exc}",
                                     maybe_applied=False) from exc
        finally:
            resp.close()

    async def get_clock(self) -> dict[str, Any]:
        """The apiserver's clock document (`rate`, `epochWall`, `epochCluster`, `now`)."""
        return cast(dict[str, Any], await self.request("GET", "/clock"))

    # -- watch -------------------------------------------------------------------------------

    async def watch(self, kind: Kind, *, resource_version: str, namespace: str | None = None,
                    label_selector: str | None = None, field_selector: str | None = None,
                    allow_bookmarks: bool = True,
                    timeout_seconds: int | None = None) -> AsyncGenerator[WatchEvent, None]:
        """Watch a collection from `resource_version`, yielding events as they arrive.

        The request is sent on the first iteration; close the iterator (`contextlib.aclosing`)
        to close the stream early. The iterator ends when the server ends the stream.

        Raises:
            ApiError: At request time (`GoneError` for an HTTP 410); `ApiConnectionError` when
                the connection fails or breaks mid-stream.
            codec.DecodeError: A malformed frame.
        """
        params = _selector_params(label_selector=label_selector, field_selector=field_selector)
        params["watch"] = "true"
        params["resourceVersion"] = resource_version
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        # Connecting and receiving the headers are bounded by the request timeout; the stream
        # itself by the server's timeoutSeconds plus that same slack (a partitioned server
        # never ends the stream), or not at all when no timeoutSeconds was asked for.
        client_timeout = aiohttp.ClientTimeout(
            total=None if timeout_seconds is None else timeout_seconds + self.timeout,
            connect=self.timeout, sock_connect=self.timeout)
        path = kind.url(namespace=namespace)
        session = self._get_session()
        try:
            resp = await session.get(self.base_url + path, params=params, timeout=client_timeout,
                                     headers=self._extra)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"WATCH {path}: {type(exc).__name__}: {exc}",
                                     maybe_applied=False) from exc
        try:
            if resp.status >= 400:
                payload = await resp.read()
                raise _error_from_response(resp.status, payload, resp.headers.get("Content-Type"),
                                           resp.headers.get("Retry-After"))
            encoding = codec.encoding_of(resp.headers.get("Content-Type")) or "json"
            frames = _msgpack_frames(resp) if encoding == "msgpack" else _json_frames(resp)
            async for frame in frames:
                if self.gate is not None:
                    await self.gate()
                yield _to_event(frame)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"WATCH {path}: stream broken: {type(exc).__name__}: {exc}",
                                     maybe_applied=False) from exc
        finally:
            # close(), not release(): a half-read stream must not go back to the pool.
            resp.close()


def _selector_params(*, label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _to_event(frame: Any) -> WatchEvent:
    if not isinstance(frame, dict):
        raise codec.DecodeError(f"watch frame is not a map: {type(frame).__name__}")
    etype = frame.get("type")
    obj = frame.get("object")
    if etype not in EVENT_TYPES or not isinstance(obj, dict):
        raise codec.DecodeError(f"malformed watch event (type {etype!r})")
    return WatchEvent(cast(EventType, etype), obj)


async def _json_frames(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    # IMPORTANT: read one chunk only when the consumer has used up the previous one, so that
    # what is buffered here is bounded by one chunk plus one partial line; the rest waits in
    # aiohttp's bounded read buffer and the kernel (TCP backpressure).
    buf = b""
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            break
        buf += chunk
        if b"\n" not in chunk:
            continue
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                yield codec.decode(line, "json")
    if buf.strip():
        yield codec.decode(buf, "json")


async def _msgpack_frames(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    unpacker = codec.stream_unpacker()
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            break
        try:
            unpacker.feed(chunk)
            frames = list(unpacker)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise codec.DecodeError(f"malformed msgpack watch frame: {exc}") from exc
        for frame in frames:
            yield frame
