"""The plugin in a user's test run: shared meshes and their reset, KUBECONFIG, evidence of failures.

A generated test project runs in its own pytest process, as a user's would, with the plugin
loaded from its entry point.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SHARED_MODULE = '''
import os

import pytest

pytestmark = pytest.mark.kubemesh(nodes=1, clock_rate=30, scope="module")
URLS = []


def same_file(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


async def test_first_leaves_things_behind(kubemesh_mesh, kubemesh_kubectl):
    assert same_file(os.environ["KUBECONFIG"], kubemesh_mesh.kubeconfig_path)
    URLS.append(kubemesh_mesh.apiserver_url)
    await kubemesh_kubectl("create", "namespace", "leftover")
    await kubemesh_kubectl("create", "configmap", "leftover", "--from-literal=a=1")
    await kubemesh_kubectl("create", "deployment", "web", "--image=nginx", "--replicas=2")
    await kubemesh_mesh.power_off("node-1")
    async with kubemesh_mesh.chaos() as chaos:
        await chaos.add({"type": "request.latency", "target": {"component": "nobody-yet"},
                         "params": {"delay": 0.1}, "duration": None})


async def test_second_gets_the_same_mesh_reset(kubemesh_mesh, kubemesh_kubectl):
    assert URLS == [kubemesh_mesh.apiserver_url]
    assert "namespace/leftover" not in await kubemesh_kubectl("get", "namespaces", "-o", "name")
    assert await kubemesh_kubectl("get", "configmaps,deployments,pods", "-o", "name") == ""
    async with kubemesh_mesh.chaos() as chaos:
        assert await chaos.list() == []
    await kubemesh_mesh.wait_nodes_ready(1, timeout=5)


def test_without_a_mesh_the_kubeconfig_is_the_users():
    assert os.environ.get("KUBECONFIG") == "/users/own/kubeconfig"


async def test_a_failure_keeps_the_history_and_the_logs(kubemesh_mesh):
    raise AssertionError("fails on purpose")
'''

SESSION_A = '''
import pytest

pytestmark = pytest.mark.kubemesh(nodes=1, scope="session")


def test_a(kubemesh_mesh):
    print("URL", kubemesh_mesh.apiserver_url)
'''


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": "/users/own/kubeconfig"}
    env.pop("CI", None)  # the generated project's outcomes are what this test checks
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-s", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=500, check=False)


def test_a_module_scoped_mesh_is_shared_and_reset_between_tests(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n"
                                        "asyncio_default_fixture_loop_scope = function\n")
    (project / "test_shared.py").write_text(SHARED_MODULE)
    base = tmp_path / "base"
    r = run_pytest(project, f"--basetemp={base}")
    assert "1 failed, 3 passed" in r.stdout, r.stdout[-6000:] + r.stderr[-2000:]
    # The failed test's report names what was saved, and it is there.
    saved = re.findall(r"saved: (\S+)", r.stdout)
    assert any(p.endswith("kubemesh-history.jsonl") for p in saved), r.stdout[-4000:]
    logs = next(Path(p) for p in saved if p.endswith("kubemesh-logs"))
    assert {f.name for f in logs.iterdir()} >= {"apiserver.log", "kubelet-0.log", "scheduler.log"}
    assert Path(next(p for p in saved if p.endswith(".jsonl"))).read_text().count("\n") > 10


def test_a_session_scoped_mesh_is_shared_by_modules(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_a.py").write_text(SESSION_A)
    (project / "test_b.py").write_text(SESSION_A)
    r = run_pytest(project)
    assert "2 passed" in r.stdout, r.stdout[-4000:]
    urls = re.findall(r"URL (\S+)", r.stdout)
    assert len(urls) == 2 and urls[0] == urls[1], r.stdout[-4000:]


def test_a_compose_file_option_with_a_space_is_refused_with_what_to_write(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    r = run_pytest(project, "--kubemesh-compose-file", str(tmp_path / "compose.yaml"))
    assert r.returncode != 0
    assert "write --kubemesh-compose-file=PATH" in r.stderr + r.stdout
