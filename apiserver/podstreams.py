"""The pods' streaming subresources, proxied to the pod's kubelet: `log`, and `exec`, `attach`, `portforward`.

`GET /api/v1/namespaces/{ns}/pods/{name}/log` is served as kube-apiserver serves it:

1. the PodLogOptions query (`container`, `previous`, `follow`, `timestamps`, `tailLines`,
   `sinceSeconds`, `sinceTime`, `limitBytes`) is validated: a malformed number is a 400, a
   value out of range a 422 `PodLogOptions "name" is invalid`;
2. the pod must exist (404 `pods "x" not found`) and the container be one of its own; without
   `container`, a pod of one container means that one, otherwise 400 `a container name must
   be specified for pod X, choose one of: [a b]` (init containers first, as upstream lists
   them); an unknown name is 400 `container c is not valid for pod X`;
3. a pod not yet bound to a node has no log location: 204 No Content (an empty log);
4. otherwise the request goes to the kubelet that registered the pod's node
   (`ComponentRegistry.kubelet_of`, the same routing as node chaos) at
   `{admin}/nodes/{node}/containerLogs/{ns}/{pod}/{container}` with the same options, and its
   answer is relayed as upstream's response checker relays a kubelet's: 200 streamed as
   `text/plain` (with `follow`, until the container's run ends or the client leaves, which
   closes the kubelet stream too), 400 a BadRequest carrying the kubelet's words (`container
   "c" in pod "p" is waiting to start: ContainerCreating`, `previous terminated container "c"
   in pod "p" not found`), 404 `the server could not find the requested resource ( pods/log
   p)`, 500 and an unreachable kubelet an InternalError.

`exec`, `attach` and `portforward` (GET or POST, plain or an upgrade to SPDY or WebSocket, the
requests kubectl sends) check the pod and container as upstream does (404, the container
400s, 400 `pod X does not have a host assigned`). An upgrade request for a pod whose node a
kubelet registered is then proxied to that kubelet as kube-apiserver proxies it: the request
line and the upgrade headers (`Upgrade`, `Connection`, `Sec-WebSocket-*`,
`X-Stream-Protocol-Version`) go to `{admin}/nodes/{node}/{exec|attach}/{ns}/{pod}/{container}`
or `{admin}/nodes/{node}/portforward/{ns}/{pod}` with the query as sent; the kubelet's `101
Switching Protocols` goes back to the client and from then on the bytes are relayed both ways,
unchanged, until either side closes (websocket frames and SPDY frames alike: the kubelet speaks
the stream protocols, `kubemesh.kubelet.streams`). A kubelet's refusal is relayed as a Status (a
400 with its words: an emulated pod's containers run no process; 404; anything else an
InternalError), and an unreachable kubelet is an InternalError `error dialing backend: ...`.

Without a kubelet for the node, or for a request that is no upgrade, the answer is 400
BadRequest naming the subresource: `pods/exec is not supported by kubemesh: its containers are
emulated and run no processes (...)`, the same words a kubelet of the emulated runtime uses.
kubectl decodes the Status from the failed upgrade and prints it (`Error from server
(BadRequest): ...` for exec and attach, `error upgrading connection: ...` for port-forward); it
never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import quote

import aiohttp
import structlog
from aiohttp import web
from yarl import URL

from kubemesh.apiserver import errors, fielderrors
from kubemesh.apiserver.registry import Registry
from kubemesh.apiserver.serving import Target, flag
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.machinery.upgrading import Reader, Writer, take_over
from kubemesh.services.model.kinds import PODS, Kind, Obj

log = structlog.get_logger("apiserver.podstreams")

Handler = Callable[[web.Request, Target], Awaitable[web.StreamResponse]]

PROCESS_SUBRESOURCES: Final = ("exec", "attach", "portforward")
"""Subresources that reach a container's process: refused unless a kubelet runs processes."""
PROXIED: Final = ("exec", "attach", "portforward")
"""Those proxied to the pod's kubelet (an upgraded connection, relayed byte for byte)."""
_HOP_HEADERS: Final = ("upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                       "sec-websocket-protocol", "sec-websocket-extensions", "x-stream-protocol-version")
"""Request headers passed on to the kubelet with an upgrade."""
_HEAD_LIMIT: Final = 64 * 1024

_LOG_OPTIONS: Final = Kind(group="", version="v1", kind="PodLogOptions", plural="podlogoptions",
                           singular="podlogoptions", namespaced=True)
"""For the wording of a 422 (`PodLogOptions "x" is invalid: ...`); never served."""

CLIENT_CHECK: Final = 0.5
"""Wall seconds between two looks at a log stream's client connection."""

_INT_OPTIONS: Final = ("tailLines", "sinceSeconds", "limitBytes")
_PASSED: Final = ("previous", "follow", "timestamps", "tailLines", "sinceSeconds", "sinceTime", "limitBytes")


def container_names(pod: Obj) -> list[str]:
    """Every container name of a pod, init containers first, then containers, then ephemeral ones."""
    spec = pod.get("spec") or {}
    return [str(c.get("name", "")) for part in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(part) or [] if isinstance(c, dict)]


def choose_container(pod: Obj, name: str, container: str | None) -> str:
    """The container a request means, or the 400 kube-apiserver answers."""
    if container:
        if container not in container_names(pod):
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        return container
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) == 1:
        return str(containers[0].get("name", ""))
    if not containers:
        raise errors.bad_request(f"a container name must be specified for pod {name}")
    raise errors.bad_request(f"a container name must be specified for pod {name}, "
                             f"choose one of: [{' '.join(container_names(pod))}]")


