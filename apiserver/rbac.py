"""The RBAC authorizer: who may do what, from the Roles, ClusterRoles and their bindings in the store.

A request is described by its `Attributes` (verb, API group, resource, subresource, namespace,
name; or a non-resource path) and asked about for a `User` (name and groups). The answer
follows upstream's RBAC authorizer:

* members of `system:masters` may do everything (the admin token, and kubeadm's admin);
* otherwise a request is allowed when one rule of a role bound to the user, or to one of its
  groups, covers it: the ClusterRoles of ClusterRoleBindings anywhere, and the Roles or
  ClusterRoles of the RoleBindings of the request's namespace;
* a rule covers verbs, API groups, resources (`*`, `resource/subresource`, `*/subresource`),
  `resourceNames` (empty: all names) and `nonResourceURLs` (`*`, exact, or a `prefix*`);
* a ClusterRole with an `aggregationRule` holds the rules of every ClusterRole its label
  selectors match (computed here, as upstream's aggregation controller would write it).

Invariant (performance): bindings are indexed by subject, and the rules one user holds in one
namespace are computed once per RBAC revision; every decision is cached under the same
revision. A write to any RBAC kind bumps the revision (the store's publisher, synchronously in
the write path), so no decision outlives the objects it was derived from. A request therefore
costs a dictionary lookup once its answer is known, and O(rules the user holds) the first time.

Escalation (`EscalationCheck`, a registry write hook): a user may create or update a Role or
ClusterRole only with rules it holds itself (or the `escalate` verb on it), and a binding only
to a role whose rules it holds (or the `bind` verb on it), as upstream's RBAC storage refuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kubemesh.apiserver import errors
from kubemesh.apiserver.storage import EventType, Store
from kubemesh.services.model.kinds import (
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    ROLEBINDINGS,
    ROLES,
    Kind,
    Obj,
)

MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"
RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_KINDS: Final = frozenset({ROLES, CLUSTERROLES, ROLEBINDINGS, CLUSTERROLEBINDINGS})


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    """An authenticated identity: upstream's user.Info."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def info(self) -> Obj:
        """The user as reviews show it (`userInfo`)."""
        out: Obj = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ADMIN: Final = User(name="kubernetes-admin", groups=(MASTERS, AUTHENTICATED))

