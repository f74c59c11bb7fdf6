"""Real kubectl 1.27-1.33 against a real apiserver process.

Every test runs against a fresh apiserver, on the oldest and newest installed kubectl, and the
core ones on every installed minor version (the `kubectl_version` and `edge_kubectl_version`
fixtures of tests/conftest.py; they skip when no kubectl.1.XX is installed). There is no
kubelet or controller here: the tests create Nodes, Leases, Pods and ReplicaSets themselves
and, where kubectl waits for a kubelet (drain), play the kubelet's part.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, KubectlCommand, RunKubectl, StartApiServer

# Every test runs on the oldest and newest installed kubectl (`edge_kubectl_version`); the core
# ones (get, create/apply/scale/label/delete) on every installed version (`kubectl_version`).
pytestmark = pytest.mark.kubectl
DEADLINE = 30.0
NODE = "node-1"

Json = dict[str, Any]


class Rest:
    """A minimal JSON client for setting up and checking state beside kubectl."""

    def __init__(self, session: aiohttp.ClientSession, server: ApiServer) -> None:
        self.session = session
        self.base = server.url
        self.headers = {"Content-Type": "application/json", **server.headers}

    async def call(self, method: str, path: str, body: Any = None, *, ctype: str | None = None,
                   params: dict[str, str] | None = None) -> tuple[int, Json]:
        headers = dict(self.headers)
        if ctype:
            headers["Content-Type"] = ctype
        data = json.dumps(body).encode() if body is not None else None
        async with self.session.request(method, self.base + path, data=data, headers=headers,
                                        params=params) as resp:
            doc: Json = await resp.json(content_type=None)
            return resp.status, doc

    async def watchers(self) -> int:
        """Live watch streams on the server (its /metrics gauge)."""
        async with self.session.get(self.base + "/metrics", headers=self.headers) as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line.startswith("apiserver_registered_watchers "):
                return int(float(line.split()[1]))
        raise AssertionError("apiserver_registered_watchers missing from /metrics")

    async def wait_for_watchers(self, n: int) -> None:
        """Until at least n watch streams are registered (kubectl's watch has really started)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + DEADLINE
        while await self.watchers() < n:
            assert loop.time() < end, f"fewer than {n} watchers registered"
            await asyncio.sleep(0.05)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        status, doc = await self.call(method, path, body, **kw)
        assert status in (200, 201), (method, path, status, doc)
        return doc


@pytest.fixture
async def server(apiserver: ApiServer) -> ApiServer:
    return apiserver


@pytest.fixture
async def rest(server: ApiServer) -> AsyncIterator[Rest]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield Rest(session, server)


def node_body(name: str = NODE) -> Json:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "Emulated Linux", "kernelVersion": "6.1.0",
                         "containerRuntimeVersion": "fake://1.0", "architecture": "amd64",
                         "operatingSystem": "linux", "machineID": "m", "systemUUID": "s", "bootID": "b",
                         "kubeProxyVersion": "v1.30.0"},
        },
    }


def pod_body(name: str, *, node: str | None = None, labels: dict[str, str] | None = None,
             owner: Json | None = None) -> Json:
    spec: Json = {"containers": [{"name": "c", "image": "nginx:1.25",
                                  "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if node:
        spec["nodeName"] = node
    md: Json = {"name": name, "labels": labels or {"app": name}}
    if owner:
        md["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


async def seed_cluster(rest: Rest) -> None:
    """A node with its lease, pods (bound and not), a replicaset and an event."""
    await rest.ok("POST", "/api/v1/nodes", node_body())
    await rest.ok("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NODE, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                 "renewTime": "2026-11-21T12:00:00.123456Z"}})
    web = await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("web-1", node=NODE, labels={"app": "web"}))
    await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("db-1", labels={"app": "db"}))
    await rest.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "other"}})
    await rest.ok("POST", "/api/v1/namespaces/other/pods", pod_body("elsewhere", node=NODE))
    await rest.ok("POST", "/apis/apps/v1/namespaces/default/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-rs"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}})
    await rest.ok("POST", "/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "web-1.abc"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1", "apiVersion": "v1",
                           "uid": web["metadata"]["uid"]},
        "reason": "Scheduled", "message": "Successfully assigned default/web-1 to node-1", "type": "Normal",
        "source": {"component": "default-scheduler"}, "count": 1,
        "firstTimestamp": "2026-11-21T12:00:00Z", "lastTimestamp": "2026-11-21T12:00:00Z"})


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, f"kubectl failed ({res.returncode}): {res.args}\n{res.stderr}\n{res.stdout}"
    return res.stdout