def log_query(request: web.Request, name: str) -> dict[str, str]:
    """The validated PodLogOptions of a log request, as the query to pass to the kubelet."""
    q = request.query
    ints: dict[str, int] = {}
    for key in _INT_OPTIONS:
        raw = q.get(key)
        if raw is None or raw == "":
            continue
        try:
            ints[key] = int(raw)
        except ValueError:
            raise errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None
    causes: list[fielderrors.Cause] = []
    if ints.get("tailLines", 0) < 0:
        causes.append(fielderrors.invalid("tailLines", ints["tailLines"], "must be greater than or equal to 0"))
    if ints.get("limitBytes", 1) < 1:
        causes.append(fielderrors.invalid("limitBytes", ints["limitBytes"], "must be greater than 0"))
    since_time = q.get("sinceTime")
    if since_time:
        try:
            parse_time(since_time)
        except ValueError:
            raise errors.bad_request(f'parsing time "{since_time}" as RFC 3339: cannot parse') from None
    if "sinceSeconds" in ints and since_time:
        causes.append(fielderrors.forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif ints.get("sinceSeconds", 1) < 1:
        causes.append(fielderrors.invalid("sinceSeconds", ints["sinceSeconds"], "must be greater than 0"))
    if causes:
        raise errors.invalid(_LOG_OPTIONS, name, list(causes))
    out = {k: q[k] for k in _PASSED if q.get(k) not in (None, "") and k not in _INT_OPTIONS}
    out.update({k: str(v) for k, v in ints.items()})
    for key in ("previous", "follow", "timestamps"):
        if key in out:
            out[key] = "true" if flag(out[key]) else "false"
    return out


def _relay_error(status: int, text: str, name: str) -> errors.StatusError:
    """A kubelet's error answer as kube-apiserver's response checker turns it into a Status."""
    if status == 400:
        return errors.bad_request(text)
    if status == 500:
        return errors.internal(text)
    reason, message = {404: ("NotFound", "the server could not find the requested resource"),
                       503: ("ServiceUnavailable", "the server is currently unable to handle the request")}.get(
        status, ("InternalError" if status >= 500 else "",
                 f"the server responded with the status code {status} but did not return more information"))
    return errors.StatusError(status, reason, f"{message} ( pods/log {name})",
                              details={"name": name, "kind": "pods/log"})


def _upgrade_error(status: int, text: str) -> errors.StatusError:
    """A kubelet's refusal of an upgrade as kube-apiserver relays it."""
    if status == 400:
        return errors.bad_request(text)
    if status == 404:
        return errors.StatusError(404, "NotFound", text)
    return errors.internal(f"error upgrading connection: {status} {text}")


class PodStreams:
    """The handlers of pods' log, exec, attach and portforward (see the module docstring)."""

    def __init__(self, *, registry: Registry, kubelet_of: Callable[[str], str | None], token: str | None,
                 connect_timeout: float = 5.0) -> None:
        self.registry = registry
        self.kubelet_of = kubelet_of
        self.token = token
        self.connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    def handlers(self) -> dict[str, Handler]:
        """Handlers by pods subresource name."""
        out: dict[str, Handler] = {"log": self.log}
        out.update({sub: self.refuse for sub in PROCESS_SUBRESOURCES})
        out.update({sub: self.upgrade for sub in PROXIED})
        return out

    async def close(self) -> None:
        """Close the HTTP session to the kubelets."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"User-Agent": "kubemesh-apiserver/podlogs"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            self._session = aiohttp.ClientSession(headers=headers, cookie_jar=aiohttp.DummyCookieJar(),
                                                  auto_decompress=False)
        return self._session

    def _pod(self, t: Target) -> tuple[Obj, str, str]:
        assert t.namespace is not None and t.name is not None
        return self.registry.get(PODS, t.namespace, t.name), t.namespace, t.name

    async def log(self, request: web.Request, t: Target) -> web.StreamResponse:
        """GET pods/{name}/log."""
        if request.method != "GET":
            raise errors.method_not_allowed()
        query = log_query(request, str(t.name))  # the options first, as upstream validates them before the pod
        pod, namespace, name = self._pod(t)
        container = choose_container(pod, name, request.query.get("container"))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            return web.Response(status=204)
        base = self.kubelet_of(node)
        path = "/".join(quote(p, safe="") for p in ("nodes", node, "containerLogs", namespace, name, container))
        if base is None:
            raise errors.internal(f'no kubelet serves node "{node}"')
        url = f"{base}/{path}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        try:
            async with self._http().get(url, params=query, timeout=timeout) as upstream:
                if upstream.status != 200:
                    text = (await upstream.content.read(50_000)).decode("utf-8", "replace").strip()
                    raise _relay_error(upstream.status, text, name)
                resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
                await resp.prepare(request)
                await self._relay(request, upstream, resp, what=f"{namespace}/{name}")
                return resp
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.internal(f'Get "{url}": {str(exc) or type(exc).__name__}') from None

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse, resp: web.StreamResponse, *,
                     what: str) -> None:
        """Copy the kubelet's stream to the client until either ends.

        aiohttp does not cancel a handler whose client left, and a quiet follow stream gives
        nothing to write that would fail: the connection is looked at every `CLIENT_CHECK`
        wall seconds, and a client that left ends the copy, which closes the kubelet's stream.
        """
        async def copy() -> None:
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()

        task = asyncio.ensure_future(copy())
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=CLIENT_CHECK)
                transport = request.transport
                if not task.done() and (transport is None or transport.is_closing()):
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except (ConnectionResetError, aiohttp.ClientError) as exc:
            # The client left, or the kubelet went away mid-stream: the response was under way, it ends here.
            log.debug("log stream ended early", pod=what, error=str(exc))
        finally:
            task.cancel()

    async def upgrade(self, request: web.Request, t: Target) -> web.StreamResponse:
        """exec, attach: an upgrade proxied to the pod's kubelet, else refused (see the module docstring)."""
        sub = str(t.sub)
        pod, namespace, name = self._pod(t)
        container = "" if sub == "portforward" else choose_container(pod, name, request.query.get("container"))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        base = self.kubelet_of(node) if node else None
        if base is None or "upgrade" not in request.headers.get("Connection", "").lower():
            return await self.refuse(request, t)
        url = URL(base)
        parts = ("", "nodes", node, sub, namespace, name, *((container,) if container else ()))
        path = "/".join(quote(p, safe="") for p in parts)
        query = request.rel_url.raw_query_string
        head = [f"{request.method} {path}{'?' + query if query else ''} HTTP/1.1",
                f"Host: {url.host}:{url.port}"]
        head += [f"{k}: {v}" for k, v in request.headers.items() if k.lower() in _HOP_HEADERS]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(url.host, url.port),
                                                    timeout=self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise errors.internal(f"error dialing backend: {str(exc) or type(exc).__name__}") from None
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            raw = await reader.readuntil(b"\r\n\r\n")
            status_line, *lines = raw.decode("latin-1").split("\r\n")
            status = int(status_line.split(" ", 2)[1])
            headers = [tuple(x.split(":", 1)) for x in lines if ":" in x]
            if status != 101:
                length = next((int(v) for k, v in headers if k.strip().lower() == "content-length"), 50_000)
                text = (await reader.read(min(length, 50_000))).decode("utf-8", "replace").strip()
                raise _upgrade_error(status, text)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as exc:
            writer.close()
            raise errors.internal(f"error upgrading connection: {str(exc) or type(exc).__name__}") from None
        except errors.StatusError:
            writer.close()
            raise
        resp, client_read, client_write = await take_over(request, headers={k.strip(): v.strip() for k, v in headers})
        await self._splice(request, client_read, client_write, reader, writer)
        return resp

    async def _splice(self, request: web.Request, client_read: Reader, client_write: Writer,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Relay bytes both ways between the client's upgraded connection and the kubelet's until either ends."""
        transport = request.transport

        async def up() -> None:
            while data := await client_read():
                writer.write(data)
                await writer.drain()
            writer.write_eof()

        async def down() -> None:
            while data := await reader.read(65536):
                await client_write(data)

        tasks = {asyncio.ensure_future(up()), asyncio.ensure_future(down())}
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            writer.close()
            if transport is not None:
                transport.close()

    async def refuse(self, request: web.Request, t: Target) -> web.StreamResponse:
        """exec, attach, portforward: checked as upstream checks them, then refused."""
        sub = str(t.sub)
        pod, _, name = self._pod(t)
        container = "" if sub == "portforward" else choose_container(pod, name, request.query.get("container"))
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(f"pod {name} does not have a host assigned")
        target = f'pod "{name}"' + (f', container "{container}"' if container else "")
        raise errors.StatusError(
            400, "BadRequest",
            f"pods/{sub} is not supported by kubemesh: its containers are emulated and run no processes ({target})",
            details={"name": name, "kind": "pods"})
