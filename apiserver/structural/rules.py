"""`x-kubernetes-validations`: CEL rules compiled once per schema node and evaluated per object.

Compilation (on CRD create/update) type-checks each rule with the CEL checker against the node's
type (`self`, and `oldSelf` for transition rules): scalars are typed exactly (`string`, `int`,
`double`, `bool`, `list(...)`, `map(string, ...)`; at the rule's own node a `date-time`,
`duration` or `byte` string is a `timestamp`, `duration` or `bytes`), objects are
`map(string, dyn)` and int-or-string or preserve-unknown-fields values are `dyn`. On top of the
checker, the checked AST (`celast`) rejects fields that an object does not declare (cel-go's
`undefined field 'x'`) and rules whose estimated cost, times the number of times they can run,
passes upstream's 10^7 limit. A property whose name is not a CEL identifier is reachable under
its escaped name (`foo-bar` as `foo__dash__bar`, `namespace` as `__namespace__`...); at the root,
`metadata` exposes only `name` and `generateName`, as upstream. Libraries: CEL's standard ones,
strings (`lowerAscii`, `split`, `replace`, `trim`, `format`...), optionals (`self.?x`,
`orValue`), `cel.bind`, and Kubernetes' own (`celib`: lists, regex, sets, IP/CIDR, URL,
quantity, semver, format).

Evaluation mirrors apiextensions' CEL validator: rules run on non-null values only, transition
rules (using `oldSelf`) only when a correlatable old value exists (same property or map key, or
the same map-list key), unless `optionalOldSelf` makes `oldSelf` an optional; errors of
non-transition rules on values unchanged since the old object are ratcheted away (not reported).
A failing rule reports at its node's path (plus `fieldPath`), `Invalid value: <scalar>: <message>`
(objects and arrays print no value), with `messageExpression`, `message` or `failed rule: <rule>`
as the detail and `reason` choosing the cause type; evaluation errors read
`Invalid value: "<type>": <error> evaluating rule: <rule>` with cel-go's error texts.

Bounds: besides the static estimate, the runtime stops any evaluation past 10,000 comprehension
iterations; such a rule is reported with upstream's "call cost exceeds limit" message and no
further rule runs. Every `validate` also has a wall-clock budget for all its rules (`Budget`);
past it, the next rule reports upstream's "running out of cost budget" message and evaluation
stops.

Cost per object: three shortcuts, none of which changes a report. `self` is the map of just
the fields the rules read when they read it only by field name (`_restricted_self`); the rules
of a node that do not use oldSelf are first evaluated as one program, `(r1) && (r2)`, and one
by one only when that is not true (`_combined`); and each node remembers the values for which
all those rules held, skipping them for an equal value (`NodeRules`), which makes an update
that leaves a value unchanged free of CEL evaluation. oldSelf is converted only when some
expression reads it.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson
from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings  # type: ignore[import-untyped]

from kubemesh.apiserver.structural.causes import (
    OMIT,
    Cause,
    child,
    duplicate,
    forbidden,
    index,
    invalid,
    key,
    required,
)
from kubemesh.apiserver.structural.celast import (
    PER_EXPRESSION_LIMIT,
    EscapeCache,
    Expr,
    cost_message,
    decode,
    escape_property,
    estimate_cost,
    field_reads,
    issue,
    mentions,
    undefined_fields,
)
from kubemesh.apiserver.structural.celib import kubernetes_library
from kubemesh.apiserver.structural.checking import rule_value
from kubemesh.apiserver.structural.equality import Unchanged
from kubemesh.apiserver.structural.fieldpaths import resolve_field_path
from kubemesh.apiserver.structural.formats import parse_go_duration
from kubemesh.apiserver.structural.nodes import Node

__all__ = ["Budget", "NodeRules", "RuleTree", "compile_node_rules", "compile_rule_tree", "evaluate"]

MAX_MESSAGE_BYTES: Final = 5 * 1024
DEFAULT_BUDGET_SECONDS: Final = 0.5

_NEWLINE: Final = re.compile(r"[\n]+")


# ---------------------------------------------------------------------------------------------
# Types and values.


def _cel_type(node: Node | None, *, top: bool) -> tuple[str, Any]:
    """(signature, cel.Type) of the values of `node`; dates and durations are typed only at the top."""
    if node is None or node.int_or_string or node.nullable or not node.type:
        return "dyn", cel.Type.DYN
    if node.type == "string":
        fmt = node.format
        if top and fmt == "date-time":
            return "timestamp", cel.Type.TIMESTAMP
        if top and fmt == "duration":
            return "duration", cel.Type.DURATION
        if top and fmt == "byte":
            return "bytes", cel.Type.BYTES
        return "string", cel.Type.STRING
    if node.type == "integer":
        return "int", cel.Type.INT
    if node.type == "number":
        return "double", cel.Type.DOUBLE
    if node.type == "boolean":
        return "bool", cel.Type.BOOL
    if node.type == "array":
        sig, elem = _cel_type(node.items, top=False)
        return f"list({sig})", cel.Type.List(elem)
    if node.type == "object":
        if node.additional is not None and not node.properties:
            sig, elem = _cel_type(node.additional, top=False)
            return f"map(string,{sig})", cel.Type.Map(cel.Type.STRING, elem)
        return "map(string,dyn)", cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    return "dyn", cel.Type.DYN


Converter = Callable[[Any], Any]


def _parse_timestamp(text: str) -> datetime | str:
    """An RFC 3339 date-time as a datetime (UTC when unzoned); the text itself if it is not one."""
    try:
        value = datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return text
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _converter(node: Node | None, *, top: bool, root: bool = False) -> Converter | None:
    """How a JSON value becomes the CEL value of `node` (None: unchanged)."""
    if node is None or node.int_or_string:
        return None
    if node.type == "number":
        return lambda v: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    if node.type == "integer":
        return lambda v: int(v) if isinstance(v, float) and v.is_integer() else v
    if node.type == "string" and top:
        if node.format == "date-time":
            return lambda v: _parse_timestamp(v) if isinstance(v, str) else v
        if node.format == "duration":
            def duration(v: Any) -> Any:
                seconds = parse_go_duration(v) if isinstance(v, str) else None
                return timedelta(seconds=seconds) if seconds is not None else v
            return duration
        if node.format == "byte":
            def decode(v: Any) -> Any:
                try:
                    return base64.b64decode(v, validate=True) if isinstance(v, str) else v
                except (binascii.Error, ValueError):
                    return v
            return decode
    if node.type == "array":
        item = _converter(node.items, top=False)
        if item is None:
            return None
        return lambda v: [item(x) if x is not None else None for x in v] if isinstance(v, list) else v
    if node.type == "object" or node.properties or node.additional is not None:
        return _object_converter(node, root=root)
    return None


FieldTable = dict[str, tuple[str | None, Converter | None]]
"""Per property: its CEL name (None when it has none) and the converter of its values."""


def _object_fields(node: Node, *, root: bool) -> FieldTable:
    fields: FieldTable = {}
    for name, prop in node.properties.items():
        fields[name] = (escape_property(name), _converter(prop, top=False))
    if root:
        fields.setdefault("metadata", ("metadata", None))
        fields["metadata"] = ("metadata", _root_metadata)
        fields.setdefault("apiVersion", ("apiVersion", None))
        fields.setdefault("kind", ("kind", None))
    return fields


def _object_converter(node: Node, *, root: bool) -> Converter | None:
    fields = _object_fields(node, root=root)
    renamed = any(escaped != name for name, (escaped, _) in fields.items())
    extra = _converter(node.additional, top=False) if node.additional is not None else None
    if not renamed and extra is None and all(conv is None for _, conv in fields.values()):
        return None
    keep_unknown = node.preserve_unknown or node.additional_allows is not None

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for name, item in value.items():
            spec = fields.get(name)
            if spec is None:
                if keep_unknown:
                    out[name] = extra(item) if extra is not None and item is not None else item
                continue
            escaped, conv = spec
            if escaped is None:
                continue
            out[escaped] = conv(item) if conv is not None and item is not None else item
        return out

    return convert


def _root_metadata(meta: Any) -> Any:
    # at the root, CEL sees metadata.name and metadata.generateName only
    if not isinstance(meta, dict):
        return meta
    return {k: v for k, v in meta.items() if k in ("name", "generateName")}


# ---------------------------------------------------------------------------------------------
# Compilation.


_ENVS: dict[tuple[str, bool, bool], Any] = {}


def _env_for(sig: str, cel_type: Any, *, old_self: bool, optional_old: bool) -> Any:
    cache_key = (sig, old_self, optional_old)
    env = _ENVS.get(cache_key)
    if env is None:
        variables: dict[str, Any] = {"self": cel_type}
        if old_self and optional_old:
            variables["__oldSelfValue"] = cel_type
            variables["__hasOldSelf"] = cel.Type.BOOL
        elif old_self:
            variables["oldSelf"] = cel_type
        env = cel.NewEnv(variables=variables, extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(),
                                                          ext_bindings.ExtBindings(), kubernetes_library()])
        _ENVS[cache_key] = env
    return env


def _issues(err: Exception) -> str:
    text = str(err)
    for prefix in ("INVALID_ARGUMENT: ", "INTERNAL: ", "UNKNOWN: "):
        text = text.removeprefix(prefix)
    return re.sub(r" \[[A-Z_]+\]$", "", text)


_OPTIONAL_WRAP: Final = "cel.bind(oldSelf, __hasOldSelf ? optional.of(__oldSelfValue) : optional.none(), {})"


@dataclass(slots=True)
class _Rule:
    source: str
    message: str
    reason: str | None
    field_path: str
    program: Any
    message_program: Any
    uses_old_self: bool
    optional_old_self: bool

    @property
    def error_string(self) -> str:
        """ruleErrorString: the message if any, else the rule."""
        return self.message.strip() if self.message else self.source.strip()


MEMO_ENTRIES: Final = 128
"""How many values per node the memo of passing rules remembers (all forgotten when full)."""
MEMO_KEY_BYTES: Final = 2048
"""Larger values (as JSON) are not remembered: at most 256 KiB of memo per node with rules."""


class NodeRules:
    """The compiled rules of one schema node, and the memo of the values they pass.

    Memo: a rule that does not use oldSelf is a function of `self` alone (CEL is deterministic,
    the Kubernetes libraries too), and `self` is a function of the JSON value, so once every such
    rule of the node held for a value, they hold for an equal value again. `passed` remembers
    those values (serialized by orjson) and evaluation skips those rules for them; an update that
    leaves a value unchanged, or objects stamped from one template, then cost no CEL evaluation.
    Only successes are remembered: a false rule or an evaluation error is evaluated again, so its
    report (message expression, ratcheting against the old value) is as before. The key is
    exact: orjson prints 1, 1.0 and true differently, keeps key order and every float digit; a
    value it cannot print (an integer beyond 2^53 included), or prints with `null` (which NaN and
    infinities share with null), or whose text is too long, is never remembered.
    """

    __slots__ = ("combined", "convert", "envs", "memoizes", "node_type", "passed", "reads_old", "restricted",
                 "rules", "transition_rules")

    def __init__(self, *, node_type: str, rules: list[_Rule], envs: tuple[Any, Any], convert: Converter | None,
                 restricted: Converter | None = None, reads_old: bool = True, is_root: bool = False,
                 combined: Any = None) -> None:
        self.node_type = node_type
        self.rules = rules
        self.envs = envs  # (with oldSelf, with optional oldSelf)
        self.convert = convert
        self.restricted = restricted
        """`self` as the map of only the fields the expressions read (see `_restricted_self`)."""
        self.reads_old = reads_old
        """Whether any rule or message expression refers to oldSelf (else it is never converted)."""
        self.passed: dict[bytes, None] = {}
        # the root holds metadata (resourceVersion, uid...): its values never repeat
        self.memoizes = not is_root and any(not rule.uses_old_self for rule in rules)
        self.transition_rules = [rule for rule in rules if rule.uses_old_self]
        self.combined = combined
        """One program `(r1) && (r2) && ...` of the rules not using oldSelf (when there are several)."""

    def self_value(self, value: Any, *, safe: bool) -> Any:
        """The CEL value of `self`; `safe`: `_cel_safe` holds for the value, the restricted map may be used."""
        if safe and self.restricted is not None and type(value) is dict:
            return self.restricted(value)
        return self.convert(value) if self.convert is not None else value

    def remember(self, key: bytes) -> None:
        """Record that every rule not using oldSelf held for the value serialized as `key`."""
        passed = self.passed
        if len(passed) >= MEMO_ENTRIES:
            passed.clear()  # start over: cheaper than tracking the least recently used
        passed[key] = None


def _json_text(value: Any) -> bytes | None:
    """The orjson text of a JSON value, None when it has an integer beyond 2^53 (or is not JSON)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except TypeError:
        return None


