"""Every command and example in README.md and docs/ runs, as written, on a default mesh.

Each fenced ```bash block is one script, run with `bash -euo pipefail` in a fresh folder that
looks like a checkout (`.venv`, `scripts`, the compose files and `Dockerfile` link to this one),
as a user would paste it into a terminal; each ```python block is written to a file there and
run with the project's interpreter. Anything a block leaves running is killed afterwards.
Blocks marked `<!-- kubemesh-example -->` are pytest examples (tests/plugin/test_plugin_examples.py
runs them); a block preceded by `<!-- not run: REASON -->` is skipped here for that reason
(the reason is part of the document, so a reader sees it too). Blocks that need Docker (the
compose stack) fail under CI=true when Docker cannot run, and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubemesh.services.mesh.compose import docker_available
from kubemesh.services.mesh.state import free_port

REPO = Path(__file__).resolve().parent.parent.parent
DOCS = ("README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")))
FENCE = re.compile(r"(?P<before>(?:<!--[^\n]*-->\s*\n)?)```(?P<lang>[a-z]*)\n(?P<body>.*?)```", re.S)
LINKED = (".venv", "scripts", "compose.yaml", "compose.etcd.yaml", "Dockerfile", ".dockerignore", "pyproject.toml",
          "constraints.txt", "deploy")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    body: str
    marker: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks() -> list[Block]:
    out: list[Block] = []
    for doc in DOCS:
        text = (REPO / doc).read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start("lang")) + 1
            out.append(Block(doc=doc, line=line, lang=m.group("lang"), body=m.group("body"),
                             marker=m.group("before").strip()))
    return out


RUNNABLE = [b for b in blocks() if b.lang in ("bash", "sh", "python") and "kubemesh-example" not in b.marker
            and not b.marker.startswith("<!-- not run:")]


def test_every_block_is_run_or_says_why_not() -> None:
    """Code blocks nothing runs are diagrams or file listings, or say in the document why they are not run."""
    for b in blocks():
        if b.marker.startswith("<!-- not run:"):
            reason = b.marker.removeprefix("<!-- not run:").removesuffix("-->").strip()
            assert len(reason) > 20, f"{b.id}: say why the block is not run"
        elif b.lang not in ("bash", "sh", "python", "text", "yaml", "json", "toml", "ini", "console", "diff", ""):
            pytest.fail(f"{b.id}: a ```{b.lang} block is neither run nor marked as text")
    assert RUNNABLE, "no runnable block found"


def workspace(tmp_path: Path) -> Path:
    """A folder that looks like a checkout: the commands' relative paths resolve as in one."""
    ws = tmp_path / "checkout"
    ws.mkdir()
    for name in LINKED:
        if (REPO / name).exists():
            (ws / name).symlink_to(REPO / name)
    return ws


def needs_docker(block: Block) -> bool:
    return "docker" in block.body


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_documented_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(tmp_path / "no-kubeconfig")}  # never a real cluster's
    env.pop("KUBEMESH_APISERVER", None)
    env.pop("KUBEMESH_TOKEN", None)
    if needs_docker(block):
        why = docker_available()
        if why is not None:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"{block.id} needs Docker: {why} (CI=true)")
            pytest.skip(f"needs Docker: {why}")
        # Its own compose project and port: the block's commands stay exactly as written.
        env["COMPOSE_PROJECT_NAME"] = f"kubemesh-docs-{os.getpid()}-{block.line}"
        env["KUBEMESH_PORT"] = str(free_port())
        env["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    ws = workspace(tmp_path)
    if block.lang == "python":
        script = ws / "example.py"
        script.write_text(block.body)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.body]
    proc = subprocess.Popen(argv, cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{block.id} did not finish in 900 s:\n{out[-6000:]}")
    finally:
        # What the block started in the background goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        if needs_docker(block):
            # With every compose file of the checkout: a block that ran the stack over etcd
            # (COMPOSE_FILE=compose.yaml:compose.etcd.yaml) leaves etcd's volume otherwise.
            files = [a for f in sorted(ws.glob("compose*.yaml")) for a in ("-f", f.name)]
            subprocess.run(["docker", "compose", *files, "down", "-v", "--remove-orphans"], cwd=ws, env=env,
                           capture_output=True, check=False, timeout=300)
        shutil.rmtree(ws / ".kubemesh", ignore_errors=True)
    assert proc.returncode == 0, f"{block.id} exited {proc.returncode}:\n{block.body}\n--- output ---\n{out[-8000:]}"
