"""The kubelet's default for run-to-completion pods (`default_run_seconds`, `--default-run-seconds`)."""

from __future__ import annotations

import argparse
import random

import pytest

from kubemesh.kubelet.lifecycle import PodMachine
from kubemesh.kubelet.running import add_arguments, settings_from_args
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.model.kinds import Obj


def pod(restart: str, annotations: dict[str, str] | None = None) -> Obj:
    return {"metadata": {"name": "job-x", "namespace": "default", "uid": "u1", "annotations": annotations or {}},
            "spec": {"restartPolicy": restart, "nodeName": "node-1",
                     "containers": [{"name": "c", "image": "busybox"}]}}


def run(p: Obj, until: float, default: float | None = 5.0) -> str:
    m = PodMachine.for_pod(p, host_ip="172.16.0.1", rng=random.Random(1), start_delay=1.0, stop_delay=0.5,
                           default_run_seconds=default)
    m.start(now=0.0, pod_ip="10.0.0.2")
    m.advance(until)
    return str(m.status(now=until)["phase"])


@pytest.mark.parametrize("restart", ["Never", "OnFailure"])
def test_run_to_completion_pods_exit_zero_after_the_default(restart: str) -> None:
    assert run(pod(restart), 5.9) == "Running"  # started at 1.0, runs 5 s
    assert run(pod(restart), 6.0) == "Succeeded"


def test_always_pods_run_forever() -> None:
    assert run(pod("Always"), 10_000.0) == "Running"


def test_annotations_win_over_the_default() -> None:
    assert run(pod("Never", {"kubemesh.io/run-seconds": "100"}), 50.0) == "Running"
    assert run(pod("Never", {"kubemesh.io/exit-code": "1"}), 6.0) == "Failed"


def test_a_negative_default_turns_it_off() -> None:
    assert run(pod("Never"), 10_000.0, default=-1) == "Running"
    assert run(pod("Never"), 10_000.0, default=None) == "Running"


def test_setting_and_flag() -> None:
    assert KubeletSettings().default_run_seconds == 5.0
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from_args(parser.parse_args([])).default_run_seconds == 5.0
    assert settings_from_args(parser.parse_args(["--default-run-seconds", "-1"])).default_run_seconds == -1
