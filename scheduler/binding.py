"""The scheduler's writes to the apiserver: binding, status patches, victim deletion, node reads.

`ClientApi` implements `scheduler.scheduling.SchedulerApi` over the shared `ApiClient`:

* `bind` POSTs a v1 Binding to `pods/binding` with the pod's uid, so that a pod deleted and
  recreated under the same name is never bound by a decision made for its predecessor.
* `patch_pod_status` sends a JSON merge patch to `pods/status` (nominatedNodeName, the
  PodScheduled condition).
* `delete_pod` deletes a preemption victim with a uid precondition and the pod's own grace
  period (victims terminate gracefully, as upstream); a victim already gone is not an error.
* `get_node` answers None on 404, which is what the node-not-found check of #56622 needs.
* `record_event` hands the event to the `kubemesh.services.machinery.eventing.EventRecorder` (action
  `Scheduling`) and returns at once.
"""

from __future__ import annotations

from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.services.machinery.client import ApiClient, NotFoundError
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import NODES, PODS, Obj


class ClientApi:
    """`SchedulerApi` over an `ApiClient` (see the module docstring)."""

    def __init__(self, client: ApiClient, *, events: EventRecorder) -> None:
        self.client = client
        self.events = events

    async def bind(self, pod: PodInfo, node: str) -> None:
        """POST the binding of `pod` to `node`."""
        await self.client.bind(namespace=pod.namespace, pod=pod.name, node=node, uid=pod.uid or None)

    async def patch_pod_status(self, pod: PodInfo, patch: Obj) -> None:
        """Merge-patch the pod's status subresource."""
        await self.client.patch(PODS, pod.name, patch, namespace=pod.namespace, patch_type="merge",
                                subresource="status")

    async def delete_pod(self, pod: PodInfo) -> None:
        """Delete a preemption victim (uid precondition); an already deleted one is fine."""
        try:
            await self.client.delete(PODS, pod.name, namespace=pod.namespace,
                                     preconditions={"uid": pod.uid} if pod.uid else None)
        except NotFoundError:
            return

    async def get_node(self, name: str) -> Obj | None:
        """GET a node; None when it does not exist."""
        try:
            return await self.client.get(NODES, name)
        except NotFoundError:
            return None

    def record_event(self, pod: Obj, *, type: str, reason: str, message: str) -> None:
        """Queue an event about the pod."""
        self.events.record(pod, type=type, reason=reason, message=message, action="Scheduling")
