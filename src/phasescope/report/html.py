"""``phasescope report``: one self-contained HTML file with interactive plots of one or more runs.

The page opens offline: plotly.js is inlined once (``plotly.offline.get_plotlyjs``), there is no
CDN and no other URL, and a Content-Security-Policy (``default-src 'none'``) stops the page from
loading anything even by accident. Several runs are overlaid, one colour each.

Plots, each built only from the runs' raw records and stored summaries (a plot without data is
left out, and the page says why):

* ``ttft_vs_prompt`` — TTFT per request vs prompt tokens, with the non-negative quadratic fit
  TTFT ≈ a + b·n + c·n² (:func:`phasescope.measure.stats.fit_quadratic_nonneg`): a = fixed
  overhead, b = linear prefill cost per token, c = attention's quadratic term.
* ``decode_vs_context`` — per-request decode tok/s vs mean context during decode
  (prompt + (output − 1)/2 tokens).
* ``itl_cdf`` — empirical CDF of per-token inter-token latency (:func:`~phasescope.measure.derive.itl_s`).
* ``throughput_vs_itl`` — output throughput vs p99 ITL, one point per concurrency level
  (records tagged ``concurrency``), the latency/throughput trade-off curve.
* ``server_timeline`` — running / waiting requests and KV-cache usage over the run, from the
  summary's ``server_timeline`` (bench scrapes the server's /metrics).
* ``per_endpoint`` (only when a run's records went to more than one endpoint, ``bench --target``)
  — p50/p99 TTFT and ITL per endpoint, from the records' ``tags.endpoint``; with a table of each
  endpoint's requests, share, req/s, output tok/s, latency percentiles and its own /metrics summary.
* ``ceilings`` — measured decode and prefill rates next to their physical ceilings
  (roofline-style), from ceilings found in the summary (``decode_ceiling_tok_s``,
  ``prefill_ceiling_tok_s``, or ``prefill_floor_s`` with ``prompt_tokens``).

Explain findings in a summary (``findings``: ``severity``, ``cause``, ``evidence``, ``advice``) are
shown at the top. Every string that came from a server or a user (model names, errors,
parameters, findings) is HTML-escaped, in the page and inside plot labels.

``--png DIR`` writes each plot as a PNG with kaleido (``pip install 'phasescope[png]'``, which
drives an installed Chrome/Chromium and downloads nothing) or, without kaleido, by screenshotting
the plot with a headless Chromium directly.
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import numpy as np

from phasescope import __version__
from phasescope.errors import InputError
from phasescope.jsonutil import to_jsonable
from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.measure.stats import fit_quadratic_nonneg, median, percentile
from phasescope.report.samples import samples_of, usable
from phasescope.report.store import RunInfo

Run = tuple[RunInfo, list[RequestRecord]]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
    "font-src data:; connect-src 'none'"
)


def esc(s: Any) -> str:
    """Escape a string for HTML and for plotly labels (plotly renders a small HTML subset)."""
    return html.escape("" if s is None else str(s), quote=False)


@dataclass
class Plot:
    name: str
    title: str
    figure: Any  # plotly.graph_objects.Figure
    note: str = ""


@dataclass
class ReportResult:
    path: Path
    size_bytes: int
    plots: list[str]
    skipped: dict[str, str]
    png_files: list[str] = field(default_factory=list)
    png_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "size_bytes": self.size_bytes, "plots": self.plots, "skipped": self.skipped,
                "png_files": self.png_files, "png_error": self.png_error}


def _raw_label(info: RunInfo) -> str:
    return f"{info.id} · {info.model or '?'}"


def _label(info: RunInfo) -> str:
    """The run's legend label, escaped for plotly."""
    return esc(_raw_label(info))


def _layout(fig: Any, title: str, x: str, y: str, **kw: Any) -> None:
    fig.update_layout(
        title={"text": title, "x": 0.01}, xaxis_title=x, yaxis_title=y, template="plotly_white",
        legend={"orientation": "h", "y": -0.22}, margin={"l": 60, "r": 20, "t": 50, "b": 90}, height=460, **kw,
    )


