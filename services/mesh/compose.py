"""The compose stack as a throwaway project: start, scale, exec, stop (Docker, through testcontainers).

    stack = ComposeStack(image="kubemesh:latest", nodes_per_kubelet=3, kubelets=2)
    stack.start()                       # `up --wait`: every service healthy
    endpoint = stack.endpoint           # a MeshEndpoint from the kubeconfig the apiserver wrote
    stack.node_op("node-4", "power-off")
    stack.stop()                        # `down --volumes`: nothing of the project remains

    ComposeStack(overrides=[etcd_compose_file()])   # over etcd, with apiserver, apiserver-2, apiserver-3

The compose file is the one shipped in the package (`kubemesh/compose.yaml`, the same file
as the repository's top-level `compose.yaml`), so that compose mode works from an installed
wheel; `overrides` are compose files applied over it, in order (`-f compose.yaml -f ...`),
such as `compose.etcd.yaml`, shipped beside it. The image is the project's own
(`scripts/docker-setup` in a checkout builds it).

Every stack has its own project name, published port (on 127.0.0.1), state folder and
volumes, so stacks of parallel tests do not meet. Calls are blocking (subprocesses): async
callers run them in a thread. Needs the `compose` extra (`pip install 'kubemesh[compose]'`,
which brings testcontainers) and a Docker engine with compose v2.
"""

from __future__ import annotations

import importlib.resources
import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kubemesh.services.mesh.endpoint import MeshEndpoint, MeshError, run_blocking
from kubemesh.services.mesh.state import free_port

DEFAULT_IMAGE: Final = "kubemesh:latest"
KUBELET_ADMIN_PORT: Final = 10250


def default_compose_file() -> Path:
    """The compose file shipped in the package (the repository's `compose.yaml`)."""
    with importlib.resources.as_file(importlib.resources.files("kubemesh") / "compose.yaml") as path:
        return Path(path)


def etcd_compose_file() -> Path:
    """The override shipped in the package that runs the stack over etcd with three apiservers (`compose.etcd.yaml`)."""
    with importlib.resources.as_file(importlib.resources.files("kubemesh") / "compose.etcd.yaml") as path:
        return Path(path)


