"""Zones, their disruption states and their rate-limited eviction queues (pure, on the clock).

The node-lifecycle controller groups nodes by zone (`topology.kubernetes.io/zone`, plus the
region, as upstream's zone key) and keeps, per zone:

* a state computed from the Ready conditions of the zone's nodes (`compute_zone_state`):
  FullDisruption when no node is ready and at least one is not; PartialDisruption when more than
  2 nodes are not ready *and* their share is at least `--unhealthy-zone-threshold` (0.55);
  Normal otherwise; Initial for a zone seen for the first time;
* one `RateLimitedTimedQueue` of nodes to taint (or, on the legacy path, to evict), drained at
  a rate that depends on the state (`zone_qps`): Normal and FullDisruption use
  `--node-eviction-rate` (0.1/s); PartialDisruption uses `--secondary-node-eviction-rate`
  (0.01/s) if the zone has more than `--large-cluster-size-threshold` (50) nodes, else 0 (stop).

`Disruption.update` is upstream's `handleDisruption`: when *every* zone is fully disrupted the
controller assumes the problem is its own connectivity ("master disruption mode"): it stops all
evictions and removes the NoExecute taints; when leaving that mode it restarts every node's
grace clock. Everything here is synchronous and reads time only from the injected clock, so the
boundaries are unit-tested exactly.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import Obj, labels_of
from kubemesh.services.model.wellknown import LABEL_REGION, LABEL_ZONE

ZONE_LABEL = LABEL_ZONE
REGION_LABEL = LABEL_REGION
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
LEGACY_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"


class ZoneState(enum.StrEnum):
    """Upstream's zoneState values."""

    INITIAL = "Initial"
    NORMAL = "Normal"
    PARTIAL_DISRUPTION = "PartialDisruption"
    FULL_DISRUPTION = "FullDisruption"


def zone_key(node: Obj) -> str:
    """The zone key of a node: region, NUL separator, zone (as upstream); "" when unlabelled."""
    labels = labels_of(node)
    region = labels.get(REGION_LABEL) or labels.get(LEGACY_REGION_LABEL) or ""
    zone = labels.get(ZONE_LABEL) or labels.get(LEGACY_ZONE_LABEL) or ""
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def zone_display(key: str) -> str:
    """A readable form of a zone key (`region/zone`, or `zone`)."""
    region, _, zone = key.partition(":\x00:")
    return f"{region}/{zone}" if region else zone


def excluded_from_disruption(node: Obj) -> bool:
    """Nodes labelled `node.kubernetes.io/exclude-disruption` do not count in zone states."""
    return EXCLUDE_DISRUPTION_LABEL in labels_of(node)


def compute_zone_state(ready_statuses: Iterable[str | None], *, unhealthy_threshold: float) -> tuple[int, ZoneState]:
    """(not-ready count, state) from the zone's Ready condition statuses ("True", "False", "Unknown", None).

    A node with no Ready condition counts as not ready, as upstream. The share is compared
    with `>=`, so 55 % of not-ready nodes is already PartialDisruption at the default 0.55, and
    upstream compares in float32: we round the same way so 0.55 boundaries agree.
    """
    ready = 0
    not_ready = 0
    for status in ready_statuses:
        if status == "True":
            ready += 1
        else:
            not_ready += 1
    if ready == 0 and not_ready > 0:
        return not_ready, ZoneState.FULL_DISRUPTION
    if not_ready > 2 and _f32(not_ready / (not_ready + ready)) >= _f32(unhealthy_threshold):
        return not_ready, ZoneState.PARTIAL_DISRUPTION
    return not_ready, ZoneState.NORMAL


def _f32(x: float) -> float:
    """Round to float32, as upstream's comparison of float32 shares does."""
    out: float = struct.unpack("f", struct.pack("f", x))[0]
    return out


def zone_qps(state: ZoneState, zone_size: int, *, healthy_qps: float, secondary_qps: float,
             large_cluster_threshold: int) -> float:
    """The eviction (tainting) rate of a zone in `state` (upstream `setLimiterInZone`)."""
    if state == ZoneState.PARTIAL_DISRUPTION:
        return secondary_qps if zone_size > large_cluster_threshold else 0.0
    return healthy_qps