def names_in(table: str) -> list[str]:
    """First column of a kubectl table, header dropped (or the NAME column with -A)."""
    lines = [ln.split() for ln in table.strip().splitlines() if ln.strip()]
    if not lines:
        return []
    col = lines[0].index("NAME") if "NAME" in lines[0] else 0
    return [ln[col] for ln in lines[1:]]


# ------------------------------------------------------------------------------------ reads


async def test_get_variants(kubectl_version: str, kubectl: RunKubectl, server: ApiServer, rest: Rest) -> None:
    v = kubectl_version
    await seed_cluster(rest)
    url = server.url

    def kc(*args: str) -> str:
        return ok(kubectl(v, *args, server=url))

    out = kc("get", "nodes")
    assert names_in(out) == [NODE] and "Ready" in out
    wide = kc("get", "nodes", "-o", "wide")
    assert "INTERNAL-IP" in wide and "10.0.0.1" in wide and "fake://1.0" in wide
    node = json.loads(kc("get", "node", NODE, "-o", "json"))
    assert node["metadata"]["name"] == NODE and node["kind"] == "Node"
    assert f"name: {NODE}" in kc("get", "node", NODE, "-o", "yaml")

    assert sorted(names_in(kc("get", "pods"))) == ["db-1", "web-1"]
    pods_wide = kc("get", "pods", "-o", "wide")
    assert "NODE" in pods_wide and NODE in pods_wide
    assert names_in(kc("get", "pods", "-l", "app=web")) == ["web-1"]
    assert names_in(kc("get", "pods", "-l", "app in (db,x)")) == ["db-1"]
    assert names_in(kc("get", "pods", "-l", "app!=web")) == ["db-1"]
    all_ns = kc("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}")
    assert sorted(names_in(all_ns)) == ["elsewhere", "web-1"] and "NAMESPACE" in all_ns
    unbound = json.loads(kc("get", "pods", "-A", "--field-selector", "spec.nodeName=", "-o", "json"))
    assert [p["metadata"]["name"] for p in unbound["items"]] == ["db-1"]
    listed = json.loads(kc("get", "pods", "-o", "json"))
    assert listed["kind"] == "List" and len(listed["items"]) == 2
    assert "web-1" in kc("get", "pods", "-l", "app=web", "-o", "yaml")

    assert names_in(kc("get", "replicasets")) == ["web-rs"]
    assert "DESIRED" in kc("get", "rs", "-o", "wide")
    assert "No resources found" in kubectl(v, "get", "deployments", server=url).stderr
    leases = kc("get", "leases", "-A")
    assert NODE in leases and "kube-node-lease" in leases
    assert json.loads(kc("get", "lease", NODE, "-n", "kube-node-lease", "-o", "json"))["spec"]["holderIdentity"] == NODE
    events = kc("get", "events")
    assert "Scheduled" in events and "pod/web-1" in events
    assert "Successfully assigned" in kc("get", "events", "--field-selector", "involvedObject.name=web-1", "-o", "yaml")

    missing = kubectl(v, "get", "pod", "nope", server=url)
    assert missing.returncode != 0 and "NotFound" in missing.stderr
    bad = kubectl(v, "get", "pods", "--field-selector", "spec.bogus=1", server=url)
    assert bad.returncode != 0 and "BadRequest" in bad.stderr


async def test_describe_node_and_pod(edge_kubectl_version: str, kubectl: RunKubectl, server: ApiServer,
                                     rest: Rest) -> None:
    v = edge_kubectl_version
    await seed_cluster(rest)
    await rest.ok("POST", "/api/v1/namespaces/default/events", {
        "metadata": {"name": "node-1.xyz"},
        "involvedObject": {"kind": "Node", "name": NODE, "uid": NODE, "namespace": ""},
        "reason": "NodeReady", "message": "Node node-1 status is now: NodeReady", "type": "Normal",
        "source": {"component": "kubelet", "host": NODE}, "count": 1,
        "firstTimestamp": "2026-11-21T12:00:00Z", "lastTimestamp": "2026-11-21T12:00:00Z"})
    out = ok(kubectl(v, "describe", "node", NODE, server=server.url))
    for expected in ("Name:               node-1", "Lease:", "HolderIdentity:  node-1", "RenewTime:",
                     "KubeletReady", "InternalIP:  10.0.0.1", "Kubelet Version:", "Non-terminated Pods:",
                     "web-1", "elsewhere", "Allocated resources:"):
        assert expected in out, f"{expected!r} missing from describe node:\n{out}"
    assert "(2 in total)" in out
    out = ok(kubectl(v, "describe", "pod", "web-1", server=server.url))
    for expected in ("Name:", "web-1", "Node:", NODE, "app=web", "nginx:1.25", "Scheduled",
                     "Successfully assigned", "node.kubernetes.io/not-ready:NoExecute"):
        assert expected in out, f"{expected!r} missing from describe pod:\n{out}"


