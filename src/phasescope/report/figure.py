"""What every figure of the report shares: the :class:`Plot` it returns, the colours (one per run,
:data:`PALETTE`, the same in every plot and the runs table), dashes (one per metric, :data:`DASH`), the
request timeline's phase colours, the layout, HTML escaping of every string from a server or a user
(plotly renders a small HTML subset), the test that an axis has spread enough to draw, and the error
bars a value's 95 % interval draws (:func:`sample_ci`, :func:`error_bars`).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Iterable

from phasescope.measure.records import RequestRecord
from phasescope.measure.aggregate import successful
from phasescope.store import RunInfo

#: one stored run: its info (summary included) and its records
Run = tuple[RunInfo, list[RequestRecord]]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
#: one dash per metric, the same for every run
DASH = {
    "running": "solid", "waiting": "dash", "preemptions": "dot",
    "kv_usage": "solid", "kv_cache_usage": "solid", "prefix_cache_hit_rate": "dash",
    "generation_tok_s": "solid", "prompt_tok_s": "dash",
    "decode": "solid", "prefill": "dash",
}
METRIC_LABEL = {
    "running": "running", "waiting": "waiting", "preemptions": "preemptions", "kv_usage": "KV cache",
    "kv_cache_usage": "KV cache", "prefix_cache_hit_rate": "prefix-cache hits", "generation_tok_s": "generation tok/s",
    "prompt_tok_s": "prompt tok/s",
}
#: the request timeline's phases
PHASE_COLOURS = {"waiting": "#c7c7c7", "prefill": "#ff7f0e", "decode": "#1f77b4"}
#: a numeric axis has spread when (max − min) ≥ this fraction of max |x|
MIN_SPREAD = 0.10


def esc(s: Any) -> str:
    """Escape a string for HTML and for plotly labels (plotly renders a small HTML subset)."""
    return html.escape("" if s is None else str(s), quote=False)


def colour(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


@dataclass
class Plot:
    name: str
    title: str
    figure: Any  # plotly.graph_objects.Figure
    note: str = ""


def finite(xs: Iterable[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]


def has_spread(xs: Iterable[Any], rel: float = MIN_SPREAD) -> bool:
    """Two or more distinct values, max − min ≥ ``rel`` × max |x| (``rel`` 0: any two distinct)."""
    v = finite(xs)
    if len(set(v)) < 2:
        return False
    lo, hi = min(v), max(v)
    return hi - lo >= rel * max(abs(lo), abs(hi))


def range_text(xs: Iterable[Any], unit: str) -> str:
    v = finite(xs)
    if not v:
        return "no values"
    lo, hi = min(v), max(v)
    return f"{lo:g} {unit}" if lo == hi else f"{lo:g}–{hi:g} {unit}"


def raw_label(info: RunInfo) -> str:
    return f"{info.id} · {info.model or '?'}"


def label(info: RunInfo) -> str:
    """The run's legend label, escaped for plotly."""
    return esc(raw_label(info))


def layout(fig: Any, title: str, x: str, y: str, **kw: Any) -> None:
    """The report's common layout. An empty ``x`` / ``y`` leaves the axis titles as they are (a
    subplot figure titles each panel's axes itself; setting "" here blanked the first panel's)."""
    titles = {k: v for k, v in (("xaxis_title", x), ("yaxis_title", y)) if v}
    fig.update_layout(
        title={"text": title, "x": 0.01}, template="plotly_white", showlegend=True,
        legend={"orientation": "h", "y": -0.2, "yanchor": "top"}, margin={"l": 70, "r": 30, "t": 60, "b": 90},
        height=460, **titles, **kw,
    )


def is_num(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def ok_records(recs: list[RequestRecord]) -> list[RequestRecord]:
    return successful(recs)


def error_bars(values: list[Any], cis: list[Any], scale: float = 1.0) -> dict[str, Any] | None:
    """Plotly ``error_x`` / ``error_y`` from each value's interval ``[low, high]`` (None where it has
    none: a zero-length bar), or None when no value has one."""
    if not any(ci is not None for ci in cis):
        return None
    plus, minus = [], []
    for v, ci in zip(values, cis):
        ok = ci is not None and is_num(v) and all(is_num(x) for x in ci)
        plus.append(max(0.0, (float(ci[1]) - float(v)) * scale) if ok else 0.0)
        minus.append(max(0.0, (float(v) - float(ci[0])) * scale) if ok else 0.0)
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.5, "width": 5}


def sample_ci(stored: Any, samples: list[Any]) -> list[float] | None:
    """A value's 95 % interval: the stored one (``*_ci`` as probe writes it) where there is one, else
    :func:`phasescope.measure.interval.median_interval` over its samples (two or more)."""
    from phasescope.measure.interval import median_interval

    if isinstance(stored, (list, tuple)) and len(stored) == 2 and all(is_num(x) for x in stored):
        return [float(stored[0]), float(stored[1])]
    iv = median_interval([x for x in samples if is_num(x)])
    return None if iv is None or iv.n < 2 else [iv.low, iv.high]
