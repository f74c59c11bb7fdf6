"""Forwarded faults: node faults to the kubelet that hosts the node, component faults to admin endpoints.

Every call has one of Jepsen's outcomes: `ok` (the target confirmed), `fail` (it certainly
did not happen: refused connection, an error answer) or `info` (no answer in time: it may
or may not have happened). An effect whose injection was `info` is still recovered when its
fault ends, since recovery calls are idempotent (Chaos Mesh's worst bug class is faults that
were never recovered because nobody was sure they had been applied).

Effects are reference-counted by `EffectKey` (node power, a node's lease, one condition
type, a component's pause, one informer, one chaos point, a component's clock; a handler drop
is its fault's own, keyed by the fault's name): when two faults pause the same component, it
is resumed only when the last of them ends; when the topmost of two faults setting one node
condition ends, the other's value is applied again. Clock skews of overlapping faults add up.

Admin contracts used (kubelet: `kubemesh.kubelet.admin`; components:
`kubemesh.services.process.component` and `kubemesh.services.process.chaospoints`):

    POST   {kubelet}/nodes/{node}/power-off | power-on | lease/stop | lease/resume | status/stop | status/resume
    POST   {kubelet}/nodes/{node}/partition | heal
    POST   {kubelet}/nodes/{node}/conditions          {"type","status","reason"?,"message"?}
    DELETE {kubelet}/nodes/{node}/conditions/{type}
    POST   {kubelet}/nodes/{node}/containers/fail     {"namespace"?,"pod"?,"container"?,"exitCode"?,"reason"?}
    POST   {kubelet}/nodes/{node}/containers/slow     {"startDelay"?,"stopDelay"?}
    POST   {kubelet}/nodes/{node}/containers/freeze   {"namespace"?,"pod","container"?,"frozen"}
    POST   {admin}/chaos/pause | /chaos/resume
    POST   {admin}/chaos/clock                        {"skew": s} | {"jump": s}
    POST   {admin}/chaos/crash                        {"exitCode","restart","apiserver"?}
    POST   {admin}/chaos/informers/{name}/freeze | unfreeze
    POST   {admin}/chaos/points/{name}                {"action","count","after","exitCode","restart"}
    DELETE {admin}/chaos/points/{name}
    POST   {admin}/chaos/handler-drops/{fault}        {"resources","eventTypes","namespace","name","occurrence"}
    DELETE {admin}/chaos/handler-drops/{fault}
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from kubemesh.apiserver.chaos.faults import Fault

Outcome = Literal["ok", "fail", "info"]
EffectKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallResult:
    """The outcome of one forwarded call."""

    outcome: Outcome
    detail: str
    body: Any = None


class Forwarder:
    """HTTP calls to kubelets and admin endpoints, with the bearer token and a timeout."""

    def __init__(self, *, token: str | None, timeout: float = 5.0) -> None:
        self.token = token
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            headers["User-Agent"] = "kubemesh-apiserver/chaos"
            self._session = aiohttp.ClientSession(headers=headers, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, method: str, url: str, body: Any = None) -> CallResult:
        """One call; never raises for network trouble (see the outcomes)."""
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            async with self._get().request(method, url, data=data, headers=headers,
                                           timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    text = raw[:300].decode("utf-8", "replace").strip()
                    return CallResult("fail", f"{method} {url}: HTTP {resp.status}: {text}")
                try:
                    parsed = orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    parsed = raw.decode("utf-8", "replace")
                return CallResult("ok", f"{method} {url}: HTTP {resp.status}", parsed)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            return CallResult("fail", f"{method} {url}: cannot connect: {exc}")
        except (TimeoutError, aiohttp.ClientError) as exc:
            return CallResult("info", f"{method} {url}: no answer ({type(exc).__name__}): outcome unknown")


Apply = Callable[[], Awaitable[CallResult]]


@dataclass(eq=False)
class _Entry:
    fault: str
    apply: Apply
    undo: Apply
    value: float = 0.0


class Effects:
    """Reference-counted effects: applied by the first fault, undone after the last."""

    def __init__(self) -> None:
        self._stacks: dict[EffectKey, list[_Entry]] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self._stacks.values())

    def keys_of(self, fault: str) -> list[EffectKey]:
        """Effects a fault holds."""
        return [k for k, s in self._stacks.items() if any(e.fault == fault for e in s)]

    def total(self, key: EffectKey) -> float:
        """The sum of the values of a key's entries (clock skews)."""
        return sum(e.value for e in self._stacks.get(key, ()))

    async def push(self, key: EffectKey, fault: str, *, apply: Apply, undo: Apply, value: float = 0.0) -> CallResult:
        """Hold an effect for a fault and (re)apply it; a certain failure does not hold it."""
        entry = _Entry(fault, apply, undo, value)
        stack = self._stacks.setdefault(key, [])
        stack.append(entry)
        result = await apply()
        if result.outcome == "fail":
            stack.remove(entry)
            if not stack:
                self._stacks.pop(key, None)
        return result

    async def pop(self, key: EffectKey, fault: str) -> CallResult | None:
        """Release a fault's hold; undo when it was the last, re-apply the new top otherwise."""
        stack = self._stacks.get(key)
        if not stack:
            return None
        entry = next((e for e in stack if e.fault == fault), None)
        if entry is None:
            return None
        was_top = stack[-1] is entry
        stack.remove(entry)
        if not stack:
            del self._stacks[key]
            return await entry.undo()
        if was_top or key[0] == "clock":
            return await stack[-1].apply()
        return CallResult("ok", "still held by another fault")


