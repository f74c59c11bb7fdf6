"""The fault spec: parsing, defaults and validation of what `/chaos/v1/faults` accepts.

A fault is plain JSON (or msgpack)::

    {"name": "hold-sched-pod-deletes",            # optional: <type>-<target> by default
     "type": "watch.hold",
     "target": {"component": "scheduler"},         # component / instance / node, mode, value
     "match": {"resources": ["pods"], "eventTypes": ["DELETED"]},
     "params": {},                                 # per type, see TYPES
     "probability": 1.0,                           # per request, per event or per target
     "duration": null,                             # cluster seconds; null = until removed (explicit;
                                                   # optional for faults that act once, e.g. watch.close)
     "trigger": {"action": "release", "on": "delivered", "component": "scheduler",
                 "resource": "nodes", "name": "node-1", "eventTypes": ["DELETED"], "delay": 30},
     "breakObjectOrder": false}

`component.dropHandler` is the one component fault with a match: `match.resources` (required)
names the informers of the target component, `match.eventTypes` the notifications (ADDED =
on_add, MODIFIED = on_update, DELETED = on_delete), `match.namespace`/`match.name` the object;
`params.occurrence` N drops only the N-th match (default: every match while active). The
informer's store still applies the change; only its handlers miss it (kubernetes#56261,
#94437). Compare `watch.drop`, enforced on the apiserver's stream: there the store misses it
too, and the next relist repairs both; after a handler drop no relist repairs anything, since
the store was right all along. `probability` applies per target, as for every forwarded fault.

`parse` turns it into a frozen `FaultSpec` or raises `SpecError` carrying one cause per
field at fault (the API answers 422 with them). Nothing here looks at the cluster: whether a
target exists is checked by the engine (`kubemesh.apiserver.chaos.engine`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kubemesh.services.model.kinds import KINDS

Category = Literal["request", "watch", "reads", "node", "component", "clock", "webhook", "rbac", "apiserver"]

TYPES: Final[dict[str, Category]] = {
    "request.latency": "request",
    "request.error": "request",
    "request.stall": "request",
    "request.reset": "request",
    "request.commitThenFail": "request",
    "partition": "request",
    "watch.hold": "watch",
    "watch.delay": "watch",
    "watch.drop": "watch",
    "watch.duplicate": "watch",
    "watch.reorder": "watch",
    "watch.close": "watch",
    "watch.gone": "watch",
    "watch.noBookmarks": "watch",
    "reads.stale": "reads",
    "node.powerOff": "node",
    "node.leaseStop": "node",
    "node.statusStop": "node",
    "node.partition": "node",
    "node.condition": "node",
    "node.containersFail": "node",
    "node.containersSlow": "node",
    "node.containersFreeze": "node",
    "component.pause": "component",
    "component.crash": "component",
    "component.freezeInformer": "component",
    "component.chaosPoint": "component",
    "component.dropHandler": "component",
    "clock.skew": "clock",
    "clock.jump": "clock",
    "webhook.latency": "webhook",
    "webhook.error": "webhook",
    "webhook.unreachable": "webhook",
    "rbac.revokeBinding": "rbac",
    "rbac.rejectTokens": "rbac",
    "apiserver.watchCacheLag": "apiserver",
    "apiserver.etcdPartition": "apiserver",
}
"""Every fault type and where it is enforced."""

ONE_SHOT: Final = frozenset({"node.containersFail", "component.crash", "watch.close"})
"""Types whose effect happens once at activation and has nothing to undo."""

VERBS: Final = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
WRITE_VERBS: Final = ("create", "update", "patch", "delete", "deletecollection")
EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})
ERROR_CODES: Final = frozenset({409, 410, 429, 500, 503, 504})
RETRY_AFTER_CODES: Final = frozenset({429, 503})
MODES: Final = frozenset({"all", "one", "fixed", "percent"})
FIELD_OPS: Final = frozenset({"exists", "notExists", "equals", "notEquals", "changed"})
TRIGGER_ACTIONS: Final = frozenset({"arm", "fire", "release"})
TRIGGER_POINTS: Final = frozenset({"delivered", "written"})
RESOURCES: Final = frozenset(k.plural for k in KINDS)
"""The plurals of the built-in kinds (an apiserver serving custom resources passes more to `parse`)."""
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_MATCH_TYPES: Final = frozenset({"request", "watch", "reads", "webhook"})
WEBHOOK_OPERATIONS: Final = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}
"""A webhook fault's `match.verbs` as the admission operations they name."""


