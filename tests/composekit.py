"""What the compose tests share (tests/compose/): the kubemesh image built from the current sources.

Without a Docker engine with compose v2 the compose tests skip, except under `CI=true`, where
they fail: `.ci/run` sets Docker up first (`scripts/docker-setup`), so in CI they really run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kubemesh.services.mesh.compose import docker_available

REPO = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("KUBEMESH_IMAGE", "kubemesh:latest")


def unavailable(why: str) -> None:
    """Skip, except under CI=true: there a compose test that cannot run is a failure."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: the compose tests must run)", pytrace=False)
    pytest.skip(why)


def ensure_image() -> str:
    """Docker and compose answer and the image is built from the current sources (else skip); its name.

    `scripts/docker-setup` rebuilds the image only when its sources changed.
    """
    why = docker_available()
    if why is not None:
        unavailable(f"Docker cannot run here: {why} (scripts/docker-setup installs and starts it)")
    os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    r = subprocess.run([str(REPO / "scripts" / "docker-setup")], capture_output=True, text=True, timeout=900,
                       check=False, env={**os.environ, "KUBEMESH_IMAGE": IMAGE})
    if r.returncode == 3:
        unavailable(f"Docker cannot be set up here: {r.stderr.strip()[-500:]}")
    assert r.returncode == 0, f"scripts/docker-setup failed:\n{r.stderr[-4000:]}"
    return IMAGE
