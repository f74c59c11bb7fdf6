"""`kubemesh rbac report` and `kubemesh kubeconfig --service-account`: least privilege from what was done.

    kubemesh kubeconfig --service-account ops/my-operator -o my-operator.kubeconfig
    kubemesh rbac report --user system:serviceaccount:ops:my-operator [--since N] [--role-yaml FILE]

The report reads the apiserver's history (every request records its user and what the
authorizer was asked: verb, API group, resource, subresource, namespace, name, allowed) and,
for one user, prints:

* every distinct request it made, with counts, allowed or DENIED;
* the rules it was denied, as the rule that would have allowed each;
* the rules it holds (a SelfSubjectRulesReview per namespace, asked by impersonating it) that
  no request used, leaving out what every authenticated user holds;
* a minimal Role (all requests in one namespace) or ClusterRole, and its binding to the
  ServiceAccount, that allow exactly what it did: `resourceNames` where every request of a
  get, update, patch or delete named an object.

Which mesh: the usual `--kubeconfig`, `--apiserver`, `--state-dir` options (the admin's token:
the history and impersonation need it). Exit codes: 0 done; 1 the mesh refused or is gone.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from kubemesh.services.tools.commands import Command, add_connection_arguments, endpoint_from_args

SA_PREFIX: Final = "system:serviceaccount:"
NAMED_VERBS: Final = frozenset({"get", "update", "patch", "delete"})
"""Verbs whose requests name one object: a role may restrict them to those names."""
BASIC: Final = frozenset({("authorization.k8s.io", "selfsubjectaccessreviews"),
                          ("authorization.k8s.io", "selfsubjectrulesreviews"),
                          ("authentication.k8s.io", "selfsubjectreviews")})
"""What every authenticated user holds (system:basic-user): never reported as unused."""

Asked = tuple[str, str, str, str, str, str]
"""(verb, group, resource, subresource, namespace, name) of one request."""


@dataclass(frozen=True)
class Report:
    """What one user did, and what it holds."""

    user: str
    requests: dict[tuple[Asked, bool], int]
    """(request, allowed) -> how many times."""
    unused: list[dict[str, Any]]
    """Granted rules (PolicyRules) no request used."""
    role: list[dict[str, Any]]
    """The minimal Role or ClusterRole, and its binding, as objects."""

    @property
    def denied(self) -> list[Asked]:
        """The distinct requests that were refused."""
        return sorted({a for (a, ok) in self.requests if not ok})


def asked_of(record: Mapping[str, Any]) -> tuple[Asked, bool] | None:
    """A history request record as (request, allowed); None when nobody authorized it."""
    a = record.get("attributes")
    if not isinstance(a, dict) or "resource" not in a:
        return None
    asked: Asked = (str(a["verb"]), str(a["group"]), str(a["resource"]), str(a["subresource"]),
                    str(a["namespace"]), str(a["name"]))
    return asked, bool(a.get("allowed"))


def needed_rule(asked: Asked) -> dict[str, Any]:
    """The PolicyRule that allows exactly one request."""
    verb, group, resource, sub, _, name = asked
    rule: dict[str, Any] = {"apiGroups": [group], "resources": [f"{resource}/{sub}" if sub else resource],
                            "verbs": [verb]}
    if name and verb in NAMED_VERBS:
        rule["resourceNames"] = [name]
    return rule


def minimal_rules(done: Iterable[Asked]) -> list[dict[str, Any]]:
    """The fewest PolicyRules that allow exactly `done` (names kept where every request of a verb named one)."""
    # (group, resource) -> verb -> names (None: some request of that verb named nothing)
    by: dict[tuple[str, str], dict[str, set[str] | None]] = {}
    for verb, group, resource, sub, _, name in done:
        verbs = by.setdefault((group, f"{resource}/{sub}" if sub else resource), {})
        if name and verb in NAMED_VERBS:
            current = verbs.get(verb, set())
            if current is not None:
                current.add(name)
                verbs[verb] = current
        else:
            verbs[verb] = None
    # merge resources of one group that need the same verbs and names
    merged: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for (group, res), verbs in sorted(by.items()):
        unnamed = tuple(sorted(v for v, n in verbs.items() if n is None))
        if unnamed:
            merged.setdefault((group, unnamed, ()), []).append(res)
        named: dict[tuple[str, ...], list[str]] = {}
        for v, n in verbs.items():
            if n is not None:
                named.setdefault(tuple(sorted(n)), []).append(v)
        for names, vs in sorted(named.items()):
            merged.setdefault((group, tuple(sorted(vs)), names), []).append(res)
    rules = []
    for (group, verbs_t, names), resources in merged.items():
        rule: dict[str, Any] = {"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs_t)}
        if names:
            rule["resourceNames"] = list(names)
        rules.append(rule)
    return rules


def _covers(rule: Mapping[str, Any], asked: Asked) -> bool:
    verb, group, resource, sub, _, name = asked
    res = f"{resource}/{sub}" if sub else resource
    verbs, groups, resources = rule.get("verbs") or [], rule.get("apiGroups") or [], rule.get("resources") or []
    names = rule.get("resourceNames") or []
    return ((("*" in verbs) or verb in verbs) and (("*" in groups) or group in groups)
            and ("*" in resources or res in resources or (bool(sub) and f"*/{sub}" in resources))
            and (not names or name in names))


def role_objects(user: str, done: Sequence[Asked]) -> list[dict[str, Any]]:
    """The minimal Role (one namespace) or ClusterRole allowing `done`, and its binding to `user`."""
    if not done:
        return []
    namespaces = {a[4] for a in done}
    rules = minimal_rules(done)
    sa = user[len(SA_PREFIX):].split(":", 1) if user.startswith(SA_PREFIX) else None
    subject: dict[str, Any] = ({"kind": "ServiceAccount", "name": sa[1], "namespace": sa[0]} if sa is not None
                               else {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user})
    name = f"{sa[1] if sa is not None else user.replace(':', '-')}-least-privilege"
    if len(namespaces) == 1 and "" not in namespaces:
        ns = next(iter(namespaces))
        kind, binding_kind, meta = "Role", "RoleBinding", {"name": name, "namespace": ns}
    else:
        kind, binding_kind, meta = "ClusterRole", "ClusterRoleBinding", {"name": name}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": dict(meta), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind, "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}, "subjects": [subject]},
    ]


def build_report(user: str, records: Iterable[Mapping[str, Any]],
                 granted: Iterable[Mapping[str, Any]]) -> Report:
    """The report for `user` from history `records` and the resource rules it holds (`granted`)."""
    requests: Counter[tuple[Asked, bool]] = Counter()
    for r in records:
        if r.get("type") == "request" and r.get("user") == user:
            got = asked_of(r)
            if got is not None:
                requests[got] += 1
    done = sorted({a for a, _ in requests})
    unused = []
    for rule in granted:
        if any((g, res) in BASIC for g in rule.get("apiGroups") or [] for res in rule.get("resources") or []):
            continue
        if not any(_covers(rule, a) for a in done):
            unused.append(dict(rule))
    return Report(user=user, requests=dict(requests), unused=unused, role=role_objects(user, done))


def render(report: Report) -> str:
    """The report as text, ending with the minimal role's YAML."""
    out = [f"user: {report.user}", "", "requests (count, outcome, verb, group, resource, namespace, name):"]
    for (a, ok), n in sorted(report.requests.items()):
        verb, group, resource, sub, ns, name = a
        res = f"{resource}/{sub}" if sub else resource
        shown_group = group or '""'
        out.append(f"  {n:6d}  {'allowed' if ok else 'DENIED '}  {verb:16s} {shown_group:24s} {res:28s} "
                   f"{ns or '-':16s} {name or '-'}")
    if not report.requests:
        out.append("  (none)")
    out += ["", "denied (the rule each needed):"]
    for a in report.denied:
        out.append(f"  {yaml.safe_dump(needed_rule(a), default_flow_style=True, width=1000).strip()}")
    if not report.denied:
        out.append("  (none)")
    out += ["", "granted but never used:"]
    for rule in report.unused:
        out.append(f"  {yaml.safe_dump(rule, default_flow_style=True, width=1000).strip()}")
    if not report.unused:
        out.append("  (none)")
    out += ["", "minimal role (allows exactly what was done):", "---"]
    out.append(yaml.safe_dump_all(report.role, sort_keys=False).rstrip() if report.role else "# nothing was done")
    return "\n".join(out) + "\n"


