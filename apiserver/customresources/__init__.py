"""CustomResourceDefinitions and the custom resources they define, served as kube-apiserver serves them.

* `definitions`: a CRD checked and defaulted as apiextensions-apiserver does on every write
  (names, group, scope, versions, structural schemas, subresources, printer columns,
  conversion), and the `Kind`s an established CRD serves, one per served version, each with
  a `CustomKind` that says how its objects are validated, pruned, defaulted and printed.
* `objects`: what a write of a custom object goes through (pruning with warnings or a 400
  under `fieldValidation=Strict`, defaults, the version's schema and CEL rules, `generation`
  bumped only by changes outside metadata and status, storage at the storage version).
* `lifecycle`: the controllers upstream runs beside the CRD registry, run here in the write
  path, right after each CRD write: names accepted and the CRD Established (its kinds join
  the apiserver's `KindTable`, so discovery, OpenAPI and routing follow at once), and a
  deleted CRD's cleanup (its objects deleted, their watches ended, its kinds removed) before
  its finalizer goes.
"""
