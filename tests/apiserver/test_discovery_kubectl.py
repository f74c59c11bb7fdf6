"""Real kubectl (1.27-1.33) against a tiny server that serves only discovery, OpenAPI and a node Table.

The server is built here from `apiserver.discovery`, `apiserver.openapi` and `apiserver.tables`
alone, so these tests prove the documents themselves are what kubectl accepts, independently
of the real apiserver's routing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from documents import (
    aggregated_discovery,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    openapi_v2_protobuf,
    openapi_v3_document,
    openapi_v3_index,
)

from kubemesh.apiserver.discovery import GIT_VERSION, SERVER_MINOR, aggregated_media_type, version_info
from kubemesh.apiserver.openapi import OPENAPI_V2_CONTENT_TYPE
from kubemesh.apiserver.tables import to_table, wants_table, watch_event_table
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import NODES, Obj

pytestmark = pytest.mark.kubectl

NOW = 1_800_000_000.0
VERSIONS = ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"]


def _kubectl_dir() -> Path | None:
    found = shutil.which("kubectl")
    return Path(os.path.realpath(found)).parent if found else None


def _kubectl(version: str) -> Path:
    base = _kubectl_dir()
    binary = base / f"kubectl.{version}" if base else None
    if binary is None or not binary.exists():
        pytest.skip(f"kubectl.{version} is not installed")
    return binary


READY = [{"type": "Ready", "status": "True"}]
NODES_DATA: list[Obj] = [
    {
        "metadata": {
            "name": "node-1",
            "uid": "u1",
            "resourceVersion": "40",
            "creationTimestamp": format_time(NOW - 300),
            "labels": {"node-role.kubernetes.io/control-plane": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0-kubemesh", "osImage": "Emulated Linux"},
        },
    },
    {
        "metadata": {
            "name": "node-2",
            "uid": "u2",
            "resourceVersion": "41",
            "creationTimestamp": format_time(NOW - 2 * 86400 - 3 * 3600),
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0-kubemesh"},
        },
    },
]


@dataclass
class TinyServer:
    aggregated: bool
    url: str = ""
    requests: list[tuple[str, str, dict[str, str], str]] = field(default_factory=list)
    posted: list[Obj] = field(default_factory=list)
    served_types: dict[str, str] = field(default_factory=dict)

    def paths(self, method: str = "GET") -> list[str]:
        return [p for m, p, _, _ in self.requests if m == method]


def _json(body: Any, *, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, headers={"Content-Type": content_type})


def _not_found(path: str) -> web.Response:
    return _json(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"the server could not find the requested resource ({path})",
            "reason": "NotFound",
            "code": 404,
        },
        status=404,
    )


def _make_app(server: TinyServer) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        accept = request.headers.get("Accept", "")
        server.requests.append((request.method, path, dict(request.query), accept))
        parts = [p for p in path.split("/") if p]
        if request.method == "POST" and len(parts) == 5 and parts[:2] == ["api", "v1"] and parts[4] == "pods":
            body = await request.json()
            server.posted.append({"query": dict(request.query), "body": body})
            meta = body.setdefault("metadata", {})
            meta.update(
                {
                    "namespace": parts[3],
                    "uid": "uid-1",
                    "resourceVersion": "43",
                    "creationTimestamp": format_time(NOW),
                }
            )
            return _json(body, status=201)
        web_deploy = "/apis/apps/v1/namespaces/default/deployments/web"
        if request.method == "PATCH" and path == web_deploy + "/scale":
            patch = await request.json()
            server.posted.append(
                {
                    "query": dict(request.query),
                    "body": patch,
                    "path": path,
                    "content_type": request.headers.get("Content-Type", ""),
                }
            )
            return _json(
                {
                    "kind": "Scale",
                    "apiVersion": "autoscaling/v1",
                    "metadata": {"name": "web", "namespace": "default", "resourceVersion": "45"},
                    "spec": {"replicas": patch["spec"]["replicas"]},
                    "status": {"replicas": 1},
                }
            )
        if request.method == "GET" and path == web_deploy:
            return _json(
                {
                    "kind": "Deployment",
                    "apiVersion": "apps/v1",
                    "metadata": {
                        "name": "web",
                        "namespace": "default",
                        "resourceVersion": "44",
                        "creationTimestamp": format_time(NOW),
                    },
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
                }
            )
        if request.method != "GET":
            return _not_found(path)
        if path == "/version":
            return _json(version_info())
        if path in ("/api", "/apis"):
            media_type = aggregated_media_type(accept) if server.aggregated else None
            if media_type is not None:
                server.served_types[path] = media_type
                return _json(aggregated_discovery(core=path == "/api", media_type=media_type), content_type=media_type)
            server.served_types[path] = "application/json"
            host = request.host or "127.0.0.1"
            return _json(api_versions(server_address=host) if path == "/api" else api_group_list())
        if path == "/api/v1/nodes" and request.query.get("watch", "").lower() == "true":
            # One MODIFIED event (node-2 turns Ready), then the stream ends, which ends `get -w`.
            changed = {**NODES_DATA[1], "status": {**NODES_DATA[1]["status"], "conditions": READY}}
            changed["metadata"] = {**NODES_DATA[1]["metadata"], "resourceVersion": "44"}
            obj = watch_event_table(NODES, changed, now=NOW) if wants_table(accept) else changed
            stream = web.StreamResponse(headers={"Content-Type": "application/json"})
            await stream.prepare(request)
            await stream.write(orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n")
            await stream.write_eof()
            return stream
        if path == "/api/v1/nodes":
            if wants_table(accept):
                include = request.query.get("includeObject", "Metadata")
                return _json(to_table(NODES, NODES_DATA, now=NOW, resource_version="42", include_object=include))
            return _json(
                {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "42"},
                    "items": NODES_DATA,
                }
            )
        if len(parts) == 4 and parts[:3] == ["api", "v1", "nodes"]:
            found = [n for n in NODES_DATA if n["metadata"]["name"] == parts[3]]
            if not found:
                return _not_found(path)
            if wants_table(accept):
                rv = found[0]["metadata"]["resourceVersion"]
                return _json(to_table(NODES, found, now=NOW, resource_version=rv))
            return _json({"kind": "Node", "apiVersion": "v1", **found[0]})
        if len(parts) == 2 and parts[0] == "api":
            doc = api_resource_list("", parts[1])
            return _json(doc) if doc is not None else _not_found(path)
        if len(parts) == 2 and parts[0] == "apis":
            doc = api_group(parts[1])
            return _json(doc) if doc is not None else _not_found(path)
        if len(parts) == 3 and parts[0] == "apis":
            doc = api_resource_list(parts[1], parts[2])
            return _json(doc) if doc is not None else _not_found(path)
        if path == "/openapi/v2":
            return web.Response(body=openapi_v2_protobuf(), headers={"Content-Type": OPENAPI_V2_CONTENT_TYPE})
        if path == "/openapi/v3":
            return _json(openapi_v3_index())
        if path.startswith("/openapi/v3/"):
            doc = openapi_v3_document(path.removeprefix("/openapi/v3/"))
            return _json(doc) if doc is not None else _not_found(path)
        return _not_found(path)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@pytest.fixture(params=["aggregated", "legacy"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[TinyServer]:
    srv = TinyServer(aggregated=request.param == "aggregated")
    runner = web.AppRunner(_make_app(srv), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    srv.url = f"http://{host}:{port}"
    try:
        yield srv
    finally:
        await runner.cleanup()


@dataclass
class Result:
    code: int
    out: str
    err: str


async def _run(version: str, server: TinyServer, tmp_path: Path, *args: str, stdin: bytes | None = None) -> Result:
    binary = _kubectl(version)
    env = {**os.environ, "KUBECONFIG": "/dev/null", "HOME": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        "--server",
        server.url,
        "--cache-dir",
        str(tmp_path / "cache"),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def _table_rows(text: str) -> dict[str, list[str]]:
    """Rows of kubectl's column output keyed by their first cell."""
    return {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}