async def first_of(calls: list[Awaitable[CallResult]]) -> list[CallResult]:
    """Run calls concurrently (one per target)."""
    return list(await asyncio.gather(*calls))


Call = tuple[str, str, Any]
"""(method, URL, JSON body or None) of one forwarded call."""


def plan_calls(f: Fault, target: str, base: str) -> tuple[EffectKey | None, Call, Call | None]:
    """(effect key, inject call, undo call) of a forwarded fault on one target whose admin URL is `base`.

    Effects with the same key are reference-counted (`Effects`); a fault without an undo is one-shot.
    """
    p = f.spec.params
    t = f.spec.type
    n = f"{base}/nodes/{target}"
    simple = {"node.powerOff": ("power", "power-off", "power-on"), "node.leaseStop": ("lease", "lease/stop",
              "lease/resume"), "node.statusStop": ("status", "status/stop", "status/resume"),
              "node.partition": ("partition", "partition", "heal")}
    if t in simple:
        k, on, off = simple[t]
        return ("node", target, k), ("POST", f"{n}/{on}", None), ("POST", f"{n}/{off}", None)
    if t == "node.condition":
        return (("node", target, "condition", p["type"]), ("POST", f"{n}/conditions", dict(p)),
                ("DELETE", f"{n}/conditions/{p['type']}", None))
    if t == "node.containersSlow":
        return (("node", target, "slow"), ("POST", f"{n}/containers/slow", dict(p)),
                ("POST", f"{n}/containers/slow", {"startDelay": 0, "stopDelay": None}))
    if t == "node.containersFail":
        return None, ("POST", f"{n}/containers/fail", dict(p)), None
    if t == "node.containersFreeze":  # SIGSTOP while the fault holds, SIGCONT when it ends (process runtime)
        pod = f"{p.get('namespace') or 'default'}/{p['pod']}/{p.get('container') or ''}"
        return (("node", target, "freeze", pod), ("POST", f"{n}/containers/freeze", {**p, "frozen": True}),
                ("POST", f"{n}/containers/freeze", {**p, "frozen": False}))
    if t == "component.pause":
        return ("component", target, "pause"), ("POST", f"{base}/chaos/pause", None), \
            ("POST", f"{base}/chaos/resume", None)
    if t == "component.crash":
        return None, ("POST", f"{base}/chaos/crash", dict(p)), None
    if t == "component.freezeInformer":
        i = p["informer"]
        return (("component", target, "informer", i), ("POST", f"{base}/chaos/informers/{i}/freeze", None),
                ("POST", f"{base}/chaos/informers/{i}/unfreeze", None))
    if t == "component.dropHandler":
        m = f.spec.match
        drop = {"resources": list(m.resources), "eventTypes": list(m.event_types), "namespace": m.namespace,
                "name": m.name, "occurrence": p.get("occurrence")}
        url = f"{base}/chaos/handler-drops/{f.name}"
        return ("component", target, "dropHandler", f.name), ("POST", url, drop), ("DELETE", url, None)
    if t == "component.chaosPoint":
        body = {k: v for k, v in p.items() if k != "point"}
        return (("component", target, "point", p["point"]), ("POST", f"{base}/chaos/points/{p['point']}", body),
                ("DELETE", f"{base}/chaos/points/{p['point']}", None))
    if t == "clock.jump" and not p.get("undo", True):
        return None, ("POST", f"{base}/chaos/clock", {"jump": p["seconds"]}), None
    # clock.skew and undone jumps: offsets that add up while they overlap
    return ("clock", target), ("POST", f"{base}/chaos/clock", None), ("POST", f"{base}/chaos/clock", {"skew": 0})

