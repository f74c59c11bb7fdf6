"""The JSON forms Go gives the apimachinery time types, and their inverses.

* `metav1.Time` is RFC 3339 in UTC to the second (`2024-05-01T10:00:00Z`); the zero time is
  `null`. Its protobuf form keeps seconds only (nanoseconds are dropped on decode).
* `metav1.MicroTime` is RFC 3339 in UTC with exactly six fractional digits
  (`2024-05-01T10:00:00.123456Z`); the zero time is `null`. Nanoseconds are truncated.
* `metav1.Duration` is Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`, `-2µs`.

Years outside 1..9999 are refused (`ValueError`): Go would print them, but no JSON client
can send them back, and Python's datetime cannot hold them.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Final

GO_ZERO_SECONDS: Final = -62135596800
"""Unix seconds of Go's zero time, 0001-01-01T00:00:00Z (`time.Time{}`), which JSON writes as null."""
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MAX_SECONDS: Final = 253402300799  # 9999-12-31T23:59:59Z

_NS: Final = 1
_US: Final = 1_000
_MS: Final = 1_000_000
_S: Final = 1_000_000_000
_M: Final = 60 * _S
_H: Final = 60 * _M
_UNITS: Final = {"ns": _NS, "us": _US, "µs": _US, "μs": _US, "ms": _MS, "s": _S, "m": _M, "h": _H}
_PART: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]+)")


def _utc(seconds: int) -> dt.datetime:
    if not GO_ZERO_SECONDS <= seconds <= _MAX_SECONDS:
        raise ValueError(f"time {seconds}s since the epoch is outside the years 1 to 9999")
    return _EPOCH + dt.timedelta(seconds=seconds)


def _stamp(t: dt.datetime) -> str:
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"


def format_time(seconds: int) -> str | None:
    """A `metav1.Time` at `seconds` since the epoch, as JSON (None for Go's zero time)."""
    if seconds == GO_ZERO_SECONDS:
        return None
    return _stamp(_utc(seconds)) + "Z"


def format_micro_time(seconds: int, nanos: int) -> str | None:
    """A `metav1.MicroTime` (nanoseconds truncated to microseconds toward zero, then normalised)."""
    truncated = nanos - (abs(nanos) % _US) * (1 if nanos >= 0 else -1)  # toward zero, as Go's Truncate
    total = seconds * _S + truncated
    secs, frac = divmod(total, _S)
    if secs == GO_ZERO_SECONDS and frac == 0:
        return None
    return f"{_stamp(_utc(secs))}.{frac // _US:06d}Z"


def parse_time(text: str) -> tuple[int, int]:
    """(seconds, nanoseconds) since the epoch of an RFC 3339 time (for encoders and tests)."""
    t = dt.datetime.fromisoformat(text.replace("z", "Z"))
    if t.tzinfo is None:
        raise ValueError(f"time {text!r} has no offset")
    delta = t - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    return seconds, delta.microseconds * _US


def format_duration(nanos: int) -> str:
    """Go's `time.Duration(nanos).String()`."""
    neg = nanos < 0
    u = -nanos if neg else nanos
    if u < _S:
        if u == 0:
            return "0s"
        if u < _US:
            text = f"{u}ns"
        elif u < _MS:
            text = _fraction(u, 3) + "µs"
        else:
            text = _fraction(u, 6) + "ms"
    else:
        secs, frac = divmod(u, _S)
        text = _fraction(frac, 9, whole=secs % 60) + "s"
        minutes = secs // 60
        if minutes:
            text = f"{minutes % 60}m{text}"
            hours = minutes // 60
            if hours:
                text = f"{hours}h{text}"
    return "-" + text if neg else text


def _fraction(value: int, precision: int, *, whole: int | None = None) -> str:
    """`whole.fraction` of value / 10**precision (or of `whole` + value / 10**precision), trailing zeros dropped."""
    scale = 10 ** precision
    if whole is None:
        whole, value = divmod(value, scale)
    digits = f"{value:0{precision}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def parse_duration(text: str) -> int:
    """Nanoseconds of a Go duration string (`time.ParseDuration`; for encoders and tests)."""
    s = text
    neg = s.startswith("-")
    if s[:1] in "+-":
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None or m.group(1) in ("", ".") or m.group(2) not in _UNITS:
            raise ValueError(f"invalid duration {text!r}")
        number, unit = m.group(1), _UNITS[m.group(2)]
        whole, _, frac = number.partition(".")
        total += int(whole or "0") * unit
        if frac:
            total += int(frac) * unit // 10 ** len(frac)
        pos = m.end()
    return -total if neg else total