USER: Final[ContextVar[User | None]] = ContextVar("kubemesh_user", default=None)
"""The user whose request is being served (None: the apiserver's own writes, never checked)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attributes:
    """What a request asks to do (upstream's authorizer.Attributes)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True

    def forbidden_message(self, user: str) -> str:
        """Upstream's sentence for a denied request (without the `<resource> is forbidden: ` head)."""
        if not self.resource_request:
            return f'User "{user}" cannot {self.verb} path "{self.path}"'
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return f'User "{user}" cannot {self.verb} resource "{res}" in API group "{self.group}" {where}'

    def forbidden(self, user: str, *, kind: Kind | None = None, reason: str = "") -> errors.StatusError:
        """The 403 upstream answers: `pods "x" is forbidden: User ... cannot ...[: reason]`."""
        sentence = self.forbidden_message(user) + (f": {reason}" if reason else "")
        if not self.resource_request:
            return errors.StatusError(403, "Forbidden", f"forbidden: {sentence}", details={})
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        head = f'{qualified} "{self.name}"' if self.name else qualified
        details: Obj = {"kind": self.resource}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        return errors.StatusError(403, "Forbidden", f"{head} is forbidden: {sentence}", details=details)


ASKED: Final[ContextVar[Attributes | None]] = ContextVar("kubemesh_attributes", default=None)
"""The resource request being served (the escalation check reads its namespace: a body may omit it)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One PolicyRule, as sets for matching."""

    verbs: frozenset[str]
    groups: frozenset[str]
    resources: frozenset[str]
    names: frozenset[str]
    urls: tuple[str, ...]

    @classmethod
    def of(cls, raw: Any) -> Rule:
        """A rule from a PolicyRule (anything malformed reads as empty: it allows nothing)."""
        r = raw if isinstance(raw, dict) else {}

        def strs(key: str) -> list[str]:
            v = r.get(key)
            return [str(x) for x in v] if isinstance(v, list) else []

        return cls(frozenset(strs("verbs")), frozenset(strs("apiGroups")), frozenset(strs("resources")),
                   frozenset(strs("resourceNames")), tuple(strs("nonResourceURLs")))

    def allows(self, a: Attributes) -> bool:
        """Whether this rule allows the request `a`."""
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.resource_request:
            return any(u in ("*", a.path) or (u.endswith("*") and a.path.startswith(u[:-1]))
                       for u in self.urls)
        if "*" not in self.groups and a.group not in self.groups:
            return False
        if not self._resource_matches(a.resource, a.subresource):
            return False
        return not self.names or a.name in self.names

    def _resource_matches(self, resource: str, sub: str) -> bool:
        if "*" in self.resources:
            return True
        if not sub:
            return resource in self.resources
        return f"{resource}/{sub}" in self.resources or f"*/{sub}" in self.resources

    def document(self) -> Obj:
        """The rule as a PolicyRule (lists sorted)."""
        out: Obj = {"verbs": sorted(self.verbs)}
        if self.urls:
            out["nonResourceURLs"] = list(self.urls)
        else:
            out["apiGroups"] = sorted(self.groups)
            out["resources"] = sorted(self.resources)
            if self.names:
                out["resourceNames"] = sorted(self.names)
        return out


@dataclass(frozen=True, slots=True)
class Grant:
    """A rule a user holds, and where it comes from (for rules reviews and the least-privilege report)."""

    rule: Rule
    binding: str
    """`ClusterRoleBinding/name` or `RoleBinding/ns/name`."""
    role: str
    """`ClusterRole/name` or `Role/ns/name`."""
    reason: str
    """Upstream's description: `ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`."""


def subject_keys(user: User) -> list[tuple[str, str]]:
    """The index keys a user's bindings are found under."""
    return [("User", user.name), *(("Group", g) for g in user.groups)]


def _describe_subject(key: tuple[str, str]) -> str:
    kind, name = key
    if kind == "User" and name.startswith("system:serviceaccount:") and name.count(":") == 3:
        _, _, ns, sa = name.split(":")
        return f'ServiceAccount "{sa}/{ns}"'
    return f'{kind} "{name}"'


def _subject_key(subject: Any, binding_ns: str) -> tuple[str, str] | None:
    if not isinstance(subject, dict):
        return None
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "ServiceAccount":
        ns = str(subject.get("namespace") or binding_ns)
        return ("User", f"system:serviceaccount:{ns}:{name}")
    if kind in ("User", "Group"):
        return (str(kind), name)
    return None


def _matches_labels(selector: Any, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions' In/NotIn/Exists/DoesNotExist) on labels."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass(slots=True)
class _Index:
    """Everything derived from the RBAC objects at one revision."""

    cluster_roles: dict[str, tuple[Rule, ...]]
    roles: dict[str, tuple[Rule, ...]]
    """`ns/name` -> rules."""
    cluster_bindings: dict[tuple[str, str], list[tuple[str, str]]]
    """subject key -> [(binding name, ClusterRole name)]."""
    bindings: dict[tuple[str, str, str], list[tuple[str, str, str]]]
    """(namespace, subject kind, subject name) -> [(binding name, role kind, role name)]."""


class FirstOpinion(Protocol):
    """An authorizer asked before RBAC (upstream's authorizer chain, e.g. `Node,RBAC`)."""

    def opinion(self, user: User, a: Attributes) -> tuple[bool, str] | None:
        """(allowed, reason when not) for the users it decides for; None: no opinion, RBAC decides.

        A refusal is not final either: RBAC may still allow (upstream's chain asks the next
        authorizer after a no-opinion); the reason is kept for the 403 when RBAC refuses too.
        """
        ...


class Authorizer:
    """The RBAC authorizer over one store (see the module docstring)."""

    def __init__(self, *, store: Store, enabled: bool = True, first: FirstOpinion | None = None) -> None:
        self.store = store
        self.enabled = enabled
        self.first = first
        """Asked before RBAC for every request (the node authorizer); its answers are never cached."""
        """False: every authenticated user may do everything (`--authorization-mode=AlwaysAllow`)."""
        self.revision = 0
        self._index: _Index | None = None
        self._grants: dict[tuple[str, tuple[str, ...], str], list[Grant]] = {}
        self._decisions: dict[tuple[Any, ...], bool] = {}
        self.revoked: dict[str, frozenset[int] | None] = {}
        """Chaos: binding (`ClusterRoleBinding/name`, `RoleBinding/ns/name`) -> indices of its role's rules
        withdrawn (None: the whole binding). Change through `revoke`/`restore`."""
        store.subscribe(self._on_write)

    def _on_write(self, kind: Kind, event: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        if kind in RBAC_KINDS:
            self.invalidate()

    def invalidate(self) -> None:
        """Forget every derived answer (an RBAC object or a revocation changed)."""
        self.revision += 1
        self._index = None
        self._grants.clear()
        self._decisions.clear()

    def revoke(self, binding: str, rules: frozenset[int] | None) -> None:
        """Withdraw a binding (`rules` None) or some of its role's rules, by index, until `restore`."""
        self.revoked[binding] = rules
        self.invalidate()

    def restore(self, binding: str) -> None:
        """Give back what `revoke` withdrew."""
        self.revoked.pop(binding, None)
        self.invalidate()

    # ------------------------------------------------------------------------------ index

    def index(self) -> _Index:
        """The RBAC objects as of now, indexed (rebuilt after any RBAC write)."""
        if self._index is None:
            self._index = self._build()
        return self._index

    def _build(self) -> _Index:
        raw_cluster = {o["metadata"]["name"]: o for o in self.store.items(CLUSTERROLES)}
        base = {name: tuple(Rule.of(r) for r in (o.get("rules") or [])) for name, o in raw_cluster.items()}
        cluster_roles = dict(base)
        for name, o in raw_cluster.items():
            agg = o.get("aggregationRule")
            if not isinstance(agg, dict):
                continue
            rules = list(base[name])
            for other_name, other in sorted(raw_cluster.items()):
                if other_name == name:
                    continue
                labels = other["metadata"].get("labels") or {}
                if any(_matches_labels(s, labels) for s in agg.get("clusterRoleSelectors") or []):
                    rules.extend(r for r in base[other_name] if r not in rules)
            cluster_roles[name] = tuple(rules)
        roles = {f"{o['metadata']['namespace']}/{o['metadata']['name']}":
                 tuple(Rule.of(r) for r in o.get("rules") or []) for o in self.store.items(ROLES)}
        cluster_bindings: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for o in self.store.items(CLUSTERROLEBINDINGS):
            ref = o.get("roleRef") or {}
            if ref.get("kind") != "ClusterRole":
                continue
            for s in o.get("subjects") or []:
                key = _subject_key(s, "")
                if key is not None:
                    cluster_bindings.setdefault(key, []).append((o["metadata"]["name"], str(ref.get("name"))))
        bindings: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        for o in self.store.items(ROLEBINDINGS):
            ns = o["metadata"]["namespace"]
            ref = o.get("roleRef") or {}
            for s in o.get("subjects") or []:
                key = _subject_key(s, ns)
                if key is not None:
                    bindings.setdefault((ns, *key), []).append(
                        (o["metadata"]["name"], str(ref.get("kind")), str(ref.get("name"))))
        return _Index(cluster_roles=cluster_roles, roles=roles, cluster_bindings=cluster_bindings, bindings=bindings)

    def role_rules(self, kind: str, namespace: str, name: str) -> tuple[Rule, ...] | None:
        """A role's rules (aggregated for a ClusterRole), None when it does not exist."""
        idx = self.index()
        if kind == "ClusterRole":
            return idx.cluster_roles.get(name)
        return idx.roles.get(f"{namespace}/{name}")

    def grants(self, user: User, namespace: str) -> list[Grant]:
        """The rules `user` holds in `namespace` ("" : cluster-wide ones only), with their origin."""
        key = (user.name, user.groups, namespace)
        got = self._grants.get(key)
        if got is not None:
            return got
        idx = self.index()
        out: list[Grant] = []
        subjects = subject_keys(user)
        for s in subjects:
            for bname, role in idx.cluster_bindings.get(s, ()):
                self._add(out, f"ClusterRoleBinding/{bname}", f"ClusterRole/{role}", idx.cluster_roles.get(role, ()),
                          f'ClusterRoleBinding "{bname}" of ClusterRole "{role}" to {_describe_subject(s)}')
        if namespace:
            for s in subjects:
                for bname, rkind, rname in idx.bindings.get((namespace, *s), ()):
                    rules = idx.cluster_roles.get(rname, ()) if rkind == "ClusterRole" else \
                        idx.roles.get(f"{namespace}/{rname}", ())
                    where = f"ClusterRole/{rname}" if rkind == "ClusterRole" else f"Role/{namespace}/{rname}"
                    self._add(out, f"RoleBinding/{namespace}/{bname}", where, rules,
                              f'RoleBinding "{bname}/{namespace}" of {rkind} "{rname}" to {_describe_subject(s)}')
        if len(self._grants) > 10_000:  # bounded: many namespaces x users
            self._grants.clear()
        self._grants[key] = out
        return out

    def _add(self, out: list[Grant], binding: str, role: str, rules: Iterable[Rule], reason: str) -> None:
        withdrawn = self.revoked.get(binding, frozenset())
        if withdrawn is None:
            return
        for i, r in enumerate(rules):
            if i not in withdrawn:
                out.append(Grant(r, binding, role, reason))

    # ------------------------------------------------------------------------------ decisions

    def allowed(self, user: User, a: Attributes) -> bool:
        """Whether `user` may do `a`."""
        if not self.enabled or MASTERS in user.groups:
            return True
        if self.first is not None:
            said = self.first.opinion(user, a)
            if said is not None and said[0]:
                return True
        key = (user.name, user.groups, a)
        got = self._decisions.get(key)
        if got is None:
            got = any(g.rule.allows(a) for g in self.grants(user, a.namespace))
            if len(self._decisions) > 100_000:
                self._decisions.clear()
            self._decisions[key] = got
        return got

    def decide(self, user: User, a: Attributes) -> tuple[bool, str]:
        """Whether `user` may do `a`, and why (upstream's `RBAC: allowed by ...`; "" when denied)."""
        if not self.enabled or MASTERS in user.groups:
            return True, ""
        said = self.first.opinion(user, a) if self.first is not None else None
        if said is not None and said[0]:
            return True, ""
        for g in self.grants(user, a.namespace):
            if g.rule.allows(a):
                return True, f"RBAC: allowed by {g.reason}"
        return False, said[1] if said is not None else ""

    def check(self, user: User, a: Attributes, *, kind: Kind | None = None) -> None:
        """Raise upstream's 403 unless `user` may do `a` (with the first authorizer's reason, if it gave one)."""
        if not self.allowed(user, a):
            raise self.refusal(user, a, kind=kind)

    def refusal(self, user: User, a: Attributes, *, kind: Kind | None = None) -> errors.StatusError:
        """The 403 for a request `allowed` refused."""
        said = self.first.opinion(user, a) if self.first is not None else None
        return a.forbidden(user.name, kind=kind, reason=said[1] if said is not None else "")

    def rules_of(self, user: User, namespace: str) -> list[Rule]:
        """What a SelfSubjectRulesReview lists (everything for system:masters)."""
        if MASTERS in user.groups or not self.enabled:
            return [Rule(frozenset({"*"}), frozenset({"*"}), frozenset({"*"}), frozenset(), ()),
                    Rule(frozenset({"*"}), frozenset(), frozenset(), frozenset(), ("*",))]
        seen: list[Rule] = []
        for g in self.grants(user, namespace):
            if g.rule not in seen:
                seen.append(g.rule)
        return seen

    # ------------------------------------------------------------------------------ escalation

    def covers(self, user: User, namespace: str, rules: Iterable[Rule]) -> list[Rule]:
        """The parts of `rules` that `user` does not hold in `namespace` (empty: it holds them all)."""
        if MASTERS in user.groups or not self.enabled:
            return []
        held = [g.rule for g in self.grants(user, namespace)]
        missing: list[Rule] = []
        for rule in rules:
            for part in _atoms(rule):
                if not any(_rule_covers(h, part) for h in held):
                    missing.append(part)
        return missing


def _atoms(rule: Rule) -> Iterator[Rule]:
    """A rule broken into one verb x group x resource (x name) or verb x URL each."""
    for verb in sorted(rule.verbs):
        if rule.urls:
            for url in rule.urls:
                yield Rule(frozenset({verb}), frozenset(), frozenset(), frozenset(), (url,))
            continue
        for group in sorted(rule.groups):
            for res in sorted(rule.resources):
                names: list[frozenset[str]] = [frozenset({n}) for n in sorted(rule.names)] or [frozenset()]
                for n in names:
                    yield Rule(frozenset({verb}), frozenset({group}), frozenset({res}), n, ())


def _rule_covers(owner: Rule, part: Rule) -> bool:
    """Whether `owner` allows everything the single-valued `part` does (a `*` needs a `*`)."""
    (verb,) = part.verbs
    if "*" not in owner.verbs and verb not in owner.verbs:
        return False
    if part.urls:
        (url,) = part.urls
        return any(u in ("*", url) or (u.endswith("*") and url.startswith(u[:-1])) for u in owner.urls)
    (group,) = part.groups
    (res,) = part.resources
    if "*" not in owner.groups and group not in owner.groups:
        return False
    if "*" not in owner.resources and res not in owner.resources:
        _, _, sub = res.partition("/")
        if not (sub and sub != "*" and f"*/{sub}" in owner.resources):
            return False
    if not owner.names:
        return True
    return bool(part.names) and part.names <= owner.names


class EscalationCheck:
    """The registry hook that refuses RBAC writes granting what the writer does not hold."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Refuse an RBAC write that grants more than its writer holds (403, upstream's wording)."""
        if kind not in RBAC_KINDS:
            return
        user = USER.get()
        if user is None:
            return
        az = self.authorizer
        md = obj.get("metadata") or {}
        asked = ASKED.get()
        ns = str(md.get("namespace") or (asked.namespace if asked is not None and kind.namespaced else ""))
        name = str(md.get("name") or "")
        if kind in (ROLES, CLUSTERROLES):
            if az.allowed(user, Attributes(verb="escalate", group=RBAC_GROUP, resource=kind.plural, namespace=ns,
                                           name=name)):
                return
            rules = [Rule.of(r) for r in obj.get("rules") or []]
            if kind is CLUSTERROLES and isinstance(obj.get("aggregationRule"), dict):
                rules = []  # the aggregated rules are checked where they are defined
            missing = az.covers(user, ns, rules)
            if missing:
                raise errors.forbidden(kind, name, f'{kind.plural}.{RBAC_GROUP} "{name}" is forbidden: user '
                                       f'"{user.name}" (groups={_go_list(user.groups)}) is attempting to grant '
                                       f"RBAC permissions not currently held:\n{_describe(missing)}")
            return
        ref = obj.get("roleRef") or {}
        rkind, rname = str(ref.get("kind") or ""), str(ref.get("name") or "")
        bind_resource = "clusterroles" if rkind == "ClusterRole" else "roles"
        bind_ns = "" if rkind == "ClusterRole" else ns
        if az.allowed(user, Attributes(verb="bind", group=RBAC_GROUP, resource=bind_resource, namespace=bind_ns,
                                       name=rname)):
            return
        role_rules = az.role_rules(rkind, ns, rname)
        if role_rules is None:
            # upstream cannot confirm the rules of a role it cannot find
            raise errors.forbidden(kind, name, f'{kind.plural}.{RBAC_GROUP} "{name}" is forbidden: user '
                                   f'"{user.name}" (groups={_go_list(user.groups)}) is attempting to grant RBAC '
                                   f'permissions not currently held: {rkind.lower()}s.{RBAC_GROUP} "{rname}" '
                                   "not found")
        missing = az.covers(user, ns, role_rules)
        if missing:
            raise errors.forbidden(kind, name, f'{kind.plural}.{RBAC_GROUP} "{name}" is forbidden: user '
                                   f'"{user.name}" (groups={_go_list(user.groups)}) is attempting to grant RBAC '
                                   f"permissions not currently held:\n{_describe(missing)}")

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """Nothing to do: the authorizer learns of RBAC writes from the store."""
        pass

    def removed(self, kind: Kind, obj: Obj) -> None:
        """Nothing to do (see `written`)."""
        pass


def _go_list(items: Iterable[str]) -> str:
    return "[" + " ".join(f'"{x}"' for x in items) + "]"


def _describe(rules: list[Rule]) -> str:
    """Missing rules as upstream lists them: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}` per line."""
    lines = []
    for r in rules:
        if r.urls:
            lines.append(f"{{NonResourceURLs:{_go_list(r.urls)}, Verbs:{_go_list(sorted(r.verbs))}}}")
        else:
            names = f", ResourceNames:{_go_list(sorted(r.names))}" if r.names else ""
            lines.append(f"{{APIGroups:{_go_list(sorted(r.groups))}, Resources:{_go_list(sorted(r.resources))}"
                         f"{names}, Verbs:{_go_list(sorted(r.verbs))}}}")
    return "\n".join(lines)
