"""Version profiles: the defaults and bug switches of one Kubernetes release, for every component.

One table (`RELEASES`, one entry per release, oldest first) says what each release sets, and
where upstream says so. Every component reads it the same way (`component.main` in
`kubemesh.services.process.component`, and the apiserver's own parser):

* `--profile NAME` (or `KUBEMESH_PROFILE`) picks a release;
* each of the release's `Default`s for that component becomes the default of one of the
  component's own flags (by flag name, `apply_defaults`), so an explicit flag still overrides it;
* the release's `Switch`es that belong to the component are on, unless `--bugs=-NAME` turns one
  off (how a scenario's fixed mode runs a release with the fix backported).

A release lists only what changed since the one before it (`changes`); `resolve` returns the
whole set. `current` is today's behaviour: no switch on, every default the code's own.
`kubemesh profiles` prints the resolved table with the upstream source of each value.

Guarantees: every flag a profile names exists on its component (tests check each one parses),
every switch exists in `kubemesh.services.model.bugs`, and `current` sets no switch.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from kubemesh.services.model.bugs import BY_NAME

Profile = Literal["1.7", "1.8", "1.13", "1.14", "1.15", "1.28", "current"]
PROFILES: Final[tuple[Profile, ...]] = ("1.7", "1.8", "1.13", "1.14", "1.15", "1.28", "current")
DEFAULT_PROFILE: Final[Profile] = "current"
ENV_VAR: Final = "KUBEMESH_PROFILE"

APISERVER: Final = "apiserver"
CONTROLLER_MANAGER: Final = "controller_manager"
KUBELET: Final = "kubelet"
SCHEDULER: Final = "scheduler"

ALPHA_NOT_READY: Final = "node.alpha.kubernetes.io/notReady"
ALPHA_UNREACHABLE: Final = "node.alpha.kubernetes.io/unreachable"
GA_NOT_READY: Final = "node.kubernetes.io/not-ready"
GA_UNREACHABLE: Final = "node.kubernetes.io/unreachable"


@dataclass(frozen=True, slots=True, kw_only=True)
class Default:
    """One flag default of one component in a release."""

    component: str
    flag: str
    """The flag without dashes (`node-monitor-grace-period`); its value is given as on the command line."""
    value: str
    source: str
    """Where upstream sets it: a file, flag, PR or KEP."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """One bug switch a release implies: its behaviour before the upstream fix or feature."""

    name: str
    on: bool
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Feature:
    """A feature gate's state in a release, and how the emulation expresses it (informational)."""

    name: str
    enabled: bool
    source: str
    emulation: str
    """The switch or default that carries it, or what the emulation does not model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """What one release changes relative to the release before it in `RELEASES`."""

    name: Profile
    summary: str
    changes: tuple[Default | Switch | Feature, ...]


def _d(component: str, flag: str, value: str, source: str) -> Default:
    return Default(component=component, flag=flag, value=value, source=source)


_CM_OPTIONS: Final = "cmd/kube-controller-manager/app/options"
_TAINT_RENAME: Final = "kubernetes#51266 (v1.9: node.kubernetes.io/not-ready, unreachable; 1.7-1.8 used alpha keys)"

RELEASES: Final[tuple[Release, ...]] = (
    Release(name="1.7", summary="the seed of 001 (kubelet heartbeats and evictions, v1.7.9): no leases, "
                                "pods evicted by the zone's pod evictor, alpha taint names", changes=(
        _d(CONTROLLER_MANAGER, "node-monitor-grace-period", "40s", f"{_CM_OPTIONS}: --node-monitor-grace-period 40s"),
        _d(CONTROLLER_MANAGER, "node-monitor-period", "5s", f"{_CM_OPTIONS}: --node-monitor-period 5s"),
        _d(CONTROLLER_MANAGER, "node-startup-grace-period", "1m", f"{_CM_OPTIONS}: --node-startup-grace-period 1m"),
        _d(CONTROLLER_MANAGER, "pod-eviction-timeout", "5m", f"{_CM_OPTIONS}: --pod-eviction-timeout 5m"),
        _d(CONTROLLER_MANAGER, "node-eviction-rate", "0.1", f"{_CM_OPTIONS}: --node-eviction-rate 0.1"),
        _d(CONTROLLER_MANAGER, "secondary-node-eviction-rate", "0.01",
           f"{_CM_OPTIONS}: --secondary-node-eviction-rate 0.01"),
        _d(CONTROLLER_MANAGER, "large-cluster-size-threshold", "50",
           f"{_CM_OPTIONS}: --large-cluster-size-threshold 50"),
        _d(CONTROLLER_MANAGER, "unhealthy-zone-threshold", "0.55", f"{_CM_OPTIONS}: --unhealthy-zone-threshold 0.55"),
        _d(CONTROLLER_MANAGER, "not-ready-taint-key", ALPHA_NOT_READY,
           "pkg/controller/node: NotReadyTaintTemplate (TaintBasedEvictions, alpha)"),
        _d(CONTROLLER_MANAGER, "unreachable-taint-key", ALPHA_UNREACHABLE,
           "pkg/controller/node: UnreachableTaintTemplate (TaintBasedEvictions, alpha)"),
        _d(APISERVER, "not-ready-taint-key", ALPHA_NOT_READY,
           "plugin/pkg/admission/defaulttolerationseconds: tolerates the alpha notReady key for 300 s"),
        _d(APISERVER, "unreachable-taint-key", ALPHA_UNREACHABLE,
           "plugin/pkg/admission/defaulttolerationseconds: tolerates the alpha unreachable key for 300 s"),
        _d(APISERVER, "default-not-ready-toleration-seconds", "300",
           "kube-apiserver --default-not-ready-toleration-seconds 300"),
        _d(APISERVER, "default-unreachable-toleration-seconds", "300",
           "kube-apiserver --default-unreachable-toleration-seconds 300"),
        _d(KUBELET, "node-status-update-frequency", "10", "kubelet --node-status-update-frequency 10s"),
        _d(KUBELET, "low-diskspace-threshold-mb", "256",
           "kubelet --low-diskspace-threshold-mb 256 (the disk-space manager's OutOfDisk condition and admission)"),
        _d(KUBELET, "eviction-hard", "memory.available<100Mi",
           "kubelet v1.7 --eviction-hard default memory.available<100Mi: disk was the disk-space manager's "
           "(OutOfDisk); the nodefs/imagefs thresholds replaced it (kubernetes#48846)"),
        _d(CONTROLLER_MANAGER, "podgc-orphan-quarantine", "0s",
           "pkg/controller/podgc gcOrphaned before kubernetes#82365 (v1.17): every 20 s pass lists the nodes from "
           "the apiserver and deletes the pods of missing ones at once, no quarantine"),
        _d(SCHEDULER, "percentage-of-nodes-to-score", "100",
           "the v1.7 scheduler filters and scores every node (percentageOfNodesToScore came in v1.12)"),
        _d(SCHEDULER, "pod-max-backoff-seconds", "60",
           "plugin/pkg/scheduler/factory: podBackoff 1s..60s per pod"),
        _d(SCHEDULER, "assumed-pod-ttl", "30",
           "plugin/pkg/scheduler/factory: schedulerCache ttl 30 s (15 min from v1.23, kubernetes#106412)"),
        Switch(name="legacy-pod-eviction", on=True,
               source="TaintBasedEvictions alpha, off by default (pkg/features, v1.6-v1.12); beta and on in v1.13"),
        Switch(name="no-node-lease", on=True,
               source="node leases: KEP-589, NodeLease alpha v1.12, beta (on) v1.14, GA v1.17"),
        Switch(name="no-out-of-service-gc", on=True,
               source="KEP-2268 non-graceful node shutdown: alpha v1.24, GA v1.28"),
        Switch(name="ghost-node-affinity-error", on=True, source="kubernetes#50813, fixed by kubernetes#53647 (v1.9)"),
        Switch(name="keep-missed-node", on=True, source="kubernetes#56261, fixed by kubernetes#56622 (v1.10)"),
        Switch(name="pressure-predicates", on=True,
               source="plugin/pkg/scheduler/algorithm/predicates: CheckNodeMemoryPressure, CheckNodeDiskPressure, "
                      "and the OutOfDisk check of the scheduler's node condition filter (the condition taints came "
                      "with TaintNodesByCondition, beta and on in v1.12)"),
        Feature(name="TaintBasedEvictions", enabled=False, source="pkg/features (alpha v1.6, beta v1.13, GA v1.18)",
                emulation="switch legacy-pod-eviction"),
        Feature(name="TaintNodesByCondition", enabled=False,
                source="not in v1.7 (alpha v1.8, beta v1.12, GA v1.17; design: kubernetes/community#819)",
                emulation="switch pressure-predicates (the scheduler reads the pressure conditions, as "
                          "v1.7's predicates did); the emulated node-lifecycle controller writes the NoSchedule "
                          "condition taints all the same (they keep pods off NotReady nodes as v1.7's "
                          "CheckNodeCondition predicate did)"),
        Feature(name="NodeLease", enabled=False, source="KEP-589 (alpha v1.12)", emulation="switch no-node-lease"),
        Feature(name="PodPriority (preemption)", enabled=False, source="alpha v1.8, beta v1.11",
                emulation="not modelled as absent: the emulated scheduler always preempts"),
    )),
    Release(name="1.8", summary="the seed of 000 (ghost node in the scheduler cache, kubernetes#53647)", changes=(
        _d(KUBELET, "low-diskspace-threshold-mb", "0",
           "kubernetes#48846 (v1.8) removed --low-diskspace-threshold-mb; OutOfDisk is not reported here from then "
           "on (v1.8-v1.11 kubelets posted it always False until its removal)"),
        _d(KUBELET, "eviction-hard", "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,"
                                     "nodefs.inodesFree<5%",
           "kubelet --eviction-hard with the disk signals that replaced --low-diskspace-threshold-mb "
           "(kubernetes#48846; today's Linux default)"),
        Switch(name="nominate-after-patch", on=True,
               source="preemption alpha since v1.8; kubernetes#72124, fixed by kubernetes#72259 (v1.14)"),
        Switch(name="stale-update-unnominates", on=True, source="kubernetes#74931, fixed by kubernetes#77990 (v1.15)"),
        Feature(name="TaintNodesByCondition", enabled=False, source="alpha v1.8 (off by default)",
                emulation="as in 1.7"),
        Feature(name="PodPriority (preemption)", enabled=False, source="alpha v1.8 (off by default)",
                emulation="the emulated scheduler preempts; the nomination switches are on"),
    )),
    Release(name="1.13", summary="the seed of 002 (nominated node race, kubernetes#72259): taint-based eviction "
                                 "on, leases still alpha", changes=(
        _d(CONTROLLER_MANAGER, "not-ready-taint-key", GA_NOT_READY, _TAINT_RENAME),
        _d(CONTROLLER_MANAGER, "unreachable-taint-key", GA_UNREACHABLE, _TAINT_RENAME),
        _d(APISERVER, "not-ready-taint-key", GA_NOT_READY, _TAINT_RENAME),
        _d(APISERVER, "unreachable-taint-key", GA_UNREACHABLE, _TAINT_RENAME),
        _d(SCHEDULER, "percentage-of-nodes-to-score", "50",
           "pkg/scheduler/apis/config: percentageOfNodesToScore default 50 (v1.12-v1.13)"),
        Switch(name="legacy-pod-eviction", on=False,
               source="pkg/features/kube_features.go: TaintBasedEvictions beta, on by default in v1.13"),
        Switch(name="ghost-node-affinity-error", on=False, source="kubernetes#53647 (v1.9)"),
        Switch(name="keep-missed-node", on=False, source="kubernetes#56622 (v1.10)"),
        Switch(name="pressure-predicates", on=False,
               source="TaintNodesByCondition beta, on by default in v1.12: pressure as node.kubernetes.io/*-pressure "
                      "NoSchedule taints"),
        Feature(name="TaintBasedEvictions", enabled=True, source="beta v1.13",
                emulation="switch legacy-pod-eviction off"),
        Feature(name="TaintNodesByCondition", enabled=True, source="beta v1.12 (on by default)",
                emulation="switch pressure-predicates off"),
        Feature(name="PodPriority (preemption)", enabled=True, source="beta v1.11", emulation="always"),
    )),
    Release(name="1.14", summary="kubernetes#74931 (a stale update drops the nomination kubernetes#72259 now "
                                 "records first): leases on", changes=(
        _d(SCHEDULER, "percentage-of-nodes-to-score", "0",
           "pkg/scheduler/core: adaptive percentageOfNodesToScore (0 = 50% minus 1% per 125 nodes) since v1.14"),
        _d(KUBELET, "node-status-report-frequency", "300",
           "kubelet nodeStatusReportFrequency 5m (KEP-589): with leases an unchanged status is posted every 5 min; "
           "the kubelet still reads its Node every --node-status-update-frequency and posts what differs"),
        Switch(name="no-node-lease", on=False, source="NodeLease beta, on by default in v1.14 (KEP-589)"),
        Switch(name="nominate-after-patch", on=False, source="kubernetes#72259 (v1.14)"),
        Feature(name="NodeLease", enabled=True, source="beta v1.14", emulation="switch no-node-lease off"),
    )),
    Release(name="1.15", summary="the seed of 003 (Recreate Deployment stuck behind Terminating pods, v1.15.5): "
                                 "no out-of-service taint yet", changes=(
        Switch(name="stale-update-unnominates", on=False, source="kubernetes#77990 (v1.15)"),
    )),
    Release(name="1.28", summary="non-graceful node shutdown GA; the last releases with a 40 s grace period",
            changes=(
        _d(CONTROLLER_MANAGER, "podgc-orphan-quarantine", "40s",
           "pkg/controller/podgc quarantineTime: pods of a node missing from the node lister for 40 s, and "
           "confirmed gone by a GET, are deleted (kubernetes#82365, v1.17)"),
        _d(SCHEDULER, "pod-max-backoff-seconds", "10",
           "kube-scheduler podMaxBackoffSeconds 10 (KubeSchedulerConfiguration, v1.19+)"),
        _d(SCHEDULER, "assumed-pod-ttl", "0",
           "pkg/scheduler: durationToExpireAssumedPod 0, never (kubernetes#106361; 15 min in v1.23)"),
        Switch(name="no-out-of-service-gc", on=False, source="KEP-2268 GA in v1.28"),
        Feature(name="NodeOutOfServiceVolumeDetach", enabled=True, source="KEP-2268 GA v1.28",
                emulation="switch no-out-of-service-gc off"),
    )),
    Release(name="current", summary="today's defaults: every fix in, 50 s node-monitor grace period", changes=(
        _d(CONTROLLER_MANAGER, "node-monitor-grace-period", "50s",
           "kubernetes#126287 (v1.32): --node-monitor-grace-period 50s"),
        _d(CONTROLLER_MANAGER, "pod-eviction-timeout", "5m",
           "unused since taint-based eviction; the flag was removed by kubernetes#115840"),
    )),
)

BY_RELEASE: Final[Mapping[str, Release]] = {r.name: r for r in RELEASES}


class UnknownProfileError(ValueError):
    """A profile name not in the table."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """Everything a release sets, with the release each value comes from."""

    name: Profile
    summary: str
    defaults: tuple[tuple[Default, str], ...]
    switches: tuple[tuple[Switch, str], ...]
    features: tuple[tuple[Feature, str], ...]

    def bugs(self, component: str | None = None) -> frozenset[str]:
        """The switches on in this release (of one component, or all)."""
        return frozenset(s.name for s, _ in self.switches
                         if s.on and (component is None or BY_NAME[s.name].component == component))

    def flag_defaults(self, component: str) -> dict[str, str]:
        """`{flag: value}` of one component (flag names without dashes)."""
        return {d.flag: d.value for d, _ in self.defaults if d.component == component}


def resolve(profile: str) -> Resolved:
    """The whole set a release implies: every earlier release's changes, then its own."""
    if profile not in BY_RELEASE:
        raise UnknownProfileError(f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}")
    defaults: dict[tuple[str, str], tuple[Default, str]] = {}
    switches: dict[str, tuple[Switch, str]] = {}
    features: dict[str, tuple[Feature, str]] = {}
    chosen = BY_RELEASE[profile]
    for rel in RELEASES:
        for c in rel.changes:
            if isinstance(c, Default):
                defaults[(c.component, c.flag)] = (c, rel.name)
            elif isinstance(c, Switch):
                switches[c.name] = (c, rel.name)
            else:
                features[c.name] = (c, rel.name)
        if rel is chosen:
            break
    return Resolved(name=chosen.name, summary=chosen.summary, defaults=tuple(defaults.values()),
                    switches=tuple(switches.values()), features=tuple(features.values()))


