"""What a compiled rule does, read from its checked AST: field names and a cost lower bound.

The CEL runtime hands back a compiled rule as a serialized `cel.expr.CheckedExpr` protobuf; a
minimal wire-format reader turns it into `Expr` trees (with source offsets). Two checks that
Kubernetes' typed CEL environment makes at CRD creation are then done on the tree:

* selecting a field that an object's schema does not declare (`self.spce`) is a compile error,
  `undefined field 'spce'`, worded and positioned as cel-go reports it; only objects whose fields
  are all declared are checked (not maps, not preserve-unknown-fields, not int-or-string);
* the cost: upstream estimates each rule's worst-case cost from the schema's `maxItems`,
  `maxLength` and `maxProperties` (or from the 3 MiB request limit when absent) and refuses rules
  above 10^7 once multiplied by how many times the rule can run. This estimate is a lower bound
  of cel-go's (it counts comprehension iterations, field selections and the traversal cost of
  string and list concatenation, with cel-go's factors), so a rule that it refuses, upstream
  refuses too; rules it lets through are still bounded at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from kubemesh.apiserver.structural.nodes import Node

__all__ = ["MAX_REQUEST_BYTES", "PER_EXPRESSION_LIMIT", "Expr", "cardinalities", "cost_message", "decode",
           "escape_property", "estimate_cost", "field_reads", "issue", "mentions", "undefined_fields"]

MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
PER_EXPRESSION_LIMIT: Final = 10_000_000
_TRAVERSAL_FACTOR: Final = 0.1
_META_FIELDS: Final = frozenset(("apiVersion", "kind", "metadata"))


_RESERVED: Final = frozenset(("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
                              "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
                              "void", "while"))
_EXPAND: Final = re.compile(r"__|[-./]|[^a-zA-Z0-9\-./_]")
_ESCAPES: Final = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}


@cache
def escape_property(name: str) -> str | None:
    """The CEL identifier of a property (Kubernetes' escaping), or None if it has none."""
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    if any(_ESCAPES.get(m.group(0)) is None for m in _EXPAND.finditer(name)):
        return None
    return _EXPAND.sub(lambda m: _ESCAPES[m.group(0)], name)


EscapeCache = dict[int, dict[str, Node]]
"""Per object node (by id), its properties by CEL name."""


@dataclass(slots=True)
class Expr:
    """One node of a CEL expression."""

    id: int = 0
    kind: str = ""  # const, ident, select, call, list, struct, comprehension
    name: str = ""  # identifier, selected field or function
    operand: Expr | None = None  # select operand or call target
    args: list[Expr] = field(default_factory=list)
    test_only: bool = False
    value: Any = None  # constants
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    iter_range: Expr | None = None
    accu_init: Expr | None = None
    loop_condition: Expr | None = None
    loop_step: Expr | None = None
    result: Expr | None = None

    def children(self) -> Iterator[Expr]:
        """Every direct sub-expression."""
        for sub in (self.operand, self.iter_range, self.accu_init, self.loop_condition, self.loop_step, self.result):
            if sub is not None:
                yield sub
        yield from self.args


# ---------------------------------------------------------------------------------------------
# Protobuf wire format.


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else ""


def _constant(data: bytes) -> Any:
    for number, value in _fields(data):
        if number == 6:
            return _text(value)
        if number in (3, 4) and isinstance(value, int):
            return value
    return None


def _expr(data: bytes) -> Expr:
    node = Expr()
    for number, value in _fields(data):
        if number == 2 and isinstance(value, int):
            node.id = value
        elif not isinstance(value, bytes):
            continue
        elif number == 3:
            node.kind, node.value = "const", _constant(value)
        elif number == 4:
            node.kind = "ident"
            node.name = next((_text(v) for n, v in _fields(value) if n == 1), "")
        elif number == 5:
            node.kind = "select"
            for n, v in _fields(value):
                if n == 1 and isinstance(v, bytes):
                    node.operand = _expr(v)
                elif n == 2:
                    node.name = _text(v)
                elif n == 3:
                    node.test_only = bool(v)
        elif number == 6:
            node.kind = "call"
            for n, v in _fields(value):
                if n == 1 and isinstance(v, bytes):
                    node.operand = _expr(v)
                elif n == 2:
                    node.name = _text(v)
                elif n == 3 and isinstance(v, bytes):
                    node.args.append(_expr(v))
        elif number == 7:
            node.kind = "list"
            node.args = [_expr(v) for n, v in _fields(value) if n == 1 and isinstance(v, bytes)]
        elif number == 8:
            node.kind = "struct"
            for n, v in _fields(value):
                if n == 2 and isinstance(v, bytes):
                    node.args.extend(_expr(e) for m, e in _fields(v) if m in (3, 4) and isinstance(e, bytes))
        elif number == 9:
            node.kind = "comprehension"
            _comprehension(node, value)
    return node


def _comprehension(node: Expr, data: bytes) -> None:
    for n, v in _fields(data):
        if n == 1:
            node.iter_var = _text(v)
        elif n == 8:
            node.iter_var2 = _text(v)
        elif n == 3:
            node.accu_var = _text(v)
        elif isinstance(v, bytes) and n in (2, 4, 5, 6, 7):
            setattr(node, {2: "iter_range", 4: "accu_init", 5: "loop_condition", 6: "loop_step", 7: "result"}[n],
                    _expr(v))


def decode(serialized: bytes) -> tuple[Expr, dict[int, int]]:
    """(expression, source offset of each expression id) of a serialized compiled expression."""
    checked = next((v for n, v in _fields(serialized) if n == 2 and isinstance(v, bytes)), serialized)
    root = Expr()
    positions: dict[int, int] = {}
    for number, value in _fields(checked):
        if number == 4 and isinstance(value, bytes):
            root = _expr(value)
        elif number == 5 and isinstance(value, bytes):
            for n, entry in _fields(value):
                if n == 4 and isinstance(entry, bytes):
                    pair = dict(_fields(entry))
                    key, offset = pair.get(1, 0), pair.get(2, 0)
                    if isinstance(key, int) and isinstance(offset, int):
                        positions[key] = offset
    return root, positions


# ---------------------------------------------------------------------------------------------
# Schema shapes.


def _min_serialized_size(node: Node | None) -> int:
    if node is None:
        return 1
    return {"string": 2, "boolean": 4, "object": 2, "array": 2}.get(node.type, 1)


def _max_size(node: Node | None) -> float:
    """The most elements (or characters) a value of `node` can have in one request."""
    if node is None:
        return 0.0
    if node.type == "string":
        return float(node.max_length) if node.max_length is not None else float(MAX_REQUEST_BYTES - 2)
    if node.type == "array":
        if node.max_items is not None:
            return float(node.max_items)
        return float((MAX_REQUEST_BYTES - 2) // (_min_serialized_size(node.items) + 1))
    if node.type == "object" and node.additional is not None:
        if node.max_properties is not None:
            return float(node.max_properties)
        # a map entry is at least `"":` and a value
        return float((MAX_REQUEST_BYTES - 2) // (_min_serialized_size(node.additional) + 4))
    return 0.0


def cardinalities(root: Node) -> dict[int, float]:
    """How many times a rule on each structural node (by id) can run for one object.

    The product of `maxItems`/`maxProperties` of the lists and maps above it; when one of them is
    unbounded, as many values of the node as fit in a request.
    """
    out: dict[int, float] = {}

    def walk(node: Node, total: float | None) -> None:
        unbounded = float((MAX_REQUEST_BYTES - 2) // (_min_serialized_size(node) + 1))
        out[id(node)] = unbounded if total is None else total
        for prop in node.properties.values():
            walk(prop, total)
        if node.items is not None:
            walk(node.items, None if total is None or node.max_items is None else total * node.max_items)
        if node.additional is not None:
            bound = node.max_properties
            walk(node.additional, None if total is None or bound is None else total * bound)

    walk(root, 1.0)
    return out


_KEY_NODE: Final = Node(raw={}, type="string")


def _child_shape(node: Node | None, name: str, escaped: EscapeCache) -> Node | None:
    if node is None:
        return None
    if node.properties:
        names = escaped.get(id(node))
        if names is None:
            names = escaped[id(node)] = {e: p for k, p in node.properties.items()
                                         if (e := escape_property(k)) is not None}
        return names.get(name)
    return node.additional


def _element_shape(node: Node | None) -> Node | None:
    if node is None:
        return None
    if node.type == "array":
        return node.items
    if node.type == "object" and node.additional is not None and not node.properties:
        return _KEY_NODE
    return None


class _Estimator:
    def __init__(self, escaped: EscapeCache) -> None:
        self.escaped = escaped

    def cost(self, expr: Expr, scope: dict[str, Node | None]) -> tuple[float, Node | None, float]:
        """(cost, schema of the result, max size of the result)."""
        if expr.kind == "ident":
            shape = scope.get(expr.name)
            return 1.0, shape, _max_size(shape)
        if expr.kind == "const":
            return 0.0, None, float(len(expr.value)) if isinstance(expr.value, str) else 0.0
        if expr.kind == "select" and expr.operand is not None:
            cost, shape, _ = self.cost(expr.operand, scope)
            child = _child_shape(shape, expr.name, self.escaped)
            return cost + 1.0, child, _max_size(child)
        if expr.kind == "comprehension":
            return self._comprehension(expr, scope)
        total = 0.0
        parts: list[tuple[float, Node | None, float]] = []
        for sub in expr.children():
            part = self.cost(sub, scope)
            parts.append(part)
            total += part[0]
        if expr.kind == "list":
            return total, None, float(len(expr.args))
        if expr.kind != "call":
            return total, None, 0.0
        if expr.name == "_?._" and len(parts) == 2 and isinstance(expr.args[1].value, str):
            child = _child_shape(parts[0][1], expr.args[1].value, self.escaped)
            return total + 1.0, child, _max_size(child)
        if expr.name == "_?_:_" and len(parts) == 3:
            # only one branch runs: cel-go counts the condition and the dearer branch
            return parts[0][0] + max(parts[1][0], parts[2][0]), None, max(parts[1][2], parts[2][2])
        if expr.name == "_+_" and len(parts) == 2:
            size = parts[0][2] + parts[1][2]
            return total + math.ceil(size * _TRAVERSAL_FACTOR), None, size
        return total + 1.0, None, 0.0

    def _comprehension(self, expr: Expr, scope: dict[str, Node | None]) -> tuple[float, Node | None, float]:
        assert expr.iter_range is not None
        range_cost, range_shape, range_size = self.cost(expr.iter_range, scope)
        inner = dict(scope)
        inner[expr.iter_var] = _element_shape(range_shape)
        if expr.iter_var2:
            inner[expr.iter_var] = None
            inner[expr.iter_var2] = _element_shape(range_shape) if range_shape is not None and \
                range_shape.type == "array" else (range_shape.additional if range_shape is not None else None)
        inner[expr.accu_var] = None
        init_cost = self.cost(expr.accu_init, scope)[0] if expr.accu_init is not None else 0.0
        step = sum(self.cost(e, inner)[0] for e in (expr.loop_condition, expr.loop_step) if e is not None)
        result_cost = self.cost(expr.result, inner)[0] if expr.result is not None else 0.0
        # map() and filter() accumulate a list as long as the range
        return range_cost + init_cost + result_cost + range_size * step, None, range_size


def estimate_cost(expr: Expr, node: Node, escaped: EscapeCache) -> float:
    """A lower bound of cel-go's estimated maximum cost of one evaluation on a value of `node`."""
    return _Estimator(escaped).cost(expr, {"self": node, "oldSelf": node})[0]


def cost_message(name: str, cost: float, limit: int) -> str:
    """The message of a rule whose estimated cost is over the limit (upstream's getCostErrorMessage)."""
    factor = cost / limit
    if factor > 100.0:
        shown = "more than 100x"
    elif factor < 1.5:
        shown = f"{factor:f}x"
    else:
        shown = f"{factor:.1f}x"
    return (f"{name} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, "
            "maxProperties, and maxLength where arrays, maps, and strings are declared)")


# ---------------------------------------------------------------------------------------------
# Undefined fields.


def _closed(node: Node | None) -> bool:
    """Whether every field of values of `node` is declared (cel-go knows the object type)."""
    return (node is not None and node.type == "object" and bool(node.properties) and not node.preserve_unknown
            and node.additional_allows is None and not node.int_or_string)


# ---------------------------------------------------------------------------------------------
# What an expression reads of a variable.


_FIELD_CALLS: Final = frozenset(("_?._", "_[_]"))  # var.?f and var["f"], with a constant string


def field_reads(expr: Expr, var: str) -> set[str] | None:
    """The fields of `var` that `expr` reads, when it reads `var` only by constant field names.

    `var.f`, `has(var.f)`, `var.?f` and `var["f"]` read `f`; any other use of `var` (passing it
    to a function, comparing it, iterating over it, or a comprehension variable of that name)
    makes the answer None: the expression may depend on every field. An expression that
    evaluates these reads on a map holding only the fields read behaves exactly as on the map of
    every field.
    """
    out: set[str] = set()
    pending = [expr]
    while pending:
        node = pending.pop()
        if node.kind == "ident" and node.name == var:
            return None
        if node.kind == "comprehension" and var in (node.iter_var, node.iter_var2, node.accu_var):
            return None
        if node.kind == "select" and node.operand is not None and node.operand.kind == "ident" \
                and node.operand.name == var:
            out.add(node.name)
            continue
        if node.kind == "call" and node.name in _FIELD_CALLS and node.operand is None and len(node.args) == 2 \
                and node.args[0].kind == "ident" and node.args[0].name == var \
                and node.args[1].kind == "const" and isinstance(node.args[1].value, str):
            out.add(node.args[1].value)
            continue
        pending.extend(node.children())
    return out


def mentions(expr: Expr, var: str) -> bool:
    """Whether `expr` refers to the variable `var` anywhere."""
    pending = [expr]
    while pending:
        node = pending.pop()
        if node.kind == "ident" and node.name == var:
            return True
        pending.extend(node.children())
    return False


def undefined_fields(expr: Expr, node: Node, escaped: EscapeCache, *,
                     is_root: bool) -> list[tuple[int, str]]:
    """(source offset, field) of each selection of a field that a closed object does not declare."""
    found: list[tuple[int, str]] = []
    metadata_node = Node(raw={}, type="object", properties={"name": Node(raw={}, type="string"),
                                                            "generateName": Node(raw={}, type="string")})

    def shape_of_select(shape: Node | None, name: str, at_root: bool) -> tuple[Node | None, bool]:
        """(child shape, known) where known says the field exists."""
        if at_root and name in _META_FIELDS:
            return (metadata_node if name == "metadata" else Node(raw={}, type="string")), True
        if shape is not None and shape.embedded and name in _META_FIELDS:
            return None, True
        if not _closed(shape):
            return _child_shape(shape, name, escaped), True
        child = _child_shape(shape, name, escaped)
        return child, child is not None

    def walk(e: Expr, scope: dict[str, tuple[Node | None, bool]]) -> tuple[Node | None, bool]:
        """(shape of e, whether e is the rule's root object)."""
        if e.kind == "ident":
            return scope.get(e.name, (None, False))
        if e.kind == "select" and e.operand is not None:
            shape, at_root = walk(e.operand, scope)
            child, known = shape_of_select(shape, e.name, at_root)
            if not known:
                found.append((e.id, e.name))
            return child, False
        if e.kind == "call" and e.name == "_?._" and len(e.args) == 2 and isinstance(e.args[1].value, str):
            shape, at_root = walk(e.args[0], scope)
            child, known = shape_of_select(shape, e.args[1].value, at_root)
            if not known:
                found.append((e.id, e.args[1].value))
            return None, False
        if e.kind == "comprehension" and e.iter_range is not None:
            range_shape, _ = walk(e.iter_range, scope)
            inner = dict(scope)
            inner[e.iter_var] = (_element_shape(range_shape), False)
            if e.iter_var2:
                inner[e.iter_var] = (None, False)
                inner[e.iter_var2] = (None, False)
            inner[e.accu_var] = (None, False)
            for sub in (e.loop_condition, e.loop_step, e.result):
                if sub is not None:
                    walk(sub, inner)
            if e.accu_init is not None:
                walk(e.accu_init, scope)
            return None, False
        for sub in e.children():
            walk(sub, scope)
        return None, False

    walk(expr, {"self": (node, is_root), "oldSelf": (node, is_root)})
    return found


def issue(source: str, offset: int, message: str) -> str:
    """An error as cel-go prints it: `ERROR: <input>:line:col: message` and a caret under the column."""
    line_start = source.rfind("\n", 0, offset) + 1
    line_end = source.find("\n", offset)
    line_end = len(source) if line_end < 0 else line_end
    line_no = source.count("\n", 0, offset) + 1
    column = offset - line_start
    snippet = source[line_start:line_end]
    return f"ERROR: <input>:{line_no}:{column + 1}: {message}\n | {snippet}\n | {'.' * column}^"
