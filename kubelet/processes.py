"""The process runtime: containers that run for real, as local processes (`--runtime process`).

Nothing here runs unless the kubelet was started with `--runtime process` (every pod runs,
unless annotated `kubemesh.io/runtime: emulated`) or `--runtime opt-in` (only pods annotated
`kubemesh.io/runtime: process` run). The default `emulated` runtime never builds a
`ProcessRuntime`.

What a container is here:

* its `command` + `args` (the image is ignored; a container without `command` runs the
  runtime's `image_commands[image]` if the user mapped the image; a pod with a container that
  has neither stays emulated under `--runtime process` (addons such as CoreDNS), and fails to
  start with `StartError` when annotated `kubemesh.io/runtime: process`), `$(VAR)` references
  expanded as upstream expands them;
* run as the user who started the mesh, in a process group (a session) of its own, with the
  container's `env` (`value`, `valueFrom` ConfigMap/Secret key and `fieldRef`, `envFrom`) on
  top of `PATH`, `HOSTNAME` and `KUBEMESH_ROOT`;
* in a directory of its own pod under the runtime's root: `<root>/<ns>_<pod>_<uid>/rootfs`
  stands for the container's file system root. A volume lives in `<pod dir>/volumes/<name>`
  (`emptyDir`; `configMap`, `secret`, `downwardAPI` and `projected` written as files) and each
  `volumeMount` is a symbolic link `rootfs/<mountPath>` to it (or to its `subPath`);
  the files of ConfigMap, Secret and downward API volumes are written again every
  `VOLUME_REFRESH` cluster seconds while the pod runs (each file replaced atomically);
  `workingDir` is `rootfs/<workingDir>` (default `rootfs`), so relative paths and
  `$KUBEMESH_ROOT/<mountPath>` reach the mounts. A mount path, `subPath` or item path that
  would leave the pod's directory (`..`, or a symbolic link a container made pointing out) is
  refused: the container does not start (`CreateContainerConfigError` as the termination
  message of a `StartError`).
* its stdout and stderr become the run's `ContainerLog` line by line, at the cluster time each
  line arrived (what `kubectl logs` shows), and go to every attached client as they come;
* its exit code (128 + n when killed by signal n) is reported to the pod machine, which
  restarts by restartPolicy with CrashLoopBackOff on the cluster clock;
* `stop` sends SIGTERM to the group, `kill` SIGKILL (the machine kills at the end of the grace
  period); `freeze`/`thaw` send SIGSTOP/SIGCONT (chaos);
* liveness and readiness probes (`exec`, `httpGet`, `tcpSocket` against 127.0.0.1: every pod
  shares the machine's network) run for real on the cluster clock's period; `failureThreshold`
  consecutive liveness failures kill the container (SIGTERM, SIGKILL after the grace period),
  which restarts it by restartPolicy; a container with a readiness probe is ready once `successThreshold` probes
  passed and unready after `failureThreshold` failures (startup probes are not run).

Every group is recorded under `<root>/groups` (`kubemesh.services.process.groups`): the
runtime kills its groups when it shuts down, and a runtime starting over a root reaps the
groups a killed predecessor left behind. The children also get SIGKILL from the kernel when
the kubelet's thread dies (PR_SET_PDEATHSIG), which covers a `kill -9` of the kubelet for
processes that did not start children of their own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import os
import re
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

import aiohttp
import structlog

from kubemesh.kubelet.containerlogs import ContainerLog
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import CONFIGMAPS, SECRETS, Kind, Obj
from kubemesh.services.process import groups

log = structlog.get_logger("kubelet.processes")

RUNTIME_ANNOTATION: Final = "kubemesh.io/runtime"
"""`process` or `emulated`: a pod's choice of runtime (see the module docstring)."""

RuntimeMode = Literal["emulated", "process", "opt-in"]

Getter = Callable[[Kind, str, str, str], Awaitable[Obj]]
"""GET one namespaced object: (kind, namespace, name, node). The node is the pod's: the request goes
out as that node's kubelet, which the node authorizer lets read only what its pods refer to."""

Exit = tuple[int, float, str, str | None]
"""(exit code, cluster time, reason, message) of a finished run."""

