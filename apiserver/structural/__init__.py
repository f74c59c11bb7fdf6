"""The structural-schema machinery of CustomResourceDefinitions (apiextensions.k8s.io/v1).

What kube-apiserver's apiextensions-apiserver does with a CRD version's `openAPIV3Schema`,
behind one class:

```python
schema, causes = StructuralSchema.compile(raw, path="spec.versions[0].schema.openAPIV3Schema")
if schema is None: ...                  # 422 Invalid with `causes` (metav1.StatusCause dicts)
unknown = schema.prune(obj)              # on decode: drop unknown fields (paths for warnings/strict)
schema.default(obj)                      # then apply defaults
causes = schema.validate(obj, old=old)   # before storing: OpenAPI + list types + CEL rules
causes = schema.validate_status(obj, old=old)  # on the status subresource instead
```

Every `Cause` is `{"reason", "field", "message"}` worded as upstream (`field.Error.ErrorBody()`
and kube-openapi's messages). The modules, one concern each: `schema` (the class), `nodes`
(parsed schema), `checking` (CRD-time structural and OpenAPI checks), `validating` (kube-openapi
validation compiled to closures), `formats`, `regex` (RE2 `pattern`), `listtype`, `defaulting`,
`pruning`, `objectmeta`, `fieldpaths`, `rules` (CEL compile and evaluation), `celast` (field
checks, cost estimate and fields read, on the checked AST), `celib` (Kubernetes' CEL libraries),
`equality` (Go's DeepEqual on JSON, what ratcheting calls unchanged), `causes` (Go-compatible
wording).

Everything is compiled once per schema into closures specialised for each node, so that a write
costs a walk of the object only: pruning (and dropping disallowed nulls) in one walk, defaulting
only along the paths that have defaults, and on update no walk at all below a value equal to its
old one, apart from its CEL rules (see `rules` for how those stay cheap). Objects are decoded
JSON (dicts, lists, strings, numbers, booleans, None, of exactly those types).

CEL library: `cel-expr-python` (the CEL project's own Python binding of cel-cpp, maintained
under github.com/cel-expr) rather than `cel-python` (a pure-Python interpreter): it has the CEL
type checker (rules are checked at CRD creation, as Kubernetes does), the standard macros and
`has()`, the strings extension (`lowerAscii`, `split`, `replace`, `trim`, `format`...), optional
values (`self.?field`, `orValue`), `cel.bind`, timestamps and durations, RE2 for `matches`, and a
hard cap on comprehension iterations that stops runaway rules; it evaluates a typical rule in a
few microseconds where cel-python takes over a hundred and lacks optionals and the strings
extension. Kubernetes' own list, regex and sets functions are added in Python (`rules`).
"""

from kubemesh.apiserver.structural.causes import Cause
from kubemesh.apiserver.structural.schema import StructuralSchema

__all__ = ["Cause", "StructuralSchema"]
