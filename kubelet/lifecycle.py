"""One pod's life on one node: the emulated containers and the status the kubelet reports.

`PodMachine` is pure: it holds the node-local truth about a pod's containers (what a container
runtime would know) and moves it forward in cluster time when told `advance(now)`. It never
talks to the API; the pod worker (`podworking`) feeds it the pod as the informer sees it and
writes back the status it builds. All times are cluster seconds passed in by the caller, so
the machine runs the same on a `ManualClock` and on the cluster clock.

Life of a pod (upstream's phases):

    admitted ──start delay──▶ containers running (Pending → Running, pod IP assigned)
       │                       │ container exits: restartPolicy Always / OnFailure(≠0) → restart
       │                       │   (first restart at once, then CrashLoopBackOff 10 s doubling to 300 s)
       │                       │ otherwise stays terminated; all terminated → Succeeded / Failed
       │                       ▼
       └─ deletionTimestamp ─▶ SIGTERM to every container; each exits after its stop delay or is
                               killed at the grace period (137) → terminal phase → final DELETE

Guarantees:

* Every container status carries the fields the Python clients require (name, ready,
  restartCount, image, imageID) plus `started`, `containerID`, `state`, `lastState`; every
  condition carries type and status; times are metav1.Time strings.
* A condition's `lastTransitionTime` changes only when its status changes.
* Once terminal (Succeeded/Failed), a pod never leaves that phase and no container restarts.
* While the pod is terminating nothing restarts, and `wants_delete` becomes true only when
  every container has terminated: the final DELETE never precedes the containers' exit.

Annotations a test or scenario may put on a pod:

* `kubemesh.io/start-delay`: seconds in ContainerCreating (overrides the node's setting);
* `kubemesh.io/run-seconds`: each container exits after running this long ...
* `kubemesh.io/exit-code`: ... with this exit code (default 0);
* without `run-seconds`, the containers of a run-to-completion pod (`restartPolicy` Never or
  OnFailure, a Job's pod) exit 0 after the kubelet's `default_run_seconds` (5 cluster seconds,
  `--default-run-seconds`; negative: they run until stopped), so a plain Job completes;
  `restartPolicy: Always` pods run until stopped;
* `kubemesh.io/stop-seconds`: seconds a container takes to exit after SIGTERM;
* `kubemesh.io/log` (`kubemesh.io/log.<container>` for one container) and
  `kubemesh.io/log-interval`: what each container run prints (`kubemesh.kubelet.containerlogs`).

Logs: every run of a container has its own `ContainerLog`, written at each transition (start,
SIGTERM, exit); the machine keeps the current run's and the last terminated run's, and
`container_log` picks one as the kubelet's log endpoint does (`--previous` is the run that
`lastState.terminated` names).

Real processes (`kubemesh.kubelet.processes`): `use_processes` gives the machine the hooks of
a process runtime. Then a run starts a process instead of printing the emulated lines; a
container exits when its process does (`collect`, called before `advance`), not after
`run-seconds`; SIGTERM goes to the process at deletion and SIGKILL at the end of the grace
period (the stop deadline); a container finished by the machine (chaos, eviction, a pod gone)
has its process killed; and init containers run one after the other, in order, before the
containers start (a failing one restarts by restartPolicy with the same back-off, or fails the
pod under `Never`). The log of such a run is the process's output only.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from kubemesh.kubelet.containerlogs import PREFIX, ContainerLog, printed_lines
from kubemesh.kubelet.resources import Rejection, qos_class
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import Obj

START_DELAY: Final = "kubemesh.io/start-delay"
RUN_SECONDS: Final = "kubemesh.io/run-seconds"
EXIT_CODE: Final = "kubemesh.io/exit-code"
STOP_SECONDS: Final = "kubemesh.io/stop-seconds"

State = Literal["waiting", "running", "terminated"]


def image_id(image: str) -> str:
    """A stable, digest-pinned image reference for `image`."""
    digest = hashlib.sha256(image.encode()).hexdigest()
    repo = image.split("@", 1)[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    elif repo.count("/") == 1 and "." not in repo.split("/", 1)[0]:
        repo = f"docker.io/{repo}"
    return f"{repo}@sha256:{digest}"


def _float_annotation(pod: Obj, name: str) -> float | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(name)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(slots=True, kw_only=True)
class Container:
    """What the runtime knows about one container."""

    name: str
    image: str
    state: State = "waiting"
    reason: str | None = "ContainerCreating"
    message: str | None = None
    container_id: str = ""
    start_at: float | None = None
    """Waiting: when the container starts."""
    started_at: float | None = None
    exit_at: float | None = None
    """Running: when it exits by itself (run-seconds)."""
    stop_at: float | None = None
    """Stopping (SIGTERM sent): when it exits; `stop_code` is then its exit code."""
    stop_code: int = 0
    finished_at: float | None = None
    exit_code: int | None = None
    restart_count: int = 0
    last_terminated: dict[str, Any] | None = None
    printed: list[str] = field(default_factory=list)
    """What each run prints at start (the pod's `kubemesh.io/log` annotations)."""
    print_interval: float = 0.0
    runs: dict[str, ContainerLog] = field(default_factory=dict)
    """The logs of the current run and the last terminated one, by container ID."""

    def terminated_record(self) -> dict[str, Any]:
        """`state.terminated` as the API shows it."""
        rec: dict[str, Any] = {
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "reason": self.reason or ("Completed" if not self.exit_code else "Error"),
            "containerID": self.container_id or None,
        }
        if self.started_at is not None:
            rec["startedAt"] = format_time(self.started_at)
        if self.finished_at is not None:
            rec["finishedAt"] = format_time(self.finished_at)
        if self.message:
            rec["message"] = self.message
        return {k: v for k, v in rec.items() if v is not None}


class ContainerProcesses(Protocol):
    """The hooks of a process runtime for one pod (`kubemesh.kubelet.processes.PodProcesses`)."""

    def start(self, *, name: str, container_id: str, log: ContainerLog) -> None:
        """Start a run of container `name`, its output going to `log`."""
        ...

    def stop(self, container_id: str) -> None:
        """SIGTERM the run."""
        ...

    def kill(self, container_id: str) -> None:
        """SIGKILL the run (no-op once it exited)."""
        ...

    def exit_of(self, container_id: str) -> tuple[int, float, str, str | None] | None:
        """(code, cluster time, reason, message) once the run ended by itself."""
        ...

    def ready(self, container_id: str) -> bool:
        """Whether the run passes its readiness probe (True without one)."""
        ...


class LogUnavailable(Exception):
    """No log to show for a container in its state (the kubelet answers 400 with this message)."""


@dataclass(slots=True, kw_only=True)
class PodMachine:
    """The node-local state of one pod (one uid) and the status derived from it."""

    key: str
    uid: str
    restart_policy: str
    containers: list[Container]
    init_containers: list[str]
    init_images: list[str]
    host_ip: str
    qos: str
    rng: random.Random
    start_delay: float
    stop_delay: float
    crash_loop_base: float = 10.0
    crash_loop_max: float = 300.0
    run_seconds: float | None = None
    exit_code: int = 0
    admitted_at: float | None = None
    pod_ip: str | None = None
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    terminal: bool = False
    terminating: bool = False
    transitions: dict[str, tuple[str, float]] = field(default_factory=dict)
    extra_conditions: list[dict[str, Any]] = field(default_factory=list)
    processes: ContainerProcesses | None = None
    """Set by `use_processes`: the containers run as real processes."""
    inits: list[Container] = field(default_factory=list)
    """With processes: the init containers, run in order before the containers."""

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def for_pod(cls, pod: Obj, *, host_ip: str, rng: random.Random, start_delay: float,
                stop_delay: float, crash_loop_base: float = 10.0,
                crash_loop_max: float = 300.0, rebooted: bool = False,
                default_run_seconds: float | None = None) -> PodMachine:
        """A machine for `pod`.

        With `rebooted`, restart counts continue from its API status (the node came back from
        a power-off: every container it ran was lost). `default_run_seconds` is how long the
        containers of a run-to-completion pod (restartPolicy Never or OnFailure) run when the
        pod has no `kubemesh.io/run-seconds` annotation (None or negative: until stopped).
        """
        spec = pod.get("spec") or {}
        md = pod.get("metadata") or {}
        previous = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
        containers = []
        for c in spec.get("containers") or []:
            cont = Container(name=str(c.get("name", "")), image=str(c.get("image", "")))
            cont.printed, cont.print_interval = printed_lines(pod, cont.name)
            prev = previous.get(cont.name) if rebooted else None
            if prev is not None:
                cont.restart_count = int(prev.get("restartCount") or 0)
                if "running" in (prev.get("state") or {}) or "terminated" in (prev.get("state") or {}):
                    cont.restart_count += 1
                    cont.last_terminated = {"exitCode": 255, "reason": "Unknown",
                                            "message": "the node was powered off"}
            containers.append(cont)
        restart_policy = str(spec.get("restartPolicy") or "Always")
        run_seconds = _float_annotation(pod, RUN_SECONDS)
        if (run_seconds is None and restart_policy in ("Never", "OnFailure") and default_run_seconds is not None
                and default_run_seconds >= 0):
            run_seconds = default_run_seconds
        code = _float_annotation(pod, EXIT_CODE)
        pod_start = _float_annotation(pod, START_DELAY)
        pod_stop = _float_annotation(pod, STOP_SECONDS)
        return cls(
            key=f"{md.get('namespace', '')}/{md.get('name', '')}",
            uid=str(md.get("uid") or ""),
            restart_policy=restart_policy,
            containers=containers,
            init_containers=[str(c.get("name", "")) for c in spec.get("initContainers") or []],
            init_images=[str(c.get("image", "")) for c in spec.get("initContainers") or []],
            host_ip=host_ip, qos=qos_class(pod), rng=rng,
            start_delay=start_delay if pod_start is None else pod_start,
            stop_delay=stop_delay if pod_stop is None else pod_stop,
            crash_loop_base=crash_loop_base, crash_loop_max=crash_loop_max,
            run_seconds=run_seconds, exit_code=int(code) if code is not None else 0,
        )

    def use_processes(self, processes: ContainerProcesses, pod: Obj) -> None:
        """Run the containers (and init containers) of `pod` as real processes (before `start`)."""
        self.processes = processes
        self.run_seconds = None
        self.inits = [Container(name=str(c.get("name", "")), image=str(c.get("image", "")))
                      for c in (pod.get("spec") or {}).get("initContainers") or []]

    # -- inputs ---------------------------------------------------------------------------

    def start(self, *, now: float, pod_ip: str, extra_delay: float = 0.0) -> None:
        """Admit the pod: create the sandbox and schedule the containers' start."""
        self.admitted_at = now
        self.pod_ip = pod_ip
        for c in self.containers:
            c.state, c.reason = "waiting", "ContainerCreating"
            c.start_at = now + self.start_delay + extra_delay
        if self.inits:
            self.inits[0].start_at = now + self.start_delay + extra_delay
            for c in self.containers:
                c.start_at, c.reason = None, "PodInitializing"
        self._set("PodScheduled", "True", now)
        self._set("PodReadyToStartContainers", "False", now)
        self._set("Initialized", "False" if self.init_containers else "True", now)
        self._set("ContainersReady", "False", now)
        self._set("Ready", "False", now)

    def reject(self, rejection: Rejection, *, now: float) -> None:
        """Admission refused the pod: it is Failed and never runs here."""
        self.terminal, self.phase = True, "Failed"
        self.reason, self.message = rejection.reason, rejection.message
        self.containers = []
        self.admitted_at = None

    def terminate(self, *, now: float, grace: float) -> None:
        """Start terminating (deletionTimestamp seen): send SIGTERM; kill at the grace period. Idempotent."""
        if self.terminating:
            return
        self.terminating = True
        for c in [*self.inits, *self.containers]:
            if c.state == "running":
                c.exit_at = None
                if self.processes is not None:
                    # SIGTERM now; SIGKILL (137) at the grace period unless the process exits first.
                    self.processes.stop(c.container_id)
                    c.stop_at, c.stop_code = now + max(0.0, grace), 137
                    continue
                if (run := c.runs.get(c.container_id)) is not None:
                    run.write(now, f"{PREFIX}received SIGTERM")
                if self.stop_delay <= grace:
                    c.stop_at, c.stop_code = now + self.stop_delay, 0
                else:
                    c.stop_at, c.stop_code = now + max(0.0, grace), 137
            elif c.state == "waiting":
                self._finish(c, now=now, code=137, reason="ContainerStatusUnknown",
                             message="The container could not be located when the pod was terminated")
        self.advance(now)

    def evict(self, *, now: float, message: str) -> None:
        """The eviction manager kills the pod: Failed/Evicted, containers killed at once."""
        for c in self.containers:
            if c.state != "terminated":
                self._finish(c, now=now, code=137, reason="Error")
        self.terminal, self.phase, self.reason, self.message = True, "Failed", "Evicted", message
        self.extra_conditions = [{"type": "DisruptionTarget", "status": "True",
                                  "reason": "TerminationByKubelet", "message": message,
                                  "lastTransitionTime": format_time(now)}]
        self._refresh_conditions(now)

    def fail_container(self, *, now: float, name: str | None = None, exit_code: int = 1,
                       reason: str = "Error") -> list[str]:
        """Make running containers exit now; the names of those that exited.

        Chaos: `OOMKilled` with 137 is an OOM kill.
        """
        hit = []
        for c in self.containers:
            if c.state == "running" and (name is None or c.name == name):
                self._exit(c, now=now, code=exit_code, reason=reason)
                hit.append(c.name)
        self.advance(now)
        return hit

    def kill_all(self, *, now: float) -> None:
        """The pod is gone from the API: stop every container at once (no status to report)."""
        for c in [*self.inits, *self.containers]:
            if c.state != "terminated":
                self._finish(c, now=now, code=137, reason="Error")

    def collect(self, now: float) -> None:
        """Take in the exits of real processes (with `use_processes`); call before `advance`."""
        if self.processes is None:
            return
        for c in [*self.inits, *self.containers]:
            if c.state != "running" or not c.container_id:
                continue
            ended = self.processes.exit_of(c.container_id)
            if ended is None:
                continue
            code, at, reason, message = ended
            at = min(at, now)
            if c in self.inits:
                self._init_exit(c, now=at, code=code, reason=reason, message=message)
            elif self.terminating or self.terminal:
                self._finish(c, now=at, code=code, reason=reason, message=message)
            else:
                self._exit(c, now=at, code=code, reason=reason, message=message)

    def _init_exit(self, c: Container, *, now: float, code: int, reason: str, message: str | None) -> None:
        """An init container's process ended: start the next one (or the containers), or retry, or fail."""
        self._finish(c, now=now, code=code, reason=reason, message=message)
        if self.terminating or self.terminal:
            return
        if code == 0:
            after = self.inits[self.inits.index(c) + 1:]
            if after:
                after[0].start_at = now
            else:
                for cont in self.containers:
                    cont.start_at, cont.reason = now, "ContainerCreating"
            return
        if self.restart_policy == "Never":
            self.terminal, self.phase = True, "Failed"
            return
        c.last_terminated = c.terminated_record()
        c.restart_count += 1
        delay = self.restart_delay(c.restart_count)
        c.state, c.start_at = "waiting", now + delay
        c.reason = "CrashLoopBackOff" if delay > 0 else "PodInitializing"
        c.message = f"back-off {int(delay)}s restarting failed container={c.name}" if delay > 0 else None
        c.started_at, c.finished_at, c.exit_code = None, None, None

    # -- time -----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time at which `advance` has something to do."""
        times = []
        for c in [*self.inits, *self.containers]:
            if c.state == "waiting" and c.start_at is not None:
                times.append(c.start_at)
            elif c.state == "running":
                if c.stop_at is not None:
                    times.append(c.stop_at)
                elif c.exit_at is not None:
                    times.append(c.exit_at)
        return min(times) if times else None

    def advance(self, now: float) -> None:
        """Apply every transition due at or before `now`, in time order."""
        while True:
            due = self.next_deadline()
            if due is None or due > now:
                break
            for c in [*self.inits, *self.containers]:
                if c.state == "waiting" and c.start_at is not None and c.start_at <= due:
                    self._run(c, at=c.start_at)
                elif c.state == "running" and c.stop_at is not None and c.stop_at <= due:
                    self._finish(c, now=c.stop_at, code=c.stop_code,
                                 reason="Completed" if c.stop_code == 0 else "Error")
                elif (c.state == "running" and c.stop_at is None and c.exit_at is not None
                      and c.exit_at <= due):
                    self._exit(c, now=c.exit_at, code=self.exit_code,
                               reason="Completed" if self.exit_code == 0 else "Error")
        self._update_phase()
        self._refresh_conditions(now)

    @property
    def wants_delete(self) -> bool:
        """Terminating and every container has exited: the final DELETE may be sent."""
        return self.terminating and all(c.state == "terminated" for c in self.containers)

    @property
    def running_containers(self) -> list[str]:
        """Names of containers that are running now."""
        return [c.name for c in self.containers if c.state == "running"]

    # -- transitions ----------------------------------------------------------------------

    def _run(self, c: Container, *, at: float) -> None:
        c.state, c.reason, c.message = "running", None, None
        c.started_at, c.start_at, c.exit_code, c.finished_at = at, None, None, None
        c.container_id = f"containerd://{self.rng.getrandbits(256):064x}"
        c.exit_at = at + self.run_seconds if self.run_seconds is not None else None
        kept = (c.last_terminated or {}).get("containerID")
        c.runs = {k: v for k, v in c.runs.items() if k == kept}
        run = c.runs[c.container_id] = ContainerLog(container_id=c.container_id)
        if self.processes is not None:
            self.processes.start(name=c.name, container_id=c.container_id, log=run)
            return
        short = c.container_id.rsplit("/", 1)[-1][:12]
        run.write(at, f'{PREFIX}container "{c.name}" started (image {c.image}, id {short}, restart {c.restart_count})')
        for i, text in enumerate(c.printed):
            run.write(at + i * c.print_interval, text)

    def _finish(self, c: Container, *, now: float, code: int, reason: str,
                message: str | None = None) -> None:
        if self.processes is not None and c.state == "running":
            self.processes.kill(c.container_id)
            if (run := c.runs.get(c.container_id)) is not None:
                run.close(now)
        elif c.state == "running" and (run := c.runs.get(c.container_id)) is not None:
            run.end(now, f"{PREFIX}exited with code {code} ({reason})")
        c.state, c.exit_code, c.reason, c.message = "terminated", code, reason, message
        c.finished_at, c.start_at, c.exit_at, c.stop_at = now, None, None, None

    def _exit(self, c: Container, *, now: float, code: int, reason: str, message: str | None = None) -> None:
        """A container exited by itself: restart it or leave it terminated by restartPolicy."""
        self._finish(c, now=now, code=code, reason=reason, message=message)
        restart = not self.terminating and not self.terminal and (
            self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0))
        if not restart:
            return
        c.last_terminated = c.terminated_record()
        c.restart_count += 1
        delay = self.restart_delay(c.restart_count)
        c.state, c.start_at = "waiting", now + delay
        if delay > 0:
            c.reason = "CrashLoopBackOff"
            c.message = f"back-off {int(delay)}s restarting failed container={c.name}"
        else:
            c.reason, c.message = "ContainerCreating", None
        c.started_at, c.finished_at, c.exit_code = None, None, None

    def restart_delay(self, restart_count: int) -> float:
        """Pause before restart number `restart_count`.

        None for the first, then CrashLoopBackOff doubling from the base to the cap.
        """
        if restart_count <= 1:
            return 0.0
        return float(min(self.crash_loop_base * 2 ** (restart_count - 2), self.crash_loop_max))

    def _update_phase(self) -> None:
        if self.terminal and not self.terminating:
            return
        if not self.containers:
            return
        if all(c.state == "terminated" for c in self.containers):
            failed = any(c.exit_code for c in self.containers)
            self.phase = "Failed" if failed else "Succeeded"
            self.terminal = True
            return
        if self.terminal:
            return
        never_started = any(c.state == "waiting" and c.restart_count == 0 and c.last_terminated is None
                            for c in self.containers)
        self.phase = "Pending" if never_started else "Running"

    def _set(self, ctype: str, status: str, now: float) -> None:
        old = self.transitions.get(ctype)
        if old is None or old[0] != status:
            self.transitions[ctype] = (status, now)

    def _refresh_conditions(self, now: float) -> None:
        if self.admitted_at is None:
            return
        sandbox = any(c.started_at is not None or c.restart_count or c.last_terminated
                      for c in [*self.inits, *self.containers]) and not self.terminal
        self._set("PodReadyToStartContainers", "True" if sandbox else "False", now)
        inits_done = all(i.state == "terminated" and i.exit_code == 0 for i in self.inits)
        if self.init_containers and sandbox and inits_done:
            self._set("Initialized", "True", now)
        ready = bool(self.containers) and all(self._ready(c) for c in self.containers) \
            and not self.terminal
        self._set("ContainersReady", "True" if ready else "False", now)
        self._set("Ready", "True" if ready else "False", now)

    # -- logs -----------------------------------------------------------------------------

    def container_log(self, name: str, *, pod: str, previous: bool) -> ContainerLog:
        """The run whose log `GET .../log` shows, chosen from the container's state as the kubelet does.

        `previous`: the run `lastState.terminated` names. Otherwise the running run, else the
        terminated one, else the last terminated one (a container waiting to restart). Raises
        `LogUnavailable` (worded as the kubelet words it) when there is none.
        """
        c = next((c for c in [*self.containers, *self.inits] if c.name == name), None)
        if c is None:
            raise LogUnavailable(f'container "{name}" in pod "{pod}" is not available')
        last_id = str((c.last_terminated or {}).get("containerID") or "")
        if previous:
            if not last_id:
                raise LogUnavailable(f'previous terminated container "{name}" in pod "{pod}" not found')
            wanted = last_id
        elif c.state in ("running", "terminated") and c.container_id and c.container_id in c.runs:
            wanted = c.container_id
        elif c.state == "terminated" and not last_id:
            raise LogUnavailable(f'container "{name}" in pod "{pod}" is terminated')
        elif last_id:
            wanted = last_id
        else:
            raise LogUnavailable(f'container "{name}" in pod "{pod}" is waiting to start: '
                                 f"{c.reason or 'ContainerCreating'}")
        run = c.runs.get(wanted)
        if run is None:  # a run from before this kubelet (re)started: its log is lost with the machine
            run = ContainerLog(container_id=wanted)
            run.ended = 0.0
        return run

    # -- output ---------------------------------------------------------------------------

    def conditions(self) -> list[dict[str, Any]]:
        """The pod conditions this kubelet owns, in upstream's order."""
        out: list[dict[str, Any]] = list(self.extra_conditions)
        unready = [c.name for c in self.containers if not self._ready(c)]
        for ctype in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
            if ctype not in self.transitions:
                continue
            status, since = self.transitions[ctype]
            cond: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None,
                                    "lastTransitionTime": format_time(since)}
            if status == "False" and ctype in ("Ready", "ContainersReady"):
                cond["reason"] = "PodCompleted" if self.terminal else "ContainersNotReady"
                if not self.terminal:
                    cond["message"] = f"containers with unready status: [{' '.join(unready)}]"
            elif status == "False" and ctype == "Initialized":
                cond["reason"] = "ContainersNotInitialized"
            out.append(cond)
        return out

    def _ready(self, c: Container) -> bool:
        """Running, and (with processes) passing its readiness probe."""
        return c.state == "running" and (self.processes is None or self.processes.ready(c.container_id))

    def _container_status(self, c: Container) -> dict[str, Any]:
        if c.state == "running":
            state: dict[str, Any] = {"running": {"startedAt": format_time(c.started_at or 0.0)}}
        elif c.state == "terminated":
            state = {"terminated": c.terminated_record()}
        else:
            waiting: dict[str, Any] = {"reason": c.reason or "ContainerCreating"}
            if c.message:
                waiting["message"] = c.message
            state = {"waiting": waiting}
        out: dict[str, Any] = {
            "name": c.name, "image": c.image, "imageID": image_id(c.image) if c.container_id else "",
            "ready": self._ready(c) and not self.terminating,
            "started": c.state == "running", "restartCount": c.restart_count, "state": state,
            "lastState": {"terminated": c.last_terminated} if c.last_terminated else {},
        }
        if c.container_id:
            out["containerID"] = c.container_id
        return out

    def status(self, *, now: float) -> Obj:
        """The pod status to write (the parts this kubelet owns)."""
        st: Obj = {"phase": self.phase, "qosClass": self.qos, "conditions": self.conditions()}
        if self.reason:
            st["reason"] = self.reason
        if self.message:
            st["message"] = self.message
        if self.admitted_at is None:
            return st
        st["hostIP"] = self.host_ip
        st["hostIPs"] = [{"ip": self.host_ip}]
        st["startTime"] = format_time(self.admitted_at)
        started = any(c.started_at is not None or c.restart_count for c in [*self.inits, *self.containers])
        if self.pod_ip and started:
            st["podIP"] = self.pod_ip
            st["podIPs"] = [{"ip": self.pod_ip}]
        st["containerStatuses"] = [self._container_status(c) for c in self.containers]
        if self.inits:
            st["initContainerStatuses"] = [self._container_status(i) for i in self.inits]
            for i, out in zip(self.inits, st["initContainerStatuses"], strict=True):
                out["ready"] = i.state == "terminated" and i.exit_code == 0
        elif self.init_containers:
            done = started
            st["initContainerStatuses"] = [
                {"name": n, "image": img, "imageID": image_id(img) if done else "", "ready": done,
                 "started": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}} if done
                 else {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}
                for n, img in zip(self.init_containers, self.init_images, strict=True)]
        return st
