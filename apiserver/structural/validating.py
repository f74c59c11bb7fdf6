"""OpenAPI validation of custom objects, with kube-openapi's semantics and wording.

`compile_validator(node)` turns a parsed schema into a tree of closures once; running it on an
object walks the object only (never the raw schema dict). Each closure mirrors kube-openapi's
`SchemaValidator`: the type check, `allOf`/`anyOf`/`oneOf`/`not`, the string, format, number,
array, enum and object checks, each applied according to the kind of the value (not the declared
type), so a mistyped value can collect several errors, as upstream.

Errors become causes exactly as apiextensions' `kubeOpenAPIResultToFieldErrors` converts them:

* the field is the kube-openapi path under the base path: `spec.replicas`, `spec.items[0].name`,
  and for entries of maps (`additionalProperties`) a dotted `spec.labels.key`, as kube-openapi
  names them (CEL and list-type errors use `spec.labels[key]`, as upstream does there);
* `Required value` (FieldValueRequired), `Unsupported value: "x": supported values: "a", "b"`
  (FieldValueNotSupported), `Too long: may not be more than N bytes` (FieldValueTooLong),
  `Too many: N: must have at most M items` (FieldValueTooMany), type and format mismatches as
  FieldValueTypeInvalid `Invalid value: "string": spec.x in body must be of type integer: "string"`,
  everything else FieldValueInvalid with kube-openapi's message (`should be greater than or equal
  to 1`, `should match '^[a-z]+$'`...);
* `anyOf`/`oneOf`/`allOf`/`not` failures and range errors are not field errors in kube-openapi, so
  they land on the base path (`<nil>` at the root) with an empty value, as upstream.

Null is refused unless `nullable` (or the schema has no type), and never matches an `enum`.

Ratcheting: given the old object, a value equal to its correlated old value (`equality.deep_equal`:
Go's DeepEqual, so 1 and 1.0 differ) reports nothing and is not walked; map-list items correlate
by key, other list items not at all, and `kind`/`apiVersion` at the root never.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from kubemesh.apiserver.structural.causes import (
    Cause,
    child,
    go_float,
    go_json,
    go_quote,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
    type_invalid,
)
from kubemesh.apiserver.structural.equality import Unchanged, equal_text, strict_deep_equal
from kubemesh.apiserver.structural.formats import string_format_checker, supported_format
from kubemesh.apiserver.structural.nodes import Node
from kubemesh.apiserver.structural.regex import compile_pattern

__all__ = ["NO_OLD", "Sink", "Validator", "compile_validator", "is_json_integer"]

_MAX_JSON_FLOAT: Final = float(1 << 53)
_CONTAINERS: Final = frozenset((dict, list))
_INT32: Final = (-(1 << 31), (1 << 31) - 1)
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_FLOAT32_MAX: Final = 3.4028234663852886e38


class Sink:
    """Where one validation run collects its causes; `base` prefixes every field.

    `unchanged`, when given, collects the objects and lists found equal to their correlated old
    value (by property names and map keys from the root), for the list-type check to skip them
    too and the CEL memo to reuse their text.
    """

    __slots__ = ("base", "causes", "matches", "unchanged")

    def __init__(self, base: str, unchanged: Unchanged | None = None) -> None:
        self.base = base
        self.causes: list[Cause] = []
        self.matches = 0  # kube-openapi's MatchCount, used to pick the best failing anyOf/oneOf branch
        self.unchanged = unchanged

    def field(self, name: str) -> str:
        """The cause field of a kube-openapi error name (leading '.' dropped, base when empty)."""
        if not name or name == ".":
            return self.base
        return child(self.base, name[1:] if name[0] == "." else name)

    def plain(self, message: str) -> None:
        """A kube-openapi error that is not a field error: on the base path, empty value."""
        self.causes.append(invalid(self.base, "", message))


Validator = Callable[[Any, str, Sink, Any], None]
"""validator(value, kube_openapi_path, sink, old): `old` is the correlated old value, or NO_OLD."""

Kinds = dict[type, Validator | None]
"""A node's checks of a non-null value by its Python type (None: nothing to check for that type)."""


class _NoOld:
    __slots__ = ()


NO_OLD: Final = _NoOld()
"""No correlated old value (a create, or a part of the object that cannot be correlated)."""


