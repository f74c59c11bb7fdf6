"""kubectl against a mesh: the real binary, the mesh's kubeconfig, a cache of its own.

    kubectl = Kubectl(endpoint.kubeconfig)
    out = await kubectl("get", "nodes", "--no-headers")          # stdout; raises KubectlError
    pods = await kubectl.json("get", "pods", "-n", "default")

`binary` may name one of the versioned binaries (`kubectl.1.27` ... `kubectl.1.33`) that sit
beside the `kubectl` on PATH on the development machines; `versions()` lists them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class KubectlError(RuntimeError):
    """kubectl exited with a non-zero status; the message carries its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(argv)} exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def versions() -> dict[str, str]:
    """The versioned kubectl binaries beside the `kubectl` on PATH: minor version ("1.27") to path."""
    found = shutil.which("kubectl")
    if found is None:
        return {}
    folder = Path(os.path.realpath(found)).parent
    out: dict[str, str] = {}
    for path in sorted(folder.glob("kubectl.1.*")):
        out[path.name.removeprefix("kubectl.")] = str(path)
    return out


class Kubectl:
    """kubectl against the mesh of a kubeconfig: `await kubectl("get", "nodes")` returns stdout."""

    def __init__(self, kubeconfig: Path, *, binary: str = "kubectl", cache_dir: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.binary = binary
        self.cache_dir = cache_dir or Path(tempfile.mkdtemp(prefix="kubemesh-kubectl-"))

    def argv(self, *args: str) -> list[str]:
        """The full command line."""
        return [self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]

    async def __call__(self, *args: str, input: str | None = None,
                       check: bool = True, timeout: float = 60.0) -> str:  # noqa: ASYNC109 - a deadline
        """Run kubectl; its stdout. Raises `KubectlError` on a non-zero exit when `check`."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args), stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input.encode() if input is not None else None)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        stdout, stderr = out.decode(), err.decode()
        if check and proc.returncode != 0:
            raise KubectlError(args, proc.returncode or 0, stdout, stderr)
        return stdout

    async def json(self, *args: str) -> Any:
        """Run kubectl with `-o json` and parse its output."""
        return json.loads(await self(*args, "-o", "json"))
