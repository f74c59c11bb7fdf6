"""The built wheel, installed (not editable) in a fresh virtualenv of someone else's project.

The project has a package of its own named `services` and PyPI's `scheduler` installed, both
names that kubemesh once occupied. With kubemesh's wheel beside them, that project's tests run
the README's pytest example and a test whose controller calls `load_kube_config()` with no
path (the fixture points `KUBECONFIG` at the mesh); without pytest-asyncio a test that needs it
fails with what to install; compose mode works from the wheel (Docker permitting: under
CI=true it must); and after `pip uninstall kubemesh`, `import scheduler` is still PyPI's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kubemesh.services.mesh.compose import docker_available

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = re.compile(r"<!-- kubemesh-example -->\s*```python\n(.*?)```", re.S)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

USER_SERVICES = '''"""The user's own `services` package: kubemesh must not shadow it, nor it kubemesh."""

WHO = "the user's services"
'''

CONTROLLER_TEST = '''
import pytest
from kubernetes import client, config

from services import WHO


@pytest.mark.kubemesh(nodes=1)
def test_a_controller_that_loads_the_default_kubeconfig_reaches_the_mesh(kubemesh_mesh):
    assert WHO == "the user's services"
    config.load_kube_config()  # no path: $KUBECONFIG, which the fixture points at the mesh
    names = [n.metadata.name for n in client.CoreV1Api().list_node().items]
    assert names == ["node-1"]
'''

NEEDS_ASYNCIO = '''
async def test_needs_the_async_client(kubemesh_client):
    pass
'''

COMPOSE_TEST = '''
import pytest


@pytest.mark.kubemesh(nodes=2, compose=True)
def test_compose_from_the_wheel(kubemesh_mesh):
    assert kubemesh_mesh.mode == "compose"
    assert kubemesh_mesh.kubeconfig_path.is_file()
'''


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO / "constraints.txt")}
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)], cwd=dist, env=env)
    [built] = dist.glob("kubemesh-*.whl")
    return built


def test_the_wheel_installs_one_top_level_name_and_ships_the_compose_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"kubemesh"}
    assert "kubemesh/compose.yaml" in names and "kubemesh/apiserver/__main__.py" in names
    assert "kubemesh/compose.etcd.yaml" in names  # beside compose.yaml, which it extends
    assert not any(n.endswith(".pyc") for n in names)


def test_a_user_project_runs_the_readme_example_from_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "services").mkdir(parents=True)
    (project / "services" / "__init__.py").write_text(USER_SERVICES)
    tests = project / "tests"
    tests.mkdir()
    readme_example = EXAMPLE.findall((REPO / "README.md").read_text())[0]  # the pods one: no extra client
    (tests / "test_readme_example.py").write_text(readme_example)
    (tests / "test_controller.py").write_text(CONTROLLER_TEST)
    (project / "pyproject.toml").write_text('[project]\nname = "user-project"\nversion = "1"\n\n'
                                            '[tool.pytest.ini_options]\npythonpath = ["."]\n'
                                            'asyncio_default_fixture_loop_scope = "function"\n')
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    py = str(venv / "bin" / "python")
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)  # nothing of this checkout: only what the wheel installed
    env.pop("KUBECONFIG", None)
    run([py, "-m", "pip", "install", "-q", f"{wheel}[pytest,compose]", "kubernetes", "scheduler==0.8.11"],
        cwd=project, env=env)
    # The user's `services` and PyPI's `scheduler` stay theirs beside kubemesh.
    probe = ("import scheduler, services, kubemesh, kubemesh.scheduler; "
             "print(scheduler.__file__, services.WHO, kubemesh.__version__)")
    out = run([py, "-c", probe], cwd=project, env=env)
    assert "site-packages/scheduler/__init__.py" in out and "the user's services" in out

    out = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project, env=env)
    assert "2 passed" in out, out

    # Without pytest-asyncio, a test that needs it says what to install (and fails, never passes).
    (tests / "test_needs_asyncio.py").write_text(NEEDS_ASYNCIO)
    run([py, "-m", "pip", "uninstall", "-q", "-y", "pytest-asyncio"], cwd=project, env=env)
    r = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_needs_asyncio.py"],
                       cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 1, r.stdout
    assert "pip install 'kubemesh[pytest]'" in r.stdout, r.stdout
    (tests / "test_needs_asyncio.py").unlink()

    # Compose mode from the wheel: the compose file is the one in the package.
    why = docker_available()
    if why is None:
        (tests / "test_compose.py").write_text(COMPOSE_TEST)
        out = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_compose.py"], cwd=project,
                  env={**env, "TESTCONTAINERS_RYUK_DISABLED": "true"})
        assert "1 passed" in out, out
    elif os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"compose mode from the wheel cannot be checked: {why} (CI=true)")

    run([py, "-m", "pip", "uninstall", "-q", "-y", "kubemesh"], cwd=project, env=env)
    out = run([py, "-c", "import scheduler; from scheduler import Scheduler; print(scheduler.__file__)"],
              cwd=project, env=env)
    assert "site-packages/scheduler/__init__.py" in out