def is_json_integer(value: float) -> bool:
    """swag.IsFloat64AJSONInteger: integral within 2^53, up to a relative error of 1e-9."""
    if math.isnan(value) or math.isinf(value) or abs(value) > _MAX_JSON_FLOAT:
        return False
    rounded = float(round(value))
    if value == rounded:
        return True
    diff = abs(value - rounded)
    return diff / min(abs(value) + abs(rounded), 1.7976931348623157e308) < 1e-9


def _kind(value: Any) -> str:
    """The OpenAPI type name of a JSON value, as kube-openapi derives it from the Go kind."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return ""


def _enum_shown(values: list[Any]) -> list[str]:
    return [v if isinstance(v, str) else go_json(v) for v in values]


def _go_converts_equal(data: Any, allowed: Any) -> bool:
    """reflect.DeepEqual after converting data to the enum value's Go type, where Go allows it."""
    if isinstance(allowed, bool) or isinstance(data, bool):
        return isinstance(allowed, bool) and isinstance(data, bool) and allowed == data
    if isinstance(allowed, str):
        if isinstance(data, str):
            return data == allowed
        if isinstance(data, int):  # Go converts an integer to the string of that rune
            return 0 <= data <= 0x10FFFF and chr(data) == allowed
        return False
    if isinstance(allowed, int):
        if isinstance(data, int):
            return data == allowed
        if isinstance(data, float) and not math.isnan(data) and not math.isinf(data):
            return int(data) == allowed
        return False
    if isinstance(allowed, float):
        return isinstance(data, int | float) and float(data) == allowed
    if isinstance(allowed, dict):
        return isinstance(data, dict) and strict_deep_equal(data, allowed)
    if isinstance(allowed, list):
        return isinstance(data, list) and strict_deep_equal(data, allowed)
    return False


def _range_problem(value: int | float, type_name: str, fmt: str, prefix: str, path: str) -> str | None:
    """validate.IsValueValidAgainstRange: does the number fit the declared type and format."""
    if type_name == "integer":
        if isinstance(value, float):
            if not value.is_integer() or math.isinf(value):
                problem = True
            else:
                low, high = _INT32 if fmt == "int32" else _INT64
                problem = not low <= int(value) <= high
        else:
            low, high = _INT32 if fmt == "int32" else _INT64
            problem = not low <= value <= high
    elif fmt == "float":
        problem = abs(float(value)) > _FLOAT32_MAX and not math.isinf(float(value))
    else:
        problem = False
    if not problem:
        return None
    return _range_message(prefix, type_name, fmt, path)


def _range_message(prefix: str, type_name: str, fmt: str, path: str) -> str:
    if fmt:
        return f"{prefix} value must be of type {type_name} with format {fmt} in {path}"
    return f"{prefix} value must be of type {type_name} (default format) in {path}"


def compile_validator(node: Node) -> Validator:
    """One closure validating a value against `node` and everything below it."""
    return _Compiler().node(node, counting=False)