# --- the plots ---------------------------------------------------------------------------------
def plot_ttft_vs_prompt(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go

    fig = go.Figure()
    notes = []
    for k, (info, recs) in enumerate(runs):
        pts = [(r.prompt_tokens or r.prompt_tokens_requested, derive.ttft_s(r)) for r in usable(recs) if r.ok]
        pts = [(float(x), float(y)) for x, y in pts if x and y is not None]
        if not pts:
            continue
        c = PALETTE[k % len(PALETTE)]
        xs, ys = zip(*pts)
        fig.add_trace(go.Scatter(x=xs, y=[y * 1e3 for y in ys], mode="markers", name=_label(info) + " TTFT",
                                 marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="prompt %{x} tok<br>TTFT %{y:.2f} ms<extra></extra>"))
        srv = [(float(r.prompt_tokens or r.prompt_tokens_requested or 0), r.server.get("prefill_s"))
               for r in usable(recs) if r.ok and r.server]
        srv = [(x, float(y)) for x, y in srv if x and isinstance(y, (int, float))]
        if srv:
            sx, sy = zip(*srv)
            fig.add_trace(go.Scatter(x=sx, y=[y * 1e3 for y in sy], mode="markers", name=_label(info) + " server prefill",
                                     marker={"color": c, "symbol": "x", "size": 7, "opacity": 0.6},
                                     hovertemplate="prompt %{x} tok<br>server prefill %{y:.2f} ms<extra></extra>"))
        if len(set(xs)) >= 2:
            f = fit_quadratic_nonneg(xs, ys)
            gx = np.linspace(0, max(xs) * 1.05, 120)
            fig.add_trace(go.Scatter(
                x=gx.tolist(), y=[f(x) * 1e3 for x in gx], mode="lines", line={"color": c, "dash": "dash"},
                name=f"{_label(info)} fit: {f.a * 1e3:.3g} ms + {f.b * 1e6:.3g} µs·n + {f.c * 1e9:.3g} ns·n² (R² {f.r2:.3f})",
                hoverinfo="skip"))
        else:
            notes.append(f"{_raw_label(info)}: one prompt size, no fit")
    if not fig.data:
        return "no successful request with a known prompt length and a first token"
    _layout(fig, "TTFT vs prompt length (prefill)", "prompt tokens", "TTFT (ms)")
    return Plot("ttft_vs_prompt", "TTFT vs prompt length", fig, "; ".join(notes))


def plot_decode_vs_context(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for k, (info, recs) in enumerate(runs):
        pts = []
        for r in usable(recs):
            v = derive.decode_tok_s(r) if r.ok else None
            p = r.prompt_tokens or r.prompt_tokens_requested
            n = derive._output_tokens(r)
            if v is None or not p or not n:
                continue
            pts.append((p + (n - 1) / 2, v))
        if len({round(x) for x, _ in pts}) < 2:
            continue
        xs, ys = zip(*sorted(pts))
        c = PALETTE[k % len(PALETTE)]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=_label(info), marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="context %{x:.0f} tok<br>%{y:.1f} tok/s<extra></extra>"))
        by: dict[int, list[float]] = {}
        for x, y in pts:
            by.setdefault(round(x), []).append(y)
        mx = sorted(by)
        fig.add_trace(go.Scatter(x=mx, y=[median(by[x]) for x in mx], mode="lines", line={"color": c},
                                 name=_label(info) + " median", hoverinfo="skip"))
    if not fig.data:
        return "needs decode rates at two or more context lengths (prompt sizes)"
    _layout(fig, "Decode tok/s vs context length (decode)", "mean context during decode (tokens)", "decode tok/s per request")
    fig.update_yaxes(rangemode="tozero")
    return Plot("decode_vs_context", "decode tok/s vs context length", fig)