async def test_discovery_and_version(edge_kubectl_version: str, kubectl: RunKubectl, server: ApiServer) -> None:
    v = edge_kubectl_version
    out = ok(kubectl(v, "api-resources", server=server.url))
    rows = {ln.split()[0] for ln in out.splitlines()[1:] if ln.strip()}
    assert {"pods", "nodes", "events", "namespaces", "deployments", "replicasets", "daemonsets",
            "leases"} <= rows
    assert " po " in out and "deploy" in out
    wide = ok(kubectl(v, "api-resources", "-o", "wide", server=server.url))
    assert "watch" in wide
    ver = json.loads(ok(kubectl(v, "version", "-o", "json", server=server.url)))
    assert ver["serverVersion"]["major"] == "1" and ver["serverVersion"]["gitVersion"].startswith("v1.")
    assert ver["clientVersion"]["minor"].rstrip("+") == v.split(".")[1]


# ------------------------------------------------------------------------------------ writes


def deployment_yaml(image: str, replicas: int = 1) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: nginx
        image: {image}
        env:
        - {{name: A, value: "1"}}
"""


async def test_create_apply_scale_delete(kubectl_version: str, kubectl: RunKubectl, server: ApiServer,
                                         rest: Rest) -> None:
    v = kubectl_version
    url = server.url
    pod_yaml = json.dumps(pod_body("created", labels={"app": "created"}))
    out = ok(kubectl(v, "create", "-f", "-", server=url, input=pod_yaml))
    assert "pod/created created" in out
    dup = kubectl(v, "create", "-f", "-", server=url, input=pod_yaml)
    assert dup.returncode != 0 and "AlreadyExists" in dup.stderr

    out = ok(kubectl(v, "apply", "-f", "-", server=url, input=deployment_yaml("nginx:1.25")))
    assert "deployment.apps/web created" in out
    dep = await rest.ok("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert dep["metadata"]["generation"] == 1
    assert "kubectl.kubernetes.io/last-applied-configuration" in dep["metadata"]["annotations"]
    out = ok(kubectl(v, "apply", "-f", "-", server=url, input=deployment_yaml("nginx:1.26")))
    assert "deployment.apps/web configured" in out
    dep2 = await rest.ok("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert dep2["metadata"]["generation"] == 2
    assert dep2["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"
    assert int(dep2["metadata"]["resourceVersion"]) > int(dep["metadata"]["resourceVersion"])
    out = ok(kubectl(v, "apply", "-f", "-", server=url, input=deployment_yaml("nginx:1.26")))
    assert "unchanged" in out

    unknown = deployment_yaml("nginx:1.26").replace("  replicas:", "  bogusField: 1\n  replicas:")
    bad = kubectl(v, "apply", "-f", "-", server=url, input=unknown)
    assert bad.returncode != 0 and "bogusField" in bad.stderr

    ok(kubectl(v, "scale", "deployment", "web", "--replicas=3", server=url))
    dep3 = await rest.ok("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert dep3["spec"]["replicas"] == 3 and dep3["metadata"]["generation"] == 3
    ready = ok(kubectl(v, "get", "deploy", "web", server=url))
    assert "0/3" in ready

    ok(kubectl(v, "label", "pod", "created", "tier=front", server=url))
    ok(kubectl(v, "label", "pod", "created", "app-", server=url))
    pod = await rest.ok("GET", "/api/v1/namespaces/default/pods/created")
    assert pod["metadata"]["labels"] == {"tier": "front"}

    out = ok(kubectl(v, "delete", "pod", "created", server=url, timeout=DEADLINE))
    assert 'pod "created" deleted' in out
    status, _ = await rest.call("GET", "/api/v1/namespaces/default/pods/created")
    assert status == 404

    await rest.ok("POST", "/api/v1/nodes", node_body())
    await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("bound", node=NODE))
    res = ok(kubectl(v, "delete", "pod", "bound", "--grace-period=0", "--force", server=url))
    assert 'pod "bound" force deleted' in res
    status, _ = await rest.call("GET", "/api/v1/namespaces/default/pods/bound")
    assert status == 404

    ok(kubectl(v, "delete", "deployment", "web", server=url, timeout=DEADLINE))
    status, _ = await rest.call("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert status == 404


async def test_label_taint_cordon(edge_kubectl_version: str, kubectl: RunKubectl, server: ApiServer,
                                  rest: Rest) -> None:
    v = edge_kubectl_version
    url = server.url
    await rest.ok("POST", "/api/v1/nodes", node_body())
    path = f"/api/v1/nodes/{NODE}"

    ok(kubectl(v, "label", "node", NODE, "zone=a", server=url))
    assert (await rest.ok("GET", path))["metadata"]["labels"]["zone"] == "a"
    ok(kubectl(v, "label", "node", NODE, "zone=b", "--overwrite", server=url))
    assert (await rest.ok("GET", path))["metadata"]["labels"]["zone"] == "b"
    ok(kubectl(v, "label", "node", NODE, "zone-", server=url))
    assert "zone" not in (await rest.ok("GET", path))["metadata"]["labels"]

    ok(kubectl(v, "taint", "node", NODE, "dedicated=gpu:NoSchedule", server=url))
    ok(kubectl(v, "taint", "node", NODE, "maint:NoExecute", server=url))
    taints = (await rest.ok("GET", path))["spec"]["taints"]
    assert sorted((t["key"], t["effect"]) for t in taints) == [("dedicated", "NoSchedule"), ("maint", "NoExecute")]
    ok(kubectl(v, "taint", "node", NODE, "dedicated=gpu:NoSchedule-", server=url))
    taints = (await rest.ok("GET", path))["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [("maint", "NoExecute")]
    ok(kubectl(v, "taint", "node", NODE, "maint-", server=url))
    assert not (await rest.ok("GET", path))["spec"].get("taints")
    assert "Taints:             <none>" in ok(kubectl(v, "describe", "node", NODE, server=url))

    ok(kubectl(v, "cordon", NODE, server=url))
    assert (await rest.ok("GET", path))["spec"]["unschedulable"] is True
    assert "SchedulingDisabled" in ok(kubectl(v, "get", "nodes", server=url))
    ok(kubectl(v, "uncordon", NODE, server=url))
    assert not (await rest.ok("GET", path))["spec"].get("unschedulable")
    assert "SchedulingDisabled" not in ok(kubectl(v, "get", "nodes", server=url))


async def play_kubelet(rest: Rest, pods: list[tuple[str, str]], done: asyncio.Event) -> list[str]:
    """Finish the deletion of each (namespace, name) once it is terminating, as a kubelet would."""
    finished: list[str] = []
    remaining = list(pods)
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while remaining and loop.time() < end and not done.is_set():
        for ns, name in list(remaining):
            status, pod = await rest.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
            if status == 404:
                remaining.remove((ns, name))
                continue
            if pod["metadata"].get("deletionTimestamp"):
                assert pod["metadata"].get("deletionGracePeriodSeconds") is not None
                await rest.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {
                    "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": pod["metadata"]["uid"]}})
                finished.append(f"{ns}/{name}")
                remaining.remove((ns, name))
        await asyncio.sleep(0.1)
    return finished


async def test_drain(edge_kubectl_version: str, kubectl: RunKubectl, server: ApiServer, rest: Rest) -> None:
    v = edge_kubectl_version
    await rest.ok("POST", "/api/v1/nodes", node_body())
    await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("bare", node=NODE))
    ds = await rest.ok("POST", "/apis/apps/v1/namespaces/default/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}})
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    await rest.ok("POST", "/api/v1/namespaces/default/pods",
                  pod_body("agent-x", node=NODE, labels={"app": "agent"}, owner=owner))
    await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("elsewhere", node="node-2"))

    done = asyncio.Event()
    kubelet = asyncio.create_task(play_kubelet(rest, [("default", "bare")], done))
    try:
        res = await asyncio.to_thread(
            kubectl, v, "drain", NODE, "--ignore-daemonsets", "--force", "--delete-emptydir-data",
            "--timeout=60s", server=server.url, timeout=90)
    finally:
        done.set()
        finished = await kubelet
    ok(res)
    assert "default/bare" in finished
    assert f"node/{NODE} drained" in res.stdout
    assert "agent-x" in res.stderr  # "Warning: ignoring DaemonSet-managed Pods: default/agent-x"
    node = await rest.ok("GET", f"/api/v1/nodes/{NODE}")
    assert node["spec"]["unschedulable"] is True
    left = await rest.ok("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={NODE}"})
    assert [p["metadata"]["name"] for p in left["items"]] == ["agent-x"]
    status, _ = await rest.call("GET", "/api/v1/namespaces/default/pods/elsewhere")
    assert status == 200


# ------------------------------------------------------------------------------------ watch


async def read_until(stream: asyncio.StreamReader, lines: list[str], needle: str, deadline: float) -> None:
    """Read lines into `lines` until one contains `needle`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not any(needle in ln for ln in lines):
        remaining = end - loop.time()
        if remaining <= 0:
            raise AssertionError(f"{needle!r} never appeared in the watch output: {lines}")
        line = await asyncio.wait_for(stream.readline(), remaining)
        if not line:
            raise AssertionError(f"watch output ended before {needle!r} appeared: {lines}")
        lines.append(line.decode())


