"""The control plane's own pods in `kube-system`, as a kubeadm cluster shows them.

On a kubeadm (or kind) cluster the control-plane processes are static pods, and the kubelet of
the control-plane node mirrors each one into the API: `kube-apiserver-<node>`,
`kube-controller-manager-<node>`, `kube-scheduler-<node>`, with the container's restarts in
`status.containerStatuses[0].restartCount` and the exit that ended the previous run in its
`lastState.terminated`. Tests list `kube-system` to see that a cluster is alive, and a crash of
the scheduler shows there as a restart.

Here the processes are kubemesh's components, and the apiserver is the one place that hears of
each of their runs: every component registers with `boot` (an id drawn once per process start,
so a re-exec in place is a new run too) and `lastExitCode` (how its previous run ended, when the
launcher or the crash fault knows; see `kubemesh.services.process.component`). `ControlPlanePods`
listens to the component registry and keeps one mirror pod per apiserver, controller-manager and
scheduler instance:

* a first registration creates the pod, Running and Ready;
* a registration with a new `boot` (the container's `containerID` is `kubemesh://<boot>`) is a
  restart: `restartCount` + 1, `lastState.terminated` with the previous run's start, its end
  (now) and its exit code (1, reason Error, when unknown; 0 is reason Completed);
* a deregistration (a clean stop) leaves the container terminated and the pod not Ready.

Instances get the host names kind gives control-plane nodes (`kubemesh-control-plane`,
`kubemesh-control-plane2`, ... in the order instances first register; a pod remembers its
instance, so a restarted apiserver with `--data-dir` finds them again). kubemesh has no Node
object for that host: the pods name it in `spec.nodeName` only, and carry the
`kubernetes.io/config.mirror` annotation, which PodGC reads to leave them alone (upstream it
never has to: the node exists there). A crash without restart is not noticed until the process
registers again. The writes are attributed to the control-plane node's kubelet, as upstream.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.registry import Registry, WriteOptions
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import PODS, Obj
from kubemesh.services.model.wellknown import ANNOTATION_MIRROR

_log = structlog.get_logger("apiserver.controlplane")

NAMESPACE: Final = "kube-system"
HOST: Final = "kubemesh-control-plane"
INSTANCE: Final = "kubemesh.io/instance"
"""Annotation: the component instance a mirror pod stands for."""

# component (as it registers) -> (pod and container name, CPU request as kubeadm sets it)
_PODS: Final[dict[str, tuple[str, str]]] = {
    "apiserver": ("kube-apiserver", "250m"),
    "controller_manager": ("kube-controller-manager", "200m"),
    "scheduler": ("kube-scheduler", "100m"),
}


def host_name(ordinal: int) -> str:
    """The `ordinal`-th control-plane host (1-based), named as kind names control-plane nodes."""
    return HOST if ordinal == 1 else f"{HOST}{ordinal}"


def mirror_pod(component: str, *, instance: str, host: str, address: str, version: str) -> Obj:
    """The spec part of a control-plane component's mirror pod."""
    name, cpu = _PODS[component]
    digest = hashlib.sha256(f"{instance}/{host}".encode()).hexdigest()[:32]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{name}-{host}", "namespace": NAMESPACE,
            "labels": {"component": name, "tier": "control-plane"},
            "annotations": {ANNOTATION_MIRROR: digest, "kubernetes.io/config.hash": digest,
                            "kubernetes.io/config.source": "file", INSTANCE: instance},
        },
        "spec": {
            "nodeName": host, "hostNetwork": True, "priorityClassName": "system-node-critical",
            "restartPolicy": "Always",
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
            "containers": [{"name": name, "image": f"kubemesh/{name}:{version}",
                            "command": ["python", "-m", f"kubemesh.{component}"],
                            "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"podIP": address, "podIPs": [{"ip": address}], "hostIP": address,
                   "hostIPs": [{"ip": address}]},
    }


class ControlPlanePods:
    """Keeps the mirror pods of the registered control-plane instances (see the module docstring)."""

    def __init__(self, *, registry: Registry, address: str, version: str) -> None:
        self.registry = registry
        self.address = address
        self.version = version

    # -- the component registry's listener ----------------------------------------------------

    def registered(self, entry: dict[str, Any]) -> None:
        """A (re-)registration: create the pod, or record a restart when `boot` changed."""
        component, instance, boot = entry.get("component"), str(entry.get("instance")), entry.get("boot")
        if component not in _PODS or not isinstance(boot, str):
            return
        token = WRITER.set(("kubelet", HOST))
        try:
            self._sync(component, instance, boot, entry.get("lastExitCode"))
        except errors.StatusError as exc:  # never fails a registration: the next one retries
            _log.warning("could not write a control-plane pod", instance=instance, error=str(exc))
        finally:
            WRITER.reset(token)

    def deregistered(self, entry: dict[str, Any]) -> None:
        """A clean stop: the container terminated with exit code 0, the pod not Ready."""
        pod = self._pod_of(str(entry.get("instance")))
        if pod is None or entry.get("component") not in _PODS:
            return
        token = WRITER.set(("kubelet", HOST))
        try:
            status = self._stopped(pod)
            self.registry.update(PODS, NAMESPACE, pod["metadata"]["name"], {**pod, "status": status},
                                 WriteOptions(), subresource="status")
        except errors.StatusError as exc:
            _log.warning("could not write a control-plane pod", instance=entry.get("instance"), error=str(exc))
        finally:
            WRITER.reset(token)

    # -- internals -------------------------------------------------------------------------------

    def _pods(self) -> list[Obj]:
        return [p for p in self.registry.store.items(PODS, namespace=NAMESPACE)
                if ((p.get("metadata") or {}).get("annotations") or {}).get(INSTANCE)]

    def _pod_of(self, instance: str) -> Obj | None:
        for pod in self._pods():
            if pod["metadata"]["annotations"][INSTANCE] == instance:
                return pod
        return None

    def _next_host(self, component: str) -> str:
        name = _PODS[component][0]
        taken = {p["metadata"]["name"] for p in self._pods()}
        ordinal = 1
        while f"{name}-{host_name(ordinal)}" in taken:
            ordinal += 1
        return host_name(ordinal)

    def _sync(self, component: str, instance: str, boot: str, last_exit: Any) -> None:
        now = format_time(self.registry.clock.now())
        pod = self._pod_of(instance)
        if pod is None:
            body = mirror_pod(component, instance=instance, host=self._next_host(component), address=self.address,
                              version=self.version)
            wanted_status = body.pop("status")
            pod = self.registry.create(PODS, NAMESPACE, body, WriteOptions())
            status = self._running(pod, {**(pod.get("status") or {}), **wanted_status}, boot=boot, now=now,
                                   restarts=0, last_state={})
        else:
            old = pod.get("status") or {}
            (previous,) = old.get("containerStatuses") or [{}]
            if previous.get("containerID") == f"kubemesh://{boot}":
                return  # the same run registering again
            state = previous.get("state") or {}
            if "terminated" in state:  # it stopped cleanly (or its end was recorded) before this run
                last_state = {"terminated": state["terminated"]}
            else:  # it crashed: this run's start is the previous one's end
                code = last_exit if isinstance(last_exit, int) and not isinstance(last_exit, bool) else 1
                last_state = {"terminated": {
                    "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                    "startedAt": (state.get("running") or {}).get("startedAt") or now, "finishedAt": now,
                    "containerID": previous.get("containerID", "")}}
            status = self._running(pod, dict(old), boot=boot, now=now,
                                   restarts=int(previous.get("restartCount") or 0) + 1, last_state=last_state)
        self.registry.update(PODS, NAMESPACE, pod["metadata"]["name"], {**pod, "status": status}, WriteOptions(),
                             subresource="status")

    def _running(self, pod: Obj, status: Obj, *, boot: str, now: str, restarts: int, last_state: Obj) -> Obj:
        container = pod["spec"]["containers"][0]
        conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                      for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                "PodScheduled")]
        return {**status, "phase": "Running", "conditions": conditions,
                "startTime": status.get("startTime") or now,
                "containerStatuses": [{
                    "name": container["name"], "image": container["image"], "imageID": "",
                    "containerID": f"kubemesh://{boot}", "ready": True, "started": True,
                    "restartCount": restarts, "state": {"running": {"startedAt": now}},
                    "lastState": last_state}]}

    def _stopped(self, pod: Obj) -> Obj:
        now = format_time(self.registry.clock.now())
        status = dict(pod.get("status") or {})
        (previous,) = status.get("containerStatuses") or [{}]
        started = ((previous.get("state") or {}).get("running") or {}).get("startedAt") or now
        status["conditions"] = [
            {**c, "status": "False", "lastTransitionTime": now} if c.get("type") in ("Ready", "ContainersReady")
            else c for c in status.get("conditions") or []]
        status["containerStatuses"] = [{
            **previous, "ready": False, "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                     "finishedAt": now, "containerID": previous.get("containerID", "")}}}]
        return status
