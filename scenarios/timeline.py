"""The timeline picture of a run: a self-contained HTML page with one inline SVG, no external assets.

Components are lanes (one per instance: the scenario's own client, the scheduler, the
controller-manager, each kubelet process), time runs left to right in cluster seconds since the
scenario started. Each lane has one row per resource, so marks of different objects do not hide
each other. Marks:

* a square: the lane's component wrote the object (create, update, patch, delete);
* a circle: the apiserver delivered an event of the object to the lane's component (watch);
* a diamond: the component recorded a Warning Event about one of the objects (for the scheduler,
  a failed scheduling attempt), labelled with its reason;
* a triangle, in a lane of its webhook configuration: an admission webhook call about an object
  (green allowed, blue patched, red denied or failed, orange failed but ignored by its policy);
* colours: ADDED green, MODIFIED blue, DELETED red.

Only the objects the scenario focused on are drawn (all pod, node and workload writes and the
ADDED/DELETED deliveries when it named none). Fault windows (node power-offs, chaos faults from
the history's `fault` records) are shaded; key moments are vertical lines with their label.
Every mark has a tooltip, and a table of the drawn records follows the picture.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.scenarios.framework import Moment, Window

Record = Mapping[str, Any]

WIDTH: Final = 1340
LEFT: Final = 190
RIGHT: Final = 20
TOP: Final = 70
ROW_H: Final = 13
LANE_GAP: Final = 8
COLORS: Final = {"ADDED": "#2a9d8f", "MODIFIED": "#457b9d", "DELETED": "#d62828"}
WARN: Final = "#f77f00"
WEBHOOK_COLORS: Final = {"allowed": "#2a9d8f", "patched": "#457b9d", "denied": "#d62828", "failed": "#d62828",
                         "ignored": "#f77f00"}
WINDOW_COLORS: Final = ("#f4a3a3", "#a3c4f4", "#b8e0a8", "#f4d9a3", "#d3b3f0")
DEFAULT_RESOURCES: Final = frozenset({"pods", "nodes", "deployments", "replicasets"})
LANE_ORDER: Final = ("scenario", "scheduler", "controller_manager", "kubelet")
KIND_TO_RESOURCE: Final = {"Pod": "pods", "Node": "nodes", "Deployment": "deployments", "ReplicaSet": "replicasets",
                           "DaemonSet": "daemonsets"}


@dataclass(frozen=True, kw_only=True)
class Mark:
    """One drawn record."""

    time: float
    lane: str
    row: str
    shape: str
    color: str
    label: str
    tip: str


def _lane_of(rec: Record) -> str:
    inst = str(rec.get("instance") or rec.get("component") or "?")
    return inst


def _lane_sort_key(lane: str, components: Mapping[str, str]) -> tuple[int, str]:
    comp = components.get(lane, lane)
    for i, c in enumerate(LANE_ORDER):
        if comp == c or lane.startswith(c):
            return (i, lane)
    return (len(LANE_ORDER), lane)


def _short(key: str) -> str:
    return key.split("/", 1)[1] if key.startswith("default/") else key


def select_marks(history: Iterable[Record], *, focus: set[tuple[str, str]], events: Mapping[str, Mapping[str, Any]],
                 t_from: float, t_to: float | None) -> list[Mark]:
    """The records worth drawing, as marks (see the module docstring)."""
    marks: list[Mark] = []
    focused_keys = {k for _, k in focus}
    for rec in history:
        t = float(rec.get("time") or 0.0)
        if t < t_from or (t_to is not None and t > t_to):
            continue
        typ, res, key, ev = rec.get("type"), str(rec.get("resource") or ""), str(rec.get("key") or ""), \
            str(rec.get("event") or "")
        if typ == "webhook":  # one admission webhook call: a lane per webhook configuration
            if focus and (res.split("/", 1)[0], key) not in focus:
                continue
            outcome = str(rec.get("outcome") or "")
            marks.append(Mark(time=t, lane=f"webhook {rec.get('configuration')}", row=res, shape="triangle",
                              color=WEBHOOK_COLORS.get(outcome, "#555"),
                              label="" if outcome in ("allowed", "patched") else outcome,
                              tip=f"t={t - t_from:.2f}s {rec.get('webhook')} {outcome} {rec.get('operation')} "
                                  f"{res} {key} in {float(rec.get('latency') or 0.0) * 1e3:.1f} ms"
                                  + (f": {rec.get('error')}" if rec.get("error") else "")))
            continue
        if typ not in ("write", "delivery"):
            continue
        if res == "events":
            if typ != "write":
                continue
            obj = events.get(key)
            if obj is None or obj.get("type") != "Warning":
                continue
            inv = obj.get("involvedObject") or {}
            inv_res = KIND_TO_RESOURCE.get(str(inv.get("kind")), "")
            inv_key = f"{inv.get('namespace')}/{inv.get('name')}" if inv.get("namespace") else str(inv.get("name"))
            if focus and (inv_res, inv_key) not in focus and inv_key not in focused_keys:
                continue
            if not focus and inv_res not in DEFAULT_RESOURCES:
                continue
            reason = str(obj.get("reason") or "Warning")
            msg = str(obj.get("message") or "")
            marks.append(Mark(time=t, lane=_lane_of(rec), row="events", shape="diamond", color=WARN,
                              label=reason,
                              tip=f"t={t - t_from:.2f}s {_lane_of(rec)} recorded {reason} about {_short(inv_key)}: "
                                  f"{msg} (Event {ev}, rv {rec.get('rv')})"))
            continue
        if focus:
            if (res, key) not in focus:
                continue
        elif res not in DEFAULT_RESOURCES or (typ == "delivery" and ev == "MODIFIED"):
            continue
        color = COLORS.get(ev, "#555")
        if typ == "write":
            tip = f"t={t - t_from:.2f}s {_lane_of(rec)} wrote {res} {key}: {ev} (rv {rec.get('rv')})"
            shape = "square"
        else:
            tip = f"t={t - t_from:.2f}s {res} {ev} {key} (rv {rec.get('rv')}) delivered to {_lane_of(rec)}"
            shape = "circle"
        label = f"{ev[:3]} {_short(key)}" if ev == "DELETED" else ""
        marks.append(Mark(time=t, lane=_lane_of(rec), row=res, shape=shape, color=color, label=label, tip=tip))
    return marks


def fault_windows(history: Iterable[Record], *, t_end: float | None) -> list[Window]:
    """Windows of chaos faults from the history's `fault` records (inject .. recover/delete)."""
    open_: dict[str, Window] = {}
    out: list[Window] = []
    for rec in history:
        if rec.get("type") != "fault":
            continue
        name = str(rec.get("fault") or "?")
        op = rec.get("op")
        t = float(rec.get("time") or 0.0)
        if op in ("inject", "create") and name not in open_:
            w = Window(start=t, label=f"fault {name}")
            open_[name] = w
            out.append(w)
        elif op in ("recover", "delete") and name in open_:
            open_.pop(name).end = t
    for w in open_.values():
        w.end = t_end
    return out


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def render(*, history: Sequence[Record], title: str, verdict: str, t0: float, t_end: float | None = None,
           moments: Sequence[Moment] = (), windows: Sequence[Window] = (), focus: set[tuple[str, str]] | None = None,
           events: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The whole HTML page (see the module docstring)."""
    focus = focus or set()
    events = events or {}
    moments = sorted(moments, key=lambda m: m.time)
    marks = select_marks(history, focus=focus, events=events, t_from=t0, t_to=t_end)
    all_windows = list(windows) + fault_windows(history, t_end=t_end)
    t_last = max([t_end or t0] + [m.time for m in marks] + [m.time for m in moments])
    span = max(t_last - t0, 1.0) * 1.04
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    components = {_lane_of(r): str(r.get("component") or "") for r in history if r.get("type") in ("write", "delivery")}
    lanes = sorted({m.lane for m in marks} | {m.lane for m in moments if m.lane and not m.lane.startswith("node/")},
                   key=lambda lane: _lane_sort_key(lane, components))
    rows_of: dict[str, list[str]] = {}
    for lane in lanes:
        rows = sorted({m.row for m in marks if m.lane == lane}, key=lambda r: (r == "events", r))
        rows_of[lane] = rows or ["-"]
    y_of: dict[tuple[str, str], float] = {}
    lane_box: dict[str, tuple[float, float]] = {}
    y = float(TOP + 18 * max(1, _label_levels(moments, x)))
    for lane in lanes:
        start = y
        for row in rows_of[lane]:
            y_of[(lane, row)] = y + ROW_H / 2
            y += ROW_H
        lane_box[lane] = (start, y)
        y += LANE_GAP
    height = int(y + 60)
    parts: list[str] = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
                        f'font-family="sans-serif" font-size="11">']
    parts.append(f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>')
    plot_top = TOP - 10
    # Fault windows (behind everything).
    for i, w in enumerate(all_windows):
        x1, x2 = x(max(w.start, t0)), x(w.end if w.end is not None else t_last)
        color = WINDOW_COLORS[i % len(WINDOW_COLORS)]
        parts.append(f'<rect x="{_fmt(x1)}" y="{plot_top}" width="{_fmt(max(x2 - x1, 2))}" '
                     f'height="{_fmt(y - plot_top)}" fill="{color}" fill-opacity="0.35">'
                     f'<title>{html.escape(w.label)}: t={w.start - t0:.1f}s .. '
                     f'{"end" if w.end is None else f"{w.end - t0:.1f}s"}</title></rect>')
        parts.append(f'<text x="{_fmt(x1 + 3)}" y="{_fmt(y - 4 - 12 * (i % 3))}" fill="#8a1c1c" '
                     f'font-style="italic">{html.escape(w.label)}</text>')
    # Lanes.
    for n, lane in enumerate(lanes):
        a, b = lane_box[lane]
        if n % 2 == 0:
            parts.append(f'<rect x="{LEFT}" y="{_fmt(a)}" width="{plot_w}" height="{_fmt(b - a)}" '
                         f'fill="#000" fill-opacity="0.035"/>')
        parts.append(f'<text x="8" y="{_fmt((a + b) / 2 + 4)}" font-weight="bold">{html.escape(lane)}</text>')
        for row in rows_of[lane]:
            if row != "-":
                parts.append(f'<text x="{LEFT - 6}" y="{_fmt(y_of[(lane, row)] + 3)}" text-anchor="end" '
                             f'fill="#777" font-size="9">{html.escape(row)}</text>')
    # Axis.
    step = _nice_step(span / 12)
    tick = 0.0
    parts.append(f'<line x1="{LEFT}" y1="{_fmt(y)}" x2="{WIDTH - RIGHT}" y2="{_fmt(y)}" stroke="#333"/>')
    while tick <= span + 1e-9:
        xt = x(t0 + tick)
        parts.append(f'<line x1="{_fmt(xt)}" y1="{_fmt(y)}" x2="{_fmt(xt)}" y2="{_fmt(y + 5)}" stroke="#333"/>')
        parts.append(f'<line x1="{_fmt(xt)}" y1="{plot_top}" x2="{_fmt(xt)}" y2="{_fmt(y)}" stroke="#000" '
                     f'stroke-opacity="0.06"/>')
        parts.append(f'<text x="{_fmt(xt)}" y="{_fmt(y + 17)}" text-anchor="middle">{tick:g}s</text>')
        tick += step
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{_fmt(y + 34)}" text-anchor="middle" fill="#555">'
                 'cluster time since the scenario started</text>')
    # Key moments.
    levels = _assign_levels(moments, x)
    for m, level in zip(moments, levels, strict=True):
        xm = x(m.time)
        ly = TOP + 4 + 18 * level
        parts.append(f'<line x1="{_fmt(xm)}" y1="{ly + 3}" x2="{_fmt(xm)}" y2="{_fmt(y)}" stroke="#6a040f" '
                     f'stroke-dasharray="4 3" stroke-width="1.2"/>')
        flip = xm + _label_width(m.label) > WIDTH - RIGHT
        anchor = f'x="{_fmt(xm - 3)}" text-anchor="end"' if flip else f'x="{_fmt(xm + 3)}"'
        parts.append(f'<text {anchor} y="{ly}" fill="#6a040f" font-weight="bold">'
                     f'{html.escape(m.label)} <tspan fill="#999" font-weight="normal">t={m.time - t0:.1f}s</tspan>'
                     '</text>')
    # Marks.
    last_label: dict[tuple[str, str, str], float] = {}
    for mk in marks:
        if mk.lane not in lane_box:
            continue
        cx, cy = x(mk.time), y_of[(mk.lane, mk.row)]
        tip = f"<title>{html.escape(mk.tip)}</title>"
        if mk.shape == "square":
            parts.append(f'<rect x="{_fmt(cx - 3.5)}" y="{_fmt(cy - 3.5)}" width="7" height="7" fill="{mk.color}">'
                         f'{tip}</rect>')
        elif mk.shape == "circle":
            parts.append(f'<circle cx="{_fmt(cx)}" cy="{_fmt(cy)}" r="3.6" fill="{mk.color}" '
                         f'stroke="white" stroke-width="0.6">{tip}</circle>')
        elif mk.shape == "triangle":
            parts.append(f'<path d="M{_fmt(cx)} {_fmt(cy - 5)} L{_fmt(cx + 5)} {_fmt(cy + 4)} L{_fmt(cx - 5)} '
                         f'{_fmt(cy + 4)} Z" fill="{mk.color}">{tip}</path>')
        else:
            parts.append(f'<path d="M{_fmt(cx)} {_fmt(cy - 5)} L{_fmt(cx + 5)} {_fmt(cy)} L{_fmt(cx)} '
                         f'{_fmt(cy + 5)} L{_fmt(cx - 5)} {_fmt(cy)} Z" fill="{mk.color}">{tip}</path>')
        if mk.label:
            k = (mk.lane, mk.row, mk.label)
            if k in last_label and cx - last_label[k] < 120:
                continue
            last_label[k] = cx
            flip = cx + 6 * len(mk.label) + 8 > WIDTH - RIGHT
            anchor = f'x="{_fmt(cx - 6)}" text-anchor="end"' if flip else f'x="{_fmt(cx + 6)}"'
            parts.append(f'<text {anchor} y="{_fmt(cy + 4)}" font-size="10" fill="{mk.color}">'
                         f'{html.escape(mk.label)}</text>')
    parts.append("</svg>")
    legend = (
        '<div class="legend"><span><svg width="10" height="10"><rect width="9" height="9" fill="#555"/></svg> '
        'write by the lane\'s component</span><span><svg width="10" height="10"><circle cx="5" cy="5" r="4" '
        'fill="#555"/></svg> watch delivery to the lane\'s component</span><span><svg width="12" height="12">'
        f'<path d="M6 1 L11 6 L6 11 L1 6 Z" fill="{WARN}"/></svg> Warning Event (e.g. FailedScheduling)</span>'
        '<span><svg width="12" height="12"><path d="M6 1 L11 10 L1 10 Z" fill="#555"/></svg> admission webhook '
        "call</span>"
        + "".join(f'<span style="color:{c}">&#9632; {e}</span>' for e, c in COLORS.items())
        + '<span style="background:#f4a3a3;opacity:.7">&nbsp;fault window&nbsp;</span>'
        '<span style="color:#6a040f">&#9482; key moment</span></div>')
    rows_html = "".join(
        f"<tr><td>{mk.time - t0:.2f}</td><td>{html.escape(mk.lane)}</td><td>{html.escape(mk.tip)}</td></tr>"
        for mk in marks[:1500])
    more = f"<p>{len(marks) - 1500} more records in history.jsonl</p>" if len(marks) > 1500 else ""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.escape(title) + "</title>"
        "<style>body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 4px}"
        ".verdict{font-size:14px;margin:0 0 10px;max-width:1300px}.legend span{margin-right:18px;font-size:12px}"
        "table{border-collapse:collapse;font-size:11px;margin-top:14px}td{border-bottom:1px solid #eee;"
        "padding:1px 8px;font-family:monospace}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p class=\"verdict\">{html.escape(verdict)}</p>{legend}"
        + "".join(parts)
        + "<details><summary>Drawn records</summary><table><tr><th>t (s)</th><th>lane</th><th>what</th></tr>"
        + rows_html + "</table>" + more + "</details></body></html>\n"
    )


def _nice_step(raw: float) -> float:
    for mult in (1, 2, 5):
        for exp in range(-2, 6):
            step = mult * 10.0 ** exp
            if step >= raw:
                return float(step)
    return raw


def _label_width(label: str) -> float:
    return 6.5 * (len(label) + 9)


def _assign_levels(moments: Sequence[Moment], x: Any) -> list[int]:
    """Stack moment labels into levels so that they do not overlap.

    Labels near the right edge extend to the left of their line.
    """
    spans: list[list[tuple[float, float]]] = []
    levels: list[int] = []
    for m in moments:
        xm = x(m.time)
        width = _label_width(m.label)
        a, b = (xm - width, xm) if xm + width > WIDTH - RIGHT else (xm, xm + width)
        for lvl, taken in enumerate(spans):
            if all(b < c or a > d for c, d in taken):
                taken.append((a, b))
                levels.append(lvl)
                break
        else:
            spans.append([(a, b)])
            levels.append(len(spans) - 1)
    return levels


def _label_levels(moments: Sequence[Moment], x: Any) -> int:
    levels = _assign_levels(moments, x)
    return (max(levels) + 1) if levels else 0
