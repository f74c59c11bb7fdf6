import random
from typing import Any

from kubemesh.kubelet.lifecycle import PodMachine
from kubemesh.kubelet.resources import Rejection
from kubemesh.services.model.kinds import Obj

REQUIRED_CONTAINER_FIELDS = {"name", "ready", "restartCount", "image", "imageID"}


def pod(*, restart: str = "Always", annotations: dict[str, str] | None = None, containers: int = 1) -> Obj:
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u1", "annotations": annotations or {}},
            "spec": {"restartPolicy": restart, "nodeName": "node-1",
                     "containers": [{"name": f"c{i}", "image": "nginx:1.25"} for i in range(containers)]}}


def machine(p: Obj, **kw: Any) -> PodMachine:
    return PodMachine.for_pod(p, host_ip="172.16.0.1", rng=random.Random(1), start_delay=2.0, stop_delay=1.0, **kw)


def wants_delete(m: PodMachine) -> bool:
    return m.wants_delete  # a call: mypy would narrow a property across asserts


def check_required(status: Obj) -> None:
    for c in status.get("containerStatuses", []):
        assert set(c) >= REQUIRED_CONTAINER_FIELDS, c
        assert isinstance(c["imageID"], str) and isinstance(c["ready"], bool)
    for cond in status.get("conditions", []):
        assert {"type", "status"} <= set(cond)


def cond(status: Obj, ctype: str) -> str:
    return str(next(c["status"] for c in status["conditions"] if c["type"] == ctype))


def test_pending_then_running_with_required_fields() -> None:
    m = machine(pod(containers=2))
    m.start(now=100.0, pod_ip="10.0.1.2")
    m.advance(100.0)
    st = m.status(now=100.0)
    check_required(st)
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert "podIP" not in st and st["hostIP"] == "172.16.0.1"
    assert cond(st, "Ready") == "False" and cond(st, "PodScheduled") == "True"
    assert m.next_deadline() == 102.0
    m.advance(102.0)
    st = m.status(now=102.0)
    check_required(st)
    assert st["phase"] == "Running"
    assert st["podIP"] == "10.0.1.2" and st["podIPs"] == [{"ip": "10.0.1.2"}]
    assert all(c["ready"] and "running" in c["state"] for c in st["containerStatuses"])
    assert st["containerStatuses"][0]["imageID"].startswith("docker.io/library/nginx@sha256:")
    assert cond(st, "Ready") == "True" and cond(st, "ContainersReady") == "True"
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    m.advance(200.0)
    again = next(c for c in m.status(now=200.0)["conditions"] if c["type"] == "Ready")
    assert again["lastTransitionTime"] == ready["lastTransitionTime"]  # no change, no transition


def test_restart_policy_never_and_onfailure() -> None:
    ok = machine(pod(restart="Never", annotations={"kubemesh.io/run-seconds": "5"}))
    ok.start(now=0.0, pod_ip="10.0.1.2")
    ok.advance(10.0)
    st = ok.status(now=10.0)
    assert st["phase"] == "Succeeded"
    assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    bad = machine(pod(restart="Never", annotations={"kubemesh.io/run-seconds": "5", "kubemesh.io/exit-code": "3"}))
    bad.start(now=0.0, pod_ip="10.0.1.3")
    bad.advance(10.0)
    assert bad.status(now=10.0)["phase"] == "Failed"
    onf = machine(pod(restart="OnFailure", annotations={"kubemesh.io/run-seconds": "5"}))
    onf.start(now=0.0, pod_ip="10.0.1.4")
    onf.advance(10.0)
    assert onf.status(now=10.0)["phase"] == "Succeeded"  # exit 0: no restart


def test_always_restarts_with_crashloop_backoff() -> None:
    m = machine(pod(restart="Always"))
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    assert m.fail_container(now=3.0, exit_code=1) == ["c0"]
    st = m.status(now=3.0)
    c = st["containerStatuses"][0]
    assert c["restartCount"] == 1 and "running" in c["state"]  # first restart at once
    assert c["lastState"]["terminated"]["exitCode"] == 1
    assert st["phase"] == "Running"
    m.fail_container(now=4.0, exit_code=1)
    c = m.status(now=4.0)["containerStatuses"][0]
    assert c["restartCount"] == 2 and c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert m.next_deadline() == 14.0
    m.advance(14.0)
    assert "running" in m.status(now=14.0)["containerStatuses"][0]["state"]
    assert [m.restart_delay(n) for n in (1, 2, 3, 4, 10)] == [0.0, 10.0, 20.0, 40.0, 300.0]


def test_oom_kill_restarts_in_place() -> None:
    m = machine(pod())
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    m.fail_container(now=5.0, exit_code=137, reason="OOMKilled")
    c = m.status(now=5.0)["containerStatuses"][0]
    assert c["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert c["restartCount"] == 1 and m.status(now=5.0)["phase"] == "Running"


def test_graceful_termination_within_grace() -> None:
    m = machine(pod(restart="Always"))
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    m.terminate(now=10.0, grace=30.0)
    assert not wants_delete(m)
    assert m.next_deadline() == 11.0
    m.advance(11.0)
    assert wants_delete(m)
    st = m.status(now=11.0)
    assert st["phase"] == "Succeeded"
    assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    # Nothing restarts once terminating.
    assert m.next_deadline() is None


def test_killed_at_grace_period() -> None:
    m = machine(pod(annotations={"kubemesh.io/stop-seconds": "100"}))
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    m.terminate(now=10.0, grace=5.0)
    m.advance(14.9)
    assert not wants_delete(m)
    m.advance(15.0)
    assert wants_delete(m)
    assert m.status(now=15.0)["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_terminate_before_start() -> None:
    m = machine(pod())
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.terminate(now=1.0, grace=30.0)
    assert wants_delete(m)
    check_required(m.status(now=1.0))


def test_eviction_and_rejection() -> None:
    m = machine(pod())
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    m.evict(now=3.0, message="The node was low on resource: memory. ")
    st = m.status(now=3.0)
    assert st["phase"] == "Failed" and st["reason"] == "Evicted"
    assert cond(st, "DisruptionTarget") == "True"
    assert m.next_deadline() is None and not m.running_containers
    check_required(st)
    r = machine(pod())
    r.reject(Rejection(reason="OutOfcpu", message="no"), now=0.0)
    st = r.status(now=0.0)
    assert st == {"phase": "Failed", "qosClass": "BestEffort", "conditions": [], "reason": "OutOfcpu",
                  "message": "no"}


def test_reboot_continues_restart_counts() -> None:
    p = pod()
    p["status"] = {"containerStatuses": [{"name": "c0", "restartCount": 2, "state": {"running": {}}}]}
    m = machine(p, rebooted=True)
    m.start(now=0.0, pod_ip="10.0.1.2")
    m.advance(2.0)
    c = m.status(now=2.0)["containerStatuses"][0]
    assert c["restartCount"] == 3 and c["lastState"]["terminated"]["reason"] == "Unknown"