def plot_itl_cdf(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for k, (info, recs) in enumerate(runs):
        itl = [x for r in usable(recs) if r.ok for x in derive.itl_s(r) if x > 0]
        if not itl:
            continue
        qs = np.linspace(0, 1, min(len(itl), 800))
        xs = np.quantile(np.asarray(itl) * 1e3, qs)
        p50, p99 = percentile(itl, 50), percentile(itl, 99)
        fig.add_trace(go.Scatter(
            x=xs.tolist(), y=qs.tolist(), mode="lines", line={"color": PALETTE[k % len(PALETTE)], "width": 2},
            name=f"{_label(info)} (p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, n={len(itl)})",  # type: ignore[operator]
            hovertemplate="ITL %{x:.3f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"))
    if not fig.data:
        return "no streamed request with two or more tokens"
    _layout(fig, "Inter-token latency distribution (CDF, per token)", "ITL (ms, log)", "fraction of tokens")
    fig.update_xaxes(type="log")
    return Plot("itl_cdf", "ITL distribution", fig)


def _load_label(info: RunInfo, c: Any) -> str:
    if c is not None:
        return f"c={c}"
    rate = info.params.get("request_rate")
    return f"rate={rate}/s" if rate not in (None, "inf") else "rate=inf"


def plot_throughput_vs_itl(runs: list[Run]) -> Plot | str:
    """One point per concurrency level: tagged levels within a run, or one point per bench run
    (its ``max_concurrency`` / ``request_rate``), runs of one model and target joined into a curve."""
    import plotly.graph_objects as go

    curves: dict[tuple[Any, ...], list[tuple[float, float, str, float]]] = {}
    colour: dict[tuple[Any, ...], str] = {}
    names: dict[tuple[Any, ...], str] = {}
    for k, (info, recs) in enumerate(runs):
        rs = usable(recs)
        tagged = any(r.tags.get("concurrency") is not None for r in rs)
        levels: dict[Any, list[RequestRecord]] = {}
        if tagged:
            for r in rs:
                if r.tags.get("concurrency") is not None:
                    levels.setdefault(r.tags["concurrency"], []).append(r)
            key: tuple[Any, ...] = ("run", info.id)
            names[key] = _label(info)
        elif info.kind == "bench" and rs:
            levels[info.params.get("max_concurrency") or info.params.get("concurrency")] = rs
            host = urlsplit(info.target).hostname if info.target else None  # the embedded engine's port varies
            key = ("bench", info.model, info.engine, host)
            names.setdefault(key, esc(f"bench · {info.model or '?'} · {info.engine or '?'} @ {host or '?'}"))
        else:
            continue
        colour.setdefault(key, PALETTE[k % len(PALETTE)])
        for c, group in levels.items():
            s = samples_of(group)
            p99 = percentile(s.pooled_itl(), 99)
            if s.throughput_tok_s is None or p99 is None:
                continue
            order = float(c) if _num(c) else (float(info.params.get("request_rate")) if _num(info.params.get("request_rate")) else math.inf)
            curves.setdefault(key, []).append((p99 * 1e3, s.throughput_tok_s, esc(_load_label(info, c)), order))
    fig = go.Figure()
    for key, pts in curves.items():
        pts.sort(key=lambda p: (p[3], p[1]))
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers+text", text=[p[2] for p in pts],
            textposition="top left", name=names[key], line={"color": colour[key]},
            hovertemplate="p99 ITL %{x:.2f} ms<br>%{y:.1f} tok/s<br>%{text}<extra></extra>"))
    if not fig.data:
        return "no load levels in these runs (a bench run, or records tagged with their concurrency)"
    _layout(fig, "Throughput vs p99 ITL across load levels", "p99 inter-token latency (ms)", "output throughput (tok/s)")
    fig.update_yaxes(rangemode="tozero")
    return Plot("throughput_vs_itl", "throughput vs p99 ITL", fig)


