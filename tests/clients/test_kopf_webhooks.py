"""kopf's admission webhooks against a real mesh: kopf serves them and manages their configurations.

The operator (`kopf_webhook_operator.py`) runs as `kopf run --standalone` in kopf's own
virtualenv, with a certificate made for the test; kopf creates the `auto.kopf.dev` webhook
configurations (URL on loopback, `caBundle`), and the apiserver calls kopf as kube-apiserver
would: kubectl is refused a widget over size 10 with kopf's message, a widget without a message
is stored with the one kopf's mutating webhook adds, and a `webhook.unreachable` fault on kopf's
validating configuration makes creates fail closed until it is removed.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from clientkit import HERE, Child, Json, client_tools, kubeconfig_env, start_mesh
from waits import eventually

from kubemesh.services.machinery.certs import ensure_certs
from kubemesh.services.mesh.kubectl import Kubectl, KubectlError
from kubemesh.services.mesh.launching import Mesh
from kubemesh.services.mesh.state import free_port

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

GROUP = "kopf.clients.kubemesh.io"
WAIT = 60.0
"""Wall seconds for one thing kopf should do."""

WIDGET_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {"size": {"type": "integer"},
                                                                         "message": {"type": "string"}}},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}


def widget(name: str, **spec: object) -> str:
    return json.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Widget",
                       "metadata": {"name": name, "namespace": "default"}, "spec": spec})


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with start_mesh(components=("apiserver",)) as m:
        yield m


async def test_kopf_serves_and_manages_its_admission_webhooks(mesh: Mesh, tmp_path: Path) -> None:
    tools = client_tools()
    kubectl = Kubectl(mesh.kubeconfig_path)
    await kubectl("apply", "-f", "-", input=yaml.safe_dump(WIDGET_CRD))
    await kubectl("wait", "--for", "condition=established", f"crd/widgets.{GROUP}", "--timeout=60s")
    pki = tmp_path / "pki"
    ensure_certs(pki)
    env = kubeconfig_env(mesh.kubeconfig_path, KOPF_WEBHOOK_PKI=str(pki), KOPF_WEBHOOK_PORT=str(free_port()))
    kopf = Child(argv=[str(tools.kopf), "run", "--standalone", "--all-namespaces", "--verbose",
                       str(HERE / "kopf_webhook_operator.py")], log_path=tmp_path / "kopf.log", env=env, cwd=tmp_path)
    await kopf.start()
    try:
        async def configured() -> bool:
            try:
                found: Json = await kubectl.json("get", "validatingwebhookconfiguration", "auto.kopf.dev")
                await kubectl.json("get", "mutatingwebhookconfiguration", "auto.kopf.dev")
            except KubectlError:
                return False
            return bool(found.get("webhooks"))

        await eventually(configured, within=WAIT, what="kopf's auto.kopf.dev webhook configurations")

        async def refused() -> str | None:
            try:
                await kubectl("apply", "-f", "-", input=widget("huge", size=100))
            except KubectlError as exc:
                return exc.stderr
            await kubectl("delete", "widget", "huge", "-n", "default")
            return None

        stderr = await eventually(refused, within=WAIT, what="the huge widget refused by kopf")
        assert "denied the request: widgets larger than 10 are not allowed" in stderr, stderr

        await kubectl("apply", "-f", "-", input=widget("small", size=3))
        small: Json = await kubectl.json("get", "widget", "small", "-n", "default")
        assert small["spec"] == {"size": 3, "message": "set by the webhook"}

        # Make kopf's validating webhook unreachable: creates fail closed (kopf's failurePolicy), then heal.
        await mesh.chaos.add({"name": "kopf-down", "type": "webhook.unreachable", "duration": None,
                              "target": {"webhookConfiguration": "auto.kopf.dev"}})
        with pytest.raises(KubectlError) as down:
            await kubectl("apply", "-f", "-", input=widget("while-down", size=1))
        assert "connection refused" in down.value.stderr or "failed calling webhook" in down.value.stderr
        await mesh.chaos.remove("kopf-down")
        await kubectl("apply", "-f", "-", input=widget("after", size=1))
    finally:
        await kopf.stop(signal.SIGINT)