def from_environment(environ: Mapping[str, str] | None = None) -> str:
    """The profile `KUBEMESH_PROFILE` names (default `current`)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR) or DEFAULT_PROFILE


def apply_defaults(parser: argparse.ArgumentParser, *, component: str, profile: str,
                   strict: bool = True) -> Resolved:
    """Make a release's defaults the defaults of `parser`'s flags (explicit flags still win).

    Values are given as on the command line; argparse converts a string default with the flag's
    `type`, exactly as it converts the flag. Raises `UnknownProfileError`, and (`strict`)
    `LookupError` when the release names a flag the parser does not have (the table and the
    component disagree; tests/services/test_profiles.py checks every component's parser). Not
    strict, such a flag is skipped: a stand-in component with a parser of its own (a test's, a
    `MeshSpec.modules` replacement) takes the switches of the release, not its flags.
    """
    release = resolve(profile)
    by_option = {opt: action for action in parser._actions for opt in action.option_strings}
    for flag, value in release.flag_defaults(component).items():
        action = by_option.get(f"--{flag}")
        if action is None:
            if not strict:
                continue
            raise LookupError(f"profile {profile} sets --{flag}, which {component} does not have")
        parser.set_defaults(**{action.dest: value})
    return release


def add_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The `--profile` flag (default `$KUBEMESH_PROFILE`, else `current`)."""
    parser.add_argument("--profile", choices=PROFILES, default=from_environment(),
                        help="Kubernetes release whose defaults and bug switches to emulate "
                             f"(`kubemesh profiles` lists them; env {ENV_VAR}; default current)")
