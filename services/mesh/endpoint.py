"""One handle on a running mesh: where its apiserver is, its token, its CA, and what reads them.

Everything outside the mesh that talks to it goes through a `MeshEndpoint`: the `kubemesh`
CLI, the local launcher (`Mesh.endpoint`), the pytest fixtures, the scenario runner (fresh
and attached runs) and the compose driver. It is the one place that turns a mesh's state
into a connection, so that TLS, the token and the request headers are right everywhere:

    endpoint = MeshEndpoint.resolve(state_dir=Path(".kubemesh"))      # `kubemesh up`'s state
    endpoint = MeshEndpoint.resolve(kubeconfig=Path(".kubemesh/compose/kubeconfig"))
    endpoint = MeshEndpoint.resolve(url="https://127.0.0.1:6443", token_file=..., ca_file=...)

    async with endpoint.client("my-test") as client:                  # the Kubernetes API
        nodes = await client.list(NODES)
    async with endpoint.chaos() as chaos:                             # the chaos front door
        await chaos.reset()
    records = await endpoint.history(types=["fault"])                 # the apiserver's history
    await endpoint.node_op("node-1", "power-off")                     # the kubelet hosting node-1

What it promises:

* **One source of truth.** `resolve` reads, in this order: an explicit URL (with a token and
  a CA file), a kubeconfig (its current context or the one named), a state folder (the
  `mesh.json` of `kubemesh up`, else the `kubeconfig` the compose stack writes there). The
  CA comes with the URL wherever the mesh serves HTTPS; the system trust store is used only
  when no CA is known.
* **Identified requests.** Every request names its sender (`X-Kubemesh-Component`,
  `X-Kubemesh-Instance`, `User-Agent`), as every component does, so that the history and
  chaos rules can tell tools apart.
* **No hidden connection state.** A `MeshEndpoint` is a frozen value: it holds no session
  and may be shared between event loops and threads. Clients it makes own their connections
  (close them, or use `async with`); its own helpers open a session per call.
* **Node operations reach the right kubelet.** A kubelet registers the nodes it hosts with
  its admin address (`GET /kubemesh/v1/components`); `node_op` calls the kubelet that
  registered the node, whatever ports the kubelets listen on.

This is tooling: timeouts and polls are wall seconds, never the cluster clock.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import yaml

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.state import (
    KUBECONFIG_FILE,
    MeshError,
    describe_nodes,
    node_is_ready,
    read_state,
    render_kubeconfig,
    write_private,
)
from kubemesh.services.model.codec import Encoding

T = TypeVar("T")

TOKEN_ENV: Final = "KUBEMESH_TOKEN"
APISERVER_ENV: Final = "KUBEMESH_APISERVER"
_POLL: Final = 0.05


class EndpointError(ValueError):
    """A mesh cannot be reached as given (no state folder, a kubeconfig without a server...)."""


@dataclass(frozen=True, kw_only=True)
class MeshEndpoint:
    """How to reach a running mesh (see the module docstring)."""

    url: str
    """The apiserver's URL, `https://127.0.0.1:PORT` (no trailing slash)."""
    token: str | None = None
    """The bearer token (None: the mesh runs without authentication)."""
    ca_pem: bytes | None = None
    """The CA that signed the apiserver's certificate (None: the system trust store)."""
    insecure: bool = False
    """Skip TLS verification (a kubeconfig's `insecure-skip-tls-verify`)."""
    kubeconfig: Path | None = None
    """A kubeconfig that reaches this mesh (for kubectl and the official clients), if one exists."""
    source: str = ""
    """Where the endpoint came from (a state folder, a kubeconfig, a URL), for messages."""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise EndpointError(f"the apiserver URL must be http(s)://..., not {self.url!r}")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    @property
    def name(self) -> str:
        """How messages name the mesh."""
        return self.source or self.url

    # -- where it comes from ----------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, *, token: str | None = None, token_file: Path | None = None,
                 ca_file: Path | None = None, kubeconfig: Path | None = None) -> MeshEndpoint:
        """An apiserver URL; the token from `token`, else `token_file`, else `$KUBEMESH_TOKEN`."""
        if token is None and token_file is not None:
            token = _read_text(token_file, "the token file").strip() or None
        ca = _read_bytes(ca_file, "the CA file") if ca_file is not None else None
        return cls(url=url, token=token or os.environ.get(TOKEN_ENV) or None, ca_pem=ca, kubeconfig=kubeconfig,
                   source=url)

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None, token: str | None = None) -> MeshEndpoint:
        """The cluster of a kubeconfig's current context (or `context`): server, CA and token.

        Reads `certificate-authority-data`, `certificate-authority` (relative to the file),
        `insecure-skip-tls-verify`, and the user's `token` or `tokenFile`; `token` overrides it.
        """
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise EndpointError(f"cannot read the kubeconfig {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise EndpointError(f"{path} is not a kubeconfig")

        def named(section: str, name: str) -> dict[str, Any]:
            for item in doc.get(section) or []:
                if isinstance(item, dict) and item.get("name") == name:
                    value = item.get(section[:-1]) or {}
                    return value if isinstance(value, dict) else {}
            raise EndpointError(f"{path}: no {section[:-1]} named {name!r}")

        ctx_name = context or doc.get("current-context")
        if not ctx_name:
            raise EndpointError(f"{path} has no current-context (name a context)")
        kctx = named("contexts", str(ctx_name))
        cluster = named("clusters", str(kctx.get("cluster", "")))
        user = named("users", str(kctx.get("user", ""))) if kctx.get("user") else {}
        server = cluster.get("server")
        if not isinstance(server, str) or not server:
            raise EndpointError(f"{path}: the cluster of context {ctx_name!r} has no server")
        ca: bytes | None = None
        if cluster.get("certificate-authority-data"):
            ca = base64.b64decode(str(cluster["certificate-authority-data"]))
        elif cluster.get("certificate-authority"):
            ca = _read_bytes(path.parent / str(cluster["certificate-authority"]), f"{path}: the CA")
        tok = token or user.get("token")
        if not tok and user.get("tokenFile"):
            tok = _read_text(path.parent / str(user["tokenFile"]), f"{path}: the token file").strip()
        return cls(url=server, token=str(tok) if tok else None, ca_pem=ca,
                   insecure=bool(cluster.get("insecure-skip-tls-verify")), kubeconfig=path.resolve(),
                   source=str(path))

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> MeshEndpoint:
        """The mesh a state folder describes: its `kubeconfig`, else its `mesh.json`.

        `kubemesh up` and the compose stack both write a kubeconfig there, with the server, the
        CA and the token.
        """
        if (state_dir / KUBECONFIG_FILE).is_file():
            return cls.from_kubeconfig(state_dir / KUBECONFIG_FILE)
        doc = read_state(state_dir)
        if doc is not None and isinstance(doc.get("apiserver"), str):
            token_file, ca_file = doc.get("tokenFile"), doc.get("caFile")
            token = _read_text(Path(token_file), "the token file").strip() or None if token_file else None
            return cls(url=str(doc["apiserver"]), token=token,
                       ca_pem=_read_bytes(Path(ca_file), "the CA file") if ca_file else None, source=str(state_dir))
        raise EndpointError(f"no mesh is described in {state_dir} (neither kubeconfig nor mesh.json): start one "
                            "with `kubemesh up`, or name it with --kubeconfig or --apiserver")

    @classmethod
    def resolve(cls, *, url: str | None = None, token: str | None = None, token_file: Path | None = None,
                ca_file: Path | None = None, kubeconfig: Path | None = None, context: str | None = None,
                state_dir: Path | None = None) -> MeshEndpoint:
        """The one place a mesh's name becomes a connection (see the module docstring for the order).

        `url` may also be a kubeconfig path or a state folder (what `--attach` accepts). Without
        any of them, `$KUBEMESH_APISERVER` (with `$KUBEMESH_TOKEN`) names the mesh.
        """
        if url is not None and not url.startswith(("http://", "https://")):
            path = Path(url)
            if path.is_dir():
                state_dir, url = path, None
            elif path.is_file():
                kubeconfig, url = path, None
            else:
                named = cls._apiserver_named(url, state_dir)
                if named is None:
                    raise EndpointError(f"{url}: neither an apiserver URL, nor a kubeconfig, nor a state folder, "
                                        "nor the name of one of the mesh's apiservers")
                return named
        if url is not None:
            return cls.from_url(url, token=token, token_file=token_file, ca_file=ca_file)
        if token is None and token_file is not None:
            token = _read_text(token_file, "the token file").strip() or None
        if kubeconfig is not None:
            return cls.from_kubeconfig(kubeconfig, context=context, token=token)
        if state_dir is not None:
            try:
                endpoint = cls.from_state_dir(state_dir)
            except EndpointError:
                if not os.environ.get(APISERVER_ENV):
                    raise
            else:
                return endpoint.with_token(token) if token else endpoint
        env_url = os.environ.get(APISERVER_ENV)
        if env_url:
            return cls.from_url(env_url, token=token, ca_file=ca_file)
        raise EndpointError("no mesh named: pass --state-dir, --kubeconfig or --apiserver")

    @classmethod
    def _apiserver_named(cls, name: str, state_dir: Path | None) -> MeshEndpoint | None:
        """One apiserver of a mesh of several (`apiserver-1`), by its process name in the state folder's mesh.json."""
        if state_dir is None:
            return None
        folder = state_dir
        doc = read_state(folder)
        urls = [p.get("url") for p in (doc or {}).get("processes") or []
                if isinstance(p, dict) and p.get("name") == name and p.get("component") == "apiserver"]
        if not urls or not isinstance(urls[0], str):
            return None
        mesh = cls.from_state_dir(folder)
        return MeshEndpoint(url=urls[0], token=mesh.token, ca_pem=mesh.ca_pem, insecure=mesh.insecure,
                            kubeconfig=None, source=f"{name} of {folder}")

    def with_token(self, token: str | None) -> MeshEndpoint:
        """The same mesh with another bearer token."""
        return MeshEndpoint(url=self.url, token=token, ca_pem=self.ca_pem, insecure=self.insecure,
                            kubeconfig=None, source=self.source)

    # -- connections --------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext | bool:
        """TLS settings for the apiserver: its CA, or the system trust store (True)."""
        if not self.url.startswith("https://"):
            return True
        if self.insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        if self.ca_pem is not None:
            return ssl.create_default_context(cadata=self.ca_pem.decode())
        return True

    def _client_ssl(self) -> ssl.SSLContext | None:
        ctx = self.ssl_context()
        return ctx if isinstance(ctx, ssl.SSLContext) else None

    def headers(self, *, component: str = "kubemesh", instance: str | None = None,
                accept: str = "application/json") -> dict[str, str]:
        """Headers for a raw request: the sender's identity, the token, what it accepts."""
        h = {"Accept": accept, "User-Agent": f"kubemesh-{component}", "X-Kubemesh-Component": component,
             "X-Kubemesh-Instance": instance or component}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def connector(self) -> aiohttp.TCPConnector:
        """A new connector without a connection limit that trusts the mesh's CA (the caller closes it)."""
        return aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=self.ssl_context())

    def client(self, component: str = "kubemesh", *, instance: str | None = None, encoding: Encoding = "msgpack",
               connector: aiohttp.BaseConnector | None = None, timeout: float = 30.0) -> ApiClient:
        """An `ApiClient` identified as `component` (close it, or `async with` it).

        With `connector` the client shares it (and does not close it); else it owns one.
        """
        return ApiClient(self.url, component=component, instance=instance or component, token=self.token,
                         encoding=encoding, timeout=timeout, connector=connector, ssl_context=self._client_ssl())

    def chaos(self, *, instance: str = "chaos-client", timeout: float = 30.0) -> Chaos:
        """A client of the chaos front door (`async with endpoint.chaos() as chaos`)."""
        client = ApiClient(self.url, component="chaos", instance=instance, token=self.token, encoding="json",
                           timeout=timeout, ssl_context=self._client_ssl())
        return Chaos(client, owned=True)

    def write_kubeconfig(self, path: Path, *, name: str = "kubemesh") -> Path:
        """Write a kubeconfig for this endpoint (mode 0600); returns the path."""
        write_private(path, render_kubeconfig(server=self.url, token=self.token, ca_pem=self.ca_pem, name=name))
        return path

    async def request_json(self, method: str, path: str, body: Any = None, *,
                           headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """One JSON request to the apiserver as this endpoint's token: (status, document)."""
        async with self.session() as s, s.request(method, self.url + path, json=body,
                                                  headers={**self.headers(), **(headers or {})}) as resp:
            return resp.status, await resp.json(content_type=None)

    async def service_account(self, namespace: str, name: str, *, seconds: int = 3600,
                              create: bool = True) -> MeshEndpoint:
        """The endpoint as ServiceAccount `namespace/name`: a token from the TokenRequest API.

        With `create`, the namespace and the ServiceAccount are created when missing (as this
        endpoint's user, normally the admin). The token expires after `seconds` of cluster time
        and dies with the ServiceAccount. Raises `MeshError` with the apiserver's message.
        """
        if create:
            for path, body in (("/api/v1/namespaces", {"metadata": {"name": namespace}}),
                               (f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})):
                status, doc = await self.request_json("POST", path, body)
                if status not in (201, 409):
                    raise MeshError(f"creating {path}/{body['metadata']['name']}: {doc.get('message', doc)}")
        status, doc = await self.request_json(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}})
        if status != 201:
            raise MeshError(f"a token for serviceaccount {namespace}/{name}: {doc.get('message', doc)}")
        return replace(self, token=str(doc["status"]["token"]), kubeconfig=None,
                       source=f"serviceaccount {namespace}/{name} of {self.name}")

    async def service_account_kubeconfig(self, namespace: str, name: str, path: Path, *, seconds: int = 3600,
                                         create: bool = True) -> Path:
        """Write a kubeconfig (mode 0600) under which a client runs as ServiceAccount `namespace/name`."""
        sa = await self.service_account(namespace, name, seconds=seconds, create=create)
        return sa.write_kubeconfig(path, name=f"kubemesh-{namespace}-{name}")

    @contextlib.asynccontextmanager
    async def session(self, *, request_timeout: float = 15.0) -> AsyncIterator[aiohttp.ClientSession]:
        """A short-lived HTTP session trusting the mesh's CA (for raw requests and admin endpoints)."""
        async with aiohttp.ClientSession(connector=self.connector(), cookie_jar=aiohttp.DummyCookieJar(),
                                         timeout=aiohttp.ClientTimeout(total=request_timeout)) as s:
            yield s

    # -- reading the mesh ---------------------------------------------------------------------

    async def get_json(self, path: str, *, params: Mapping[str, str] | None = None, component: str = "kubemesh",
                       session: aiohttp.ClientSession | None = None) -> Any:
        """GET a JSON document from the apiserver; raises `aiohttp.ClientResponseError` on an error status."""
        if session is None:
            async with self.session() as own:
                return await self.get_json(path, params=params, component=component, session=own)
        async with session.get(self.url + path, params=params, headers=self.headers(component=component)) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def history(self, *, since: int = 0, types: Sequence[str] = (), limit: int | None = None,
                      component: str = "kubemesh") -> list[dict[str, Any]]:
        """The apiserver's history records after index `since` (`GET /kubemesh/v1/history`)."""
        params = {"since": str(since)}
        if types:
            params["type"] = ",".join(types)
        if limit is not None:
            params["limit"] = str(limit)
        async with self.session(request_timeout=120.0) as s, \
                s.get(f"{self.url}/kubemesh/v1/history", params=params,
                      headers=self.headers(component=component, accept="application/jsonl")) as resp:
            resp.raise_for_status()
            text = await resp.text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    async def history_last_index(self) -> int:
        """The index of the newest history record (0 when empty).

        Found by exponential and binary search with `limit=1` queries (about 2 log2(n) tiny
        requests), so that a long-lived mesh's history is never downloaded whole.
        """
        async with self.session() as s:
            async def exists(i: int) -> bool:
                async with s.get(f"{self.url}/kubemesh/v1/history", params={"since": str(i - 1), "limit": "1"},
                                 headers=self.headers(accept="application/jsonl")) as resp:
                    resp.raise_for_status()
                    return bool((await resp.text()).strip())

            if not await exists(1):
                return 0
            lo, hi = 1, 2
            while await exists(hi):
                lo, hi = hi, hi * 2
            while hi - lo > 1:  # exists(lo), not exists(hi)
                mid = (lo + hi) // 2
                if await exists(mid):
                    lo = mid
                else:
                    hi = mid
            return lo

    async def components(self, *, session: aiohttp.ClientSession | None = None) -> dict[str, dict[str, Any]] | None:
        """The apiserver's component registry by instance, or None when it keeps none."""
        try:
            doc = await self.get_json("/kubemesh/v1/components", session=session)
        except aiohttp.ClientResponseError as exc:
            if exc.status in (404, 405):
                return None
            raise
        items = doc.get("items", []) if isinstance(doc, dict) else []
        return {str(i["instance"]): i for i in items if isinstance(i, dict) and i.get("instance")}

    async def chaos_available(self) -> bool:
        """Whether the apiserver serves the chaos front door (`/chaos/v1`)."""
        try:
            await self.get_json("/chaos/v1/faults")
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return False
        return True

    async def nodes(self, *, session: aiohttp.ClientSession | None = None) -> list[dict[str, Any]]:
        """Every Node object."""
        doc = await self.get_json("/api/v1/nodes", session=session)
        return [n for n in (doc.get("items") or []) if isinstance(n, dict)]

    async def wait_nodes_ready(self, count: int, *,
                               timeout: float = 60.0) -> list[dict[str, Any]]:  # noqa: ASYNC109 - a deadline
        """Wait until at least `count` nodes are Ready; return the nodes. Raises `MeshError`."""
        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        last_error = ""
        async with self.session() as s:
            while True:
                try:
                    last = await self.nodes(session=s)
                    last_error = ""
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                if sum(1 for n in last if node_is_ready(n)) >= count:
                    return last
                if time.monotonic() >= deadline:
                    err = f"; last error: {last_error}" if last_error else ""
                    raise MeshError(f"{count} nodes not Ready within {timeout:.1f} s: {describe_nodes(last)}{err}")
                await asyncio.sleep(_POLL)

    # -- admin endpoints ----------------------------------------------------------------------

    async def admin_urls(self) -> dict[str, str]:
        """The admin URL of every registered component instance."""
        return {inst: str(e["adminURL"]).rstrip("/") for inst, e in (await self.components() or {}).items()
                if e.get("adminURL")}

    async def kubelet_of(self, node: str) -> str:
        """The admin URL of the kubelet that hosts `node` (as it registered; else the one that answers for it)."""
        registry = await self.components() or {}
        kubelets = {inst: e for inst, e in registry.items() if e.get("component") == "kubelet" and e.get("adminURL")}
        for e in kubelets.values():
            if node in (e.get("nodes") or ()):
                return str(e["adminURL"]).rstrip("/")
        async with self.session(request_timeout=5.0) as s:
            for e in kubelets.values():
                url = str(e["adminURL"]).rstrip("/")
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with s.get(f"{url}/nodes/{node}", headers=self.headers()) as resp:
                        if resp.status == 200:
                            return url
        raise MeshError(f"no kubelet hosts node {node!r} "
                        f"(registered kubelets: {', '.join(sorted(kubelets)) or 'none'})")

    async def admin_request(self, base: str, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to an admin endpoint (`base` is its URL); its JSON answer. Raises `MeshError`."""
        async with self.session(request_timeout=10.0) as s, \
                s.request(method, base + path, json=body, headers=self.headers()) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise MeshError(f"{method} {base}{path}: HTTP {resp.status}: {text.strip()[:300]}")
            if not text.strip():
                return None
            try:
                return json.loads(text)
            except ValueError:  # health endpoints answer plain text
                return text

    async def component_request(self, instance: str, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to a registered component's admin endpoint. Raises `MeshError`."""
        urls = await self.admin_urls()
        if instance not in urls:
            raise MeshError(f"no admin endpoint registered for {instance!r} (known: {', '.join(sorted(urls))})")
        return await self.admin_request(urls[instance], method, path, body)

    async def node_op(self, node: str, op: str, body: Any = None, *, method: str = "POST") -> Any:
        """One kubelet admin operation on a node (`power-off`, `conditions`, ...); its JSON answer."""
        base = await self.kubelet_of(node)
        return await self.admin_request(base, method, f"/nodes/{node}/{op}".rstrip("/"), body)


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code (blocking tooling such as the compose driver).

    In a thread of its own when this thread already runs an event loop (asyncio.run would refuse).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class History:
    """The apiserver's history of a mesh: `await history()` is every record so far."""

    def __init__(self, endpoint: MeshEndpoint) -> None:
        self.endpoint = endpoint

    async def __call__(self, *, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every record (of the given types)."""
        return await self.endpoint.history(types=types)

    async def since(self, since: int, *, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The records after index `since`."""
        return await self.endpoint.history(since=since, types=types)

    async def last_index(self) -> int:
        """The index of the newest record (0 when there is none)."""
        return await self.endpoint.history_last_index()

    async def write(self, path: Path) -> Path:
        """Write every record to `path` as JSON lines; returns the path."""
        records = await self.endpoint.history()
        text = "".join(json.dumps(r, default=str) + "\n" for r in records)
        await asyncio.to_thread(_write_text, path, text)
        return path


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise EndpointError(f"cannot read {what} {path}: {exc}") from exc


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EndpointError(f"cannot read {what} {path}: {exc}") from exc


__all__ = ["EndpointError", "History", "MeshEndpoint", "MeshError", "describe_nodes", "node_is_ready", "run_blocking"]