async def test_get_watch(edge_kubectl_version: str, kubectl_command: KubectlCommand, server: ApiServer,
                         rest: Rest) -> None:
    v = edge_kubectl_version
    await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("w1"))
    args = ("get", "pods", "-w", "--output-watch-events")
    with kubectl_command(v, *args, server=server.url) as (argv, env):
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            lines: list[str] = []
            await read_until(proc.stdout, lines, "w1", DEADLINE)
            await rest.wait_for_watchers(1)
            # An update while watching: the change must arrive as a MODIFIED row.
            await rest.ok("PATCH", "/api/v1/namespaces/default/pods/w1", {"metadata": {"labels": {"x": "y"}}},
                          ctype="application/merge-patch+json")
            await read_until(proc.stdout, lines, "MODIFIED", DEADLINE)
            await rest.ok("POST", "/api/v1/namespaces/default/pods", pod_body("w2"))
            await read_until(proc.stdout, lines, "w2", DEADLINE)
            await rest.ok("DELETE", "/api/v1/namespaces/default/pods/w2")
            await read_until(proc.stdout, lines, "DELETED", DEADLINE)
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()
    modified = next(ln for ln in lines if "MODIFIED" in ln)
    assert "w1" in modified
    assert "w2" in next(ln for ln in lines if "DELETED" in ln)