def _check_discovery_mode(server: TinyServer, version: str) -> None:
    if not server.aggregated:
        assert server.served_types.get("/apis") == "application/json"
        assert "/apis/apps/v1" in server.paths()  # legacy: one request per group/version
        return
    expected = "v2" if version >= "1.30" else "v2beta1"
    assert server.served_types["/api"].split(";")[2] == f"v={expected}"
    assert server.served_types["/apis"].split(";")[2] == f"v={expected}"
    assert "/apis/apps/v1" not in server.paths()  # the aggregated documents were accepted


@pytest.mark.parametrize("version", VERSIONS)
async def test_api_resources(version: str, server: TinyServer, tmp_path: Path) -> None:
    res = await _run(version, server, tmp_path, "api-resources")
    assert res.code == 0, res.err
    rows = _table_rows(res.out)
    assert rows["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["nodes"] == ["nodes", "no", "v1", "false", "Node"]
    assert rows["deployments"] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    assert rows["leases"] == ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    assert rows["poddisruptionbudgets"] == [
        "poddisruptionbudgets",
        "pdb",
        "policy/v1",
        "true",
        "PodDisruptionBudget",
    ]
    assert rows["bindings"] == ["bindings", "v1", "true", "Binding"]
    assert "pods/eviction" not in rows  # subresources are not listed
    _check_discovery_mode(server, version)

    wide = await _run(version, server, tmp_path / "w", "api-resources", "-o", "wide", "--api-group", "")
    assert wide.code == 0, wide.err
    pods = _table_rows(wide.out)["pods"]
    verbs = " ".join(pods[5:-1]).strip("[]").replace(",", " ").split()  # "[a b]" or "a,b" by version
    assert verbs == ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    assert pods[-1] == "all"


@pytest.mark.parametrize("version", VERSIONS)
async def test_get_nodes_prints_table_columns(version: str, server: TinyServer, tmp_path: Path) -> None:
    res = await _run(version, server, tmp_path, "get", "nodes")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = _table_rows(res.out)
    assert rows["node-1"] == ["node-1", "Ready,SchedulingDisabled", "control-plane", "5m", "v1.30.0-kubemesh"]
    assert rows["node-2"] == ["node-2", "NotReady", "<none>", "2d3h", "v1.30.0-kubemesh"]
    _check_discovery_mode(server, version)

    wide = await _run(version, server, tmp_path, "get", "no", "-o", "wide")
    assert wide.code == 0, wide.err
    header = wide.out.splitlines()[0]
    for column in ("INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"):
        assert column in header
    assert "10.0.0.1" in _table_rows(wide.out)["node-1"]

    labels = await _run(version, server, tmp_path, "get", "nodes", "--show-labels")
    assert labels.code == 0, labels.err
    assert "node-role.kubernetes.io/control-plane=" in _table_rows(labels.out)["node-1"][-1]


@pytest.mark.parametrize("version", VERSIONS)
async def test_version(version: str, server: TinyServer, tmp_path: Path) -> None:
    res = await _run(version, server, tmp_path, "version", "-o", "json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["serverVersion"]["gitVersion"] == GIT_VERSION
    assert doc["serverVersion"]["minor"] == SERVER_MINOR
    skew = abs(int(version.split(".")[1]) - int(SERVER_MINOR))
    assert ("exceeds the supported minor version skew" in res.err) == (skew > 1), res.err


POD_YAML = b"""\
apiVersion: v1
kind: Pod
metadata:
  name: demo
spec:
  containers:
  - name: app
    image: nginx:1.27
"""


@pytest.mark.parametrize("version", VERSIONS)
async def test_create_passes_validation(version: str, server: TinyServer, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_bytes(POD_YAML)
    res = await _run(version, server, tmp_path, "create", "-f", str(manifest), "--dry-run=server", "-o", "name")
    assert res.code == 0, res.err
    assert res.out.strip() == "pod/demo"
    assert len(server.posted) == 1
    query = server.posted[0]["query"]
    assert query.get("dryRun") == "All"
    assert query.get("fieldValidation") == "Strict"  # validation delegated to the server
    assert server.posted[0]["body"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    gets = server.paths()
    if version in ("1.27", "1.28"):
        assert "/openapi/v2" in gets
    else:
        assert "/openapi/v3/api/v1" in gets
        assert "/openapi/v2" not in gets


@pytest.mark.parametrize("version", VERSIONS)
async def test_apply_passes_validation(version: str, server: TinyServer, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_bytes(POD_YAML)
    res = await _run(version, server, tmp_path, "apply", "-f", str(manifest), "--dry-run=server")
    assert res.code == 0, res.err
    assert "pod/demo created (server dry run)" in res.out
    assert "/api/v1/namespaces/default/pods/demo" in server.paths()  # 404, so apply creates
    query = server.posted[0]["query"]
    assert query.get("fieldManager") == "kubectl-client-side-apply"
    assert query.get("fieldValidation") == "Strict"


@pytest.mark.parametrize("version", VERSIONS)
async def test_get_single_node_sort_by_and_watch(version: str, server: TinyServer, tmp_path: Path) -> None:
    one = await _run(version, server, tmp_path, "get", "node", "node-1")
    assert one.code == 0, one.err
    assert _table_rows(one.out)["node-1"][1] == "Ready,SchedulingDisabled"
    assert "node-2" not in one.out

    # --sort-by asks for includeObject=Object and sorts by fields of the full objects.
    by_age = await _run(version, server, tmp_path, "get", "nodes", "--sort-by=.metadata.creationTimestamp")
    assert by_age.code == 0, by_age.err
    assert [line.split()[0] for line in by_age.out.splitlines()[1:]] == ["node-2", "node-1"]
    assert any(q.get("includeObject") == "Object" for _, p, q, _ in server.requests if p == "/api/v1/nodes")

    watched = await _run(version, server, tmp_path, "get", "nodes", "-w")
    assert watched.code == 0, watched.err
    lines = [line.split() for line in watched.out.splitlines()]
    assert lines[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[-1][:2] == ["node-2", "Ready"]  # the watch event, printed from its one-row Table
    watch_query = next(q for _, p, q, _ in server.requests if p == "/api/v1/nodes" and "watch" in q)
    assert watch_query["resourceVersion"] == "42"  # started from the Table's resourceVersion


@pytest.mark.parametrize("version", VERSIONS)
async def test_scale_uses_the_scale_subresource(version: str, server: TinyServer, tmp_path: Path) -> None:
    # The Scale kind comes from the deployments/scale discovery entry (autoscaling/v1), although the
    # autoscaling group itself is not advertised.
    res = await _run(version, server, tmp_path, "scale", "deployment", "web", "--replicas=3")
    assert res.code == 0, res.err
    assert "deployment.apps/web scaled" in res.out
    assert server.posted[-1]["body"] == {"spec": {"replicas": 3}}
    assert server.posted[-1]["content_type"].startswith("application/merge-patch+json")