class TokenBucket:
    """A token bucket on the cluster clock; QPS 0 rejects everything (upstream's never-limiter).

    Starts full (`burst` tokens), as client-go's token bucket does.
    """

    def __init__(self, *, clock: Clock, qps: float, burst: int = 1) -> None:
        self._clock = clock
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst) if qps > 0 else 0.0
        self._last = clock.now()

    def _refill(self) -> None:
        now = self._clock.now()
        if self.qps > 0 and now > self._last:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = max(self._last, now)

    def try_accept(self) -> bool:
        """Take a token if one is available."""
        if self.qps <= 0:
            return False
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    @property
    def tokens(self) -> float:
        """Tokens available now (for the debug endpoint)."""
        self._refill()
        return self._tokens

    def next_token_at(self) -> float | None:
        """Cluster time at which a token is (or was) available; None for a stopped bucket."""
        if self.qps <= 0:
            return None
        self._refill()
        if self._tokens >= 1.0:
            return self._last
        return self._last + (1.0 - self._tokens) / self.qps


@dataclass(slots=True)
class TimedValue:
    """A queued node: name, uid, when it was added and when it may be processed."""

    value: str
    uid: str
    added_at: float
    process_at: float


ActionFn = Callable[[TimedValue], tuple[bool, float]]
"""Process one value; return (done, retry_after). Not done → retried after `retry_after` + 1 s."""


class RateLimitedTimedQueue:
    """Upstream's RateLimitedTimedQueue: a unique queue drained through a swappable token bucket.

    Set semantics as upstream's UniqueQueue: `add` is a no-op while the value is remembered, a
    processed value stays remembered (so a node is tainted once per outage) until `remove`
    forgets it (the node became healthy again or was deleted).
    """

    def __init__(self, *, clock: Clock, qps: float, burst: int = 1) -> None:
        self._clock = clock
        self._queue: list[TimedValue] = []
        self._seen: set[str] = set()
        self.limiter = TokenBucket(clock=clock, qps=qps, burst=burst)

    def add(self, value: str, uid: str) -> bool:
        """Queue `value` unless it is already known; True if it was added."""
        if value in self._seen:
            return False
        now = self._clock.now()
        self._seen.add(value)
        self._queue.append(TimedValue(value=value, uid=uid, added_at=now, process_at=now))
        self._queue.sort(key=lambda v: v.process_at)
        return True

    def remove(self, value: str) -> bool:
        """Forget `value` entirely; True if it was known."""
        known = value in self._seen
        self._seen.discard(value)
        self._queue = [v for v in self._queue if v.value != value]
        return known

    def clear(self) -> None:
        """Forget everything."""
        self._queue.clear()
        self._seen.clear()

    def try_process(self, fn: ActionFn) -> list[str]:
        """Process due values while the limiter grants tokens; return the values done.

        As upstream, a token is spent before looking at the head, even if the head turns out
        not to be due yet.
        """
        done: list[str] = []
        while self._queue:
            if not self.limiter.try_accept():
                break
            now = self._clock.now()
            head = self._queue[0]
            if now < head.process_at:
                break
            ok, wait = fn(head)
            if ok:
                self._queue.pop(0)
                done.append(head.value)
            else:
                head.process_at = now + wait + 1.0
                self._queue.sort(key=lambda v: v.process_at)
        return done

    async def atry_process(self, fn: Callable[[TimedValue], Awaitable[tuple[bool, float]]]) -> list[str]:
        """`try_process` for an asynchronous action (an API write).

        The queue may change while the action awaits: a monitor pass whose cache does not yet
        show the node's new taint removes and re-adds the value (a fresh entry), or a node that
        became healthy is removed. A successful action therefore drops *every* queued entry of
        its value, as upstream's `RemoveFromQueue` does by value, and leaves the remembered set
        alone (a re-added value stays remembered: the node was handled once for this outage).
        Keeping the fresh entry instead would spend a later token on a node already done, which
        shows as a doubled gap between two evictions. A failed action is retried later only if
        its own entry is still queued.
        """
        done: list[str] = []
        while self._queue:
            if not self.limiter.try_accept():
                break
            now = self._clock.now()
            head = self._queue[0]
            if now < head.process_at:
                break
            ok, wait = await fn(head)
            if ok:
                self._queue = [v for v in self._queue if v.value != head.value]
                done.append(head.value)
            elif any(v is head for v in self._queue):
                head.process_at = self._clock.now() + wait + 1.0
                self._queue.sort(key=lambda v: v.process_at)
        return done

    def next_due(self) -> float | None:
        """Earliest cluster time at which `try_process` could act (None: nothing queued, or stopped).

        The eviction loop sleeps until then instead of polling on a fixed period: with a burst
        of 1, a token that waits for the next poll is lost time, so a coarse poll (at a fast
        cluster clock, 20 ms of wall time is most of a second of cluster time) would stretch
        every gap between two evictions by half a poll period on average.
        """
        if not self._queue:
            return None
        token = self.limiter.next_token_at()
        if token is None:
            return None
        return max(token, self._queue[0].process_at)

    def swap_limiter(self, qps: float) -> None:
        """Change the rate; 0 stops processing. Mirrors upstream's SwapLimiter.

        When the old limiter had no token to give, the new one starts drained too, so swapping
        does not grant a burst.
        """
        if self.limiter.qps == qps:
            return
        old_had_token = self.limiter.try_accept()
        new = TokenBucket(clock=self._clock, qps=qps, burst=self.limiter.burst)
        if qps > 0 and not old_had_token:
            new.try_accept()
        self.limiter = new

    @property
    def qps(self) -> float:
        """The current rate."""
        return self.limiter.qps

    def items(self) -> list[TimedValue]:
        """Queued (not yet processed) values, in order."""
        return list(self._queue)

    def known(self) -> set[str]:
        """Everything remembered: queued or processed and not yet removed."""
        return set(self._seen)

    def __len__(self) -> int:
        return len(self._queue)