def _cel_safe(text: bytes | None) -> bool:
    """Whether CEL converts every part of the value of `text` (and of its conversion) without an error.

    Conservative: only JSON values with no integer beyond 2^53 (`_json_text` refuses those) and
    no float from 1e16 up (whose conversion to an integer field could leave int64) qualify.
    """
    return text is not None and b"e+" not in text


def _restricted_self(node: Node, trees: list[Expr] | None, *, is_root: bool) -> Converter | None:
    """`self` as the map of only the fields the rules read, when that is equivalent; else None.

    CEL converts a map when the expression first touches it, every entry of it, so a rule reading
    two fields of a large object pays for all of them. When every rule and message expression of
    an object node reads `self` only by constant field names (`celast.field_reads`), `self` may be
    a map of just those fields, converted as the whole map would convert them: no expression can
    tell the two apart, with one exception: converting the whole map fails when some field holds
    a value CEL cannot represent (an integer beyond int64), and every rule then reports that
    error. So the caller uses the restricted map only when `_cel_safe` vouches for the value.
    """
    if trees is None or node.type != "object" or node.int_or_string:
        return None
    reads: set[str] = set()
    for tree in trees:
        found = field_reads(tree, "self")
        if found is None:
            return None
        reads |= found
    if _converter(node, top=True, root=is_root) is None:
        # the raw map is self: its keys are the CEL names
        names = tuple(sorted(reads))
        return lambda value: {name: value[name] for name in names if name in value}
    if node.preserve_unknown or node.additional_allows is not None:
        return None  # unknown fields keep their names next to the escaped ones: not worth the care
    table = [(name, escaped, conv) for name, (escaped, conv) in _object_fields(node, root=is_root).items()
             if escaped is not None and escaped in reads]

    def converted_fields(value: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, escaped, conv in table:
            if name in value:
                item = value[name]
                out[escaped] = conv(item) if conv is not None and item is not None else item
        return out

    return converted_fields


def _syntax_trees(programs: list[Any]) -> list[Expr] | None:
    """The checked ASTs of compiled programs; None if one cannot be read."""
    trees: list[Expr] = []
    for program in programs:
        try:
            trees.append(decode(program.serialize())[0])
        except (ValueError, IndexError, UnicodeDecodeError):
            return None
    return trees


def compile_node_rules(node: Node, path: str, uncorrelatable: str | None, *, is_root: bool,
                       cardinality: float = 1.0) -> tuple[NodeRules | None, list[Cause]]:
    """Compile the rules of `node` (at `path` in the CRD); causes as apiextensions reports them.

    `cardinality` is how many times the node's rules can run for one object (see
    `celast.cardinalities`); the estimated cost of each rule times it may not pass 10^7.
    """
    escapes: EscapeCache = {}
    sig, cel_type = _cel_type(node, top=True)
    env = _env_for(sig, cel_type, old_self=True, optional_old=False)
    optional_env = _env_for(sig, cel_type, old_self=True, optional_old=True)
    plain_env = _env_for(sig, cel_type, old_self=False, optional_old=False)
    causes: list[Cause] = []
    compiled: list[_Rule] = []
    for i, rule in enumerate(node.validations):
        base = index(child(path, "x-kubernetes-validations"), i)
        source = rule.get("rule", "")
        if not isinstance(source, str) or not source.strip():
            continue
        optional_old = rule.get("optionalOldSelf") is True
        try:
            program = (optional_env.compile(_OPTIONAL_WRAP.format(source)) if optional_old
                       else env.compile(source))
        except RuntimeError as err:
            causes.append(invalid(child(base, "rule"), rule_value(rule), "compilation failed: " + _issues(err)))
            continue
        result_type = program.return_type()
        if result_type not in (cel.Type.BOOL, cel.Type.DYN):
            causes.append(invalid(child(base, "rule"), rule_value(rule), "cel expression must evaluate to a bool"))
            continue
        problem = _static_problem(program, source, node, escapes, is_root=is_root, cardinality=cardinality,
                                  wrapped=optional_old)
        if problem is not None:
            causes.append(problem(child(base, "rule"), rule_value(rule)))
            continue
        uses_old_self = _uses_old_self(plain_env, source)
        if uses_old_self and uncorrelatable is not None:
            causes.append(invalid(child(base, "rule"), source, "oldSelf cannot be used on the uncorrelatable "
                                                               f"portion of the schema within {uncorrelatable}"))
        if isinstance(rule.get("optionalOldSelf"), bool) and not uses_old_self:
            causes.append(invalid(child(base, "optionalOldSelf"), rule["optionalOldSelf"],
                                  "may not be set if oldSelf is not used in rule"))
        message_program = None
        message_expression = rule.get("messageExpression", "")
        if isinstance(message_expression, str) and message_expression.strip():
            try:
                message_program = (optional_env.compile(_OPTIONAL_WRAP.format(message_expression)) if optional_old
                                   else env.compile(message_expression))
            except RuntimeError as err:
                causes.append(invalid(child(base, "messageExpression"), rule_value(rule),
                                      "messageExpression compilation failed: " + _issues(err)))
                continue
            if message_program.return_type() not in (cel.Type.STRING, cel.Type.DYN):
                causes.append(invalid(child(base, "messageExpression"), rule_value(rule),
                                      "messageExpression must evaluate to a string"))
                continue
        field_path = ""
        if rule.get("fieldPath"):
            field_path = resolve_field_path(rule["fieldPath"], node)[0] or ""
        compiled.append(_Rule(source=source, message=rule.get("message", "") or "", reason=rule.get("reason"),
                              field_path=field_path, program=program, message_program=message_program,
                              uses_old_self=uses_old_self, optional_old_self=optional_old))
    if causes or not compiled:
        return None, causes
    programs = [p for rule in compiled for p in (rule.program, rule.message_program) if p is not None]
    trees = _syntax_trees(programs)
    reads_old = trees is None or any(mentions(tree, name) for tree in trees
                                     for name in ("oldSelf", "__oldSelfValue", "__hasOldSelf"))
    return NodeRules(node_type=node.type, rules=compiled, envs=(env, optional_env),
                     convert=_converter(node, top=True, root=is_root),
                     restricted=_restricted_self(node, trees, is_root=is_root), reads_old=reads_old,
                     is_root=is_root, combined=_combined(env, compiled)), []


def _combined(env: Any, rules: list[_Rule]) -> Any:
    """One program that is true exactly when every rule not using oldSelf is true; None if pointless.

    `(r1) && (r2)`: CEL's `&&` is true only when both sides are true (false or an error on
    either side makes it false or an error), so one evaluation tells that all rules hold, the
    usual case, for the price of one; otherwise the rules are evaluated one by one, as always.
    The newlines end a `//` comment a rule may finish with.
    """
    plain = [rule for rule in rules if not rule.uses_old_self]
    if len(plain) < 2:
        return None
    try:
        return env.compile(" && ".join(f"(\n{rule.source}\n)" for rule in plain))
    except RuntimeError:
        return None


def _static_problem(program: Any, source: str, node: Node, escapes: EscapeCache, *, is_root: bool,
                    cardinality: float, wrapped: bool) -> Callable[[str, Any], Cause] | None:
    """Undefined fields (a compile error) or an estimated cost over the limit, from the checked AST."""
    try:
        tree, positions = decode(program.serialize())
    except (ValueError, IndexError, UnicodeDecodeError):  # an AST this reader does not know: no static checks
        return None
    shift = _OPTIONAL_WRAP.index("{") if wrapped else 0
    missing = undefined_fields(tree, node, escapes, is_root=is_root)
    if missing:
        text = "\n".join(issue(source, max(positions.get(expr_id, 0) - shift, 0), f"undefined field '{name}'")
                         for expr_id, name in missing)
        return lambda path, value: invalid(path, value, "compilation failed: " + text)
    cost = estimate_cost(tree, node, escapes) * cardinality
    if cost > PER_EXPRESSION_LIMIT:
        return lambda path, _value: forbidden(path, cost_message("estimated rule cost", cost, PER_EXPRESSION_LIMIT))
    return None


def _uses_old_self(plain_env: Any, source: str) -> bool:
    """Whether the rule references oldSelf: it does not compile once oldSelf is undeclared."""
    if "oldSelf" not in source:
        return False
    try:
        plain_env.compile(source)
    except RuntimeError as err:
        return re.search(r"undeclared reference to 'oldSelf[.']", str(err)) is not None
    return False


# ---------------------------------------------------------------------------------------------
# The tree of nodes with rules, and evaluation.


@dataclass(slots=True)
class RuleTree:
    """The rules of a node and the subtrees (below it) that hold rules."""

    rules: NodeRules | None
    properties: dict[str, RuleTree]
    additional: RuleTree | None
    items: RuleTree | None
    map_keys: list[str] | None  # list-type map: correlates old items by these keys
    map_correlatable: bool
    walker: Walker | None = None  # built on first use


def compile_rule_tree(node: Node, compiled: dict[int, NodeRules]) -> RuleTree | None:
    """The tree of compiled rules (from `compiled`, keyed by id(node)); None where there are none."""
    props = {name: sub for name, prop in node.properties.items() if (sub := compile_rule_tree(prop, compiled))}
    extra = compile_rule_tree(node.additional, compiled) if node.additional is not None else None
    items = compile_rule_tree(node.items, compiled) if node.items is not None else None
    rules = compiled.get(id(node))
    if rules is None and not props and extra is None and items is None:
        return None
    return RuleTree(rules=rules, properties=props, additional=extra, items=items,
                    map_keys=list(node.list_map_keys) if node.list_type == "map" else None,
                    map_correlatable=node.map_type in (None, "granular", "atomic"))


class Budget:
    """The time all rules of one `validate` call may take; spent is checked before each rule."""

    __slots__ = ("deadline", "stopped")

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds
        self.stopped = False

    def exhausted(self) -> bool:
        """Whether evaluation must stop (budget spent, or a rule hit the per-call limit)."""
        return self.stopped


_GO_ERRORS: Final = (
    (re.compile(r'Key not found in map : "(.*)"$'), r"no such key: \1"),
    (re.compile(r"^divide by zero$"), "division by zero"),
    (re.compile(r"^Index error: index=(-?\d+) size=(\d+)$"), r"index out of bounds: \1"),
    (re.compile(r"^No matching overloads found : (.*)$"), r"no such overload: \1"),
)


def _go_error(text: str) -> str:
    text = _issues(Exception(text))
    for prefix in ("NOT_FOUND: ", "OUT_OF_RANGE: ", "INVALID_ARGUMENT: ", "UNKNOWN: "):
        text = text.removeprefix(prefix)
    for pattern, replacement in _GO_ERRORS:
        if pattern.search(text):
            return pattern.sub(replacement, text)
    return text


class _Run:
    """One evaluation: where causes go, its budget, and whether errors of unchanged values ratchet.

    `texts`: the JSON texts of values already serialized, by id (see `equality.Unchanged`).
    """

    __slots__ = ("budget", "errs", "ratchet", "texts")

    def __init__(self, errs: list[Cause], budget: Budget, ratchet: bool, texts: Unchanged | None) -> None:
        self.errs = errs
        self.budget = budget
        self.ratchet = ratchet
        self.texts = texts


Walker = Callable[[Any, Any, bool, str, _Run], None]
"""walker(value, old, has_old, path, run): evaluate the rules of a tree on a value."""


def evaluate(tree: RuleTree, value: Any, old: Any, path: str, errs: list[Cause], budget: Budget, *,
             has_old: bool, ratchet: bool, texts: Unchanged | None = None) -> None:
    """Run the rules of `tree` on `value` (and its correlated `old`), appending causes to `errs`.

    The order is fixed: a node's own rules, then list items in order, map entries (other than
    properties) in value order, then properties in schema order; evaluation stops for good once
    the budget is spent or a rule hits the per-call limit.
    """
    walker = tree.walker
    if walker is None:
        walker = tree.walker = _walker(tree)
    walker(value, old, has_old, path, _Run(errs, budget, ratchet, texts))


def _walker(tree: RuleTree) -> Walker:
    rules = tree.rules
    items = _walker(tree.items) if tree.items is not None else None
    map_keys = tree.map_keys
    extra = _walker(tree.additional) if tree.additional is not None else None
    props = [(name, _walker(sub)) for name, sub in tree.properties.items()]
    names = frozenset(tree.properties)
    correlatable = tree.map_correlatable
    leaf = items is None and extra is None and not props

    def walk(value: Any, old: Any, has_old: bool, path: str, run: _Run) -> None:
        budget = run.budget
        if value is None or budget.exhausted():
            return
        if rules is not None:
            _run_rules(rules, value, old if has_old else None, has_old, path, run)
            if leaf or budget.exhausted():
                return
        if isinstance(value, list):
            if items is None:
                return
            olds = _correlate_list(map_keys, old if has_old else None)
            for i, item in enumerate(value):
                old_item = _MISSING
                if olds is not None and isinstance(item, dict):
                    old_item = olds.get(_list_key(map_keys or [], item), _MISSING)
                if old_item is _MISSING:
                    items(item, None, False, index(path, i), run)
                else:
                    items(item, old_item, True, index(path, i), run)
                if budget.exhausted():
                    return
        elif isinstance(value, dict):
            old_map = old if has_old and correlatable and isinstance(old, dict) else None
            if extra is not None:
                for name, item in value.items():
                    if name in names:
                        continue
                    if old_map is not None and name in old_map:
                        extra(item, old_map[name], True, key(path, name), run)
                    else:
                        extra(item, None, False, key(path, name), run)
                    if budget.exhausted():
                        return
            for name, sub in props:
                if name in value:
                    if old_map is not None and name in old_map:
                        sub(value[name], old_map[name], True, child(path, name), run)
                    else:
                        sub(value[name], None, False, child(path, name), run)
                    if budget.exhausted():
                        return

    return walk


_MISSING: Final = object()


def _list_key(keys: list[str], item: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((type(item.get(k)).__name__, repr(item.get(k, _MISSING))) for k in keys)


def _correlate_list(keys: list[str] | None, old: Any) -> dict[tuple[Any, ...], Any] | None:
    """Old items of a map list by key; other lists do not correlate (oldSelf is absent below them)."""
    if keys is None or not isinstance(old, list):
        return None
    return {_list_key(keys, item): item for item in old if isinstance(item, dict)}


_OUT_OF_BUDGET: Final = "validation failed due to running out of cost budget, no further validation rules will be run"


class _Stop(Exception):
    """A rule exhausted the per-call limit: report it and run no further rule."""


def _run_rules(rules: NodeRules, value: Any, old: Any, has_old: bool, path: str, run: _Run) -> None:
    """Evaluate the rules of one node on `value` (old: its correlated old value, if `has_old`)."""
    text = run.texts.get(id(value)) if run.texts else None
    if text is None:
        text = _json_text(value)
    memo_key = text if (text is not None and rules.memoizes and len(text) <= MEMO_KEY_BYTES
                        and b"null" not in text) else None
    # the rules not using oldSelf are known to hold for this value: skip them
    known_to_pass = memo_key is not None and memo_key in rules.passed
    transition = rules.transition_rules
    if known_to_pass and not (transition and (has_old or any(rule.optional_old_self for rule in transition))):
        return  # nothing left to evaluate
    self_value = rules.self_value(value, safe=_cel_safe(text))
    all_passed = True  # every rule not using oldSelf evaluated to true
    convert = rules.convert
    # oldSelf is converted only when some expression can see it
    old_value = (convert(old) if convert is not None else old) if has_old and rules.reads_old else None
    errs, budget = run.errs, run.budget
    deadline = budget.deadline
    activation: Any = None
    optional_activation: Any = None
    if rules.combined is not None and not known_to_pass:
        if time.perf_counter() > deadline:
            errs.append(invalid(path, rules.node_type, _OUT_OF_BUDGET))
            budget.stopped = True
            return
        try:
            activation = rules.envs[0].Activation({"self": self_value, "oldSelf": old_value})
            known_to_pass = rules.combined.eval(activation).value() is True
        except Exception:  # evaluated one by one below, where the error is reported as it should be
            activation, known_to_pass = None, False
    for rule in rules.rules:
        uses_old_self = rule.uses_old_self
        if uses_old_self:
            if not has_old and not rule.optional_old_self:
                continue  # transition rules need an old value
        elif known_to_pass:
            continue
        if time.perf_counter() > deadline:
            errs.append(invalid(path, rules.node_type, _OUT_OF_BUDGET))
            budget.stopped = True
            return
        optional = rule.optional_old_self
        current = optional_activation if optional else activation
        if current is None:
            env, optional_env = rules.envs
            try:
                if optional:
                    current = optional_activation = optional_env.Activation(
                        {"self": self_value, "__oldSelfValue": old_value, "__hasOldSelf": has_old})
                else:
                    current = activation = env.Activation({"self": self_value, "oldSelf": old_value})
            except Exception as err:  # a value the declared type cannot hold
                errs.append(invalid(path, rules.node_type, f"{_go_error(str(err))} evaluating rule: "
                                                           f"{rule.error_string}"))
                all_passed = False
                continue
        try:
            result: Any = rule.program.eval(current)
            if result.value() is True:  # the common case: the rule holds (only a BOOL true is True)
                continue
        except Exception as err:  # the runtime and the Python library functions may raise anything
            result = err
        if not uses_old_self:
            all_passed = False
        try:
            failure = _evaluate_rule(rule, result, current, rules.node_type, path)
        except _Stop as stop:
            errs.append(invalid(path, rules.node_type, str(stop)))
            budget.stopped = True
            return
        if failure is None:
            continue
        if isinstance(failure, str):  # the rule evaluated to false
            if run.ratchet and has_old and not uses_old_self and value == old:
                continue  # ratcheting: an unchanged value keeps passing
            field = child(path, rule.field_path) if rule.field_path else path
            shown = OMIT if rules.node_type in ("object", "array") else value
            errs.append(_for_reason(rule.reason, field, shown, failure))
        else:
            errs.append(failure)
    if all_passed and memo_key is not None and memo_key not in rules.passed:
        rules.remember(memo_key)


def _evaluate_rule(rule: _Rule, result: Any, activation: Any, node_type: str, path: str) -> str | Cause | None:
    """What the `result` of evaluating `rule` (or the exception it raised) means.

    None when the rule holds, the failure detail when it is false, a cause when it could not be
    evaluated.
    """
    error: str | None
    if isinstance(result, Exception):
        result_type, error = None, str(result)
    else:
        try:
            result_type = result.type()
            error = str(result.value()) if result_type == cel.Type.ERROR else None
        except Exception as err:
            result_type, error = None, str(err)
    if error is not None:
        text = _go_error(error)
        if "budget" in text.lower():
            raise _Stop("'operation cancelled: actual cost limit exceeded': no further validation rules will be run "
                        f"due to call cost exceeds limit for rule: {rule.error_string}")
        if text.startswith("no such overload"):
            return invalid(path, node_type, f"'{text}': call arguments did not match a supported operator, function "
                                            f"or macro signature for rule: {rule.error_string}")
        return invalid(path, node_type, f"{text} evaluating rule: {rule.error_string}")
    if result_type != cel.Type.BOOL:
        return invalid(path, node_type, "'no such overload': call arguments did not match a supported operator, "
                                        f"function or macro signature for rule: {rule.error_string}")
    if result.value() is True:
        return None
    return _message(rule, activation)


def _message(rule: _Rule, activation: Any) -> str:
    if rule.message_program is not None:
        try:
            result = rule.message_program.eval(activation)
        except RuntimeError:
            result = None
        if result is not None and result.type() == cel.Type.STRING:
            text = str(result.value()).strip()
            if text and len(text) <= MAX_MESSAGE_BYTES and not _NEWLINE.search(text):
                return text
    if rule.message:
        return rule.message.strip()
    return f"failed rule: {rule.error_string}"


def _for_reason(reason: str | None, path: str, value: Any, detail: str) -> Cause:
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return duplicate(path, value)
    return invalid(path, value, detail)
