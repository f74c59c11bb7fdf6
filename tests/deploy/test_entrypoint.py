"""The image's entrypoint (scripts/docker-entrypoint) inside a pod of deploy/.

* `publish-secret`'s Secret is a valid `V1Secret` holding what the pods mount (the apiserver's
  volume items name exactly its keys), a CA that signed a serving certificate for the Service's
  names, and a kubeconfig for the Service.
* With that Secret mounted as the manifests mount it (`KUBEMESH_STATE_PROVIDED=true`), the
  command each container runs (`kubemesh-entrypoint argv ...`, what it would exec): a kubelet
  host of a StatefulSet hosts the slice of its ordinal and is named after its pod; an apiserver
  with `KUBEMESH_ETCD_ENDPOINTS` runs over etcd and writes nothing into the state folder; under
  kubemesh's process runtime (`KUBEMESH_ROOT`) the absolute state folder is taken under the root.
"""

from __future__ import annotations

import base64
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes.client as _k8s
import pytest
import yaml
from cryptography import x509

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

k8s: Any = _k8s  # the client package is only partly annotated

REPO = Path(__file__).resolve().parent.parent.parent
ENTRYPOINT = REPO / "scripts" / "docker-entrypoint"


def load_entrypoint() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("kubemesh_entrypoint", str(ENTRYPOINT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def published(tmp_path: Path) -> dict[str, Any]:
    entrypoint = load_entrypoint()
    body: dict[str, Any] = entrypoint.secret_body(
        "kubemesh-cluster", namespace="sim", server="https://kubemesh-apiserver:6443", token="t0ken",
        hosts=("kubemesh-apiserver", "kubemesh-apiserver.sim.svc"), workdir=tmp_path / "work")
    return body


def mounted_items() -> list[dict[str, str]]:
    """The apiserver pod's volume items of the Secret, as deploy/base mounts them."""
    docs = list(yaml.safe_load_all((REPO / "deploy" / "base" / "apiserver.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v)
    return list(volume["secret"]["items"])


def mount(secret: dict[str, Any], state: Path) -> None:
    """Write the Secret's keys where the pod's volume items put them."""
    for item in mounted_items():
        path = state / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(secret["data"][item["key"]]))


def entrypoint_argv(component: str, env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KUBEMESH_")}
    out = subprocess.run([sys.executable, str(ENTRYPOINT), "argv", component], env={**clean, **env},
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    argv: list[str] = json.loads(out.stdout)
    return argv


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_published_secret_holds_what_the_pods_mount(tmp_path: Path) -> None:
    secret = published(tmp_path)
    with k8s.ApiClient() as client:
        model = client.deserialize(json.dumps(secret), "V1Secret", "application/json")
        assert client.sanitize_for_serialization(model) == secret
    assert set(secret["data"]) == {item["key"] for item in mounted_items()}
    files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert files["token"].decode().strip() == "t0ken"
    cert = x509.load_pem_x509_certificate(files["apiserver.crt"])
    ca = x509.load_pem_x509_certificate(files["ca.crt"])
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert {"kubemesh-apiserver", "kubemesh-apiserver.sim.svc", "localhost"} <= set(names)
    kubeconfig = yaml.safe_load(files["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://kubemesh-apiserver:6443"
    assert kubeconfig["users"][0]["user"]["token"] == "t0ken"


def test_each_kubelet_host_hosts_the_slice_of_its_ordinal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    mount(published(tmp_path), state)
    env = {"KUBEMESH_STATE": str(state), "KUBEMESH_STATE_PROVIDED": "true", "KUBEMESH_NODES": "100",
           "KUBEMESH_APISERVER": "https://kubemesh-apiserver:6443"}
    slices = []
    for ordinal in (0, 2):
        argv = entrypoint_argv("kubelet", {**env, "KUBEMESH_POD_NAME": f"kubemesh-kubelet-{ordinal}"})
        assert argv[1:3] == ["-m", "kubemesh.kubelet"]
        assert flag(argv, "--instance") == f"kubemesh-kubelet-{ordinal}"
        assert flag(argv, "--apiserver") == "https://kubemesh-apiserver:6443"
        assert flag(argv, "--token-file") == str(state / "token")
        slices.append((int(flag(argv, "--node-offset")), int(flag(argv, "--nodes"))))
    assert slices == [(0, 100), (200, 100)]  # kubemesh-kubelet-2 hosts node-201 ... node-300
    assert "--pod-watch" not in argv
    argv = entrypoint_argv("kubelet", {**env, "KUBEMESH_POD_NAME": "kubemesh-kubelet-0",
                                       "KUBEMESH_POD_WATCH": "shared"})
    assert flag(argv, "--pod-watch") == "shared"
    argv = entrypoint_argv("scheduler", {**env, "KUBEMESH_POD_NAME": "kubemesh-scheduler-7d9f-x2x4z"})
    assert flag(argv, "--instance") == "kubemesh-scheduler-7d9f-x2x4z"


def test_apiserver_over_etcd_from_the_mounted_secret(tmp_path: Path) -> None:
    state = tmp_path / "state"
    mount(published(tmp_path), state)
    before = sorted(p.relative_to(state) for p in state.rglob("*"))
    argv = entrypoint_argv("apiserver", {
        "KUBEMESH_STATE": str(state), "KUBEMESH_STATE_PROVIDED": "true", "KUBEMESH_DATA": str(tmp_path / "data"),
        "KUBEMESH_ETCD_ENDPOINTS": "http://kubemesh-etcd:2379", "KUBEMESH_ADVERTISE_ADDRESS": "10.1.2.3"})
    assert flag(argv, "--storage") == "etcd"
    assert flag(argv, "--etcd-endpoints") == "http://kubemesh-etcd:2379"
    assert flag(argv, "--advertise-address") == "10.1.2.3"
    assert "--data-dir" not in argv
    assert flag(argv, "--tls-cert-file") == str(state / "pki" / "apiserver.crt")
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == before, "a mounted Secret is read-only"
    assert not (tmp_path / "data").exists()


def test_process_runtime_takes_the_state_under_its_root(tmp_path: Path) -> None:
    mount(published(tmp_path), tmp_path / "state")  # a volume mounted at /state
    argv = entrypoint_argv("controller-manager", {"KUBEMESH_ROOT": str(tmp_path), "KUBEMESH_STATE_PROVIDED": "true",
                                                  "KUBEMESH_POD_NAME": "kubemesh-controller-manager-abc"})
    assert flag(argv, "--token-file") == str(tmp_path / "state" / "token")
