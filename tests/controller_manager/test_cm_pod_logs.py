"""`kubectl logs` and the official Python client's `read_namespaced_pod_log` on a mesh; exec and port-forward refused.

One mesh (one node, clock rate 10) for the module. The emulated containers print what their
pod's `kubemesh.io/log` annotations say, framed by the kubelet's `[kubemesh]` lines (start with
the container ID's first 12 hex digits, SIGTERM, exit with its code), see
`kubemesh.kubelet.containerlogs`. With the oldest and the newest installed kubectl (1.27 and
1.33), each in a namespace of its own:

* `-c`, `--tail`, `--timestamps`, the default container of a two-container pod;
* `--previous` of a container that exits 3 every 2 cluster seconds and is restarted
  (`restartPolicy: Always`): the previous run is the one `lastState.terminated` names (its ID
  in the start line) and ends with its exit line; checked when the pod's status did not
  change around the call (a restart in between would make either answer right);
* `-f` of a running container: kubectl returns once the run has ended, with every line;
* errors in kube-apiserver's words: a container waiting to start, no previous run;
* `exec`, `attach` and `port-forward`: a 400 that names the subresource, printed by kubectl,
  which exits non-zero instead of waiting.

A follow stream whose client leaves while the container prints nothing ends at the kubelet
too (its admin endpoint counts the streams it serves, `logStreams`).

The Python client reads the same logs (container, tail, timestamps, previous, follow) and
gets the 400 a two-container pod without `container` answers, a 422 for a negative `tailLines`,
a 404 for a missing pod, and no content for a pod no node runs yet.

Every wait is in cluster seconds (`MeshEnv.until`); nothing asserts on wall time.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from cm_e2e import Story, node_of, phase
from cm_mesh import MeshEnv, start_mesh
from kubernetes import client as _k8s_client
from kubernetes import config as _k8s_config

from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.model.kinds import NAMESPACES, PODS, Obj

# The official client is untyped: use it as such.
k8s_client: Any = _k8s_client
k8s_config: Any = _k8s_config

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module")]

RATE = 10.0
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")
STARTED = re.compile(r'^\[kubemesh\] container "(?P<name>[^"]+)" started \(image (?P<image>\S+), '
                     r"id (?P<id>[0-9a-f]{12}), restart (?P<restart>\d+)\)$")
NOT_SUPPORTED = "is not supported by kubemesh: its containers are emulated and run no processes"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh_env() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=1, rate=RATE):
        yield env


def pod(name: str, ns: str, *, containers: tuple[str, ...] = ("app",), restart: str = "Always",
        annotations: dict[str, str] | None = None, scheduler: str | None = None) -> Obj:
    spec: Obj = {"restartPolicy": restart,
                 "containers": [{"name": c, "image": f"registry.example/{c}:1.0"} for c in containers]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}}, "spec": spec}


async def create(env: MeshEnv, ns: str, *pods: Obj) -> None:
    try:
        await env.client.get(NAMESPACES, ns)
    except NotFoundError:
        await env.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for p in pods:
        await env.client.create(PODS, p, namespace=ns)


def statuses(p: Obj) -> dict[str, Obj]:
    return {s["name"]: s for s in (p.get("status") or {}).get("containerStatuses") or []}


async def running(env: MeshEnv, ns: str, name: str, container: str) -> Obj:
    async def check() -> Obj | None:
        p = await env.client.get(PODS, name, namespace=ns)
        return p if "running" in (statuses(p).get(container) or {}).get("state", {}) else None
    result: Obj = await env.until(check, within=60, what=f"{ns}/{name} {container} running")
    return result


def short_id(container_id: str) -> str:
    return container_id.rsplit("/", 1)[-1][:12]


async def previous_run_checked(env: MeshEnv, ns: str, name: str, read: Callable[[], Awaitable[str]]) -> list[str]:
    """`read()`'s lines (a `--previous` read), once the pod's status was the same before and after it.

    The lines must be the run `lastState.terminated` names: its start line carries that ID. The
    kubelet's container state moves a moment before its status write lands, so a read that
    disagrees is tried again; only agreement ends the wait.
    """
    disagreements: list[tuple[list[str], Obj]] = []

    async def attempt() -> list[str] | None:
        before = statuses(await env.client.get(PODS, name, namespace=ns))["main"]
        if not before.get("lastState", {}).get("terminated"):
            return None
        lines = (await read()).splitlines()
        after = statuses(await env.client.get(PODS, name, namespace=ns))["main"]
        if after["restartCount"] != before["restartCount"]:
            return None  # restarted meanwhile: either run's log would be right
        started = STARTED.match(lines[0]) if lines else None
        if started is None or started["id"] != short_id(before["lastState"]["terminated"]["containerID"]):
            disagreements.append((lines, before))
            return None
        return lines
    try:
        result: list[str] = await env.until(attempt, within=120, what=f"a --previous read of {ns}/{name}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; reads that disagreed with the status: {disagreements[-3:]}") from None
    return result


# ---------------------------------------------------------------------------------- kubectl


async def test_kubectl_logs_previous_follow_and_refused_exec(mesh_env: MeshEnv, edge_kubectl_version: str) -> None:
    env = mesh_env
    story = Story(env, edge_kubectl_version)
    ns = f"logs-{edge_kubectl_version.replace('.', '')}"
    await create(env, ns,
                 pod("talker", ns, containers=("app", "sidecar"),
                     annotations={"kubemesh.io/log": "hello from app\nready", "kubemesh.io/log.sidecar": "sidecar up"}),
                 pod("crasher", ns, containers=("main",),
                     annotations={"kubemesh.io/run-seconds": "2", "kubemesh.io/exit-code": "3",
                                  "kubemesh.io/log": "working"}),
                 pod("follower", ns, containers=("main",), restart="Never",
                     annotations={"kubemesh.io/run-seconds": "20", "kubemesh.io/log-interval": "3",
                                  "kubemesh.io/log": "tick 1\ntick 2\ntick 3\ntick 4\ntick 5"}),
                 pod("slowstart", ns, containers=("main",), annotations={"kubemesh.io/start-delay": "100000"}))

    follower = await running(env, ns, "follower", "main")
    follow = asyncio.ensure_future(story.run("logs", "-f", "follower", "-n", ns, within=120))
    talker = await running(env, ns, "talker", "sidecar")

    # The default container (the first, as kubectl says), -c, --tail, --timestamps.
    lines = (await story.run("logs", "talker", "-n", ns)).splitlines()
    started = STARTED.match(lines[0])
    assert started and started["name"] == "app" and started["image"] == "registry.example/app:1.0", lines
    assert started["id"] == short_id(statuses(talker)["app"]["containerID"]) and started["restart"] == "0"
    assert lines[1:] == ["hello from app", "ready"]
    assert (await story.run("logs", "talker", "-c", "sidecar", "-n", ns)).splitlines()[1:] == ["sidecar up"]
    assert await story.run("logs", "talker", "-c", "app", "--tail", "1", "-n", ns) == "ready\n"
    stamped = (await story.run("logs", "talker", "-c", "app", "--timestamps", "-n", ns)).splitlines()
    assert len(stamped) == 3 and all(STAMP.match(ln) for ln in stamped), stamped
    assert [STAMP.sub("", ln) for ln in stamped] == lines

    # Errors as kube-apiserver relays the kubelet's words.
    err = await story.fails("logs", "talker", "-c", "app", "--previous", "-n", ns)
    assert 'previous terminated container "app" in pod "talker" not found' in err.stderr, err.stderr
    err = await story.fails("logs", "slowstart", "-n", ns)
    assert ('Error from server (BadRequest): container "main" in pod "slowstart" is waiting to start: '
            "ContainerCreating") in err.stderr, err.stderr

    # --previous: the run that exited 3 before the current one.
    async def read_previous() -> str:
        return await story.run("logs", "crasher", "--previous", "-n", ns)
    prev = await previous_run_checked(env, ns, "crasher", read_previous)
    assert prev[1:] == ["working", "[kubemesh] exited with code 3 (Error)"], prev

    # -f: kubectl followed the run to its end (it was running when kubectl started).
    assert "running" in statuses(follower)["main"]["state"]
    out = (await follow).splitlines()
    assert out[1:] == ["tick 1", "tick 2", "tick 3", "tick 4", "tick 5", "[kubemesh] exited with code 0 (Completed)"]
    assert STARTED.match(out[0])
    assert phase(await env.client.get(PODS, "follower", namespace=ns)) == "Succeeded"

    # exec, attach, port-forward: a clear 400, printed, never a hang.
    err = await story.fails("exec", "talker", "-c", "sidecar", "-n", ns, "--", "ls", "/")
    assert (f'Error from server (BadRequest): pods/exec {NOT_SUPPORTED} (pod "talker", container "sidecar")'
            in err.stderr), err.stderr
    err = await story.fails("attach", "talker", "-c", "app", "-n", ns)
    assert f"pods/attach {NOT_SUPPORTED}" in err.stderr, err.stderr
    err = await story.fails("port-forward", "pod/talker", "0:8080", "-n", ns)
    assert f'error upgrading connection: pods/portforward {NOT_SUPPORTED} (pod "talker")' in err.stderr, err.stderr


# ---------------------------------------------------------------------------------- the Python client


def core_api(env: MeshEnv) -> Any:
    api_client = k8s_config.new_client_from_config(config_file=str(env.mesh.kubeconfig_path))
    return k8s_client.CoreV1Api(api_client)


async def test_python_client_reads_logs(mesh_env: MeshEnv) -> None:
    env = mesh_env
    ns = "logs-python"
    await create(env, ns,
                 pod("talker", ns, containers=("app", "sidecar"), annotations={"kubemesh.io/log": "one\ntwo"}),
                 pod("crasher", ns, containers=("main",),
                     annotations={"kubemesh.io/run-seconds": "2", "kubemesh.io/exit-code": "3"}),
                 pod("unscheduled", ns, containers=("main",), scheduler="nobody"))
    api = core_api(env)

    async def read(name: str, **kw: Any) -> str:
        text: str = await asyncio.to_thread(api.read_namespaced_pod_log, name, ns, **kw)
        return text

    async def refused(name: str, **kw: Any) -> tuple[int, Obj]:
        with pytest.raises(k8s_client.ApiException) as info:
            await read(name, **kw)
        status: Obj = json.loads(info.value.body)
        return int(info.value.status), status

    await running(env, ns, "talker", "sidecar")
    assert (await read("talker", container="app")).splitlines()[1:] == ["one", "two"]
    assert await read("talker", container="sidecar", tail_lines=1) == "two\n"
    assert STAMP.match(await read("talker", container="app", timestamps=True, tail_lines=1))
    assert await read("talker", container="app", limit_bytes=10) == "[kubemesh]"

    code, status = await refused("talker")
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == "a container name must be specified for pod talker, choose one of: [app sidecar]"
    code, status = await refused("talker", container="nope")
    assert (code, status["message"]) == (400, "container nope is not valid for pod talker")
    code, status = await refused("talker", container="app", tail_lines=-1)
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"] == ('PodLogOptions "talker" is invalid: '
                                 "tailLines: Invalid value: -1: must be greater than or equal to 0")
    code, status = await refused("missing")
    assert (code, status["reason"], status["message"]) == (404, "NotFound", 'pods "missing" not found')

    async def read_previous() -> str:
        return await read("crasher", container="main", previous=True)
    prev = await previous_run_checked(env, ns, "crasher", read_previous)
    assert prev[-1] == "[kubemesh] exited with code 3 (Error)"

    await create(env, ns, pod("short", ns, containers=("main",), restart="Never",
                              annotations={"kubemesh.io/run-seconds": "15", "kubemesh.io/log": "working"}))
    await running(env, ns, "short", "main")
    followed = (await read("short", follow=True)).splitlines()
    assert followed[1:] == ["working", "[kubemesh] exited with code 0 (Completed)"]

    unscheduled = await env.client.get(PODS, "unscheduled", namespace=ns)
    assert not node_of(unscheduled)
    # No node, no log location: 204 No Content, which the client returns as None.
    assert await read("unscheduled") is None


async def test_a_follow_stream_ends_when_its_client_leaves(mesh_env: MeshEnv) -> None:
    """A quiet follow stream (a container that prints nothing more) is closed through to the kubelet."""
    env = mesh_env
    ns = "logs-leave"
    await create(env, ns, pod("quiet", ns, containers=("main",)))
    node = node_of(await running(env, ns, "quiet", "main"))
    endpoint = env.mesh.endpoint
    kubelet = await endpoint.kubelet_of(node)

    async def streams(count: int) -> bool:
        return bool((await endpoint.admin_request(kubelet, "GET", f"/nodes/{node}"))["logStreams"] == count)

    url = f"{endpoint.url}/api/v1/namespaces/{ns}/pods/quiet/log"
    async with endpoint.session(request_timeout=120) as session, \
            session.get(url, params={"follow": "true"}, headers=endpoint.headers()) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "text/plain"
        assert STARTED.match((await resp.content.readline()).decode().rstrip("\n"))
        await env.until(lambda: streams(1), within=60, what="the kubelet streams the log")
    await env.until(lambda: streams(0), within=60, what="the kubelet's stream ended after the client left")
