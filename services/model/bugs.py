"""Behaviour switches: the historic bugs, each one switchable on demand.

Every component accepts `--bugs NAME[,NAME...]` and reads `KUBEMESH_BUGS`; each keeps only
the names that belong to it, so one environment variable can be handed to the whole mesh. A
version profile (`--profile`) turns the switches of its release on; `-NAME` turns one off.
Off (the default) is today's fixed behaviour; on is the behaviour before the upstream fix.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True, kw_only=True)
class Bug:
    """One historic bug that a component can reintroduce."""

    name: str
    component: str
    issue: str
    fix: str
    summary: str


BUGS: Final[tuple[Bug, ...]] = (
    Bug(name="ghost-node-affinity-error", component="scheduler", issue="kubernetes#50813",
        fix="kubernetes#53647",
        summary="a deleted node whose pods are still cached stays as a ghost NodeInfo; inter-pod "
                "(anti-)affinity iterates it, fails with node \"X\" not found, and every pod with "
                "(anti-)affinity stays Pending"),
    Bug(name="keep-missed-node", component="scheduler", issue="kubernetes#56261", fix="kubernetes#56622",
        summary="after a node-not-found scheduling error the scheduler neither re-reads the node nor "
                "drops it from its cache"),
    Bug(name="nominate-after-patch", component="scheduler", issue="kubernetes#72124",
        fix="kubernetes#72259",
        summary="the nominated node is recorded only when the pod update carrying nominatedNodeName "
                "comes back on the watch, so another pod can take the node in between"),
    Bug(name="stale-update-unnominates", component="scheduler", issue="kubernetes#74931",
        fix="kubernetes#77990",
        summary="a stale pod update without nominatedNodeName removes the in-memory nomination"),
    Bug(name="pressure-predicates", component="scheduler", issue="kubernetes v1.7 scheduler predicates",
        fix="TaintNodesByCondition (alpha 1.8, beta 1.12, GA 1.17)",
        summary="the scheduler reads the node's pressure conditions (CheckNodeMemoryPressure: only "
                "BestEffort pods are kept off a MemoryPressure node; DiskPressure, PIDPressure and, with "
                "CheckNodeCondition, OutOfDisk keep every pod off) instead of the node.kubernetes.io/*-pressure "
                "taints, so Burstable pods "
                "are still placed on a node under memory pressure"),
    Bug(name="legacy-pod-eviction", component="controller_manager", issue="kubernetes v1.7 node controller",
        fix="taint-based eviction (GA 1.18; flags removed by kubernetes#115840)",
        summary="pods of a NotReady/Unknown node are deleted by the zone's rate-limited pod evictor "
                "after --pod-eviction-timeout instead of NoExecute taints and tolerations"),
    Bug(name="no-out-of-service-gc", component="controller_manager", issue="KEP-2268",
        fix="non-graceful node shutdown, GA 1.28",
        summary="PodGC does not force-delete Terminating pods on a NotReady node tainted "
                "node.kubernetes.io/out-of-service"),
    Bug(name="no-node-lease", component="kubelet", issue="before node leases (KEP-589)",
        fix="kubernetes#69241 (lease renewal as heartbeat)",
        summary="the heartbeat is the NodeStatus update alone; no Lease is renewed"),
    Bug(name="pods-list-from-watch-cache", component="kubelet", issue="kubernetes#59848",
        fix="consistent initial lists: kubernetes#83520 (relists), KEP-3157 WatchList, KEP-2340",
        summary="a node's pod informer starts from a list at resourceVersion 0, served from whatever the "
                "apiserver's watch cache holds: a kubelet restarted against a lagging apiserver sees pods that "
                "were deleted or moved and runs them again"),
)

BY_NAME: Final[Mapping[str, Bug]] = {b.name: b for b in BUGS}

ENV_VAR: Final = "KUBEMESH_BUGS"


class UnknownBugError(ValueError):
    """A switch name that no component knows."""


def split_names(value: str | None) -> list[str]:
    """Split a comma-separated list, dropping blanks."""
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def parse_bugs(*, component: str, cli: Iterable[str] = (),
               environ: Mapping[str, str] | None = None, profile: Iterable[str] = ()) -> frozenset[str]:
    """The switches that apply to `component`, from its profile, the CLI and `KUBEMESH_BUGS`.

    `profile` holds the switches a version profile turns on (`kubemesh.services.model.profiles`);
    a name with a leading `-` (`-legacy-pod-eviction`) turns a switch off, whichever source turned
    it on: a release with one fix backported. Names given on the command line must exist (a typo
    is an error, not a silent no-op); names in the environment that belong to other components
    are ignored.
    """
    env = os.environ if environ is None else environ
    chosen: set[str] = {n for n in profile if n in BY_NAME and BY_NAME[n].component == component}
    off: set[str] = set()
    for name in cli:
        bare = name.removeprefix("-")
        bug = BY_NAME.get(bare)
        if bug is None:
            raise UnknownBugError(f"unknown bug switch {bare!r}; `kubemesh bugs` lists them")
        if bug.component == component:
            (off if name.startswith("-") else chosen).add(bare)
    for name in split_names(env.get(ENV_VAR)):
        bare = name.removeprefix("-")
        bug = BY_NAME.get(bare)
        if bug is not None and bug.component == component:
            (off if name.startswith("-") else chosen).add(bare)
    return frozenset(chosen - off)


def is_known(name: str) -> bool:
    """Whether `name` (or `-name`, a switch turned off) is a known switch."""
    return name.removeprefix("-") in BY_NAME