TRANSITIONS_KEPT = 32


@dataclass(frozen=True, slots=True)
class DisruptionResult:
    """What `Disruption.update` decided."""

    entered_master_disruption: bool = False
    exited_master_disruption: bool = False
    changed: Mapping[str, ZoneState] = field(default_factory=dict)


class Disruption:
    """Zone states and their queues: upstream's zoneStates + zoneNoExecuteTainter + handleDisruption."""

    def __init__(self, *, clock: Clock, healthy_qps: float, secondary_qps: float,
                 large_cluster_threshold: int, unhealthy_threshold: float) -> None:
        self._clock = clock
        self.healthy_qps = healthy_qps
        self.secondary_qps = secondary_qps
        self.large_cluster_threshold = large_cluster_threshold
        self.unhealthy_threshold = unhealthy_threshold
        self.states: dict[str, ZoneState] = {}
        self.queues: dict[str, RateLimitedTimedQueue] = {}
        self.sizes: dict[str, int] = {}
        self.not_ready: dict[str, int] = {}
        self.since: dict[str, float] = {}
        """Cluster time at which each zone entered its current state (for the debug endpoint)."""
        self.transitions: dict[str, deque[tuple[str, float]]] = {}
        """The last `TRANSITIONS_KEPT` (state, cluster time) changes of each zone (for the debug endpoint)."""
        self.master_disruption = False
        self.master_disruption_since: float | None = None

    def _set_state(self, zone: str, state: ZoneState) -> None:
        if self.states.get(zone) != state:
            now = self._clock.now()
            self.since[zone] = now
            self.transitions.setdefault(zone, deque(maxlen=TRANSITIONS_KEPT)).append((str(state), now))
        self.states[zone] = state

    def ensure_zone(self, zone: str) -> bool:
        """Register a zone (state Initial, queue at the healthy rate); True if it is new."""
        if zone in self.queues:
            return False
        self._set_state(zone, ZoneState.INITIAL)
        self.queues[zone] = RateLimitedTimedQueue(clock=self._clock, qps=self.healthy_qps)
        return True

    def queue(self, zone: str) -> RateLimitedTimedQueue:
        """The zone's queue (the zone is registered on first use)."""
        self.ensure_zone(zone)
        return self.queues[zone]

    def _qps(self, zone: str, size: int, state: ZoneState) -> float:
        return zone_qps(state, size, healthy_qps=self.healthy_qps, secondary_qps=self.secondary_qps,
                        large_cluster_threshold=self.large_cluster_threshold)

    def update(self, zone_conditions: Mapping[str, list[str | None]]) -> DisruptionResult:
        """Recompute every zone's state from its nodes' Ready statuses and swap the limiters.

        The caller performs the side effects of entering master disruption mode (remove the
        NoExecute taints of every node) and of leaving it (reset every node's probe and
        transition timestamps to now); the queues' rates are set here.
        """
        new_states: dict[str, ZoneState] = {}
        all_full_now = True
        for zone, statuses in zone_conditions.items():
            not_ready, state = compute_zone_state(statuses, unhealthy_threshold=self.unhealthy_threshold)
            self.sizes[zone] = len(statuses)
            self.not_ready[zone] = not_ready
            new_states[zone] = state
            if state != ZoneState.FULL_DISRUPTION:
                all_full_now = False
            self.ensure_zone(zone)
        all_full_before = True
        for zone in list(self.states):
            if zone not in zone_conditions:
                # A zone with no nodes left: forget its state (its queue stays, as upstream).
                del self.states[zone]
                self.since.pop(zone, None)
                continue
            if self.states[zone] != ZoneState.FULL_DISRUPTION:
                all_full_before = False
        if all_full_now and all_full_before:
            return DisruptionResult()
        if all_full_now:
            # Every zone looks dead: more likely the controller is cut off than the whole
            # cluster down. Stop all evictions (upstream "master disruption mode").
            for zone in self.states:
                self.queues[zone].swap_limiter(0.0)
                self._set_state(zone, ZoneState.FULL_DISRUPTION)
            self.master_disruption = True
            self.master_disruption_since = self._clock.now()
            return DisruptionResult(entered_master_disruption=True,
                                    changed={z: ZoneState.FULL_DISRUPTION for z in self.states})
        if all_full_before:
            # Leaving master disruption mode: restore every zone's rate for its new state.
            changed: dict[str, ZoneState] = {}
            for zone in self.states:
                state = new_states[zone]
                self.queues[zone].swap_limiter(self._qps(zone, len(zone_conditions[zone]), state))
                self._set_state(zone, state)
                changed[zone] = state
            self.master_disruption = False
            self.master_disruption_since = None
            return DisruptionResult(exited_master_disruption=True, changed=changed)
        changed = {}
        for zone, old in self.states.items():
            state = new_states[zone]
            if old == state:
                continue
            self.queues[zone].swap_limiter(self._qps(zone, len(zone_conditions[zone]), state))
            self._set_state(zone, state)
            changed[zone] = state
        self.master_disruption = False
        self.master_disruption_since = None
        return DisruptionResult(changed=changed)

    def snapshot(self) -> dict[str, object]:
        """States, sizes, rates and queue contents, for the debug endpoint."""
        zones: dict[str, object] = {}
        for zone, q in self.queues.items():
            zones[zone_display(zone) or "<none>"] = {
                "state": str(self.states.get(zone, ZoneState.INITIAL)),
                "stateSince": self.since.get(zone),
                "transitions": [{"state": st, "at": at} for st, at in self.transitions.get(zone, ())],
                "size": self.sizes.get(zone, 0),
                "notReady": self.not_ready.get(zone, 0),
                "qps": q.qps,
                "tokens": round(q.limiter.tokens, 3),
                "queue": [{"node": v.value, "addedAt": v.added_at, "processAt": v.process_at} for v in q.items()],
                "processed": sorted(q.known() - {v.value for v in q.items()}),
            }
        return {"masterDisruption": self.master_disruption, "masterDisruptionSince": self.master_disruption_since,
                "zones": zones}