VOLUME_REFRESH: Final = 10.0
"""Cluster seconds between two rewrites of a running pod's ConfigMap, Secret and downward API files
(upstream's kubelet takes up to its sync period plus its cache's TTL, about a minute)."""
DRAIN_WAIT: Final = 1.0
"""Wall seconds to wait for the output pipes after the process exited (a child may hold them)."""

_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


class ConfigError(Exception):
    """The container cannot be created as specified (CreateContainerConfigError)."""


def expand(text: str, env: dict[str, str]) -> str:
    """Upstream's `$(VAR)` expansion: defined names replaced, `$$` escapes `$`, the rest left as is."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


def _pdeathsig() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


_PREEXEC: Final = _pdeathsig()


def field_value(pod: Obj, path: str, *, pod_ip: str | None, host_ip: str) -> str:
    """A downward API `fieldRef.fieldPath` of `pod`."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace"),
              "metadata.uid": md.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
              "status.podIP": pod_ip, "status.hostIP": host_ip, "status.podIPs": pod_ip,
              "status.hostIPs": host_ip}
    if path in ("metadata.labels", "metadata.annotations"):
        items = md.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return str(simple[path] or "")


def safe_relative(path: str, *, what: str) -> PurePosixPath:
    """A relative path that stays below its base (no `..`, not absolute), or ConfigError."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise ConfigError(f"{what} {path!r} must be a relative path without '..'")
    return p


def _inside(path: Path, base: Path) -> Path:
    """`path` with symbolic links resolved, refused unless it stays inside `base`."""
    real = path.resolve()
    if not real.is_relative_to(base.resolve()):
        raise ConfigError(f"{path} leaves the pod's directory")
    return real


# ---------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class RunningProcess:
    """One run of one container (or an exec'd command) as a process group."""

    proc: asyncio.subprocess.Process
    pgid: int
    since: int
    subscribers: set[asyncio.Queue[tuple[int, bytes] | None]] = field(default_factory=set)
    exit: Exit | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    master: int | None = None
    """The pty's master side, for a process run with a terminal."""
    watcher: asyncio.Task[None] | None = None

    def signal(self, sig: int) -> None:
        """Send `sig` to every process of the group."""
        groups.kill_group(self.pgid, since=self.since, sig=sig)


@dataclass(slots=True, eq=False)
class ContainerRun:
    """What the runtime keeps for one run of a container."""

    name: str
    container_id: str
    log: ContainerLog
    spec: Obj
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    process: RunningProcess | None = None
    exit: Exit | None = None
    task: asyncio.Task[None] | None = None
    probe: asyncio.Task[None] | None = None
    killed: bool = False
    frozen: bool = False
    ready: bool = True
    """Passing its readiness probe (False from the start when it has one, until a probe passes)."""
    readiness: asyncio.Task[None] | None = None


@dataclass(eq=False)
class PodProcesses:
    """The processes of one pod: the `ContainerProcesses` hooks its `PodMachine` calls."""

    runtime: ProcessRuntime
    pod: Obj
    """The pod as last seen (the worker refreshes it on every sync)."""
    notify: Callable[[], None]
    """Called when a run exits: the worker syncs the pod."""
    host_ip: str
    pod_ip: str | None = None
    runs: dict[str, ContainerRun] = field(default_factory=dict)
    refresher: asyncio.Task[None] | None = None
    """Rewrites the pod's ConfigMap, Secret and downward API files while the pod runs."""

    @property
    def key(self) -> str:
        """`namespace/name` of the pod."""
        md = self.pod.get("metadata") or {}
        return f"{md.get('namespace', '')}/{md.get('name', '')}"

    @property
    def directory(self) -> Path:
        """The pod's own directory under the runtime's root."""
        md = self.pod.get("metadata") or {}
        return self.runtime.root / f"{md.get('namespace', '')}_{md.get('name', '')}_{md.get('uid', '')}"

    def _container_spec(self, name: str) -> Obj:
        spec = self.pod.get("spec") or {}
        for part in ("initContainers", "containers"):
            for c in spec.get(part) or []:
                if c.get("name") == name:
                    return dict(c)
        return {"name": name}

    # -- the hooks --------------------------------------------------------------------------

    def start(self, *, name: str, container_id: str, log: ContainerLog) -> None:
        """Start a run of container `name` (in the background: its configuration needs the API)."""
        run = ContainerRun(name=name, container_id=container_id, log=log, spec=self._container_spec(name))
        run.ready = not run.spec.get("readinessProbe")
        self.runs[container_id] = run
        if self.refresher is None:
            self.refresher = asyncio.get_running_loop().create_task(self._refresh(), name=f"volumes:{self.key}")
        run.task = asyncio.get_running_loop().create_task(self._run(run), name=f"run:{self.key}:{name}")

    def stop(self, container_id: str) -> None:
        """SIGTERM the run's group."""
        run = self.runs.get(container_id)
        if run is not None and run.process is not None and run.exit is None:
            run.process.signal(signal.SIGTERM)
            if run.frozen:
                run.process.signal(signal.SIGCONT)

    def kill(self, container_id: str) -> None:
        """SIGKILL the run's group (no-op once it exited); its exit is no longer reported."""
        run = self.runs.get(container_id)
        if run is None:
            return
        run.killed = True
        if run.process is not None:
            run.process.signal(signal.SIGKILL)
        if run.process is None and run.task is not None:
            run.task.cancel()
        if run.probe is not None:
            run.probe.cancel()

    def ready(self, container_id: str) -> bool:
        """Whether the run passes its readiness probe (True without one)."""
        run = self.runs.get(container_id)
        return run is not None and run.ready

    def exit_of(self, container_id: str) -> Exit | None:
        """How the run ended, once it did."""
        run = self.runs.get(container_id)
        return None if run is None else run.exit

    def forget_run(self, container_id: str) -> None:
        """Drop a finished run kept for nothing."""
        self.runs.pop(container_id, None)

    def run_of(self, container: str) -> ContainerRun | None:
        """The live run of `container` (exec and attach go there)."""
        for run in reversed(self.runs.values()):
            if run.name == container and run.exit is None and run.process is not None and not run.killed:
                return run
        return None

    def freeze(self, *, container: str | None, frozen: bool) -> list[str]:
        """SIGSTOP (or SIGCONT) the live runs of the pod's containers (or of one); their names."""
        hit = []
        for run in list(self.runs.values()):
            if (container is None or run.name == container) and run.process is not None and run.exit is None:
                run.process.signal(signal.SIGSTOP if frozen else signal.SIGCONT)
                run.frozen = frozen
                hit.append(run.name)
        return hit

    def kill_all(self) -> None:
        """SIGKILL every run of the pod (and stop rewriting its files)."""
        for cid in list(self.runs):
            self.kill(cid)
        if self.refresher is not None:
            self.refresher.cancel()
            self.refresher = None

    def remove(self) -> None:
        """Kill every run and remove the pod's directory."""
        self.kill_all()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- a run ------------------------------------------------------------------------------

    async def _run(self, run: ContainerRun) -> None:
        clock = self.runtime.clock
        try:
            argv = await self._prepare(run)
            run.process = await self.runtime.spawn(argv, env=run.env, cwd=run.cwd,
                                                   stdin=bool(run.spec.get("stdin")), log=run.log)
        except ConfigError as exc:
            run.exit = (128, clock.now(), "StartError", f"CreateContainerConfigError: {exc}")
        except OSError as exc:
            run.exit = (128, clock.now(), "StartError", f"failed to start container process: {exc}")
        except Exception as exc:  # e.g. a Secret whose data is not base64: the run must still end, visibly
            run.exit = (128, clock.now(), "StartError", f"CreateContainerConfigError: {type(exc).__name__}: {exc}")
        if run.exit is not None:
            log.info("container failed to start", pod=self.key, container=run.name, error=run.exit[3])
            self.notify()
            return
        assert run.process is not None
        if run.spec.get("livenessProbe"):
            run.probe = asyncio.get_running_loop().create_task(self._liveness(run), name=f"probe:{run.name}")
        if run.spec.get("readinessProbe"):
            run.readiness = asyncio.get_running_loop().create_task(self._readiness(run), name=f"ready:{run.name}")
        await run.process.done.wait()
        for task in (run.probe, run.readiness):
            if task is not None:
                task.cancel()
        run.exit = run.process.exit
        if not run.killed:
            self.notify()

    async def _prepare(self, run: ContainerRun) -> list[str]:
        spec = run.spec
        pod_dir = self.directory
        rootfs = pod_dir / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        await self._volumes(pod_dir)
        for mount in spec.get("volumeMounts") or []:
            self._mount(pod_dir, rootfs, mount)
        env = await self._env(spec)
        workdir = str(spec.get("workingDir") or "")
        cwd = rootfs
        if workdir:
            cwd = rootfs / safe_relative(workdir.lstrip("/") or ".", what="workingDir")
            cwd.mkdir(parents=True, exist_ok=True)
            _inside(cwd, pod_dir)
        base = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                "HOSTNAME": str((self.pod.get("metadata") or {}).get("name", "")),
                "HOME": str(rootfs), "KUBEMESH_ROOT": str(rootfs)}
        for k in ("LANG", "LC_ALL", "TMPDIR"):
            if k in os.environ:
                base[k] = os.environ[k]
        run.env = {**base, **env}
        run.cwd = cwd
        command = [str(x) for x in spec.get("command") or []]
        if not command:
            command = list(self.runtime.image_commands.get(str(spec.get("image", "")), ()))
        if not command:
            raise ConfigError(f"container {run.name} has no command and image {spec.get('image')!r} is "
                              "not mapped to a local command")
        return [expand(x, run.env) for x in (*command, *(str(a) for a in spec.get("args") or []))]

    async def _get(self, kind: Kind, name: str, *, optional: bool) -> Obj | None:
        ns = str((self.pod.get("metadata") or {}).get("namespace", ""))
        node = str((self.pod.get("spec") or {}).get("nodeName") or "")
        try:
            return await self.runtime.getter(kind, ns, name, node)
        except Exception as exc:  # NotFound or unreachable: optional sources are skipped
            if optional:
                return None
            raise ConfigError(f'{kind.kind.lower()} "{name}" not found') from exc

    async def _data(self, kind: Kind, name: str, *, optional: bool) -> dict[str, bytes]:
        obj = await self._get(kind, name, optional=optional)
        if obj is None:
            return {}
        out = {str(k): str(v).encode() for k, v in (obj.get("data") or {}).items()} if kind is CONFIGMAPS else \
            {str(k): base64.b64decode(str(v)) for k, v in (obj.get("data") or {}).items()}
        if kind is CONFIGMAPS:
            out.update({str(k): base64.b64decode(str(v)) for k, v in (obj.get("binaryData") or {}).items()})
        else:
            out.update({str(k): str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
        return out

    async def _env(self, spec: Obj) -> dict[str, str]:
        env: dict[str, str] = {}
        for src in spec.get("envFrom") or []:
            prefix = str(src.get("prefix") or "")
            for key, kind in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                ref = src.get(key)
                if ref:
                    data = await self._data(kind, str(ref.get("name", "")), optional=bool(ref.get("optional")))
                    env.update({prefix + k: v.decode("utf-8", "replace") for k, v in data.items()})
        md = self.pod.get("metadata") or {}
        for item in spec.get("env") or []:
            name = str(item.get("name", ""))
            if "value" in item or not item.get("valueFrom"):
                env[name] = expand(str(item.get("value") or ""), env)
                continue
            vf = item["valueFrom"]
            if vf.get("fieldRef"):
                env[name] = field_value(self.pod, str(vf["fieldRef"].get("fieldPath", "")), pod_ip=self.pod_ip,
                                        host_ip=self.host_ip)
            elif vf.get("configMapKeyRef") or vf.get("secretKeyRef"):
                ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
                kind = CONFIGMAPS if vf.get("configMapKeyRef") else SECRETS
                data = await self._data(kind, str(ref.get("name", "")), optional=bool(ref.get("optional")))
                key = str(ref.get("key", ""))
                if key in data:
                    env[name] = data[key].decode("utf-8", "replace")
                elif not ref.get("optional"):
                    raise ConfigError(f"couldn't find key {key} in {kind.kind} {md.get('namespace')}/"
                                      f"{ref.get('name')}")
            elif vf.get("resourceFieldRef"):
                env[name] = "0"
        return env

    async def _refresh(self) -> None:
        """Every `VOLUME_REFRESH` cluster seconds, write the projected files again from the API."""
        while True:
            await self.runtime.clock.sleep(VOLUME_REFRESH)
            if self.directory.is_dir():
                with contextlib.suppress(Exception):  # a source gone or unreachable: the files stay as they were
                    await self._volumes(self.directory)

    async def _volumes(self, pod_dir: Path) -> None:
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            name = str(vol.get("name", ""))
            target = pod_dir / "volumes" / safe_relative(name, what="volume name")
            if "emptyDir" in vol or ("hostPath" not in vol and not any(
                    k in vol for k in ("configMap", "secret", "downwardAPI", "projected"))):
                target.mkdir(parents=True, exist_ok=True)
                continue
            files: dict[str, bytes] = {}
            sources: list[tuple[str, Obj]] = []
            if "projected" in vol:
                sources = [(k, v) for s in (vol["projected"] or {}).get("sources") or [] for k, v in s.items()]
            else:
                sources = [(k, vol[k]) for k in ("configMap", "secret", "downwardAPI") if k in vol]
            for kind_name, src in sources:
                files.update(await self._files(kind_name, src or {}))
            target.mkdir(parents=True, exist_ok=True)
            for rel, data in files.items():
                path = target / safe_relative(rel, what="volume item path")
                path.parent.mkdir(parents=True, exist_ok=True)
                _inside(path.parent, pod_dir)
                if not path.exists() or path.read_bytes() != data:
                    staged = path.with_name(f".{path.name}.new")
                    staged.write_bytes(data)
                    staged.replace(path)  # a reader sees the old content or the new, never half of it

    async def _files(self, kind_name: str, src: Obj) -> dict[str, bytes]:
        if kind_name == "downwardAPI":
            out: dict[str, bytes] = {}
            for item in src.get("items") or []:
                if item.get("fieldRef"):
                    out[str(item.get("path", ""))] = field_value(
                        self.pod, str(item["fieldRef"].get("fieldPath", "")), pod_ip=self.pod_ip,
                        host_ip=self.host_ip).encode()
            return out
        if kind_name not in ("configMap", "secret"):
            return {}
        kind = CONFIGMAPS if kind_name == "configMap" else SECRETS
        ref = str(src.get("name") or src.get("secretName") or "")
        data = await self._data(kind, ref, optional=bool(src.get("optional")))
        items = src.get("items")
        if not items:
            return data
        return {str(i.get("path", "")): data[str(i.get("key", ""))] for i in items if str(i.get("key", "")) in data}

    def _mount(self, pod_dir: Path, rootfs: Path, mount: Obj) -> None:
        volume = pod_dir / "volumes" / safe_relative(str(mount.get("name", "")), what="volume name")
        source = volume
        sub = str(mount.get("subPath") or "")
        if sub:
            source = volume / safe_relative(sub, what="subPath")
            if not source.exists():
                source.mkdir(parents=True, exist_ok=True)
        source = _inside(source, volume)  # a link a container made inside its volume cannot lead out
        mount_path = safe_relative(str(mount.get("mountPath", "")).lstrip("/") or ".", what="mountPath")
        link = rootfs / mount_path
        if link == rootfs:
            raise ConfigError("mountPath / is not supported by the process runtime")
        link.parent.mkdir(parents=True, exist_ok=True)
        _inside(link.parent, pod_dir)
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(source)

    async def _readiness(self, run: ContainerRun) -> None:
        """Readiness: `successThreshold` passes make the run ready, `failureThreshold` failures unready."""
        probe: Obj = run.spec.get("readinessProbe") or {}
        clock = self.runtime.clock
        period = float(probe.get("periodSeconds") or 10)
        needed = {True: int(probe.get("successThreshold") or 1), False: int(probe.get("failureThreshold") or 3)}
        await clock.sleep(float(probe.get("initialDelaySeconds") or 0))
        streak: tuple[bool, int] = (True, 0)
        while run.exit is None:
            ok = await self.runtime.probe(probe, run=run, seconds=float(probe.get("timeoutSeconds") or 1))
            streak = (ok, streak[1] + 1 if streak[0] == ok else 1)
            if streak[1] >= needed[ok] and run.ready != ok:
                run.ready = ok
                self.notify()  # the worker writes the new ready state
            await clock.sleep(period)

    async def _liveness(self, run: ContainerRun) -> None:
        probe: Obj = run.spec.get("livenessProbe") or {}
        clock = self.runtime.clock
        period = float(probe.get("periodSeconds") or 10)
        threshold = int(probe.get("failureThreshold") or 3)
        timeout = float(probe.get("timeoutSeconds") or 1)
        await clock.sleep(float(probe.get("initialDelaySeconds") or 0))
        failures = 0
        while run.exit is None:
            ok = await self.runtime.probe(probe, run=run, seconds=timeout)
            failures = 0 if ok else failures + 1
            if failures >= threshold:
                log.info("liveness probe failed; killing the container", pod=self.key, container=run.name)
                if run.process is not None:
                    # As the kubelet kills: SIGTERM, then SIGKILL after the grace period (the probe's
                    # own, else the pod's). A frozen process cannot act on SIGTERM: it dies at SIGKILL.
                    grace = probe.get("terminationGracePeriodSeconds")
                    if grace is None:
                        grace = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
                    run.process.signal(signal.SIGTERM)
                    await clock.sleep(float(grace) if isinstance(grace, int | float) else 30.0)
                    if run.process.exit is None:
                        run.process.signal(signal.SIGKILL)
                return
            await clock.sleep(period)


# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class ProcessRuntime:
    """Every process one kubelet process runs for its nodes (see the module docstring)."""

    root: Path
    clock: Clock
    getter: Getter
    mode: RuntimeMode = "process"
    image_commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    live: set[RunningProcess] = field(default_factory=set)

    @property
    def groups_dir(self) -> Path:
        """Where the process groups are recorded."""
        return self.root / "groups"

    def open(self) -> int:
        """Create the root and reap what a killed predecessor left there; how many processes were killed."""
        self.root.mkdir(parents=True, exist_ok=True)
        reaped = groups.reap(self.root)
        if reaped:
            log.warning("reaped processes a previous kubelet left behind", processes=reaped)
        return reaped

    def wants(self, pod: Obj) -> bool:
        """Whether `pod` runs as processes here.

        Under `process`, a pod that is not annotated `emulated` runs unless one of its containers
        has neither a `command` nor a mapped image (an addon such as CoreDNS, which has nothing
        to run on this machine): that pod stays emulated, as a whole.
        """
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(RUNTIME_ANNOTATION)
        choice = None if raw is None else str(raw)
        if self.mode == "opt-in":
            return choice == "process"
        if choice is not None:
            return choice != "emulated"
        spec = pod.get("spec") or {}
        return all(bool(c.get("command")) or str(c.get("image", "")) in self.image_commands
                   for part in ("initContainers", "containers") for c in spec.get(part) or [])

    def for_pod(self, pod: Obj, *, notify: Callable[[], None], host_ip: str) -> PodProcesses:
        """The hooks of one pod's machine."""
        return PodProcesses(runtime=self, pod=pod, notify=notify, host_ip=host_ip)

    async def spawn(self, argv: list[str], *, env: dict[str, str], cwd: Path | None, stdin: bool,
                    log: ContainerLog | None = None, tty: bool = False) -> RunningProcess:
        """Start `argv` in a new session, recorded; its output goes to `log` and the subscribers."""
        master: int | None = None
        if tty:
            master, slave = os.openpty()
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                preexec_fn=_tty_preexec(slave))
            os.close(slave)
        else:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                preexec_fn=_PREEXEC)
        groups.record(self.groups_dir, proc.pid)
        rp = RunningProcess(proc=proc, pgid=proc.pid, since=groups.start_ticks(proc.pid) or 0, master=master)
        self.live.add(rp)
        rp.watcher = asyncio.get_running_loop().create_task(self._watch(rp, log=log, master=master),
                                                            name=f"pid:{proc.pid}")
        return rp

    async def _watch(self, rp: RunningProcess, *, log: ContainerLog | None, master: int | None) -> None:
        clock = self.clock

        async def pump(read: Callable[[], Awaitable[bytes]], channel: int) -> None:
            pending = b""
            while True:
                try:
                    chunk = await read()
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                for q in list(rp.subscribers):
                    q.put_nowait((channel, chunk))
                if log is not None:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    now = clock.now()
                    for line in lines:
                        log.write(now, line.decode("utf-8", "replace"))
            if log is not None and pending:
                log.write(clock.now(), pending.decode("utf-8", "replace"))

        pumps = []
        if master is not None:
            pumps.append(pump(_pty_reader(master), 1))
        else:
            assert rp.proc.stdout is not None and rp.proc.stderr is not None
            out, err = rp.proc.stdout, rp.proc.stderr
            pumps += [pump(lambda: out.read(65536), 1), pump(lambda: err.read(65536), 2)]
        reading = asyncio.ensure_future(asyncio.gather(*pumps))
        code = await rp.proc.wait()
        # The output a process wrote before it exited is read before its exit is reported;
        # a child of it that holds the pipes open does not hold the exit back for long.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reading), timeout=DRAIN_WAIT)
        reading.cancel()
        if master is not None:
            with contextlib.suppress(OSError):
                os.close(master)
        code = 128 - code if code < 0 else code
        rp.exit = (code, clock.now(), "Completed" if code == 0 else "Error", None)
        # Whatever the leader left in its group dies with it, as a container's processes die with its init.
        rp.signal(signal.SIGKILL)
        groups.forget(self.groups_dir, rp.pgid)
        self.live.discard(rp)
        for q in list(rp.subscribers):
            q.put_nowait(None)
        rp.done.set()

    async def probe(self, probe: Obj, *, run: ContainerRun, seconds: float) -> bool:
        """One probe attempt against a run: True when it passed."""
        wall = max(0.05, self.clock.to_wall(seconds))
        try:
            if probe.get("exec"):
                argv = [str(x) for x in (probe["exec"] or {}).get("command") or []]
                rp = await self.spawn(argv, env=run.env, cwd=run.cwd, stdin=False)
                try:
                    await asyncio.wait_for(rp.done.wait(), timeout=wall)
                except TimeoutError:
                    rp.signal(signal.SIGKILL)
                    return False
                return rp.exit is not None and rp.exit[0] == 0
            if probe.get("tcpSocket"):
                port = _port(probe["tcpSocket"].get("port"), run.spec)
                _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=wall)
                writer.close()
                return True
            if probe.get("httpGet"):
                get = probe["httpGet"]
                port = _port(get.get("port"), run.spec)
                url = f"{str(get.get('scheme') or 'HTTP').lower()}://127.0.0.1:{port}{get.get('path') or '/'}"
                headers = {str(h.get("name")): str(h.get("value")) for h in get.get("httpHeaders") or []}
                async with aiohttp.ClientSession() as session, session.get(
                        url, headers=headers, timeout=aiohttp.ClientTimeout(total=wall), ssl=False) as resp:
                    return 200 <= resp.status < 400
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
            return False
        return True

    def shutdown(self) -> None:
        """SIGKILL every group this runtime started, and every recorded one."""
        for rp in list(self.live):
            rp.signal(signal.SIGKILL)
        groups.reap(self.root)