def docker_available() -> str | None:
    """None when `docker compose` can run containers here, else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=20, check=False)
        if info.returncode != 0:
            return f"no Docker engine ({info.stderr.strip()[:200]})"
        comp = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=20,
                              check=False)
        if comp.returncode != 0:
            return "no `docker compose` (compose v2)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker does not answer: {exc}"
    return None


def testcontainers_missing() -> str | None:
    """None when testcontainers is installed, else how to get it."""
    try:
        import testcontainers.compose  # noqa: F401, PLC0415 - an optional dependency, probed on use
    except ImportError:
        return "compose mode needs testcontainers: pip install 'kubemesh[compose]'"
    return None


def image_exists(image: str) -> bool:
    """Whether the engine has `image` locally."""
    r = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30, check=False)
    return r.returncode == 0


class ComposeStack:
    """One throwaway compose project (see the module docstring)."""

    def __init__(self, *, compose_file: Path | None = None, image: str = DEFAULT_IMAGE, nodes_per_kubelet: int = 3,
                 kubelets: int = 1, clock_rate: float = 1.0, bugs: Sequence[str] = (), seed: int | None = None,
                 token: str | None = None, project: str | None = None, state_dir: Path | None = None,
                 env: Mapping[str, str] | None = None, overrides: Sequence[Path] = ()) -> None:
        from testcontainers.compose import DockerCompose  # noqa: PLC0415 - the optional `compose` extra

        self.compose_file = (compose_file or default_compose_file()).resolve()
        # Resolved: `extends: file: compose.yaml` in an override names the file beside the real one.
        self.overrides = [Path(o).resolve() for o in overrides]
        self.project = project or f"kubemesh-{secrets.token_hex(4)}"
        self._own_state = state_dir is None
        self.state_dir = (state_dir or Path(tempfile.mkdtemp(prefix=f"{self.project}-"))).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.kubelets = kubelets
        self.nodes_per_kubelet = nodes_per_kubelet
        self.token = token or secrets.token_urlsafe(32)
        values: dict[str, str] = {
            "COMPOSE_PROJECT_NAME": self.project,
            "KUBEMESH_IMAGE": image,
            "KUBEMESH_PORT": str(self.port),
            "KUBEMESH_STATE_DIR": str(self.state_dir),
            "KUBEMESH_NODES": str(nodes_per_kubelet),
            "KUBEMESH_CLOCK_RATE": repr(float(clock_rate)),
            "KUBEMESH_BUGS": ",".join(bugs),
            "KUBEMESH_SEED": "" if seed is None else str(seed),
            "KUBEMESH_TOKEN": self.token,
            **(env or {}),
        }
        self.env_file = self.state_dir.parent / f".{self.project}.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        self.compose = DockerCompose(context=str(self.compose_file.parent),
                                     compose_file_name=[str(self.compose_file),
                                                        *(str(o) for o in self.overrides)],
                                     env_file=str(self.env_file),
                                     wait=True, keep_volumes=False)
        self.started = False

    @property
    def apiserver_url(self) -> str:
        """`https://127.0.0.1:<published port>`."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        """The kubeconfig the apiserver container wrote for the host."""
        return self.state_dir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        """The stack's CA certificate."""
        return self.state_dir / "pki" / "ca.crt"

    @property
    def endpoint(self) -> MeshEndpoint:
        """The stack's apiserver, as its kubeconfig names it (valid once started)."""
        return MeshEndpoint.from_kubeconfig(self.kubeconfig_path)

    def command(self) -> list[str]:
        """`docker compose -f FILE --env-file FILE` for this stack."""
        return list(self.compose.compose_command_property)

    def run(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Run `docker compose ARGS` for this project; raise with its output on failure."""
        r = subprocess.run([*self.command(), *args], capture_output=True, text=True, timeout=timeout,
                           cwd=self.compose_file.parent, check=False)
        if check and r.returncode != 0:
            raise MeshError(f"docker compose {' '.join(args)} exited {r.returncode}:\n{r.stdout[-2000:]}"
                            f"\n{r.stderr[-4000:]}")
        return r

    def start(self) -> None:
        """`up --wait` (every service healthy), with `kubelets` kubelet containers."""
        self.started = True
        try:
            self.compose.start()  # testcontainers: `up --wait`
            if self.kubelets != 1:
                self.scale_kubelets(self.kubelets)
        except (MeshError, subprocess.CalledProcessError) as exc:
            out = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) else ""
            raise MeshError(f"the compose stack did not come up: {exc}\n{out[-3000:]}\n--- logs ---\n"
                            f"{self.tail_logs()}") from exc

    def scale_kubelets(self, count: int) -> None:
        """`up --scale kubelet=N --wait`: kubelet n hosts the same nodes whenever it runs."""
        self.run("up", "--detach", "--wait", "--no-build", "--scale", f"kubelet={count}")
        self.kubelets = count

    def restart(self, service: str) -> None:
        """`docker compose restart SERVICE`."""
        self.run("restart", service)

    def exec(self, service: str, *command: str, index: int = 1, check: bool = True) -> str:
        """Run a command in a service's container (replica `index`); its stdout."""
        r = self.run("exec", "-T", "--index", str(index), service, *command, check=check, timeout=60)
        return r.stdout

    def replica_of(self, node: str) -> int:
        """The kubelet replica that hosts `node`, as the kubelets registered their nodes (`kubelet-<n>`)."""
        registry = run_blocking(self.endpoint.components()) or {}
        for instance, entry in registry.items():
            replica = instance.removeprefix("kubelet-")
            if entry.get("component") == "kubelet" and node in (entry.get("nodes") or ()) and replica.isdigit():
                return int(replica)
        kubelets = sorted(i for i, e in registry.items() if e.get("component") == "kubelet")
        raise MeshError(f"no kubelet of the stack registered node {node!r} (kubelets: {', '.join(kubelets) or 'none'})")

    def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """A kubelet admin operation on a node, inside its kubelet's container (admin ports are not published)."""
        out = self.exec("kubelet", "kubemesh-entrypoint", "admin", "POST", f"/nodes/{node}/{op}",
                        json.dumps(body or {}), index=self.replica_of(node))
        return json.loads(out) if out.strip() else None

    def crash(self, service: str, *, index: int = 1) -> None:
        """SIGKILL the component inside its container; the restart policy brings it back."""
        # The exec session dies with the container (exit 137): that is the crash, not an error.
        self.exec(service, "kubemesh-entrypoint", "crash", index=index, check=False)

    def containers(self, *, all_: bool = True) -> list[dict[str, Any]]:
        """`docker compose ps --format json` as a list of containers."""
        out = self.run("ps", "--format", "json", *(["--all"] if all_ else [])).stdout
        text = out.strip()
        if not text:
            return []
        if text.startswith("["):
            doc = json.loads(text)
            return [c for c in doc if isinstance(c, dict)]
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def inspect(self, container: str) -> dict[str, Any]:
        """`docker inspect` of one container."""
        r = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, timeout=30, check=True)
        doc: list[dict[str, Any]] = json.loads(r.stdout)
        return doc[0]

    def tail_logs(self, lines: int = 40) -> str:
        """The last log lines of every service."""
        return self.run("logs", "--no-color", "--tail", str(lines), check=False).stdout[-12000:]

    def stop(self) -> None:
        """`down --volumes --remove-orphans`: no container, network or volume of the project remains."""
        try:
            if self.started:
                self.compose.stop(down=True)  # testcontainers: `down --volumes`
                self.started = False
        finally:
            self.env_file.unlink(missing_ok=True)
            if self._own_state:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project (empty after `stop`)."""
        label = f"label=com.docker.compose.project={self.project}"
        out: dict[str, list[str]] = {}
        for kind, cmd in (("containers", ["docker", "ps", "-aq", "--filter", label]),
                          ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
                          ("volumes", ["docker", "volume", "ls", "-q", "--filter", label])):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
            out[kind] = r.stdout.split()
        return out

    def __enter__(self) -> ComposeStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
