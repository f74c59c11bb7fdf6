"""Cron schedules as the CronJob controller reads them, evaluated on cluster-clock seconds.

The grammar is the one kube-controller-manager accepts (its cron library's standard parser):

* five fields, `minute hour day-of-month month day-of-week`, each a comma-separated list of
  `*` (or `?`), `N`, `N-M`, each optionally followed by `/step`; `N/step` means `N-max/step`;
  months `jan`..`dec` and weekdays `sun`..`sat` by name (any case); weekdays are 0-6 (Sunday 0);
* the macros `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`),
  `@hourly`, and `@every <duration>` (Go durations such as `90s`, `1h30m`);
* a leading `CRON_TZ=<zone>` or `TZ=<zone>` names the IANA time zone the fields are read in;
  otherwise `time_zone` (the CronJob's `spec.timeZone`), otherwise UTC.

Day matching follows that library: when the day-of-month or the day-of-week field is an
unrestricted `*` (a step above 1 makes it restricted), both must match; when both are
restricted, either may match (`0 0 1 * mon` fires on the 1st and on every Monday).

`Schedule.next_after(t)` is the first activation strictly after `t` (seconds since the epoch,
the cluster clock's): activations of a five-field schedule fall on whole minutes of the zone's
wall clock. A wall time skipped by a daylight-saving jump fires at the instant the old offset
gives it (so it is not lost); a wall time that occurs twice fires once, at its first
occurrence. A schedule that can never fire (`0 0 30 2 *`) yields None after five years.
Nothing here reads a clock: the caller passes the time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["CronSchedule", "EverySchedule", "Schedule", "ScheduleError", "load_zone", "parse_schedule"]


class ScheduleError(ValueError):
    """A schedule that does not parse, or names an unknown time zone."""


_MONTHS: Final = {name: i + 1 for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_WEEKDAYS: Final = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}

_MACROS: Final = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

_SEARCH_YEARS: Final = 5
"""How far ahead `next_after` looks before deciding that a schedule never fires."""

_GO_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def load_zone(name: str) -> tzinfo:
    """The IANA time zone `name` (`UTC` and `Local` are UTC: the controller's local zone).

    Raises:
        ScheduleError: the zone is unknown.
    """
    if name in ("", "UTC", "Local"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone {name}") from exc


@dataclass(frozen=True, slots=True)
class _Field:
    values: frozenset[int]
    star: bool
    """An unrestricted `*` (or `*/1`): matters for the day-of-month / day-of-week rule."""


def _number(text: str, names: dict[str, int] | None) -> int:
    lowered = text.lower()
    if names is not None and lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise ScheduleError(f"failed to parse int from {text}")
    return int(text)


def _parse_field(text: str, lo: int, hi: int, names: dict[str, int] | None) -> _Field:
    values: set[int] = set()
    star = False
    for expr in text.split(","):
        if not expr:
            raise ScheduleError(f"empty expression in {text!r}")
        range_part, slash, step_part = expr.partition("/")
        bounds = range_part.split("-")
        expr_star = False
        if bounds[0] in ("*", "?"):
            if len(bounds) != 1:
                raise ScheduleError(f"invalid range {range_part!r}")
            start, end, expr_star = lo, hi, True
        elif len(bounds) == 1:
            start = end = _number(bounds[0], names)
        elif len(bounds) == 2:
            start, end = _number(bounds[0], names), _number(bounds[1], names)
        else:
            raise ScheduleError(f"too many hyphens: {range_part}")
        step = 1
        if slash:
            if not step_part.isdigit():
                raise ScheduleError(f"failed to parse int from {step_part}")
            step = int(step_part)
            if step == 0:
                raise ScheduleError(f"step of range should be a positive number: {expr}")
            if len(bounds) == 1 and not expr_star:
                end = hi  # `N/step` means `N-max/step`
            if step > 1:
                expr_star = False
        if start < lo:
            raise ScheduleError(f"beginning of range ({start}) below minimum ({lo}): {expr}")
        if end > hi:
            raise ScheduleError(f"end of range ({end}) above maximum ({hi}): {expr}")
        if start > end:
            raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
        values.update(range(start, end + 1, step))
        star = star or expr_star
    return _Field(frozenset(values), star)


def _parse_go_duration(text: str) -> float:
    pos, total = 0, 0.0
    if not text:
        raise ScheduleError("empty duration")
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ScheduleError(f"failed to parse duration {text}")
    return total


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A five-field schedule in one time zone."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_star: bool
    weekdays_star: bool
    zone: tzinfo

    def _day_matches(self, d: datetime) -> bool:
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.days_star or self.weekdays_star:
            return dom and dow
        return dom or dow

    def next_after(self, t: float) -> float | None:
        """The first activation strictly after `t` (epoch seconds), or None if there is none."""
        # Whole minutes of the zone's wall clock, searched field by field (month, day, hour,
        # minute) on naive wall times, then mapped back to an instant.
        first = math.floor(t) + 1
        wall = datetime.fromtimestamp(first, self.zone).replace(tzinfo=None)
        if wall.second or wall.microsecond:
            wall = wall.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = wall.year + _SEARCH_YEARS
        while wall.year <= limit:
            if wall.month not in self.months:
                wall = (wall.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_matches(wall):
                wall = wall.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if wall.hour not in self.hours:
                wall = wall.replace(minute=0) + timedelta(hours=1)
                continue
            if wall.minute not in self.minutes:
                wall += timedelta(minutes=1)
                continue
            instant = wall.replace(tzinfo=self.zone).timestamp()
            if instant > t:
                return instant
            wall += timedelta(minutes=1)  # the second occurrence of a repeated wall time
        return None


@dataclass(frozen=True, slots=True)
class EverySchedule:
    """`@every <duration>`: a constant period after the previous activation."""

    period: float
    zone: tzinfo = UTC

    def next_after(self, t: float) -> float | None:
        """`t` rounded down to the second, plus the period."""
        return math.floor(t) + self.period


Schedule = CronSchedule | EverySchedule


def parse_schedule(text: str, *, time_zone: str | None = None) -> Schedule:
    """Parse a CronJob schedule; `time_zone` applies unless the text starts with `CRON_TZ=`/`TZ=`.

    Raises:
        ScheduleError: the text does not parse or names an unknown zone.
    """
    spec = text.strip()
    zone_name = time_zone or ""
    if spec.startswith(("CRON_TZ=", "TZ=")):
        head, _, spec = spec.partition(" ")
        zone_name = head.split("=", 1)[1]
        spec = spec.strip()
    zone = load_zone(zone_name)
    if not spec:
        raise ScheduleError("empty spec string")
    if spec.startswith("@"):
        if spec.startswith("@every"):
            period = _parse_go_duration(spec[len("@every"):].strip())
            if period < 1:
                period = 1.0  # the library's floor
            return EverySchedule(period=float(math.floor(period)), zone=zone)
        macro = _MACROS.get(spec.lower())
        if macro is None:
            raise ScheduleError(f"unrecognized descriptor: {spec}")
        spec = macro
    fields = spec.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: {spec}")
    minute = _parse_field(fields[0], 0, 59, None)
    hour = _parse_field(fields[1], 0, 23, None)
    dom = _parse_field(fields[2], 1, 31, None)
    month = _parse_field(fields[3], 1, 12, _MONTHS)
    dow = _parse_field(fields[4], 0, 6, _WEEKDAYS)
    return CronSchedule(minutes=minute.values, hours=hour.values, days=dom.values, months=month.values,
                        weekdays=dow.values, days_star=dom.star, weekdays_star=dow.star, zone=zone)
