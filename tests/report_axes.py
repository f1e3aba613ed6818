"""Checks on plotly figure data shared by the report tests (unit and browser): a plot whose x
axis holds a single distinct value says nothing, and each run of a comparison gets its own colour."""

from __future__ import annotations

import math
from typing import Any


def _axis_values(trace: dict[str, Any]) -> list[Any]:
    xs = trace.get("x")
    if xs is None:
        return []
    if isinstance(xs, dict) and "bdata" in xs:  # plotly's typed-array encoding: count only
        return [("typed", i) for i in range(int(xs.get("shape", 2) if str(xs.get("shape", "")).isdigit() else 2))]
    out = []
    for v in xs:
        if v is None:
            continue
        if isinstance(v, float) and not math.isfinite(v):
            continue
        out.append(round(v, 9) if isinstance(v, float) else v)
    return out


def degenerate_axes(fig: dict[str, Any]) -> list[str]:
    """The x axes (``x``, ``x2``...) of a figure (``{"data": [...], "layout": {...}}``) whose traces
    together hold fewer than two distinct x values."""
    by_axis: dict[str, set[Any]] = {}
    for tr in fig.get("data") or []:
        ax = tr.get("xaxis") or "x"
        by_axis.setdefault(ax, set()).update(_axis_values(tr))
    return sorted(ax for ax, vals in by_axis.items() if len(vals) < 2)


def trace_colour(trace: dict[str, Any]) -> str | None:
    for part in ("line", "marker"):
        c = (trace.get(part) or {}).get("color")
        if isinstance(c, str):
            return c
    return None