def _port(value: Any, spec: Obj) -> int:
    if isinstance(value, int):
        return value
    for p in spec.get("ports") or []:
        if p.get("name") == value:
            return int(p.get("containerPort"))
    return int(str(value))


def _tty_preexec(slave: int) -> Callable[[], None]:
    """The child's set-up for a terminal session: its own session, with `slave` as controlling terminal."""
    import fcntl  # noqa: PLC0415 - POSIX only
    import termios  # noqa: PLC0415

    def preexec() -> None:
        if _PREEXEC is not None:
            _PREEXEC()
        # uvloop (the kubelet's loop) runs this before it starts the new session and before the
        # terminal is on fd 0: lead a session now (EPERM if already) and take the terminal by the
        # descriptor the parent opened, still open in the child until exec.
        with contextlib.suppress(OSError):
            os.setsid()
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    return preexec


def _pty_reader(master: int) -> Callable[[], Awaitable[bytes]]:
    loop = asyncio.get_running_loop()

    async def read() -> bytes:
        fut: asyncio.Future[bytes] = loop.create_future()

        def ready() -> None:
            loop.remove_reader(master)
            try:
                data = os.read(master, 65536)
            except OSError:
                data = b""
            if not fut.done():
                fut.set_result(data)

        loop.add_reader(master, ready)
        try:
            return await fut
        finally:
            with contextlib.suppress(Exception):
                loop.remove_reader(master)

    return read


def resize(master: int, *, width: int, height: int) -> None:
    """Set a pty's window size (a terminal resize)."""
    import fcntl  # noqa: PLC0415
    import struct  # noqa: PLC0415
    import termios  # noqa: PLC0415

    with contextlib.suppress(OSError):
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
