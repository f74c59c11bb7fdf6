"""`StructuralSchema`: one CRD version's `openAPIV3Schema`, checked and compiled once.

Then used to default, prune and validate every object of that version.

`compile` runs the checks apiextensions runs on CRD create/update, in upstream's order: decoding,
the structural invariants (`check_structural`), the defaults (each must validate against its own
schema, rules included, and contain no unknown fields), then the OpenAPI checks with the CEL rules
compiled where the schema is otherwise sound (`check_openapi`). Errors about unsupported keywords
found while building the structural schema are shown only when nothing else is wrong, as upstream.

The object-side methods follow the apiextensions request path: `prune` then `default` when
decoding (writes and reads from storage), `validate` (or `validate_status` on the status
subresource) before storing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from kubemesh.apiserver.structural.causes import Cause, child, forbidden, invalid, key
from kubemesh.apiserver.structural.celast import cardinalities
from kubemesh.apiserver.structural.checking import check_openapi, check_status_root, check_structural
from kubemesh.apiserver.structural.defaulting import Defaulter, compile_defaulter, has_defaults
from kubemesh.apiserver.structural.equality import Unchanged
from kubemesh.apiserver.structural.listtype import ListChecker, compile_list_checker
from kubemesh.apiserver.structural.nodes import Node, parse
from kubemesh.apiserver.structural.objectmeta import validate_embedded
from kubemesh.apiserver.structural.pruning import Pruner, compile_pruner
from kubemesh.apiserver.structural.rules import (
    DEFAULT_BUDGET_SECONDS,
    Budget,
    NodeRules,
    RuleTree,
    compile_node_rules,
    compile_rule_tree,
    evaluate,
)
from kubemesh.apiserver.structural.validating import NO_OLD, Sink, Validator, compile_validator

__all__ = ["StructuralSchema"]

_BLOCKING: Final = frozenset(("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong",
                              "FieldValueTooMany", "FieldValueTypeInvalid"))
_NOT_CHECKED: Final = ("some validation rules were not checked because the object was invalid; correct the "
                       "existing errors to complete validation")
_INIT_ERRORS: Final = {
    "id": "OpenAPIV3Schema 'id' is not supported", "$schema": "OpenAPIV3Schema 'schema' is not supported",
    "$ref": "OpenAPIV3Schema '$ref' is not supported",
    "patternProperties": "OpenAPIV3Schema 'patternProperties' is not supported",
    "dependencies": "OpenAPIV3Schema 'dependencies' is not supported",
    "additionalItems": "OpenAPIV3Schema 'additionalItems' is not supported",
    "definitions": "OpenAPIV3Schema 'definitions' is not supported",
}

EmbeddedChecker = Callable[[Any, str, list[Cause]], None]


def _init_problem(node: Node) -> str | None:
    """What NewStructural refuses (unsupported keywords, items arrays), anywhere in the schema."""
    for name in node.unsupported:
        if name in _INIT_ERRORS:
            return _INIT_ERRORS[name]
    if node.items_is_array:
        return "OpenAPIV3Schema 'items' must be a schema, but is an array"
    if node.preserve_unknown_false:
        return "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
    children = [*node.properties.values(), *(n for _, n in node.nested_nodes)]
    children += [n for n in (node.items, node.additional) if n is not None]
    for sub in children:
        problem = _init_problem(sub)
        if problem is not None:
            return problem
    return None


def _compile_embedded(node: Node, *, root: bool = True) -> EmbeddedChecker | None:
    """A checker of the embedded resources below the root (objectmeta.Validate, isResourceRoot=false)."""
    props = {n: c for n, p in node.properties.items() if (c := _compile_embedded(p, root=False)) is not None}
    extra = _compile_embedded(node.additional, root=False) if node.additional is not None else None
    items = _compile_embedded(node.items, root=False) if node.items is not None else None
    embedded = node.embedded and not root
    if not embedded and not props and extra is None and items is None:
        return None

    def check(value: Any, path: str, errs: list[Cause]) -> None:
        if isinstance(value, dict):
            if embedded:
                errs.extend(validate_embedded(value, path))
            for name, item in value.items():
                sub = props.get(name)
                if sub is not None:
                    sub(item, child(path, name), errs)
                elif extra is not None and name not in node.properties:
                    extra(item, key(path, name), errs)
        elif isinstance(value, list) and items is not None:
            for i, item in enumerate(value):
                items(item, f"{path}[{i}]", errs)

    return check


class StructuralSchema:
    """A compiled structural schema. Build it with `compile`; the methods never look at the raw dict."""

    __slots__ = ("_defaulter", "_embedded", "_has_defaults", "_lists", "_pruner", "_root", "_rules",
                 "_status_validator", "_validator", "budget_seconds")

    def __init__(self, root: Node, rules: dict[int, NodeRules]) -> None:
        self._root = root
        self._pruner: Pruner = compile_pruner(root, embedded=True, top=True)
        self._defaulter: Defaulter | None = compile_defaulter(root)
        self._has_defaults = has_defaults(root)
        self._validator: Validator = compile_validator(root)
        status = root.properties.get("status")
        self._status_validator: Validator | None = compile_validator(status) if status is not None else None
        self._lists: ListChecker | None = compile_list_checker(root)
        self._embedded: EmbeddedChecker | None = _compile_embedded(root)
        self._rules: RuleTree | None = compile_rule_tree(root, rules)
        self.budget_seconds = DEFAULT_BUDGET_SECONDS
        """Wall-clock time all CEL rules of one validate call may take."""

    # -----------------------------------------------------------------------------------------
    # Compilation.

    @classmethod
    def compile(cls, schema: dict[str, Any], *, path: str,
                status_subresource: bool = False) -> tuple[StructuralSchema | None, list[Cause]]:
        """Check `schema` as apiextensions does on CRD create/update and compile it.

        `path` is where the schema sits in the CRD (`spec.versions[0].schema.openAPIV3Schema`);
        every cause's field starts with it. With `status_subresource`, the root may only use the
        keywords that survive extracting `properties.status` (upstream's extra rule). Returns
        (schema, []) when valid, (None, causes) otherwise; the causes are exactly those
        apiextensions reports (a rule that does not compile is one of them).
        """
        causes: list[Cause] = []
        root = parse(schema, path, causes)
        if causes:
            return None, causes
        if status_subresource:
            causes.extend(check_status_root(schema, path))
        if root.nullable:
            causes.append(forbidden(child(path, "nullable"), "nullable cannot be true at the root"))
        compiled: dict[int, NodeRules] = {}
        counts = cardinalities(root)

        def compile_rules(node: Node, node_path: str, uncorrelatable: str | None) -> list[Cause]:
            rules, problems = compile_node_rules(node, node_path, uncorrelatable, is_root=node is root,
                                                 cardinality=counts.get(id(node), 1.0))
            if rules is not None:
                compiled[id(node)] = rules
            return problems

        init_problem = _init_problem(root)
        rules_allowed = False
        if init_problem is None:
            structural = check_structural(root, path)
            if structural:
                causes.extend(structural)
            else:
                defaults = _check_defaults(root, path)
                causes.extend(defaults)
                rules_allowed = not defaults
        causes.extend(check_openapi(root, path, compile_rules=compile_rules if rules_allowed else None))
        if init_problem is not None and not causes:
            causes.append(invalid(path, "", init_problem))
        if causes:
            return None, causes
        return cls(root, compiled), []

    # -----------------------------------------------------------------------------------------
    # Objects.

    def default(self, obj: dict[str, Any]) -> None:
        """Apply the schema's defaults to `obj` in place (after `prune`, as upstream decodes)."""
        if self._defaulter is not None:
            self._defaulter(obj)

    def prune(self, obj: dict[str, Any]) -> list[str]:
        """Remove unknown fields from `obj` in place; their sorted paths (`spec.foo`, `spec.items[0].bar`).

        Keeps `apiVersion`, `kind` and `metadata` at the root and in embedded resources (metadata
        reduced to ObjectMeta's fields, unknown ones reported as `metadata.foo`), honours
        `x-kubernetes-preserve-unknown-fields`, and drops nulls the schema neither accepts nor
        defaults (unreported).
        """
        pruned: list[str] = []
        self._pruner(obj, "", pruned)
        pruned.sort()
        return pruned

    def validate(self, obj: dict[str, Any], *, old: dict[str, Any] | None = None) -> list[Cause]:
        """All causes for `obj` (empty when valid), for a create (`old` None) or an update.

        OpenAPI validation of the whole object, embedded resources' apiVersion/kind/metadata,
        list-type set/map uniqueness (on update only when the old object had no such error), and
        the CEL rules with `old` correlated for transition rules. As upstream, rules are skipped
        when the object already has a required, unsupported, too long, too many or wrong-type
        error: a single cause on `<nil>` says so.
        """
        unchanged: Unchanged = {}
        causes = self._schema_causes(self._validator, obj, old, "", unchanged)
        if self._embedded is not None:
            self._embedded(obj, "", causes)
        causes.extend(self._list_causes(obj, old, unchanged))
        causes.extend(self._rule_causes(obj, old, causes, unchanged))
        return causes

    def validate_status(self, obj: dict[str, Any], *, old: dict[str, Any] | None = None) -> list[Cause]:
        """The validation of an update through the status subresource (`ValidateStatusUpdate`).

        Only `obj["status"]` is validated against `properties.status` (fields `status.x`, messages
        naming `x` as kube-openapi sees the status schema as a root), list types over the whole
        object, and every CEL rule of the schema with `old` (rules on `spec` included, as upstream:
        unchanged values pass by ratcheting).
        """
        causes: list[Cause] = []
        unchanged: Unchanged = {}
        if "status" in obj and self._status_validator is not None:
            old_status = old.get("status", NO_OLD) if old is not None else None
            causes = self._schema_causes(self._status_validator, obj["status"], old_status, "status", unchanged)
        causes.extend(self._list_causes(obj, old, unchanged))
        causes.extend(self._rule_causes(obj, old, causes, unchanged))
        return causes

    @staticmethod
    def _schema_causes(validator: Validator, value: Any, old: Any, base: str, unchanged: Unchanged) -> list[Cause]:
        """OpenAPI validation; on update, errors of unchanged values are ratcheted away.

        The result is that of upstream's order: a plain pass, and only when it fails, a ratcheting
        pass (old values correlated, unchanged values skipped) whose errors are reported. On update
        the ratcheting pass runs first instead: it skips every unchanged subtree, so for the usual
        update (a valid object, most of it unchanged) it is the only pass. When it finds errors, the
        plain pass decides whether they stand (it may find none where ratcheting finds some: under
        oneOf/not, an unchanged branch validates). Both orders report the same causes. The values
        found unchanged go to `unchanged`.
        """
        if old is None or old is NO_OLD:
            sink = Sink(base)
            validator(value, "", sink, NO_OLD)
            return _dedupe(sink.causes)
        ratcheted = Sink(base, unchanged)
        validator(value, "", ratcheted, old)
        if not ratcheted.causes:
            return []
        plain = Sink(base)
        validator(value, "", plain, NO_OLD)
        if not plain.causes:
            return []
        return _dedupe(ratcheted.causes)

    def _list_causes(self, obj: dict[str, Any], old: dict[str, Any] | None, unchanged: Unchanged) -> list[Cause]:
        """List-type errors; none on update when the old object already had some (ratcheting).

        On update, lists equal to their old counterpart (same property names and map keys), and
        values in `unchanged` (found equal to theirs by the OpenAPI validation), are not checked:
        a duplicate there is one the old object has too, and then nothing is reported anyway. So
        the errors found elsewhere decide, and are the complete answer when the old object is
        clean.
        """
        if self._lists is None:
            return []
        found: list[Cause] = []
        self._lists(obj, "", found, NO_OLD if old is None else old, unchanged)
        if found and old is not None:
            before: list[Cause] = []
            self._lists(old, "", before, NO_OLD, unchanged)
            if before:
                return []  # ratcheting: the old object already broke the list invariants
        return found

    def _rule_causes(self, obj: dict[str, Any], old: dict[str, Any] | None, so_far: list[Cause],
                     unchanged: Unchanged) -> list[Cause]:
        if self._rules is None:
            return []
        if so_far and any(c["reason"] in _BLOCKING for c in so_far):
            return [invalid("", None, _NOT_CHECKED)]
        found: list[Cause] = []
        evaluate(self._rules, obj, old, "", found, Budget(self.budget_seconds), has_old=old is not None,
                 ratchet=old is not None, texts=unchanged)
        return found

    @property
    def has_defaults(self) -> bool:
        """Whether any `default` is declared (so `default` can be skipped otherwise)."""
        return self._has_defaults


def _dedupe(causes: list[Cause]) -> list[Cause]:
    """kube-openapi reports each distinct error once."""
    if len(causes) < 2:
        return causes
    seen: set[tuple[str, str]] = set()
    out: list[Cause] = []
    for cause in causes:
        ident = (cause["field"], cause["message"])
        if ident not in seen:
            seen.add(ident)
            out.append(cause)
    return out


# ---------------------------------------------------------------------------------------------
# Defaults (structuraldefaulting.ValidateDefaults).


def _check_defaults(root: Node, path: str) -> list[Cause]:
    causes: list[Cause] = []
    _walk_defaults(root, path, causes, embedded_root=root)
    return causes


def _walk_defaults(node: Node, path: str, causes: list[Cause], *, embedded_root: Node) -> None:
    if node.embedded:
        embedded_root = node
    if node.has_default:
        causes.extend(_check_one_default(node, path, is_resource_root=node is embedded_root))
    if node.items is not None:
        _walk_defaults(node.items, child(path, "items"), causes, embedded_root=embedded_root)
    for name, prop in node.properties.items():
        _walk_defaults(prop, key(child(path, "properties"), name), causes, embedded_root=embedded_root)


def _check_one_default(node: Node, path: str, *, is_resource_root: bool) -> list[Cause]:
    default_path = child(path, "default")
    value = node.default
    pruned = copy.deepcopy(value)
    compile_pruner(node, embedded=node.embedded or is_resource_root, nulls=False)(pruned, "", [])
    if pruned != value:
        return [invalid(default_path, value, "must not have unknown fields")]
    if node.embedded and isinstance(value, dict):
        problems = validate_embedded(value, default_path)
        if problems:
            return problems
    sink = Sink(default_path)
    compile_validator(node)(value, "", sink, NO_OLD)
    if sink.causes:
        return _dedupe(sink.causes)
    if node.validations:
        rules, problems = compile_node_rules(node, path, None, is_root=False)
        if rules is not None and not problems:
            found: list[Cause] = []
            tree = RuleTree(rules=rules, properties={}, additional=None, items=None, map_keys=None,
                            map_correlatable=True)
            evaluate(tree, value, value, default_path, found, Budget(DEFAULT_BUDGET_SECONDS), has_old=True,
                     ratchet=False)
            return found
    return []