async def test_get_single_object_watch_json(edge_kubectl_version: str, kubectl_command: KubectlCommand,
                                            server: ApiServer, rest: Rest) -> None:
    v = edge_kubectl_version
    await rest.ok("POST", "/api/v1/nodes", node_body())
    with kubectl_command(v, "get", "node", NODE, "-w", "-o", "json", server=server.url) as (argv, env):
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            lines: list[str] = []
            await read_until(proc.stdout, lines, f'"name": "{NODE}"', DEADLINE)
            # kubectl watches from resourceVersion=0 and drops the first ADDED: an update made
            # before its watch is registered would be folded into that ADDED and never shown.
            await rest.wait_for_watchers(1)
            await rest.ok("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"watched": "yes"}}},
                          ctype="application/merge-patch+json")
            await read_until(proc.stdout, lines, '"watched": "yes"', DEADLINE)
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()


# ------------------------------------------------------------------------------------ auth


async def test_token_protected_apiserver(edge_kubectl_version: str, kubectl: RunKubectl,
                                         start_apiserver: StartApiServer) -> None:
    """--token-file with HTTPS: client-go sends a kubeconfig's token only over TLS."""
    v = edge_kubectl_version
    token = "kubemesh-test-token-4f1c"
    srv = await start_apiserver(token=token, tls=True)
    url = srv.url
    assert url.startswith("https://")
    good = ok(kubectl(v, "get", "namespaces", server=url, token=token, ca=srv.ca))
    assert {"default", "kube-system", "kube-node-lease"} <= set(names_in(good))
    created = kubectl(v, "create", "-f", "-", server=url, token=token, ca=srv.ca,
                          input=json.dumps(node_body()))
    assert "node/node-1 created" in ok(created)
    assert names_in(ok(kubectl(v, "get", "nodes", server=url, token=token, ca=srv.ca))) == [NODE]

    wrong = kubectl(v, "get", "namespaces", server=url, token="wrong", ca=srv.ca)
    assert wrong.returncode != 0
    assert "Unauthorized" in wrong.stderr or "provide credentials" in wrong.stderr, wrong.stderr
    # With no credentials at all kubectl answers the 401 by prompting for a username.
    none = kubectl(v, "get", "namespaces", "--insecure-skip-tls-verify", server=url, input="")
    assert none.returncode != 0
    assert "Please enter Username" in none.stdout or "provide credentials" in none.stderr, none

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/v1/namespaces", ssl=srv.ssl_context() or True) as resp:
            assert resp.status == 401
            status = await resp.json()
            assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)
        async with session.get(f"{url}/readyz", ssl=srv.ssl_context() or True) as resp:
            assert resp.status == 200
