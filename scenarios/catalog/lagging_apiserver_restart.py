"""lagging-apiserver-restart: a kubelet restarted against a lagging apiserver runs a deleted pod again.

kubernetes#59848 ("Kubernetes is vulnerable to stale reads, violating critical pod safety
guarantees"): in a highly available control plane each apiserver serves reads from its own
watch cache, and one cache can lag etcd. A kubelet that saw a pod deleted, and then restarts
and reconnects to a lagging apiserver, lists its pods at resourceVersion "0" (client-go's
reflector did, before WatchList): the lagging cache still shows the deleted pod bound to the
node, so the kubelet "travels back in time" and starts it again, while a pod of the same name
already runs elsewhere. At-most-one is broken for as long as the cache lags.

The mesh: three apiservers over the mesh's own etcd, three kubelets, each talking to one of
them (`MeshShape(store="etcd", apiservers=3)`). The run:

1. db-0 runs on the victim node, whose kubelet talks to a healthy apiserver;
2. a third apiserver's watch cache stops applying etcd's changes (chaos
   `apiserver.watchCacheLag`, created on that apiserver);
3. db-0 is deleted (gracefully: the victim's kubelet stops it and confirms) and a replacement
   db-0 is started on another node, whose kubelet talks to the second healthy apiserver;
4. the victim's kubelet crashes and restarts against the lagging apiserver (chaos
   `component.crash` with `restart` and `apiserver`: the reconnection of an HA control plane).

* buggy (`pods-list-from-watch-cache`): the restarted kubelet's first list is at
  resourceVersion "0", served from the lagging cache: it starts the old db-0 (uid of the
  deleted pod) again. Outcome `reproduced`.
* fixed: the first list has no resourceVersion, a consistent read, which the lagging apiserver
  serves from etcd (kube-apiserver on etcd 3.4.23); the old db-0 is not there, nothing starts.
  Outcome `prevented`.

Oracle, from the API: a `Started` event written by the victim node's kubelet about the old uid
after the kubelet restarted (events are objects in etcd, readable through any apiserver), while
the replacement runs elsewhere; the window needs the lag fault injected and the kubelet
registered again with the lagging apiserver.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Mode, Outcome, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import pod
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import PODS, Obj

OBSERVE = 30.0
"""Cluster seconds watched after the kubelet registered again with the lagging apiserver."""


class LaggingApiserverRestart(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "lagging-apiserver-restart"
    summary: ClassVar[str] = ("a kubelet restarted against an apiserver whose watch cache lags lists its pods from "
                              "that cache and starts a deleted pod again, a second copy of db-0 (HA stale read)")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#59848", "kubernetes#83520", "KEP-3157", "KEP-2340")
    bugs: ClassVar[tuple[str, ...]] = ("pods-list-from-watch-cache",)
    expected: ClassVar[dict[Mode, Outcome]] = {"buggy": "reproduced", "fixed": "prevented"}
    needs_chaos: ClassVar[bool] = True
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, kubelets=3, clock_rate=10.0, store="etcd", apiservers=3)
    deadline: ClassVar[float] = 400.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim, other, lagging = await self._roles(ctx)
        node, other_node = victim["nodes"][0], other["nodes"][0]
        ctx.focus("nodes", node, other_node)
        ctx.focus("pods", "default/db-0")
        await ctx.client.create(PODS, pod("db-0", labels={"app": "db"}, node_name=node), namespace="default")

        async def running() -> Obj | None:
            p = await ctx.pod("db-0")
            return p if oracles.is_running(p) and not oracles.is_terminating(p) else None

        first = await ctx.until(running, within=60)
        if first is None:
            raise ScenarioError(f"db-0 never ran on {node}")
        old_uid = str(first["metadata"]["uid"])
        ctx.say(f"db-0 Running on {node} (uid {old_uid[:8]}), whose kubelet {victim['instance']} talks to "
                f"{victim['apiserver']}")

        t_lag = ctx.now()
        await ctx.add_fault({"name": "scenario-cache-lag", "type": "apiserver.watchCacheLag", "duration": None},
                            apiserver=str(lagging["url"]))
        ctx.mark(f"{lagging['name']}'s watch cache stops", lane="scenario", at=t_lag)

        await ctx.client.delete(PODS, "db-0", namespace="default")
        ctx.mark("DELETE db-0", lane="scenario")

        async def gone() -> bool | None:
            return True if await ctx.pod("db-0") is None else None

        if not await ctx.until(gone, within=60):
            raise ScenarioError(f"db-0 did not leave the API after its graceful delete ({node}'s kubelet)")
        ctx.say(f"db-0 stopped and deleted by {node}'s kubelet")
        await ctx.client.create(PODS, pod("db-0", labels={"app": "db"}, node_name=other_node), namespace="default")
        replacement = await ctx.until(running, within=60)
        if replacement is None:
            raise ScenarioError(f"the replacement db-0 never ran on {other_node}")
        ctx.say(f"replacement db-0 Running on {other_node} (uid {str(replacement['metadata']['uid'])[:8]})")

        t_restart = ctx.now()
        await ctx.add_fault({"name": "scenario-reconnect", "type": "component.crash",
                             "target": {"instance": [victim["instance"]]},
                             "params": {"restart": True, "apiserver": str(lagging["url"])}})
        ctx.mark(f"{victim['instance']} restarts against {lagging['name']}", lane="scenario", at=t_restart)

        async def reconnected() -> dict[str, Any] | None:
            entry = await ctx.registration(str(victim["instance"]))
            return entry if entry and entry.get("apiserver") == lagging["name"] and \
                entry.get("boot") != victim.get("boot") else None

        again = await ctx.until(reconnected, within=60)
        if again is not None:
            ctx.say(f"{victim['instance']} registered again, now with {lagging['name']}")
            await ctx.until(lambda: self._restarts(ctx, old_uid, node, after=t_restart), within=OBSERVE)
        return await self._judge(ctx, node=node, other_node=other_node, old_uid=old_uid, lagging=lagging,
                                 victim=str(victim["instance"]), reconnected=again is not None,
                                 t_restart=t_restart, replacement_started=oracles.started_at(replacement))

    async def _roles(self, ctx: ScenarioContext) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The victim kubelet, another kubelet on another apiserver, and a third apiserver to lag."""
        apiservers = await ctx.apiservers()
        kubelets = [e for e in (await ctx.mesh.components() or {}).values()
                    if e.get("component") == "kubelet" and e.get("nodes") and e.get("apiserver")]
        kubelets.sort(key=lambda e: str(e["instance"]))
        for victim in kubelets:
            for other in kubelets:
                if other["apiserver"] == victim["apiserver"]:
                    continue
                third = [a for a in apiservers if a.get("name") not in (victim["apiserver"], other["apiserver"])]
                if third:
                    return victim, other, third[0]
        raise ScenarioError(f"needs three apiservers over etcd with kubelets on two of them (kubemesh up --store etcd "
                            f"--apiservers 3 --nodes 3 --kubelets 3); found {len(apiservers)} apiserver(s) and "
                            f"{len(kubelets)} kubelet(s) registered with one")

    async def _restarts(self, ctx: ScenarioContext, uid: str, node: str, *, after: float) -> list[Obj] | None:
        """`Started` events the node wrote about the old db-0 (its uid) since the kubelet restarted."""
        found = [e for e in await ctx.events_about("db-0", reason="Started")
                 if (e.get("involvedObject") or {}).get("uid") == uid and (e.get("source") or {}).get("host") == node
                 and parse_time(str(e.get("firstTimestamp") or "")) is not None
                 and (parse_time(str(e.get("firstTimestamp"))) or 0.0) >= after - 1.0]
        return found or None

    async def _judge(self, ctx: ScenarioContext, *, node: str, other_node: str, old_uid: str, lagging: dict[str, Any],
                     victim: str, reconnected: bool, t_restart: float, replacement_started: float | None) -> Verdict:
        status = await ctx.fault_status("scenario-cache-lag", apiserver=str(lagging["url"]))
        lag_on = bool(status) and (status or {}).get("status", {}).get("phase") == "Active"
        evidence = [f"{lagging['name']} ({lagging['url']}): watch cache lag "
                    + ("active" if lag_on else "not active (faults off, or never created)"),
                    f"{victim} restarted at t={t_restart - ctx.t0:.1f}s against {lagging['name']}: "
                    + ("registered there again" if reconnected else "never registered there")]
        restarts = await self._restarts(ctx, old_uid, node, after=t_restart) or []
        for e in restarts:
            evidence.append(f"{node} reported {e.get('reason')} of the old db-0 (uid {old_uid[:8]}) at "
                            f"{e.get('firstTimestamp')}: {e.get('message')}")
        if not reconnected:
            return oracles.inconclusive(f"{victim} did not come back against {lagging['name']}", evidence)
        if not restarts and not lag_on:
            return oracles.inconclusive(f"the window did not open: {lagging['name']}'s cache was not lagging when "
                                        f"{victim} restarted against it", evidence)
        when = parse_time(str(restarts[0].get("firstTimestamp"))) if restarts else None
        since = f"t={replacement_started - ctx.t0:.1f}s" if replacement_started is not None else "before"
        return oracles.decide(
            symptom=bool(restarts), healthy=not restarts and lag_on, evidence=evidence,
            reproduced=(f"two copies of default/db-0 ran at once: the replacement on {other_node} (running since "
                        f"{since}), and the deleted one (uid {old_uid[:8]}), which {node}'s kubelet started again "
                        f"at t={(when or t_restart) - ctx.t0:.1f}s after restarting against {lagging['name']}: its "
                        "first pod list, at resourceVersion 0, came from that apiserver's lagging watch cache, "
                        "where the deleted pod was still bound to the node"),
            prevented=(f"prevented: {node}'s kubelet restarted against the lagging {lagging['name']} but listed its "
                       "pods with a consistent read (no resourceVersion), which that apiserver served from etcd: the "
                       f"deleted db-0 was not there and nothing started on {node}; the replacement ran alone on "
                       f"{other_node}"))
