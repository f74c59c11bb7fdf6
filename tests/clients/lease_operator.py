"""A small kubernetes_asyncio operator, run as its own process under the kubeconfig in $KUBECONFIG.

What an operator with leader election does once: list the leases of its namespace, read its
own lease (create it when missing), renew it, list the ConfigMaps and write its output
ConfigMap. A step the apiserver refuses is reported on stderr (the apiserver's message) and
the operator goes on, as a controller's loop would; the exit code is 3 when any step was
refused, 0 otherwise.

Run: `KUBECONFIG=... python lease_operator.py NAMESPACE`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

NAME = "my-operator"


async def main(namespace: str) -> int:
    await config.load_kube_config()
    refused = 0
    async with client.ApiClient() as api:
        coord, core = client.CoordinationV1Api(api), client.CoreV1Api(api)
        now = datetime.datetime.now(datetime.UTC)

        async def step(what: str, call: Callable[[], Awaitable[Any]]) -> Any:
            nonlocal refused
            try:
                return await call()
            except ApiException as exc:
                if exc.status != 403:
                    raise
                refused += 1
                print(f"{what}: {json.loads(exc.body or b'{}').get('message')}", file=sys.stderr)
                return None

        await step("list leases", lambda: coord.list_namespaced_lease(namespace))
        lease: Any = None
        try:
            lease = await step("get lease", lambda: coord.read_namespaced_lease(NAME, namespace))
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = await step("create lease", lambda: coord.create_namespaced_lease(namespace, client.V1Lease(
                metadata=client.V1ObjectMeta(name=NAME),
                spec=client.V1LeaseSpec(holder_identity=NAME, lease_duration_seconds=15, acquire_time=now,
                                        renew_time=now))))
        if lease is not None:
            lease.spec.renew_time = now
            await step("renew lease", lambda: coord.replace_namespaced_lease(NAME, namespace, lease))
        await step("list configmaps", lambda: core.list_namespaced_config_map(namespace))
        try:
            await step("write output", lambda: core.create_namespaced_config_map(namespace, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"{NAME}-output"), data={"ok": "true"})))
        except ApiException as exc:
            if exc.status != 409:
                raise
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