def _num(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


#: timeline series: left axis (requests), right axis (fractions, shown in %), lower panel (tok/s)
QUEUE_SERIES = ("running", "waiting", "preemptions")
FRACTION_SERIES = ("kv_usage", "kv_cache_usage", "prefix_cache_hit_rate")
RATE_SERIES = ("generation_tok_s", "prompt_tok_s")


def find_timeline(summary: dict[str, Any] | None) -> dict[str, list[Any]] | None:
    """A ``{"t_s": [...], series: [...]}`` timeline from a summary: ``server_metrics.timeline``
    (bench), ``server_timeline`` or ``timeline``; either a list of samples or a dict of lists.
    Only the series in :data:`QUEUE_SERIES`, :data:`FRACTION_SERIES` and :data:`RATE_SERIES`."""
    if not isinstance(summary, dict):
        return None
    cands = [summary.get("server_timeline"), summary.get("timeline")]
    sm = summary.get("server_metrics")
    if isinstance(sm, dict):
        cands = [sm.get("timeline"), sm.get("server_timeline"), *cands]
    wanted = QUEUE_SERIES + FRACTION_SERIES + RATE_SERIES
    for c in cands:
        if isinstance(c, list) and c and all(isinstance(x, dict) for x in c):
            keys = list(dict.fromkeys(k for x in c for k in x))
            c = {k: [x.get(k) for x in c] for k in keys}
        if not isinstance(c, dict):
            continue
        tkey = next((k for k in ("t_s", "t", "time_s", "elapsed_s") if isinstance(c.get(k), list)), None)
        if tkey is None:
            continue
        n = len(c[tkey])
        out: dict[str, list[Any]] = {"t_s": c[tkey]}
        for k in wanted:
            v = c.get(k)
            if isinstance(v, list) and len(v) == n and any(isinstance(x, (int, float)) for x in v):
                out[k] = v
        if n and len(out) > 1:
            return out
    return None


def plot_server_timeline(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}], [{}]])
    dashes = ("solid", "dot", "dash", "dashdot")
    has_rates = False
    for k, (info, _) in enumerate(runs):
        tl = find_timeline(info.summary)
        if tl is None:
            continue
        c = PALETTE[k % len(PALETTE)]
        j = 0
        for name in QUEUE_SERIES + FRACTION_SERIES + RATE_SERIES:
            if name not in tl:
                continue
            vals = tl[name]
            frac = name in FRACTION_SERIES
            if frac:
                vals = [None if v is None else v * 100 for v in vals]
            trace = go.Scatter(x=tl["t_s"], y=vals, mode="lines", name=f"{_label(info)} {esc(name)}",
                               line={"color": c, "dash": dashes[j % len(dashes)], "shape": "hv" if name in QUEUE_SERIES else "linear"})
            j += 1
            if name in RATE_SERIES:
                fig.add_trace(trace, row=2, col=1)
                has_rates = True
            else:
                fig.add_trace(trace, row=1, col=1, secondary_y=frac)
    if not fig.data:
        return "no server metrics timeline in the runs' summaries (bench records one when the server exposes /metrics)"
    _layout(fig, "Server queue, KV cache and token rates during the run", "", "requests")
    fig.update_layout(height=560)
    fig.update_xaxes(title_text="time since start (s)", row=2, col=1)
    fig.update_yaxes(title_text="KV usage / prefix hits (%)", secondary_y=True, rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", secondary_y=False, row=1, col=1)
    fig.update_yaxes(title_text="server tok/s" if has_rates else "", rangemode="tozero", row=2, col=1)
    return Plot("server_timeline", "server queue / KV timeline", fig)


def find_ceilings(summary: Any) -> list[dict[str, float | None]]:
    """Ceiling rows ``{"prompt_tokens", "decode_tok_s", "prefill_tok_s"}`` found anywhere in a
    summary: nodes with ``decode_ceiling_tok_s``, ``prefill_ceiling_tok_s`` or ``prefill_floor_s``
    (then prefill tok/s = prompt_tokens / prefill_floor_s). ``prompt_tokens`` is None for a
    ceiling that does not depend on the prompt size."""
    rows: dict[Any, dict[str, float | None]] = {}

    def pos(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            n = pos(o.get("prompt_tokens"))
            dec = pos(o.get("decode_ceiling_tok_s"))
            pre = pos(o.get("prefill_ceiling_tok_s"))
            floor = pos(o.get("prefill_floor_s"))
            if pre is None and floor is not None and n is not None:
                pre = n / floor
            if dec is not None or pre is not None:
                row = rows.setdefault(n, {"prompt_tokens": n, "decode_tok_s": None, "prefill_tok_s": None})
                row["decode_tok_s"] = row["decode_tok_s"] or dec
                row["prefill_tok_s"] = row["prefill_tok_s"] or pre
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(summary)
    return sorted(rows.values(), key=lambda r: r["prompt_tokens"] or 0)


def _size_of(r: RequestRecord) -> Any:
    return r.tags.get("prompt_tokens_target") or r.tags.get("prompt_tokens") or r.prompt_tokens_requested or r.prompt_tokens


def plot_ceilings(runs: list[Run]) -> Plot | str:
    """Measured decode and prefill rates per prompt size (single-stream requests) next to the
    ceilings from the summary, with efficiency = measured ÷ ceiling in the hover text."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode (memory-bandwidth bound)", "prefill (compute bound)"),
                        horizontal_spacing=0.1)
    for k, (info, recs) in enumerate(runs):
        ceil = find_ceilings(info.summary)
        if not ceil:
            continue
        c = PALETTE[k % len(PALETTE)]
        ok = [r for r in usable(recs) if r.ok and r.tags.get("concurrency") in (None, 1)]
        by: dict[float, list[RequestRecord]] = {}
        for r in ok:
            n = _size_of(r)
            if _num(n):
                by.setdefault(float(n), []).append(r)
        sizes = sorted(by)
        meas = {
            "decode_tok_s": [median([derive.decode_tok_s(r) for r in by[n]]) for n in sizes],
            "prefill_tok_s": [_prefill_rate(by[n]) for n in sizes],
        }
        for col, key in ((1, "decode_tok_s"), (2, "prefill_tok_s")):
            crow = [r for r in ceil if r[key] is not None]
            if not crow:
                continue
            if all(r["prompt_tokens"] is None for r in crow):  # one ceiling for every size
                cx = sizes or [0]
                cy = [crow[0][key]] * len(cx)
            else:
                cx = [r["prompt_tokens"] for r in crow if r["prompt_tokens"] is not None]
                cy = [r[key] for r in crow if r["prompt_tokens"] is not None]
            fig.add_trace(go.Scatter(x=cx, y=cy, mode="lines+markers", name=f"{_label(info)} ceiling",
                                     line={"color": c, "dash": "dash"}, marker={"symbol": "line-ew-open", "size": 12},
                                     showlegend=col == 1, legendgroup=f"c{k}",
                                     hovertemplate="prompt %{x} tok<br>ceiling %{y:,.0f} tok/s<extra></extra>"),
                          row=1, col=col)
            ys = meas[key]
            cmap = dict(zip(cx, cy))
            eff = [f"{y / cmap[x]:.0%}" if y and cmap.get(x) else "" for x, y in zip(sizes, ys)]
            if any(y is not None for y in ys):
                fig.add_trace(go.Scatter(x=sizes, y=ys, mode="lines+markers+text", name=f"{_label(info)} measured",
                                         line={"color": c}, marker={"size": 9}, text=eff, textposition="top center",
                                         showlegend=col == 1,
                                         legendgroup=f"m{k}",
                                         hovertemplate="prompt %{x} tok<br>measured %{y:,.1f} tok/s<br>%{text} of ceiling<extra></extra>"),
                              row=1, col=col)
    if not fig.data:
        return "no ceilings in the runs' summaries (probe adds them when model and device are known: --model, --device)"
    _layout(fig, "Measured vs physical ceiling (roofline view)", "prompt tokens", "decode tok/s (single stream)")
    fig.update_xaxes(title_text="prompt tokens", row=1, col=2)
    fig.update_yaxes(title_text="prefill tok/s", type="log", row=1, col=2)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    return Plot("ceilings", "measured vs ceilings", fig,
                "labels: measured ÷ ceiling. decode: median single-stream rate per prompt size; prefill: server-side "
                "rate where reported, else prompt ÷ TTFT")


def _prefill_rate(rs: list[RequestRecord]) -> float | None:
    srv = [derive.server_prefill_tok_s(r) for r in rs]
    if any(v is not None for v in srv):
        return median(srv)
    return median([derive.prefill_tok_s(r) for r in rs])



PLOTS: tuple[tuple[str, str, Callable[[list[Run]], Plot | str]], ...] = (
    ("ttft_vs_prompt", "TTFT vs prompt length", plot_ttft_vs_prompt),
    ("decode_vs_context", "decode tok/s vs context length", plot_decode_vs_context),
    ("itl_cdf", "ITL distribution", plot_itl_cdf),
    ("throughput_vs_itl", "throughput vs p99 ITL", plot_throughput_vs_itl),
    ("server_timeline", "server queue / KV timeline", plot_server_timeline),
    ("ceilings", "measured vs ceilings", plot_ceilings),
)


# --- several endpoints (bench --target, issue 10) -----------------------------------------------
def endpoint_groups(recs: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """A run's measured records by endpoint (``tags.endpoint``, as :mod:`phasescope.load.routing`
    tags them), in first-seen order. Records without the tag are left out."""
    out: dict[str, list[RequestRecord]] = {}
    for r in usable(recs):
        ep = r.tags.get("endpoint")
        if ep:
            out.setdefault(str(ep), []).append(r)
    return out


def endpoint_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per (run, endpoint) for every run whose records went to more than one endpoint:
    ``run``, ``endpoint``, ``requests``, ``share`` (fraction of the run's tagged requests),
    ``completed``, ``failed``, ``request_throughput`` (req/s), ``output_throughput`` (tok/s),
    ``{median,p99}_{ttft,itl}_ms`` — :func:`phasescope.load.summary.summarize` over that
    endpoint's records alone (the same numbers ``bench`` prints per endpoint) — and
    ``server_metrics`` (that endpoint's /metrics summary from the stored bench summary, or None)."""
    from phasescope.load.summary import summarize

    rows: list[dict[str, Any]] = []
    for info, recs in runs:
        groups = endpoint_groups(recs)
        if len(groups) < 2:
            continue
        total = sum(len(g) for g in groups.values())
        stored = {}
        summ = info.summary if isinstance(info.summary, dict) else {}
        for e in summ.get("endpoints") or []:
            if isinstance(e, dict) and e.get("endpoint"):
                stored[str(e["endpoint"])] = e.get("server_metrics")
        for ep, group in groups.items():
            s = summarize(group, percentiles=(50.0, 99.0))
            rows.append({"run": info.id, "endpoint": ep, "requests": len(group), "share": len(group) / total,
                         "completed": s.get("completed"), "failed": s.get("failed"),
                         "request_throughput": s.get("request_throughput"),
                         "output_throughput": s.get("output_throughput"),
                         **{k: s.get(k) for k in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms")},
                         "server_metrics": stored.get(ep)})
    return rows


def plot_per_endpoint(runs: list[Run]) -> Plot | str:
    """Grouped bars: p50/p99 TTFT and p50/p99 ITL (ms) for each endpoint of each multi-endpoint run."""
    import plotly.graph_objects as go

    rows = endpoint_rows(runs)
    if not rows:
        return "no run sent requests to more than one endpoint"
    several = len({r["run"] for r in rows}) > 1
    xs = [esc(f"{r['run']} · {r['endpoint']}" if several else r["endpoint"]) for r in rows]
    fig = go.Figure()
    for k, (key, name) in enumerate((("median_ttft_ms", "p50 TTFT"), ("p99_ttft_ms", "p99 TTFT"),
                                     ("median_itl_ms", "p50 ITL"), ("p99_itl_ms", "p99 ITL"))):
        fig.add_trace(go.Bar(x=xs, y=[r[key] for r in rows], name=name, marker={"color": PALETTE[k % len(PALETTE)]},
                             hovertemplate="%{x}<br>" + name + " %{y:.2f} ms<extra></extra>"))
    _layout(fig, "Latency per endpoint", "endpoint", "ms (log)", barmode="group")
    fig.update_yaxes(type="log")
    return Plot("per_endpoint", "latency per endpoint", fig,
                note="Each endpoint's requests alone (records tagged with their endpoint); ITL per token.")


def _endpoints_html(runs: list[Run]) -> str:
    """The per-endpoint table (only runs with more than one endpoint; empty string otherwise)."""
    rows = endpoint_rows(runs)
    if not rows:
        return ""

    def f(v: Any, nd: int = 2) -> str:
        return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else (
            f"{v:.{nd}f}" if isinstance(v, float) else esc(v))

    body = []
    for r in rows:
        sm = r["server_metrics"] if isinstance(r["server_metrics"], dict) else None
        if sm is None:
            srv = "-"
        elif sm.get("available"):
            ss = sm.get("summary") or {}
            srv = (f"{sm.get('engine')}: max running {f(ss.get('max_running'), 0)}, KV peak "
                   f"{f(ss.get('kv_usage_peak'), 3)}, gen tokens {f(ss.get('generation_tokens'), 0)}")
        else:
            srv = f"none ({sm.get('reason') or 'unavailable'})"
        body.append(
            f"<tr><td>{esc(r['run'])}</td><td>{esc(r['endpoint'])}</td><td>{r['requests']}</td>"
            f"<td>{100 * r['share']:.0f}%</td><td>{f(r['completed'], 0)}</td><td>{f(r['failed'], 0)}</td>"
            f"<td>{f(r['request_throughput'])}</td><td>{f(r['output_throughput'], 1)}</td>"
            f"<td>{f(r['median_ttft_ms'])}</td><td>{f(r['p99_ttft_ms'])}</td>"
            f"<td>{f(r['median_itl_ms'])}</td><td>{f(r['p99_itl_ms'])}</td><td>{esc(srv)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "endpoint", "requests", "share", "ok", "failed", "req/s",
                                             "out tok/s", "p50 TTFT ms", "p99 TTFT ms", "p50 ITL ms", "p99 ITL ms",
                                             "server /metrics"))
    return (f"<h3>Per endpoint</h3><table class=\"runs endpoints\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def build_plots(runs: list[Run]) -> tuple[list[Plot], dict[str, str]]:
    """Every plot of :data:`PLOTS` that has data (the rest in ``skipped`` with the reason), plus
    ``per_endpoint`` when a run went to more than one endpoint (never listed as skipped)."""
    plots: list[Plot] = []
    skipped: dict[str, str] = {}
    for name, _, fn in PLOTS:
        res = fn(runs)
        if isinstance(res, str):
            skipped[name] = res
        else:
            plots.append(res)
    pe = plot_per_endpoint(runs)
    if not isinstance(pe, str):
        plots.append(pe)
    return plots, skipped


# --- the page ----------------------------------------------------------------------------------
def _script_json(obj: Any) -> str:
    """JSON safe inside <script>: no ``</script>``, ``<!--`` or line separators can break out."""
    s = json.dumps(to_jsonable(obj), ensure_ascii=False, separators=(",", ":"))
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _findings_html(runs: list[Run]) -> str:
    parts = []
    for info, _ in runs:
        s = info.summary if isinstance(info.summary, dict) else {}
        fs = s.get("findings")
        if fs is None and isinstance(s.get("diagnosis"), dict):
            fs = s["diagnosis"].get("findings")
        if not isinstance(fs, list) or not fs:
            continue
        items = []
        for f in fs:
            if not isinstance(f, dict):
                items.append(f"<li>{esc(f)}</li>")
                continue
            sev = esc(f.get("severity", "info"))
            ev = "".join(f"<li>{esc(_ev_text(e))}</li>" for e in f.get("evidence") or [])
            adv = "".join(f"<li>{esc(_adv_text(a))}</li>" for a in f.get("advice") or [])
            items.append(
                f'<li class="finding sev-{sev}"><span class="sev">{sev}</span> <b>{esc(f.get("cause") or f.get("id"))}</b>'
                + (f"<ul class=evidence>{ev}</ul>" if ev else "") + (f"<div class=advice>change:<ul>{adv}</ul></div>" if adv else "")
                + "</li>")
        parts.append(f"<h3>Findings · {esc(info.id)}</h3><ul class=findings>{''.join(items)}</ul>")
    return "".join(parts)


def _ev_text(e: Any) -> str:
    if isinstance(e, dict):
        v, u = e.get("value"), e.get("unit") or ""
        if isinstance(v, float):
            v = f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
        return f"{e.get('what', '')}: {v}{(' ' + u) if u else ''}" + (f" ({e['source']})" if e.get("source") else "")
    return str(e)


def _adv_text(a: Any) -> str:
    if isinstance(a, dict):
        return f"[{a.get('engine', 'any')}] {a.get('change', '')}" + (f" — {a['why']}" if a.get("why") else "")
    return str(a)


def _runs_table(runs: list[Run]) -> str:
    rows = []
    for k, (i, recs) in enumerate(runs):
        ok = sum(1 for r in recs if r.ok)
        eng = " ".join(x for x in (i.engine, i.engine_version) if x)
        params = json.dumps(to_jsonable(i.params), ensure_ascii=False)
        if len(params) > 300:
            params = params[:297] + "..."
        status = i.status + (f" ({i.error})" if i.error else "")
        rows.append(
            f'<tr><td><span class=swatch style="background:{PALETTE[k % len(PALETTE)]}"></span>{esc(i.id)}</td>'
            f"<td>{esc(i.kind)}</td><td>{esc(status)}</td><td>{esc(i.started_iso)}</td><td>{esc(i.model)}</td>"
            f"<td>{esc(i.target)}</td><td>{esc(eng)}</td><td>{esc(i.device)}</td><td>{ok}/{len(recs)}</td>"
            f"<td><code>{esc(params)}</code></td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "kind", "status", "started (UTC)", "model", "target", "engine",
                                             "device", "ok/requests", "parameters"))
    return f"<table class=runs><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} .meta{color:#666;font-size:13px;margin-bottom:16px}
table.runs{border-collapse:collapse;font-size:13px;margin:8px 0 16px} table.runs td,table.runs th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
table.runs code{font-size:11px;word-break:break-all}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.ps-plot{border:1px solid #eee;margin:12px 0;min-height:460px} .note{color:#666;font-size:12px;margin:-8px 0 12px}
ul.findings{padding-left:18px} .finding{margin-bottom:8px} .sev{font-size:11px;text-transform:uppercase;padding:1px 6px;border-radius:3px;background:#eee}
.sev-problem .sev{background:#fdd} .sev-limit .sev{background:#ffe8c2} ul.evidence{font-size:13px;color:#444}
.skipped{color:#666;font-size:13px} #ps-errors{color:#b00;white-space:pre-wrap}
"""


def render_html(runs: list[Run], plots: list[Plot], skipped: dict[str, str], *, title: str | None = None) -> str:
    from plotly.offline import get_plotlyjs

    titles = dict((n, t) for n, t, _ in PLOTS)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = title or ("phasescope report · " + ", ".join(i.id for i, _ in runs))
    divs = []
    specs = []
    for p in plots:
        divs.append(f'<div class="ps-plot" id="plot-{p.name}" data-plot="{p.name}"></div>'
                    + (f'<p class=note>{esc(p.note)}</p>' if p.note else ""))
        fig = p.figure.to_plotly_json()
        specs.append({"id": f"plot-{p.name}", "data": fig.get("data", []), "layout": fig.get("layout", {})})
    skipped_html = "".join(f"<li><b>{esc(titles.get(k, k))}</b>: {esc(v)}</li>" for k, v in skipped.items())
    findings = _findings_html(runs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{_CSS}</style>
<script>
window.__psErrors = [];
window.__psError = function (m) {{  // every JS error or blocked load is shown on the page, as it happens
  window.__psErrors.push(m);
  var p = document.getElementById("ps-errors");
  if (p) p.textContent = window.__psErrors.join("\\n");
  if (document.body) document.body.setAttribute("data-ps-errors", String(window.__psErrors.length));
}};
window.addEventListener("error", function (e) {{ window.__psError("error: " + (e.message || e.type)); }});
window.addEventListener("unhandledrejection", function (e) {{ window.__psError("rejection: " + e.reason); }});
document.addEventListener("securitypolicyviolation", function (e) {{ window.__psError("csp: " + e.violatedDirective + " " + e.blockedURI); }});
</script>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{esc(title)}</h1>
<div class=meta>generated {now} by phasescope {esc(__version__)} · opens offline · {len(plots)} plots</div>
{findings}
{_runs_table(runs)}
{_endpoints_html(runs)}
{''.join(divs)}
{f'<div class=skipped>Not plotted (no data in these runs):<ul>{skipped_html}</ul></div>' if skipped_html else ''}
<pre id="ps-errors"></pre>
<script id="ps-specs" type="application/json">{_script_json(specs)}</script>
<script>
(function () {{
  var specs = JSON.parse(document.getElementById("ps-specs").textContent);
  var config = {{displaylogo: false, responsive: true, showLink: false, showSendToCloud: false}};
  var jobs = specs.map(function (s) {{
    try {{ return Plotly.newPlot(s.id, s.data, s.layout, config); }}
    catch (e) {{ window.__psError("plot " + s.id + ": " + e); return null; }}
  }});
  Promise.all(jobs).then(function () {{
    var n = 0;
    document.querySelectorAll(".ps-plot").forEach(function (d) {{ if (d.querySelector(".main-svg")) n += 1; }});
    document.body.setAttribute("data-plots-rendered", String(n));
  }}, function (e) {{ window.__psError("render: " + e); }}).then(function () {{
    document.getElementById("ps-errors").textContent = window.__psErrors.join("\\n");
    document.body.setAttribute("data-ps-errors", String(window.__psErrors.length));
    document.body.setAttribute("data-ps-done", "1");
  }});
}})();
</script>
</body></html>
"""


def write_report(runs: list[Run], out: str | os.PathLike[str], *, png_dir: str | os.PathLike[str] | None = None,
                 title: str | None = None) -> ReportResult:
    """Write the HTML report (and PNGs when ``png_dir`` is given)."""
    if not runs:
        raise InputError("report needs at least one run")
    plots, skipped = build_plots(runs)
    page = render_html(runs, plots, skipped, title=title)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        from phasescope.redact import clean  # the write boundary: no secret, encodable

        tmp.write_text(clean(page), encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    res = ReportResult(out, out.stat().st_size, [p.name for p in plots], skipped)
    if png_dir is not None:
        res.png_files, res.png_error = write_pngs(plots, Path(png_dir))
    return res


# --- static images -----------------------------------------------------------------------------
def find_chromium() -> str | None:
    for name in (os.environ.get("PHASESCOPE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


def write_pngs(plots: list[Plot], png_dir: Path, *, width: int = 1100, height: int = 520) -> tuple[list[str], str | None]:
    """Each plot as ``<png_dir>/<name>.png``. Returns (files, why-not or None)."""
    if not plots:
        return [], "no plots to write"
    try:
        png_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {png_dir}: {exc.strerror or exc}") from None
    paths = [png_dir / f"{p.name}.png" for p in plots]
    kaleido_error = None
    try:
        import kaleido  # noqa: F401
        import plotly.io as pio

        pio.write_images([p.figure for p in plots], paths, width=width, height=height, scale=2)
        return [str(p) for p in paths], None
    except ImportError:
        kaleido_error = "kaleido is not installed (pip install 'phasescope[png]')"
    except Exception as exc:  # kaleido could not start a browser: try chromium directly
        kaleido_error = f"kaleido failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    chrome = find_chromium()
    if chrome is None:
        return [], f"{kaleido_error}; and no Chromium/Chrome was found for screenshots (apt-get install chromium)"
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    done = []
    with tempfile.TemporaryDirectory(prefix="phasescope-png-") as tmp:
        for p, path in zip(plots, paths):
            fig = p.figure.to_plotly_json()
            layout = dict(fig.get("layout", {}), width=width, height=height)
            page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                    f'content="{CSP}"><style>body{{margin:0;background:#fff}}</style><script>{js}</script></head><body>'
                    f'<div id="p"></div><script>Plotly.newPlot("p",{_script_json(fig.get("data", []))},'
                    f'{_script_json(layout)},{{staticPlot:true}});</script></body></html>')
            page_path = Path(tmp) / f"{p.name}.html"
            from phasescope.redact import clean

            page_path.write_text(clean(page), encoding="utf-8")
            cmd = [chrome, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", f"--screenshot={path}",
                   f"--window-size={width},{height}", "--force-device-scale-factor=2", "--virtual-time-budget=3000",
                   page_path.as_uri()]
            try:
                subprocess.run(cmd, capture_output=True, timeout=60, check=False)
            except subprocess.TimeoutExpired:
                return [str(x) for x in done], "chromium timed out taking a screenshot"
            if path.exists():
                done.append(path)
    if len(done) < len(paths):
        return [str(x) for x in done], f"chromium wrote {len(done)} of {len(paths)} images ({kaleido_error})"
    return [str(x) for x in done], None