async def _run_report(args: argparse.Namespace) -> int:
    from kubemesh.services.mesh.endpoint import MeshError  # noqa: PLC0415 - aiohttp only for mesh commands

    try:
        endpoint = endpoint_from_args(args)
        records = await endpoint.history(since=args.since, types=("request",))
        done = {a for r in records if r.get("user") == args.user and (x := asked_of(r)) is not None
                for a in (x[0],)}
        granted: list[dict[str, Any]] = []
        for ns in sorted({a[4] for a in done} | {""}):
            status, doc = await endpoint.request_json(
                "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                 "spec": {"namespace": ns}}, headers={"Impersonate-User": args.user})
            if status != 201:
                raise MeshError(f"rules of {args.user}: {doc.get('message', doc)}")
            for rule in doc["status"].get("resourceRules") or []:
                if rule not in granted:
                    granted.append(rule)
    except MeshError as exc:
        print(f"kubemesh rbac report: {exc}", file=sys.stderr)
        return 1
    report = build_report(args.user, records, granted)
    sys.stdout.write(render(report))
    if args.role_yaml is not None:
        args.role_yaml.write_text(yaml.safe_dump_all(report.role, sort_keys=False))
    return 0


def _configure_rbac(parser: argparse.ArgumentParser) -> None:
    which = argparse.ArgumentParser(add_help=False)
    add_connection_arguments(which)
    sub = parser.add_subparsers(dest="rbac_command", metavar="ACTION", required=True)
    rep = sub.add_parser("report", help="what one user did, was denied and never used; its minimal role",
                         parents=[which])
    rep.add_argument("--user", required=True, help="e.g. system:serviceaccount:NS:NAME")
    rep.add_argument("--since", type=int, default=0, help="only history records after this index")
    rep.add_argument("--role-yaml", type=Path, default=None, help="also write the minimal role's YAML here")


async def _run_kubeconfig(args: argparse.Namespace) -> int:
    from kubemesh.services.mesh.endpoint import MeshError  # noqa: PLC0415 - aiohttp only for mesh commands

    ns, _, name = args.service_account.partition("/")
    if not ns or not name:
        print("kubemesh kubeconfig: --service-account is NAMESPACE/NAME", file=sys.stderr)
        return 2
    out = args.output if args.output is not None else Path(f"kubeconfig-{ns}-{name}")
    try:
        path = await endpoint_from_args(args).service_account_kubeconfig(ns, name, out, seconds=args.duration,
                                                                         create=not args.no_create)
    except MeshError as exc:
        print(f"kubemesh kubeconfig: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def _configure_kubeconfig(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--service-account", required=True, metavar="NS/NAME",
                        help="run as this ServiceAccount (created if missing)")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="where to write it (default ./kubeconfig-NS-NAME)")
    parser.add_argument("--duration", type=int, default=3600, help="token lifetime in cluster seconds (>= 600)")
    parser.add_argument("--no-create", action="store_true", help="fail when the ServiceAccount does not exist")


RBAC_COMMAND: Final = Command(name="rbac", help="least-privilege report of one user from the history",
                              description=__doc__, configure=_configure_rbac, run=_run_report)
KUBECONFIG_COMMAND: Final = Command(name="kubeconfig", help="write a kubeconfig that runs as a ServiceAccount",
                                    description=__doc__, configure=_configure_kubeconfig, run=_run_kubeconfig)