class _Compiler:
    """Builds the validator closures.

    Each closure is specialised once for its node: only the keywords present are checked, bounds
    and their range problems are worked out here, and the type check is left out of the kinds of
    values it always accepts. `counting`: whether the closures keep kube-openapi's MatchCount in
    the sink; only the branches of anyOf/oneOf (and what is below them) read it, to pick the
    best failing branch, so the rest of the tree does not pay for it.
    """

    def node(self, node: Node, *, counting: bool) -> Validator:
        return self.parts(node, counting=counting)[0]

    def parts(self, node: Node, *, counting: bool) -> tuple[Validator, Kinds | None]:
        """The validator of `node`, and (when not counting) its checks by the Python type of a value.

        The second lets a parent run a non-null value's checks directly when it has no old value
        to ratchet against (None: nothing to run for that type); null and ratcheting need the
        validator itself.
        """
        types = ["integer", "string"] if node.int_or_string else ([node.type] if node.type else [])
        fmt = supported_format(node.type if not node.int_or_string else "", node.format)
        nullable = node.nullable
        type_check = self._type(types, fmt) if (types or fmt) else None
        junctors = self._junctors(node, counting=counting) if (
            node.all_of or node.any_of or node.one_of or node.not_ is not None) else None
        string_check = self._string(node, fmt)
        number_check = self._number(node, types, fmt)
        array_check = self._array(node, counting=counting)
        enum_check = self._enum(node.enum) if node.enum else None
        object_check = self._object(node, counting=counting)
        passes = self._type_passes(types, fmt)
        # per Python type of the value: the checks to run, and kube-openapi's MatchCount increment
        # (one per validator of the chain plus one; a type check that always passes for that kind
        # is left out of the run but still counted)
        by_kind: dict[type, tuple[Validator | None, int]] = {}
        for kind, specific in ((str, string_check), (int, number_check), (float, number_check),
                               (list, array_check), (dict, object_check), (bool, None)):
            chain = [c for c in (type_check, junctors) if c is not None]
            if specific is not None:
                chain.append(specific)
            if enum_check is not None:
                chain.append(enum_check)
            # the object validator runs after the enum check in kube-openapi
            if kind is dict and specific is not None and enum_check is not None:
                chain[-2], chain[-1] = chain[-1], chain[-2]
            run = [c for c in chain if not (c is type_check and kind in passes)]
            by_kind[kind] = (_sequence(run), len(chain) + 1)
        null_type = ",".join(types)
        null_refused = bool(types) and not nullable
        enum_shown = _enum_shown(node.enum) if node.enum else None

        def validate(value: Any, path: str, sink: Sink, old: Any) -> None:
            # ratcheting: an unchanged value (equal to its correlated old value) reports nothing
            if old is not NO_OLD:
                same = equal_text(value, old)
                if same is not False:
                    if sink.unchanged is not None and type(value) in _CONTAINERS:
                        sink.unchanged[id(value)] = same if type(same) is bytes else None
                    return
            if value is None:
                if null_refused:
                    sink.causes.append(type_invalid(sink.field(path), "null",
                                                    f"{path} in body must be of type {null_type}: \"null\""))
                if enum_shown is not None:
                    sink.causes.append(not_supported(sink.field(path), None, enum_shown))
                if counting:
                    sink.matches += 2
                return
            entry = by_kind.get(type(value))
            if entry is None:
                return
            check, matches = entry
            if check is not None:
                check(value, path, sink, old)
            if counting:
                sink.matches += matches

        kinds = None if counting else {kind: check for kind, (check, _) in by_kind.items()}
        return validate, kinds

    @staticmethod
    def _type_passes(types: list[str], fmt: str) -> frozenset[type]:
        """The Python types the type check always accepts (the float/int subtleties and formats excluded)."""
        if fmt:
            return frozenset()
        passes: set[type] = {t for t, name in ((str, "string"), (bool, "boolean"), (list, "array"),
                                               (dict, "object")) if name in types}
        if "integer" in types:
            passes.add(int)
        if "number" in types:
            passes |= {int, float}
        return frozenset(passes)

    @staticmethod
    def _type(types: list[str], fmt: str) -> Validator:
        joined = ",".join(types)
        numeric = "number" in types or "integer" in types

        def check(value: Any, path: str, sink: Sink, old: Any) -> None:
            kind = _kind(value)
            is_float_int = kind == "number" and "integer" in types and is_json_integer(value)
            is_int_float = kind == "integer" and "number" in types
            if kind not in ("string", "array") and fmt:
                value_format = {"integer": "int64", "number": "float64"}.get(kind, "")
                lower = fmt == "int64" and value_format == "int32"
                if not (kind in types or value_format == fmt or is_float_int or is_int_float or lower):
                    message = f'{path} in body must be of type {fmt}: {go_quote(value_format)}'
                    sink.causes.append(type_invalid(sink.field(path), value_format, message))
                    return
            if not numeric and fmt and kind in ("string", "array"):
                return
            if not (kind in types or is_float_int or is_int_float):
                sink.causes.append(type_invalid(sink.field(path), kind,
                                                f"{path} in body must be of type {joined}: {go_quote(kind)}"))

        return check

    def _junctors(self, node: Node, *, counting: bool) -> Validator:
        # anyOf/oneOf compare their failing branches by MatchCount; allOf adds its branches' counts
        any_of = [self.node(n, counting=True) for n in node.any_of]
        # the int-or-string idiom `anyOf: [{type: integer}, {type: string}]` passes for any int or string
        int_or_string_any_of = [n.raw for n in node.any_of] == [{"type": "integer"}, {"type": "string"}]
        one_of = [self.node(n, counting=True) for n in node.one_of]
        all_of = [self.node(n, counting=counting) for n in node.all_of]
        not_ = self.node(node.not_, counting=False) if node.not_ is not None else None

        def run(branch: Validator, value: Any, path: str, sink: Sink, old: Any) -> Sink:
            sub = Sink(sink.base)
            branch(value, path, sub, old)
            return sub

        def check(value: Any, path: str, sink: Sink, old: Any) -> None:
            if any_of and not (int_or_string_any_of and type(value) in (int, str)):
                best: Sink | None = None
                for branch in any_of:
                    result = run(branch, value, path, sink, old)
                    if not result.causes:
                        best = None
                        break
                    if best is None or result.matches > best.matches:
                        best = result
                else:
                    sink.plain(f"{go_quote(path)} must validate at least one schema (anyOf)")
                if best is not None:
                    sink.causes.extend(best.causes)
            if one_of:
                best = None
                valid = 0
                for branch in one_of:
                    result = run(branch, value, path, sink, old)
                    if not result.causes:
                        valid += 1
                        best = None
                        continue
                    if valid == 0 and (best is None or result.matches > best.matches):
                        best = result
                if valid != 1:
                    found = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                    sink.plain(f"{go_quote(path)} must validate one and only one schema (oneOf). {found}")
                    if best is not None:
                        sink.causes.extend(best.causes)
            if all_of:
                valid = 0
                for branch in all_of:
                    result = run(branch, value, path, sink, old)
                    if not result.causes:
                        valid += 1
                    sink.causes.extend(result.causes)
                    sink.matches += result.matches
                if valid != len(all_of):
                    extra = ". None validated" if valid == 0 else ""
                    sink.plain(f"{go_quote(path)} must validate all the schemas (allOf){extra}")
            if not_ is not None and not run(not_, value, path, sink, old).causes:
                sink.plain(f"{go_quote(path)} must not validate the schema (not)")

        return check

    @staticmethod
    def _string(node: Node, fmt: str) -> Validator | None:
        max_length, min_length = node.max_length, node.min_length
        matcher = compile_pattern(node.pattern)[0] if node.pattern else None
        pattern = node.pattern
        format_ok = string_format_checker(fmt) if fmt else None
        if max_length is None and min_length is None and matcher is None and format_ok is None:
            return None

        def check(value: str, path: str, sink: Sink, old: Any) -> None:
            if max_length is not None and len(value) > max_length:
                sink.causes.append(too_long(sink.field(path), max_length))
            elif min_length is not None and len(value) < min_length:
                sink.causes.append(invalid(sink.field(path), value,
                                           f"{path} in body should be at least {min_length} chars long"))
            elif matcher is not None and not matcher(value):
                sink.causes.append(invalid(sink.field(path), value, f"{path} in body should match '{pattern}'"))
            if format_ok is not None and not format_ok(value):
                sink.causes.append(type_invalid(sink.field(path), value,
                                                f"{path} in body must be of type {fmt}: {go_quote(value)}"))

        return check

    @staticmethod
    def _number(node: Node, types: list[str], fmt: str) -> Validator | None:
        type_name = types[0] if len(types) == 1 else ""
        num_fmt = fmt if (type_name == "integer" and fmt in ("int32", "int64")) or \
            (type_name == "number" and fmt in ("float", "double")) else ""
        checks_range = type_name == "integer" or num_fmt == "float"
        if node.maximum is None and node.minimum is None and node.multiple_of is None and not checks_range:
            return None
        # integers: the int32/int64 bounds of the value; whether a bound is itself out of range
        low, high = _INT32 if num_fmt == "int32" else _INT64

        def bound_check(bound: int | float | None, prefix: str) -> _Bound | None:
            if bound is None:
                return None
            out_of_range = checks_range and _range_problem(bound, type_name, num_fmt, prefix, "") is not None
            return _Bound(bound, out_of_range, prefix)

        factor = bound_check(node.multiple_of, "MultipleOf")
        maximum = bound_check(node.maximum, "Maximum boundary")
        minimum = bound_check(node.minimum, "Minimum boundary")
        exclusive_max, exclusive_min = node.exclusive_maximum, node.exclusive_minimum
        max_word = "less than" if exclusive_max else "less than or equal to"
        min_word = "greater than" if exclusive_min else "greater than or equal to"

        # a bound that does not fit the declared type/format is reported on every value, as upstream

        def check(value: int | float, path: str, sink: Sink, old: Any) -> None:
            if checks_range:
                if type_name == "integer" and type(value) is int:
                    if not low <= value <= high:
                        sink.plain(_range_message("Checked", type_name, num_fmt, path))
                else:
                    problem = _range_problem(value, type_name, num_fmt, "Checked", path)
                    if problem:
                        sink.plain(problem)
            is_int = isinstance(value, int)
            if factor is not None:
                if factor.out_of_range:
                    sink.plain(_range_message(factor.prefix, type_name, num_fmt, path))
                _multiple_of(value, factor.value, is_int and not factor.out_of_range, path, sink)
            if maximum is not None:
                as_int = is_int and not maximum.out_of_range
                if maximum.out_of_range:
                    sink.plain(_range_message(maximum.prefix, type_name, num_fmt, path))
                bound = maximum.integral() if as_int else maximum.as_float
                if value > bound or (exclusive_max and value >= bound):
                    shown = str(bound) if as_int else go_float(float(bound))
                    sink.causes.append(invalid(sink.field(path), value, f"{path} in body should be {max_word} {shown}"))
            if minimum is not None:
                as_int = is_int and not minimum.out_of_range
                if minimum.out_of_range:
                    sink.plain(_range_message(minimum.prefix, type_name, num_fmt, path))
                bound = minimum.integral() if as_int else minimum.as_float
                if value < bound or (exclusive_min and value <= bound):
                    shown = str(bound) if as_int else go_float(float(bound))
                    sink.causes.append(invalid(sink.field(path), value, f"{path} in body should be {min_word} {shown}"))

        return check

    def _array(self, node: Node, *, counting: bool) -> Validator | None:
        items, item_kinds = self.parts(node.items, counting=counting) if node.items is not None else (None, None)
        max_items, min_items, unique = node.max_items, node.min_items, node.unique_items
        # only map lists correlate their items with the old list (by key), as upstream ratchets
        map_keys = list(node.list_map_keys) if node.list_type == "map" and node.list_map_keys else None
        if items is None and max_items is None and min_items is None and not unique:
            return None

        def check(value: list[Any], path: str, sink: Sink, old: Any) -> None:
            if items is not None:
                olds = _map_list_index(map_keys, old) if map_keys is not None and old is not NO_OLD else None
                if olds is None:
                    for i, item in enumerate(value):
                        if item_kinds is None or item is None:
                            items(item, f"{path}[{i}]", sink, NO_OLD)
                        else:
                            inner = item_kinds.get(type(item))
                            if inner is not None:
                                inner(item, f"{path}[{i}]", sink, NO_OLD)
                else:
                    for i, item in enumerate(value):
                        old_item = olds.get(_map_key(map_keys or [], item), NO_OLD) if isinstance(item, dict) \
                            else NO_OLD
                        items(item, f"{path}[{i}]", sink, old_item)
            size = len(value)
            if min_items is not None and size < min_items:
                sink.causes.append(invalid(sink.field(path), size,
                                           f"{path} in body should have at least {min_items} items"))
            if max_items is not None and size > max_items:
                sink.causes.append(too_many(sink.field(path), size, max_items))
            if unique:
                seen: list[Any] = []
                for item in value:
                    if any(strict_deep_equal(item, s) for s in seen):
                        message = f"{path} in body shouldn't contain duplicates"
                        sink.causes.append(invalid(sink.field(path), "", message))
                        break
                    seen.append(item)

        return check

    @staticmethod
    def _enum(values: list[Any]) -> Validator:
        shown = _enum_shown(values)
        hashable = {v for v in values if isinstance(v, str)}
        only_strings = len(hashable) == len(values)

        def check(value: Any, path: str, sink: Sink, old: Any) -> None:
            if only_strings and isinstance(value, str):
                if value in hashable:
                    return
            elif any(_go_converts_equal(value, allowed) for allowed in values):
                return
            sink.causes.append(not_supported(sink.field(path), value, shown))

        return check

    def _object(self, node: Node, *, counting: bool) -> Validator | None:
        table = {name: self.parts(prop, counting=counting) for name, prop in node.properties.items()}
        props = {name: validator for name, (validator, _) in table.items()}
        extra, extra_kinds = self.parts(node.additional, counting=counting) if node.additional is not None \
            else (None, None)
        closed = node.additional_allows is False
        required_names = list(node.required)
        max_props, min_props = node.max_properties, node.min_properties
        if not props and extra is None and not closed and not required_names and max_props is None \
                and min_props is None:
            return None

        def check(value: dict[str, Any], path: str, sink: Sink, old: Any) -> None:
            size = len(value)
            if min_props is not None and size < min_props:
                sink.causes.append(invalid(sink.field(path), size,
                                           f"{path} in body should have at least {min_props} properties"))
            if max_props is not None and size > max_props:
                sink.causes.append(too_many(sink.field(path), size, max_props))
            prefix = f"{path}." if path else ""
            if isinstance(old, dict):
                for name, item in value.items():
                    validator = props.get(name)
                    # type meta never ratchets
                    old_item = NO_OLD if not path and name in ("kind", "apiVersion") else old.get(name, NO_OLD)
                    if validator is not None:
                        validator(item, prefix + name, sink, old_item)
                    elif closed:
                        message = f"{path}.{name} in body is a forbidden property"
                        sink.causes.append(invalid(sink.field(path), name, message))
                    elif extra is not None:
                        extra(item, f"{path}.{name}", sink, old_item)
            else:
                # no old value: run the checks of each value's type directly (see `parts`)
                for name, item in value.items():
                    entry = table.get(name)
                    if entry is not None:
                        validator, kinds = entry
                        if kinds is None or item is None:
                            validator(item, prefix + name, sink, NO_OLD)
                        else:
                            inner = kinds.get(type(item))
                            if inner is not None:
                                inner(item, prefix + name, sink, NO_OLD)
                    elif closed:
                        message = f"{path}.{name} in body is a forbidden property"
                        sink.causes.append(invalid(sink.field(path), name, message))
                    elif extra is not None:
                        if extra_kinds is None or item is None:
                            extra(item, f"{path}.{name}", sink, NO_OLD)
                        else:
                            inner = extra_kinds.get(type(item))
                            if inner is not None:
                                inner(item, f"{path}.{name}", sink, NO_OLD)
            for name in required_names:
                if name not in value:
                    sink.causes.append(required(sink.field(f"{path}.{name}")))

        return check