class SpecError(ValueError):
    """An invalid fault spec: `causes` are `{"field", "message"}` pairs."""

    def __init__(self, causes: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{c['field']}: {c['message']}" for c in causes))
        self.causes = causes


@dataclass(frozen=True, slots=True)
class FieldCondition:
    """A condition on one field of an object (dotted path)."""

    path: str
    op: str = "exists"
    value: Any = None

    def holds(self, obj: dict[str, Any] | None, prev: dict[str, Any] | None = None) -> bool:
        """Whether the object (and for `changed` its previous state) satisfies the condition."""
        present, value = _lookup(obj, self.path)
        if self.op == "exists":
            return present and value not in (None, "")
        if self.op == "notExists":
            return not present or value in (None, "")
        if self.op == "equals":
            return present and value == self.value
        if self.op == "notEquals":
            return not present or value != self.value
        # changed: the field differs from the previous state (an ADDED event has none)
        _, old = _lookup(prev, self.path)
        return prev is not None and old != value

    def to_dict(self) -> dict[str, Any]:
        """The normalized JSON form."""
        out: dict[str, Any] = {"path": self.path, "op": self.op}
        if self.op in ("equals", "notEquals"):
            out["value"] = self.value
        return out


def _lookup(obj: dict[str, Any] | None, path: str) -> tuple[bool, Any]:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


@dataclass(frozen=True, slots=True)
class Selector:
    """Which objects (and events, requests) a match or a trigger names."""

    verbs: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    """`pods` (any pods request, subresources included) or `pods/status` (that subresource)."""
    namespace: str | None = None
    name: str | None = None
    event_types: tuple[str, ...] = ()
    fields: tuple[FieldCondition, ...] = ()

    def matches_resource(self, plural: str, sub: str | None = None) -> bool:
        """Whether a resource (and subresource) is selected."""
        if not self.resources:
            return True
        for r in self.resources:
            base, _, rsub = r.partition("/")
            if base == plural and (not rsub or rsub == sub):
                return True
        return False

    def matches_target(self, *, plural: str, sub: str | None, namespace: str | None, name: str | None) -> bool:
        """Whether the resource, namespace and name a request (or a webhook call) is about are selected."""
        if not self.matches_resource(plural, sub):
            return False
        if self.namespace is not None and namespace != self.namespace:
            return False
        return self.name is None or name == self.name

    def matches_object(self, obj: dict[str, Any] | None, prev: dict[str, Any] | None = None) -> bool:
        """Namespace, name and field conditions against an object."""
        md = (obj or {}).get("metadata") or {}
        if self.namespace is not None and md.get("namespace") != self.namespace:
            return False
        if self.name is not None and md.get("name") != self.name:
            return False
        return all(c.holds(obj, prev) for c in self.fields)

    def to_dict(self) -> dict[str, Any]:
        """The normalized JSON form (empty fields left out)."""
        out: dict[str, Any] = {}
        if self.verbs:
            out["verbs"] = list(self.verbs)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.name is not None:
            out["name"] = self.name
        if self.event_types:
            out["eventTypes"] = list(self.event_types)
        if self.fields:
            out["fields"] = [c.to_dict() for c in self.fields]
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """Who a fault hits: clients by component/instance, or nodes; and how many of them."""

    component: str | None = None
    """A component name (`scheduler`, `controller_manager`, `kubelet`, any client's), `*` = any."""
    instances: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    mode: str = "all"
    value: float | None = None
    webhook_configuration: str | None = None
    """For webhook faults: the Mutating/ValidatingWebhookConfiguration's name, `*` = any."""
    webhook: str | None = None
    """For webhook faults: one webhook of the configuration (None: all of them)."""

    def to_dict(self) -> dict[str, Any]:
        """The normalized JSON form."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.component is not None:
            out["component"] = self.component
        if self.instances:
            out["instance"] = list(self.instances)
        if self.nodes:
            out["node"] = list(self.nodes)
        if self.value is not None:
            out["value"] = self.value
        if self.webhook_configuration is not None:
            out["webhookConfiguration"] = self.webhook_configuration
        if self.webhook is not None:
            out["webhook"] = self.webhook
        return out

    def describe(self) -> str:
        """A short name for default fault names."""
        if self.webhook_configuration is not None:
            return (self.webhook or self.webhook_configuration).replace("*", "any")
        if self.nodes:
            return self.nodes[0]
        if self.instances:
            return self.instances[0]
        return (self.component or "any").replace("*", "any").replace("_", "-")


@dataclass(frozen=True, slots=True)
class Trigger:
    """Sieve-style: act when `component` observes (`delivered`) or `written`s a change."""

    action: str
    on: str
    component: str | None
    instance: str | None
    selector: Selector
    occurrence: int = 1
    delay: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The normalized JSON form."""
        out: dict[str, Any] = {"action": self.action, "on": self.on, **self.selector.to_dict(),
                               "occurrence": self.occurrence, "delay": self.delay}
        if self.component is not None:
            out["component"] = self.component
        if self.instance is not None:
            out["instance"] = self.instance
        return out


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One validated fault."""

    name: str
    type: str
    target: Target
    match: Selector = field(default_factory=Selector)
    params: dict[str, Any] = field(default_factory=dict)
    probability: float = 1.0
    duration: float | None = None
    triggers: tuple[Trigger, ...] = ()
    break_object_order: bool = False

    @property
    def category(self) -> Category:
        """Where the fault is enforced."""
        return TYPES[self.type]

    def to_dict(self) -> dict[str, Any]:
        """The normalized JSON form (what GET returns, without status)."""
        return {"name": self.name, "type": self.type, "target": self.target.to_dict(),
                "match": self.match.to_dict(), "params": dict(self.params), "probability": self.probability,
                "duration": self.duration, "trigger": [t.to_dict() for t in self.triggers],
                "breakObjectOrder": self.break_object_order}


# -------------------------------------------------------------------------------------- parsing


class _Causes:
    """The context of one parse: the causes found so far, and the resources a match may name."""

    def __init__(self, resources: Collection[str] = RESOURCES) -> None:
        self.items: list[dict[str, str]] = []
        self.resources = resources

    def add(self, fld: str, message: str) -> None:
        self.items.append({"field": fld, "message": message, "reason": "FieldValueInvalid"})


def _str_list(value: Any, fld: str, causes: _Causes) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    causes.add(fld, "must be a string or a list of non-empty strings")
    return ()


def _number(value: Any, fld: str, causes: _Causes, *, minimum: float = 0.0, strict: bool = False,
            required: bool = False, default: float | None = None) -> float | None:
    if value is None:
        if required:
            causes.add(fld, "required")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        causes.add(fld, "must be a number")
        return default
    if value < minimum or (strict and value == minimum):
        causes.add(fld, f"must be {'>' if strict else '>='} {minimum:g}")
        return default
    return float(value)


def _int(value: Any, fld: str, causes: _Causes, *, minimum: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        causes.add(fld, "must be an integer")
        return default
    if value < minimum:
        causes.add(fld, f"must be >= {minimum}")
        return default
    return value


def parse_field_condition(raw: Any, fld: str, causes: _Causes) -> FieldCondition | None:
    """A condition from `{"path","op","value"}` or a shorthand string.

    Shorthands: `status.nominatedNodeName` (set), `!status.nominatedNodeName` (not set),
    `spec.nodeName=node-1`, `spec.nodeName!=node-1`, `~status.nominatedNodeName` (changed).
    """
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("!"):
            return FieldCondition(text[1:], "notExists") if text[1:] else _bad(fld, causes)
        if text.startswith("~"):
            return FieldCondition(text[1:], "changed") if text[1:] else _bad(fld, causes)
        if "!=" in text:
            path, _, value = text.partition("!=")
            return FieldCondition(path.strip(), "notEquals", value.strip()) if path.strip() else _bad(fld, causes)
        if "=" in text:
            path, _, value = text.partition("=")
            return FieldCondition(path.strip(), "equals", value.strip()) if path.strip() else _bad(fld, causes)
        return FieldCondition(text, "exists") if text else _bad(fld, causes)
    if not isinstance(raw, dict):
        causes.add(fld, "must be an object {path, op, value} or a string such as 'status.nominatedNodeName'")
        return None
    fpath = raw.get("path")
    op = raw.get("op", "exists")
    if not isinstance(fpath, str) or not fpath:
        causes.add(f"{fld}.path", "required: a dotted field path such as status.nominatedNodeName")
        return None
    if op not in FIELD_OPS:
        causes.add(f"{fld}.op", f"must be one of {', '.join(sorted(FIELD_OPS))}")
        return None
    if op in ("equals", "notEquals") and "value" not in raw:
        causes.add(f"{fld}.value", f"required with op {op}")
        return None
    return FieldCondition(fpath, op, raw.get("value"))


def _bad(fld: str, causes: _Causes) -> FieldCondition | None:
    causes.add(fld, "empty field path")
    return None


def parse_selector(raw: Any, fld: str, causes: _Causes, *, watch: bool, request: bool) -> Selector:
    """A match (or the object part of a trigger)."""
    if raw is None:
        return Selector()
    if not isinstance(raw, dict):
        causes.add(fld, "must be an object")
        return Selector()
    known = {"verbs", "verb", "resources", "resource", "namespace", "name", "eventTypes", "eventType", "fields",
             "field"}
    for k in raw:
        if k not in known:
            causes.add(f"{fld}.{k}", f"unknown field; known: {', '.join(sorted(known))}")
    verbs = _str_list(raw.get("verbs", raw.get("verb")), f"{fld}.verbs", causes)
    for v in verbs:
        if v not in VERBS:
            causes.add(f"{fld}.verbs", f"unknown verb {v!r}; known: {', '.join(sorted(VERBS))}")
    if verbs and not request:
        causes.add(f"{fld}.verbs", "only request faults match verbs")
    resources = _str_list(raw.get("resources", raw.get("resource")), f"{fld}.resources", causes)
    for r in resources:
        if r.split("/", 1)[0] not in causes.resources:
            causes.add(f"{fld}.resources", f"unknown resource {r!r}; known: {', '.join(sorted(causes.resources))}")
    events = _str_list(raw.get("eventTypes", raw.get("eventType")), f"{fld}.eventTypes", causes)
    for e in events:
        if e not in EVENT_TYPES:
            causes.add(f"{fld}.eventTypes", f"unknown event type {e!r}; known: ADDED, MODIFIED, DELETED")
    if events and not watch:
        causes.add(f"{fld}.eventTypes", "only watch faults and triggers match event types")
    conds: list[FieldCondition] = []
    raw_fields = raw.get("fields", raw.get("field"))
    if raw_fields is not None:
        items = raw_fields if isinstance(raw_fields, list) else [raw_fields]
        for i, item in enumerate(items):
            c = parse_field_condition(item, f"{fld}.fields[{i}]", causes)
            if c is not None:
                conds.append(c)
    for key in ("namespace", "name"):
        if raw.get(key) is not None and not isinstance(raw.get(key), str):
            causes.add(f"{fld}.{key}", "must be a string")
    ns = raw.get("namespace") if isinstance(raw.get("namespace"), str) else None
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    return Selector(verbs=verbs, resources=resources, namespace=ns, name=name, event_types=events,
                    fields=tuple(conds))


def parse_target(raw: Any, causes: _Causes, *, category: Category) -> Target:
    """The target, with per-category requirements."""
    if category == "rbac":
        # RBAC faults act on the apiserver's authorizer and authenticator: what they revoke is a param
        if raw not in (None, {}):
            causes.add("target", "rbac faults take no target: name the binding or the user in params")
        return Target()
    if category == "apiserver":
        # The apiserver the fault is created on is its target (with several, create it on that one).
        if raw not in (None, {}):
            causes.add("target", "apiserver faults act on the apiserver they are created on: no target")
        return Target()
    if not isinstance(raw, dict):
        causes.add("target", "required: an object with component, instance and/or node")
        return Target()
    for k in raw:
        if k not in ("component", "instance", "instances", "node", "nodes", "mode", "value", "webhookConfiguration",
                     "webhook"):
            causes.add(f"target.{k}", "unknown field; known: component, instance, node, mode, value, "
                                      "webhookConfiguration, webhook")
    if category == "webhook":
        return _webhook_target(raw, causes)
    if "webhookConfiguration" in raw or "webhook" in raw:
        causes.add("target.webhookConfiguration", "only webhook faults target webhook configurations")
    component = raw.get("component")
    if component is not None and (not isinstance(component, str) or not component):
        causes.add("target.component", "must be a non-empty string")
        component = None
    instances = _str_list(raw.get("instance", raw.get("instances")), "target.instance", causes)
    nodes = _str_list(raw.get("node", raw.get("nodes")), "target.node", causes)
    mode = raw.get("mode", "all")
    if mode not in MODES:
        causes.add("target.mode", f"must be one of {', '.join(sorted(MODES))}")
        mode = "all"
    value = raw.get("value")
    if mode == "fixed":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            causes.add("target.value", "mode fixed needs an integer value >= 1")
    elif mode == "percent":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 100:
            causes.add("target.value", "mode percent needs a value in (0, 100]")
    elif value is not None:
        causes.add("target.value", f"not used with mode {mode}")
    if category == "node":
        if component not in (None, "kubelet"):
            causes.add("target.component", "node faults target nodes (the kubelet that hosts them)")
        if instances:
            causes.add("target.instance", "node faults target nodes: use target.node")
        if not nodes and "mode" not in raw:
            causes.add("target.node", "required: a node name or list (or an explicit mode over all nodes)")
    elif category in ("component", "clock"):
        if nodes:
            causes.add("target.node", "component faults target components: use target.component/instance")
        if component is None and not instances:
            causes.add("target.component", "required: a component name (or target.instance)")
        if component == "*":
            causes.add("target.component", "must name one component")
    elif component is None and not instances and not nodes:
        causes.add("target.component", "required: a component name, '*' for every client, an instance or a node")
    if nodes and component not in (None, "kubelet"):
        causes.add("target.node", "a node's clients are kubelet clients; drop target.component or set kubelet")
    return Target(component=component if component is not None or not nodes else "kubelet",
                  instances=instances, nodes=nodes, mode=str(mode),
                  value=float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None)


def _webhook_target(raw: dict[str, Any], causes: _Causes) -> Target:
    """A webhook fault's target: a configuration (`*` for all) and optionally one webhook of it."""
    for k in ("component", "instance", "instances", "node", "nodes", "value"):
        if k in raw:
            causes.add(f"target.{k}", "webhook faults target webhook configurations: use target.webhookConfiguration")
    if raw.get("mode", "all") != "all":
        causes.add("target.mode", "webhook faults hit every call they match (use probability for a share)")
    config, hook = raw.get("webhookConfiguration"), raw.get("webhook")
    if not isinstance(config, str) or not config:
        causes.add("target.webhookConfiguration", "required: a webhook configuration's name, or '*' for all")
        config = None
    if hook is not None and (not isinstance(hook, str) or not hook):
        causes.add("target.webhook", "must be a webhook's name")
        hook = None
    return Target(webhook_configuration=config, webhook=hook)


def parse_trigger(raw: Any, fld: str, causes: _Causes) -> Trigger | None:
    """One trigger."""
    if not isinstance(raw, dict):
        causes.add(fld, "must be an object")
        return None
    action = raw.get("action", "arm")
    if action not in TRIGGER_ACTIONS:
        causes.add(f"{fld}.action", "must be arm, fire or release")
    on = raw.get("on", "delivered")
    if on not in TRIGGER_POINTS:
        causes.add(f"{fld}.on", "must be delivered (the component received it on a watch) or written "
                                "(the component wrote it)")
    comp = raw.get("component")
    if comp is not None and not isinstance(comp, str):
        causes.add(f"{fld}.component", "must be a string")
        comp = None
    inst = raw.get("instance")
    if inst is not None and not isinstance(inst, str):
        causes.add(f"{fld}.instance", "must be a string")
        inst = None
    sel_raw = {k: v for k, v in raw.items()
               if k not in ("action", "on", "component", "instance", "occurrence", "delay")}
    if not (sel_raw.get("resources") or sel_raw.get("resource")):
        causes.add(f"{fld}.resource", "required: the resource of the object to observe")
    if "verbs" in sel_raw or "verb" in sel_raw:
        causes.add(f"{fld}.verbs", "triggers observe events: use eventTypes")
    selector = parse_selector(sel_raw, fld, causes, watch=True, request=False)
    occurrence = _int(raw.get("occurrence"), f"{fld}.occurrence", causes, minimum=1, default=1)
    delay = _number(raw.get("delay"), f"{fld}.delay", causes, default=0.0) or 0.0
    return Trigger(action="arm" if action == "fire" else str(action), on=str(on), component=comp, instance=inst,
                   selector=selector, occurrence=occurrence, delay=delay)


def _params(type_: str, raw: Any, causes: _Causes, match: Selector) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        causes.add("params", "must be an object")
        return {}
    p: dict[str, Any] = {}
    allowed: set[str] = set()

    def num(key: str, **kw: Any) -> None:
        allowed.add(key)
        value = _number(raw.get(key), f"params.{key}", causes, **kw)
        if value is not None:
            p[key] = value

    def choice(key: str, options: tuple[str, ...]) -> None:
        allowed.add(key)
        value = raw.get(key, options[0])
        if value not in options:
            causes.add(f"params.{key}", f"must be one of {', '.join(options)}")
            value = options[0]
        p[key] = value

    def text(key: str, *, required: bool = False) -> None:
        allowed.add(key)
        value = raw.get(key)
        if value is None:
            if required:
                causes.add(f"params.{key}", "required")
            return
        if not isinstance(value, str) or not value:
            causes.add(f"params.{key}", "must be a non-empty string")
            return
        p[key] = value

    def flag(key: str, default: bool) -> None:
        allowed.add(key)
        value = raw.get(key, default)
        if not isinstance(value, bool):
            causes.add(f"params.{key}", "must be true or false")
            value = default
        p[key] = value

    def integer(key: str, default: int, minimum: int = 0) -> None:
        allowed.add(key)
        p[key] = _int(raw.get(key), f"params.{key}", causes, minimum=minimum, default=default)

    if type_ == "request.latency":
        num("delay", required=True)
        num("jitter", default=0.0)
        choice("distribution", ("uniform", "exponential"))
    elif type_ == "request.error":
        allowed.update(("code", "retryAfter", "message"))
        code = raw.get("code")
        if code not in ERROR_CODES:
            causes.add("params.code", f"required: one of {', '.join(str(c) for c in sorted(ERROR_CODES))}")
        else:
            p["code"] = code
        if "retryAfter" in raw:
            if code not in RETRY_AFTER_CODES:
                causes.add("params.retryAfter", "only 429 and 503 carry Retry-After")
            else:
                p["retryAfter"] = _int(raw["retryAfter"], "params.retryAfter", causes, minimum=0, default=1)
        elif code in RETRY_AFTER_CODES:
            p["retryAfter"] = 1
        text("message")
    elif type_ == "request.stall":
        num("timeout", strict=True)
        choice("then", ("pass", "reset"))
    elif type_ == "request.commitThenFail":
        allowed.add("code")
        flag("lose", False)  # true: no answer at all, the send of the committed write's answer fails
        code = raw.get("code", 500)
        if code not in (500, 503, 504):
            causes.add("params.code", "must be 500, 503 or 504")
        p["code"] = code
        bad = [v for v in match.verbs if v not in WRITE_VERBS]
        if bad:
            causes.add("match.verbs", f"commit-then-fail applies to writes only, not {', '.join(bad)}")
    elif type_ == "partition":
        choice("mode", ("reset", "blackhole"))
    elif type_ == "watch.delay":
        num("delay", required=True, strict=True)
        num("jitter", default=0.0)
    elif type_ == "watch.reorder":
        integer("window", 4, minimum=2)
        num("maxDelay", default=1.0, strict=True)
    elif type_ == "watch.gone":
        flag("newWatches", False)
    elif type_ == "reads.stale":
        allowed.update(("revisions", "seconds"))
        if ("revisions" in raw) == ("seconds" in raw):
            causes.add("params.revisions", "exactly one of revisions (N revisions ago) or seconds (S cluster "
                                           "seconds ago) is required")
        elif "revisions" in raw:
            p["revisions"] = _int(raw["revisions"], "params.revisions", causes, minimum=1, default=1)
        else:
            num("seconds", required=True, strict=True)
    elif type_ == "node.condition":
        text("type", required=True)
        choice("status", ("True", "False", "Unknown"))
        text("reason")
        text("message")
    elif type_ == "node.containersFail":
        text("namespace")
        text("pod")
        text("container")
        integer("exitCode", 1)
        text("reason")
    elif type_ == "node.containersFreeze":
        text("namespace")
        text("pod", required=True)
        text("container")
    elif type_ == "node.containersSlow":
        allowed.update(("startDelay", "stopDelay"))
        if "startDelay" not in raw and "stopDelay" not in raw:
            causes.add("params.startDelay", "one of startDelay or stopDelay is required")
        if "startDelay" in raw:
            num("startDelay")
        if "stopDelay" in raw:
            num("stopDelay")
    elif type_ == "component.crash":
        integer("exitCode", 1)
        flag("restart", False)
        text("apiserver")  # the restarted process talks to this apiserver URL (an HA reconnection)
        apiserver = p.get("apiserver")
        if apiserver is not None and (not p.get("restart") or not str(apiserver).startswith(("http://", "https://"))):
            causes.add("params.apiserver", "the URL of the apiserver the restarted process talks to: needs "
                                           "restart: true and an http(s) URL")
    elif type_ == "component.freezeInformer":
        text("informer", required=True)
    elif type_ == "component.dropHandler":
        allowed.add("occurrence")
        if raw.get("occurrence") is not None:
            p["occurrence"] = _int(raw["occurrence"], "params.occurrence", causes, minimum=1, default=1)
    elif type_ == "component.chaosPoint":
        text("point", required=True)
        allowed.add("action")
        if raw.get("action") not in ("crash", "pause"):
            causes.add("params.action", "required: crash or pause")
        else:
            p["action"] = raw["action"]
        integer("count", 1, minimum=1)
        integer("after", 0)
        integer("exitCode", 1)
        flag("restart", False)
    elif type_ == "webhook.latency":
        num("delay", required=True, strict=True)
    elif type_ == "webhook.error":
        allowed.add("code")
        code = raw.get("code", 500)
        if isinstance(code, bool) or not isinstance(code, int) or not 400 <= code <= 599:
            causes.add("params.code", "must be an HTTP error status (400-599)")
            code = 500
        p["code"] = code
    elif type_ == "rbac.revokeBinding":
        text("binding", required=True)
        b = p.get("binding")
        if isinstance(b, str) and not (_RBAC_BINDING.fullmatch(b)):
            causes.add("params.binding", "must be ClusterRoleBinding/NAME or RoleBinding/NAMESPACE/NAME")
        allowed.add("rules")
        rules = raw.get("rules")
        if rules is not None:
            if not isinstance(rules, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                      for i in rules) or not rules:
                causes.add("params.rules", "must be a non-empty list of rule indices (0 = the role's first rule)")
            else:
                p["rules"] = sorted(set(rules))
    elif type_ == "rbac.rejectTokens":
        text("user", required=True)
    elif type_ == "apiserver.etcdPartition":
        choice("mode", ("reset", "blackhole"))  # blackhole: each etcd call hangs for etcd's timeout first
    elif type_ == "apiserver.watchCacheLag":
        allowed.add("delay")
        if raw.get("delay") is not None:  # absent: the cache applies nothing until the fault ends
            num("delay", strict=True)
    elif type_ == "clock.skew":
        allowed.add("seconds")
        p["seconds"] = _number(raw.get("seconds"), "params.seconds", causes, minimum=-1e12, required=True)
    elif type_ == "clock.jump":
        allowed.add("seconds")
        p["seconds"] = _number(raw.get("seconds"), "params.seconds", causes, minimum=-1e12, required=True)
        flag("undo", True)
    for k in raw:
        if k not in allowed:
            causes.add(f"params.{k}", f"unknown parameter of {type_}"
                                      + (f"; known: {', '.join(sorted(allowed))}" if allowed else "; it takes none"))
    return p


_RBAC_BINDING: Final = re.compile(r"ClusterRoleBinding/[^/]+|RoleBinding/[^/]+/[^/]+")


def parse(raw: Any, *, resources: Collection[str] = RESOURCES) -> FaultSpec:
    """Validate a fault spec; raises SpecError with every field at fault.

    `resources`: the plurals a match or a trigger may name (the apiserver passes every kind it
    serves, custom resources included; the default is the built-in kinds).
    """
    causes = _Causes(resources)
    if not isinstance(raw, dict):
        raise SpecError([{"field": "", "message": "a fault must be an object", "reason": "FieldValueInvalid"}])
    known = {"name", "type", "target", "match", "params", "probability", "duration", "ttl", "trigger",
             "triggers", "breakObjectOrder", "status"}
    for k in raw:
        if k not in known:
            causes.add(k, f"unknown field; known: {', '.join(sorted(known - {'status'}))}")
    type_ = raw.get("type")
    if type_ not in TYPES:
        causes.add("type", f"required: one of {', '.join(TYPES)}")
        raise SpecError(causes.items)
    category = TYPES[type_]
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name)):
        causes.add("name", "must be a lowercase DNS-style name ([a-z0-9], '-' and '.')")
        name = None
    target = parse_target(raw.get("target"), causes, category=category)
    handler_drop = type_ == "component.dropHandler"
    match = parse_selector(raw.get("match"), "match", causes, watch=category == "watch" or handler_drop,
                           request=category in ("request", "webhook"))
    if category == "webhook":
        bad_verbs = [v for v in match.verbs if v not in WEBHOOK_OPERATIONS]
        if bad_verbs:
            causes.add("match.verbs", f"webhooks are called on create, update, patch and delete, not "
                                      f"{', '.join(bad_verbs)}")
    if category in ("request", "reads", "webhook") and match.fields:
        causes.add("match.fields", "field conditions apply to watch events (and triggers), not to requests")
    if handler_drop:
        if not match.resources:
            causes.add("match.resources", "required: the resource whose informer's handlers miss events, e.g. nodes")
        elif any("/" in r for r in match.resources):
            causes.add("match.resources", "informers watch whole resources: no subresources")
        if match.fields:
            causes.add("match.fields", f"{type_} matches event types, namespace and name, not field conditions")
    elif category not in _MATCH_TYPES and match != Selector():
        causes.add("match", f"{type_} matches no requests or events; leave match out")
    if type_ == "request.commitThenFail" and not match.verbs:
        match = Selector(verbs=WRITE_VERBS, resources=match.resources, namespace=match.namespace, name=match.name,
                         fields=match.fields)
    if type_ == "reads.stale":
        bad = [v for v in match.verbs if v not in ("get", "list")]
        if bad:
            causes.add("match.verbs", "stale reads serve get and list only")
    params = _params(type_, raw.get("params"), causes, match)
    probability = _number(raw.get("probability", 1.0), "probability", causes, strict=True, default=1.0) or 1.0
    if probability > 1:
        causes.add("probability", "must be in (0, 1]")
    if "duration" in raw and "ttl" in raw:
        causes.add("ttl", "give duration or ttl, not both")
    # A fault that acts once at activation has nothing to last: its duration may be left out.
    acts_once = type_ in ONE_SHOT or (type_ == "watch.gone" and not params.get("newWatches"))
    if "duration" not in raw and "ttl" not in raw and not acts_once:
        causes.add("duration", "required: cluster seconds, or null for a fault that lasts until it is removed")
    dur_raw = raw.get("duration", raw.get("ttl"))
    dur_field = "duration" if "duration" in raw else "ttl"
    duration = None if dur_raw is None else _number(dur_raw, dur_field, causes, strict=True)
    trig_raw = raw.get("trigger", raw.get("triggers"))
    triggers: list[Trigger] = []
    if trig_raw is not None:
        items = trig_raw if isinstance(trig_raw, list) else [trig_raw]
        for i, item in enumerate(items):
            t = parse_trigger(item, f"trigger[{i}]" if isinstance(trig_raw, list) else "trigger", causes)
            if t is not None:
                triggers.append(t)
        if sum(1 for t in triggers if t.action == "arm") > 1:
            causes.add("trigger", "at most one arm trigger")
        if sum(1 for t in triggers if t.action == "release") > 1:
            causes.add("trigger", "at most one release trigger")
    bo = raw.get("breakObjectOrder", False)
    if not isinstance(bo, bool):
        causes.add("breakObjectOrder", "must be true or false")
        bo = False
    if bo and type_ not in ("watch.hold", "watch.delay", "watch.reorder"):
        causes.add("breakObjectOrder", "only watch.hold, watch.delay and watch.reorder can break per-object order")
    if causes.items:
        raise SpecError(causes.items)
    default = re.sub(r"[^a-z0-9.-]+", "-", f"{type_.replace('.', '-')}-{target.describe()}".lower()).strip("-.")
    return FaultSpec(name=name or default[:200], type=type_,
                     target=target, match=match, params=params, probability=probability, duration=duration,
                     triggers=tuple(triggers), break_object_order=bo)
