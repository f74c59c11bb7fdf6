"""A kopf operator, run by tests/clients/test_kopf_operator.py as `kopf run` in kopf's own virtualenv.

It manages `Widget`s (`widgets.kopf.clients.kubemesh.io`) as an operator author writes one:

* create: a child ConfigMap `<name>-data` holding the spec, adopted (`kopf.adopt`: an owner
  reference to the Widget, controller and blockOwnerDeletion), then `status.phase: Created` and
  `status.observedSize` through `patch.status`; the handler's result lands in
  `status.create_widget`; a k8s Event (`kopf.info`) says so;
* update of the spec: the ConfigMap follows, `status.phase: Updated`;
* delete: the handler fails (temporarily: kopf retries it) until a ConfigMap `<name>-release`
  exists, then writes a ConfigMap `<name>-deleted`, nobody's child, to record that it ran. kopf
  holds the Widget with its finalizer until the handler succeeds, then removes the finalizer;
  the garbage collector then removes `<name>-data`;
* a timer every 0.5 s counts `status.ticks`.

The API client for the ConfigMaps is kubernetes_asyncio, loaded from KUBECONFIG at start-up.
kopf is installed only in `.venv-kopf`, not in the project's virtualenv that mypy runs in, so
mypy sees it as `Any`: hence the two exemptions below.
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

from typing import Any

import kopf  # type: ignore[import-not-found]
from kubernetes_asyncio import client as _client
from kubernetes_asyncio import config as _config

client: Any = _client
config: Any = _config

GROUP = "kopf.clients.kubemesh.io"
VERSION = "v1"
PLURAL = "widgets"


@kopf.on.startup()
async def start(settings: Any, memo: Any, **_: Any) -> None:
    settings.watching.server_timeout = 10  # the server ends each watch after 10 s; kopf resumes it
    await config.load_kube_config()
    memo.api = client.ApiClient()


@kopf.on.cleanup()
async def stop(memo: Any, **_: Any) -> None:
    await memo.api.close()


def data_of(spec: Any) -> dict[str, str]:
    return {"size": str(spec["size"]), "message": str(spec.get("message", ""))}


@kopf.on.create(GROUP, VERSION, PLURAL)
async def create_widget(name: str, namespace: str, spec: Any, body: Any, patch: Any, memo: Any, logger: Any,
                        **_: Any) -> dict[str, str]:
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-data"}, "data": data_of(spec)}
    kopf.adopt(child, owner=body)
    await client.CoreV1Api(memo.api).create_namespaced_config_map(namespace, child)
    logger.info("created ConfigMap %s-data", name)
    kopf.info(body, reason="ChildCreated", message=f"created ConfigMap {name}-data")  # a k8s Event of the Widget
    patch.status["phase"] = "Created"
    patch.status["observedSize"] = spec["size"]
    return {"configMap": f"{name}-data"}


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def update_widget(name: str, namespace: str, spec: Any, patch: Any, memo: Any, **_: Any) -> None:
    await client.CoreV1Api(memo.api).patch_namespaced_config_map(f"{name}-data", namespace, {"data": data_of(spec)})
    patch.status["phase"] = "Updated"
    patch.status["observedSize"] = spec["size"]


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete_widget(name: str, namespace: str, spec: Any, memo: Any, **_: Any) -> None:
    core = client.CoreV1Api(memo.api)
    try:
        await core.read_namespaced_config_map(f"{name}-release", namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            raise kopf.TemporaryError(f"waiting for ConfigMap {name}-release", delay=0.5) from None
        raise
    record = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-deleted"},
              "data": data_of(spec)}
    await core.create_namespaced_config_map(namespace, record)


@kopf.timer(GROUP, VERSION, PLURAL, interval=0.5)
async def tick(status: Any, patch: Any, **_: Any) -> None:
    patch.status["ticks"] = int(status.get("ticks", 0)) + 1