def _sequence(checks: list[Validator]) -> Validator | None:
    """One validator running `checks` in order (None for none, the check itself for one)."""
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks

        def both(value: Any, path: str, sink: Sink, old: Any) -> None:
            first(value, path, sink, old)
            second(value, path, sink, old)

        return both

    def every(value: Any, path: str, sink: Sink, old: Any) -> None:
        for check in checks:
            check(value, path, sink, old)

    return every


class _Bound:
    """A numeric bound (maximum, minimum, multipleOf) with its forms worked out once."""

    __slots__ = ("as_float", "as_int", "out_of_range", "prefix", "value")

    def __init__(self, value: int | float, out_of_range: bool, prefix: str) -> None:
        self.value = value
        self.out_of_range = out_of_range  # it does not fit the declared integer type / float format
        self.prefix = prefix
        self.as_float = float(value)
        finite = not isinstance(value, float) or math.isfinite(value)
        self.as_int: int | None = int(value) if finite else None

    def integral(self) -> int:
        """The bound as an int (compared with integer values); int() raises for inf as it always did."""
        return self.as_int if self.as_int is not None else int(self.value)


def _map_key(keys: list[str], item: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((type(item.get(k)).__name__, repr(item.get(k))) if k in item else ("absent", "") for k in keys)


def _map_list_index(keys: list[str] | None, old: Any) -> dict[tuple[Any, ...], Any] | None:
    if keys is None or not isinstance(old, list):
        return None
    return {_map_key(keys, item): item for item in old if isinstance(item, dict)}


def _multiple_of(value: int | float, factor: int | float, as_int: bool, path: str, sink: Sink) -> None:
    if as_int:
        int_factor = int(factor)
        if int_factor <= 0:
            sink.causes.append(invalid(sink.field(path), int_factor,
                                       f"factor MultipleOf declared for {path} must be positive: {int_factor}"))
            return
        if int(value) % int_factor != 0:
            sink.causes.append(invalid(sink.field(path), value,
                                       f"{path} in body should be a multiple of {int_factor}"))
        return
    f_factor, f_value = float(factor), float(value)
    if f_factor <= 0:
        sink.causes.append(invalid(sink.field(path), f_factor,
                                   f"factor MultipleOf declared for {path} must be positive: {go_float(f_factor)}"))
        return
    mult = 1 / f_factor * f_value if f_factor < 1 else f_value / f_factor
    if not is_json_integer(mult):
        sink.causes.append(invalid(sink.field(path), value,
                                   f"{path} in body should be a multiple of {go_float(f_factor)}"))
