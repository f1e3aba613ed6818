"""The report's figures: one function per plot, each a pure function of the runs' raw records
(per request through :mod:`phasescope.measure.derive`, aggregated through
:mod:`phasescope.measure.aggregate`) and their stored summaries and fits — no new numbers.

A plot is drawn only where its x axis has spread (:func:`has_spread`): a bench run at one prompt
length gets no "TTFT vs prompt length" column of dots but the TTFT distribution instead, and one
load level gets no throughput/latency "curve" but the per-request timeline. Each returns a
:class:`Plot`, or a string saying why it was left out.

* ``ttft_vs_prompt`` — TTFT per request vs prompt tokens (prompt lengths that differ by ≥ 10 %),
  with the line the run stored: explain's own fit TTFT ≈ a + b·n + c·n² (never refitted here),
  else the median TTFT per prompt length.
* ``ttft_distribution`` — histogram (% of requests) and CDF of TTFT, per run.
* ``decode_vs_context`` — per-request decode tok/s vs mean context during decode
  (prompt + (output − 1)/2 tokens), when contexts differ by ≥ 10 %.
* ``itl_cdf`` — empirical CDF of per-token inter-token latency (:func:`~phasescope.measure.derive.itl_s`).
* ``throughput_vs_itl`` — output throughput vs p99 ITL, one point per load level (records tagged
  ``concurrency``, or bench runs of one model and target), drawn with two or more levels.
* ``request_timeline`` — bench runs (or any run whose requests overlap): one bar per request —
  waited (scheduled → sent → server began its prompt), prefilled (the server's own prompt time),
  decoded (first → last token), from :func:`~phasescope.measure.derive.phase_spans_ns` — and
  below it how many requests were in prefill and in decode at each moment: the view of prefill
  and decode sharing the device.
* ``server_timeline`` — running / waiting requests, KV-cache usage and prefix-cache hits (in %),
  server token rates, from the summary's ``server_metrics.timeline`` (bench scrapes /metrics).
* ``ceilings`` — the roofline view: attained vs physical ceiling per phase (decode tok/s and
  prefill tok/s, one bar pair per prompt size), labelled with the stored efficiency and the
  binding roof (``ceilings.sizes`` rows that probe stores).
* ``per_endpoint`` (only when a run's records went to more than one endpoint, ``bench --target``).

Colours: one per run (:data:`PALETTE`, the same in every plot and the runs table); dashes: one per
metric (:data:`DASH`); the request timeline's phases have their own colours (:data:`PHASE_COLOURS`).
Every string from a server or a user is HTML-escaped (plotly renders a small HTML subset).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

import numpy as np

from phasescope.measure import derive
from phasescope.measure.aggregate import METRIC_BY_KEY, measured, median, percentile, point_value, samples_of, successful
from phasescope.measure.records import RequestRecord
from phasescope.store import RunInfo

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
#: at most this many requests per run in the request timeline (the first ones by start time)
TIMELINE_MAX_REQUESTS = 400


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


def _finite(xs: Iterable[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]


def has_spread(xs: Iterable[Any], rel: float = MIN_SPREAD) -> bool:
    """Two or more distinct values, max − min ≥ ``rel`` × max |x| (``rel`` 0: any two distinct)."""
    v = _finite(xs)
    if len(set(v)) < 2:
        return False
    lo, hi = min(v), max(v)
    return hi - lo >= rel * max(abs(lo), abs(hi))


def _range_text(xs: Iterable[Any], unit: str) -> str:
    v = _finite(xs)
    if not v:
        return "no values"
    lo, hi = min(v), max(v)
    return f"{lo:g} {unit}" if lo == hi else f"{lo:g}–{hi:g} {unit}"


def _raw_label(info: RunInfo) -> str:
    return f"{info.id} · {info.model or '?'}"


def _label(info: RunInfo) -> str:
    """The run's legend label, escaped for plotly."""
    return esc(_raw_label(info))


def _layout(fig: Any, title: str, x: str, y: str, **kw: Any) -> None:
    fig.update_layout(
        title={"text": title, "x": 0.01}, xaxis_title=x, yaxis_title=y, template="plotly_white", showlegend=True,
        legend={"orientation": "h", "y": -0.2, "yanchor": "top"}, margin={"l": 70, "r": 30, "t": 60, "b": 90},
        height=460, **kw,
    )


def _num(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _ok(recs: list[RequestRecord]) -> list[RequestRecord]:
    return successful(recs)


# --- prefill ------------------------------------------------------------------------------------
def stored_ttft_fit(summary: Any) -> dict[str, Any] | None:
    """explain's own prompt-scaling fit, as it stored it (``experiments["prompt-scaling"].fit``:
    ``a_s``, ``b_s_per_token``, ``c_s_per_token2``, ``r2``) with the points it fitted (each
    length's best TTFT, ``ttft_min_s``, else its median) — the report draws this fit, it never
    fits again over every record of the run (which mixes in the other experiments' requests)."""
    exps = summary.get("experiments") if isinstance(summary, dict) else None
    ps = exps.get("prompt-scaling") if isinstance(exps, dict) else None
    fit = ps.get("fit") if isinstance(ps, dict) else None
    if not isinstance(fit, dict) or not all(_num(fit.get(k)) for k in ("a_s", "b_s_per_token", "c_s_per_token2")):
        return None
    pts = []
    for p in ps.get("points") or []:
        if isinstance(p, dict) and _num(p.get("prompt_tokens")):
            y = p.get("ttft_min_s") if _num(p.get("ttft_min_s")) else p.get("ttft_s")
            if _num(y):
                pts.append((float(p["prompt_tokens"]), float(y)))
    return {"a": float(fit["a_s"]), "b": float(fit["b_s_per_token"]), "c": float(fit["c_s_per_token2"]),
            "r2": float(fit["r2"]) if _num(fit.get("r2")) else None, "points": pts}


def _stored_size_medians(summary: Any) -> list[tuple[float, float]]:
    """(prompt tokens, median TTFT) per size from a probe summary's ``sizes``."""
    return sorted((n, float(s["ttft_s"])) for n, s in _stored_sizes(summary).items() if _num(s.get("ttft_s")))


def plot_ttft_vs_prompt(runs: list[Run]) -> Plot | str:
    """TTFT per request vs prompt tokens; the line through them is what the run stored: explain's
    own prompt-scaling fit (:func:`stored_ttft_fit`), else the probe summary's median per size,
    else the median per prompt length (:func:`phasescope.measure.aggregate.median`). Nothing is
    refitted here."""
    import plotly.graph_objects as go

    fig = go.Figure()
    seen: list[float] = []
    for k, (info, recs) in enumerate(runs):
        fit = stored_ttft_fit(info.summary)
        ok = _ok(recs)
        if fit is not None:  # the fitted experiment's requests, not the other experiments' ones
            ok = [r for r in ok if r.tags.get("experiment") == "prompt-scaling"] or ok
        pts = [(r.prompt_tokens or r.prompt_tokens_requested, derive.ttft_s(r)) for r in ok]
        pts = [(float(x), float(y)) for x, y in pts if x and y is not None]
        seen.extend(x for x, _ in pts)
        if not pts or not has_spread([x for x, _ in pts]):
            continue
        c = colour(k)
        xs, ys = zip(*pts)
        g = info.id
        fig.add_trace(go.Scatter(x=xs, y=[y * 1e3 for y in ys], mode="markers", name=_label(info) + " · TTFT",
                                 legendgroup=g, marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="prompt %{x} tok<br>TTFT %{y:.2f} ms<extra></extra>"))
        srv = [(float(r.prompt_tokens or r.prompt_tokens_requested or 0), (r.server or {}).get("prefill_s")) for r in ok]
        srv = [(x, float(y)) for x, y in srv if x and isinstance(y, (int, float))]
        if srv:
            sx, sy = zip(*srv)
            fig.add_trace(go.Scatter(x=sx, y=[y * 1e3 for y in sy], mode="markers", name=_label(info) + " · server prefill",
                                     legendgroup=g, marker={"color": c, "symbol": "x", "size": 7, "opacity": 0.6},
                                     hovertemplate="prompt %{x} tok<br>server prefill %{y:.2f} ms<extra></extra>"))
        if fit is not None:
            a, b, cc = fit["a"], fit["b"], fit["c"]
            gx = np.linspace(0, max(xs) * 1.05, 120)
            r2 = f" (R² {fit['r2']:.3f})" if fit["r2"] is not None else ""
            fig.add_trace(go.Scatter(
                x=gx.tolist(), y=[(a + b * x + cc * x * x) * 1e3 for x in gx], mode="lines",
                line={"color": c, "dash": "dash"}, legendgroup=g,
                name=f"{_label(info)} · explain's fit: {a * 1e3:.3g} ms + {b * 1e6:.3g} µs·n + {cc * 1e9:.3g} ns·n²{r2}",
                hoverinfo="skip"))
            if fit["points"]:
                fx, fy = zip(*fit["points"])
                fig.add_trace(go.Scatter(x=fx, y=[y * 1e3 for y in fy], mode="markers", legendgroup=g,
                                         name=_label(info) + " · fitted points (best of each length)",
                                         marker={"color": c, "symbol": "diamond-open", "size": 11},
                                         hovertemplate="prompt %{x} tok<br>best TTFT %{y:.2f} ms<extra></extra>"))
            continue
        med = _stored_size_medians(info.summary)
        if not med:
            by: dict[float, list[float]] = {}
            for x, y in pts:
                by.setdefault(x, []).append(y)
            med = [(x, median(by[x])) for x in sorted(by)]  # type: ignore[misc]
        fig.add_trace(go.Scatter(x=[x for x, _ in med], y=[y * 1e3 for _, y in med], mode="lines+markers",
                                 line={"color": c}, marker={"color": c, "symbol": "diamond", "size": 9}, legendgroup=g,
                                 name=_label(info) + " · median TTFT per prompt length",
                                 hovertemplate="prompt %{x} tok<br>median TTFT %{y:.2f} ms<extra></extra>"))
    if not fig.data:
        if not seen:
            return "no successful request with a known prompt length and a first token"
        return (f"one prompt length ({_range_text(seen, 'tokens')}): nothing to scale against; "
                "see the TTFT distribution (probe or explain vary the prompt)")
    _layout(fig, "TTFT vs prompt length (prefill)", "prompt tokens", "TTFT (ms)")
    fig.update_yaxes(rangemode="tozero")
    return Plot("ttft_vs_prompt", "TTFT vs prompt length", fig,
                "dashed: explain's own fit TTFT ≈ a + b·n + c·n² over its best TTFT per length, as it stored it; "
                "solid: the median per prompt length")


def _cdf(values: list[float], n: int = 800) -> tuple[list[float], list[float]]:
    qs = np.linspace(0, 1, min(len(values), n))
    return np.quantile(np.asarray(values), qs).tolist(), qs.tolist()


def plot_ttft_distribution(runs: list[Run]) -> Plot | str:
    """Histogram (% of requests) and CDF of TTFT, one colour per run."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("histogram", "CDF"), horizontal_spacing=0.1)
    for k, (info, recs) in enumerate(runs):
        ttft = [t * 1e3 for t in (derive.ttft_s(r) for r in _ok(recs)) if t is not None]
        if len(set(ttft)) < 2:
            continue
        c = colour(k)
        p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
        name = f"{_label(info)} (p50 {p50:.1f} ms, p99 {p99:.1f} ms, n={len(ttft)})"
        fig.add_trace(go.Histogram(x=ttft, histnorm="percent", name=name, legendgroup=info.id, opacity=0.55,
                                   marker={"color": c}, nbinsx=min(40, max(8, len(ttft) // 3)),
                                   hovertemplate="TTFT %{x} ms<br>%{y:.1f} % of requests<extra></extra>"), row=1, col=1)
        xs, qs = _cdf(ttft)
        fig.add_trace(go.Scatter(x=xs, y=qs, mode="lines", line={"color": c, "width": 2}, name=name, legendgroup=info.id,
                                 showlegend=False, hovertemplate="TTFT %{x:.2f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"),
                      row=1, col=2)
    if not fig.data:
        return "fewer than two distinct TTFTs (no successful streamed requests)"
    _layout(fig, "Time to first token, per request (prefill + wait)", "TTFT (ms)", "% of requests", barmode="overlay")
    fig.update_xaxes(title_text="TTFT (ms)", row=1, col=2)
    fig.update_yaxes(title_text="fraction of requests ≤ x", range=[0, 1.02], row=1, col=2)
    return Plot("ttft_distribution", "TTFT distribution", fig)


# --- decode -------------------------------------------------------------------------------------
def plot_decode_vs_context(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go

    fig = go.Figure()
    seen: list[float] = []
    for k, (info, recs) in enumerate(runs):
        pts = []
        for r in _ok(recs):
            v = derive.decode_tok_s(r)
            p = r.prompt_tokens or r.prompt_tokens_requested
            n = derive._output_tokens(r)
            if v is None or not p or not n:
                continue
            pts.append((p + (n - 1) / 2, v))
        seen.extend(x for x, _ in pts)
        if not has_spread([x for x, _ in pts]):
            continue
        xs, ys = zip(*sorted(pts))
        c = colour(k)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=_label(info), legendgroup=info.id,
                                 marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="context %{x:.0f} tok<br>%{y:.1f} tok/s<extra></extra>"))
        by: dict[int, list[float]] = {}
        for x, y in pts:
            by.setdefault(round(x), []).append(y)
        mx = sorted(by)
        fig.add_trace(go.Scatter(x=mx, y=[median(by[x]) for x in mx], mode="lines", line={"color": c}, legendgroup=info.id,
                                 name=_label(info) + " · median", hoverinfo="skip"))
    if not fig.data:
        if not seen:
            return "no decode rates (needs streamed requests of two or more tokens)"
        return f"one context length ({_range_text([round(x) for x in seen], 'tokens')}): nothing to scale against"
    _layout(fig, "Decode tok/s vs context length (decode)", "mean context during decode (tokens)", "decode tok/s per request")
    fig.update_yaxes(rangemode="tozero")
    return Plot("decode_vs_context", "decode tok/s vs context length", fig)


def plot_itl_cdf(runs: list[Run]) -> Plot | str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for k, (info, recs) in enumerate(runs):
        s = samples_of(recs)
        itl = [x * 1e3 for x in s.pooled_itl() if x > 0]  # the CDF on a log axis: zero gaps cannot be drawn
        if len(set(itl)) < 2:
            continue
        xs, qs = _cdf(itl)
        # the legend's percentiles are the run's (show's ITL p50/p99), zero gaps included
        p50, p99 = (point_value(s, METRIC_BY_KEY[k2]) * 1e3 for k2 in ("itl_p50_s", "itl_p99_s"))  # type: ignore[operator]
        fig.add_trace(go.Scatter(
            x=xs, y=qs, mode="lines", line={"color": colour(k), "width": 2}, legendgroup=info.id,
            name=f"{_label(info)} (p50 {p50:.2f} ms, p99 {p99:.2f} ms, n={len(s.pooled_itl())} tokens)",
            hovertemplate="ITL %{x:.3f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"))
    if not fig.data:
        return "no streamed request with two or more tokens"
    _layout(fig, "Inter-token latency distribution (CDF, per token)", "ITL (ms, log scale)", "fraction of tokens ≤ x")
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[0, 1.02])
    return Plot("itl_cdf", "ITL distribution", fig)


# --- load ---------------------------------------------------------------------------------------
def _load_label(info: RunInfo, c: Any) -> str:
    if c is not None:
        return f"c={c}"
    rate = info.params.get("request_rate")
    return f"rate={rate}/s" if rate not in (None, "inf") else "rate=inf"


def plot_throughput_vs_itl(runs: list[Run]) -> Plot | str:
    """One point per load level: tagged levels within a run, or one point per bench run (its
    ``max_concurrency`` / ``request_rate``), runs of one model and target joined into a curve;
    only curves of two or more distinct levels are drawn."""
    import plotly.graph_objects as go

    curves: dict[tuple[Any, ...], list[tuple[float, float, str, float]]] = {}
    colours: dict[tuple[Any, ...], str] = {}
    names: dict[tuple[Any, ...], str] = {}
    for k, (info, recs) in enumerate(runs):
        rs = measured(recs)
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
        colours.setdefault(key, colour(k))
        for c, group in levels.items():
            s = samples_of(group)
            p99 = percentile(s.pooled_itl(), 99)
            if s.throughput_tok_s is None or p99 is None:
                continue
            rate = info.params.get("request_rate")
            order = float(c) if _num(c) else (float(rate) if _num(rate) else math.inf)
            curves.setdefault(key, []).append((p99 * 1e3, s.throughput_tok_s, esc(_load_label(info, c)), order))
    fig = go.Figure()
    for key, pts in curves.items():
        if len({p[3] for p in pts}) < 2 or len({round(p[0], 9) for p in pts}) < 2:
            continue
        pts.sort(key=lambda p: (p[3], p[1]))
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers+text", text=[p[2] for p in pts],
            textposition="top left", name=names[key], line={"color": colours[key]}, legendgroup=str(key[1]),
            hovertemplate="p99 ITL %{x:.2f} ms<br>%{y:.1f} tok/s<br>%{text}<extra></extra>"))
    if not fig.data:
        return ("one load level per run: a throughput/latency curve needs two or more "
                "(bench --sweep, or bench runs at several --max-concurrency)" if curves else
                "no load levels in these runs (a bench run, or records tagged with their concurrency)")
    _layout(fig, "Throughput vs p99 ITL across load levels", "p99 inter-token latency (ms)", "output throughput (tok/s)")
    fig.update_yaxes(rangemode="tozero")
    return Plot("throughput_vs_itl", "throughput vs p99 ITL", fig)


def _overlapping(recs: list[RequestRecord]) -> bool:
    spans = sorted((r.t_start_ns, r.t_done_ns or r.t_start_ns) for r in recs)
    end = -math.inf
    for a, b in spans:
        if a < end:
            return True
        end = max(end, b)
    return False


def _in_phase(spans: list[tuple[float, float]]) -> tuple[list[float], list[int]]:
    """Step function: how many of the [start, end) spans are open at each change point."""
    ev = sorted([(a, 1) for a, b in spans if b > a] + [(b, -1) for a, b in spans if b > a], key=lambda e: (e[0], e[1]))
    xs, ys, n = [0.0], [0], 0
    for t, d in ev:
        n += d
        if xs and xs[-1] == t:
            ys[-1] = n
        else:
            xs.append(t)
            ys.append(n)
    return xs, ys


def plot_request_timeline(runs: list[Run]) -> Plot | str:
    """Per-request phases over the run (bench runs, or runs whose requests overlap), and how many
    requests were prefilling / decoding at each moment."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    chosen: list[tuple[int, RunInfo, list[tuple[RequestRecord, dict[str, Any]]]]] = []
    for k, (info, recs) in enumerate(runs):
        ok = _ok(recs)
        if not ok or not (info.kind == "bench" or _overlapping(ok)):
            continue
        rows = [(r, s) for r in sorted(ok, key=lambda r: r.t_start_ns) if (s := derive.phase_spans_ns(r)) is not None]
        if len(rows) >= 2:
            chosen.append((k, info, rows))
    if not chosen:
        return "no run with overlapping requests (a bench run)"
    chosen = chosen[:4]
    n = len(chosen)
    fig = make_subplots(rows=n + 1, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        row_heights=[0.7 / n] * n + [0.3],
                        subplot_titles=[esc(_raw_label(i)) for _, i, _ in chosen] + ["requests in each phase"])
    notes = []
    server_prefill = False
    for row, (k, info, rows) in enumerate(chosen, start=1):
        if len(rows) > TIMELINE_MAX_REQUESTS:
            notes.append(f"{info.id}: the first {TIMELINE_MAX_REQUESTS} of {len(rows)} requests")
        all_rows = rows
        rows = rows[:TIMELINE_MAX_REQUESTS]
        t0 = min(s["arrived"] for _, s in all_rows)
        sec = lambda t: (t - t0) / 1e9  # noqa: E731
        seg: dict[str, tuple[list[Any], list[Any]]] = {p: ([], []) for p in ("waiting", "prefill", "decode")}
        pre_spans, dec_spans = [], []
        for i, (_, s) in enumerate(rows, start=1):
            pre0 = s["prefill_start"] if s["prefill_start"] is not None else s["sent"]
            server_prefill = server_prefill or s["prefill_start"] is not None
            for phase, a, b in (("waiting", s["arrived"], pre0), ("prefill", pre0, s["first_token"]),
                                ("decode", s["first_token"], s["last_token"])):
                if b > a or phase != "waiting":
                    seg[phase][0].extend([sec(a), sec(b), None])
                    seg[phase][1].extend([i, i, None])
            pre_spans.append((sec(pre0), sec(s["first_token"])))
            dec_spans.append((sec(s["first_token"]), sec(s["last_token"])))
        width = max(2, min(10, int(300 / len(rows))))
        for phase, (xs, ys) in seg.items():
            if not xs:
                continue
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=phase, legendgroup=phase, showlegend=row == 1,
                                     line={"color": PHASE_COLOURS[phase], "width": width}, meta={"phase": phase},
                                     hovertemplate=f"{phase} %{{x:.3f}} s<br>request %{{y}}<extra></extra>"), row=row, col=1)
        fig.update_yaxes(title_text="request", autorange="reversed", row=row, col=1)
        c = colour(k)
        for phase, spans in (("prefill", pre_spans), ("decode", dec_spans)):
            xs, ys = _in_phase(spans)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": c, "dash": DASH[phase], "shape": "hv"},
                                     name=f"{_label(info)} · in {phase}", legendgroup=info.id, meta={"metric": phase},
                                     hovertemplate=f"%{{x:.3f}} s<br>%{{y}} in {phase}<extra></extra>"), row=n + 1, col=1)
    if not server_prefill:
        notes.append("no server prompt timings: each bar's orange part is its whole TTFT (the server's queue and the "
                     "prefill together); grey is only the client-side wait")
    _layout(fig, "Requests over time: waited, prefilled, decoded (prefill and decode sharing the device)", "", "")
    fig.update_layout(height=300 + 180 * n)
    fig.update_xaxes(title_text="time since the first arrival (s)", row=n + 1, col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=n + 1, col=1)
    return Plot("request_timeline", "request timeline", fig, "; ".join(
        ["grey: waited (scheduled → sent → the server began the prompt), orange: prefill (the server's prompt "
         "time), blue: decode (first → last token)", *notes]))


# --- server /metrics ------------------------------------------------------------------------------
#: timeline series: requests panel, percent panel (stored as fractions, drawn in %), token-rate panel
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
    """Up to three panels over the run, each with its own unit: requests (running, waiting,
    preemptions), % (KV cache, prefix-cache hits: the stored fractions × 100), server tok/s."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = (("requests", QUEUE_SERIES, 1.0), ("KV cache / prefix-cache hits (%)", FRACTION_SERIES, 100.0),
              ("server tok/s", RATE_SERIES, 1.0))
    found = [(k, info, tl) for k, (info, _) in enumerate(runs) if (tl := find_timeline(info.summary)) is not None]
    used = [p for p in panels if any(any(isinstance(v, (int, float)) for v in tl.get(s) or []) for _, _, tl in found
                                     for s in p[1])]
    if not used:
        return "no server metrics timeline in the runs' summaries (bench records one when the server exposes /metrics)"
    fig = make_subplots(rows=len(used), cols=1, shared_xaxes=True, vertical_spacing=0.07)
    for row, (title, series, scale) in enumerate(used, start=1):
        for k, info, tl in found:
            for name in series:
                vals = tl.get(name)
                if not vals or not any(isinstance(v, (int, float)) for v in vals):
                    continue
                ys = [None if not isinstance(v, (int, float)) else v * scale for v in vals]
                fig.add_trace(go.Scatter(
                    x=tl["t_s"], y=ys, mode="lines", name=f"{_label(info)} · {METRIC_LABEL.get(name, esc(name))}",
                    legendgroup=info.id, meta={"metric": name},
                    line={"color": colour(k), "dash": DASH.get(name, "solid"), "shape": "hv" if name in QUEUE_SERIES else "linear"},
                    hovertemplate=f"%{{x:.1f}} s<br>{METRIC_LABEL.get(name, esc(name))} %{{y:.3g}}<extra></extra>"),
                    row=row, col=1)
        kw: dict[str, Any] = {"range": [0, 100]} if scale == 100.0 else {"rangemode": "tozero"}
        fig.update_yaxes(title_text=title, row=row, col=1, **kw)
    _layout(fig, "Server queue, KV cache and token rates during the run (server /metrics)", "", "")
    fig.update_layout(height=260 + 170 * len(used))
    fig.update_xaxes(title_text="time since start (s)", row=len(used), col=1)
    return Plot("server_timeline", "server queue / KV timeline", fig,
                "solid / dashed / dotted: one metric each (see the legend); one colour per run")


# --- ceilings (roofline) ------------------------------------------------------------------------------
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


def _prefill_rate(rs: list[RequestRecord]) -> float | None:
    srv = [derive.server_prefill_tok_s(r) for r in rs]
    if any(v is not None for v in srv):
        return median(srv)
    return median([derive.prefill_tok_s(r) for r in rs])


def _stored_sizes(summary: Any) -> dict[float, dict[str, Any]]:
    """The probe summary's per-size rows (``sizes``), by prompt tokens."""
    out: dict[float, dict[str, Any]] = {}
    if isinstance(summary, dict):
        for s in summary.get("sizes") or []:
            if isinstance(s, dict):
                n = s.get("prompt_tokens") or s.get("prompt_tokens_target")
                if _num(n):
                    out[float(n)] = s
    return out


def _stored_ceiling_rows(summary: Any) -> dict[float | None, dict[str, Any]]:
    ce = summary.get("ceilings") if isinstance(summary, dict) else None
    rows = ce.get("sizes") if isinstance(ce, dict) else None
    out: dict[float | None, dict[str, Any]] = {}
    for r in rows or []:
        if isinstance(r, dict):
            n = r.get("prompt_tokens")
            out[float(n) if _num(n) else None] = r
    return out


def roofline_rows(info: RunInfo, recs: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per (phase, prompt size) with ``phase``, ``prompt_tokens``, ``attained_tok_s``,
    ``ceiling_tok_s``, ``efficiency`` and ``binding`` — stored values first: the probe summary's
    ``sizes`` (decode_tok_s; server prefill_tok_s, else client) and ``ceilings.sizes``
    (decode_ceiling_tok_s, decode_efficiency, decode_binding, prefill_floor_s → prompt ÷ floor,
    prefill_efficiency); a size without a stored rate takes the median of its single-stream
    records (derive)."""
    ceil = find_ceilings(info.summary)
    if not ceil:
        return []
    stored = _stored_sizes(info.summary)
    crow = _stored_ceiling_rows(info.summary)
    by: dict[float, list[RequestRecord]] = {}
    for r in _ok(recs):
        if r.tags.get("concurrency") in (None, 1):
            n = _size_of(r)
            if _num(n):
                by.setdefault(float(n), []).append(r)
    sizes = sorted(set(by) | set(stored)) or [None]  # type: ignore[list-item]
    out = []
    for phase in ("decode", "prefill"):
        key = f"{phase}_tok_s"
        for n in sizes:
            c = next((r for r in ceil if r["prompt_tokens"] == n), None) or next(
                (r for r in ceil if r["prompt_tokens"] is None), None)
            if c is None or c[key] is None:
                continue
            s = stored.get(n) if n is not None else None
            srv = (s or {}).get("server") or {}
            if phase == "decode":
                att = (s or {}).get("decode_tok_s")
                if att is None and n in by:
                    att = median([derive.decode_tok_s(r) for r in by[n]])
            else:
                att = srv.get("prefill_tok_s") or (s or {}).get("prefill_tok_s")
                if att is None and n in by:
                    att = _prefill_rate(by[n])
            cr = crow.get(n) or crow.get(None) or {}
            out.append({"phase": phase, "prompt_tokens": n, "attained_tok_s": att, "ceiling_tok_s": c[key],
                        "efficiency": cr.get(f"{phase}_efficiency"),
                        "binding": cr.get("decode_binding") if phase == "decode" else "compute"})
    return out


def _pale(hex_colour: str, alpha: float = 0.22) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _pct_text(x: float) -> str:
    """As the phase card writes a share: one decimal below 10 %."""
    return f"{x * 100:.1f}%" if x < 0.1 else f"{x * 100:.0f}%"


def plot_ceilings(runs: list[Run]) -> Plot | str:
    """The roofline view, per phase: attained tok/s next to the physical ceiling (a pale bar
    behind a solid one), one row per prompt size, labelled with efficiency and binding roof."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    per_run = [(k, info, roofline_rows(info, recs)) for k, (info, recs) in enumerate(runs)]
    per_run = [x for x in per_run if x[2]]
    if not per_run:
        return "no ceilings in the runs' summaries (probe adds them when model and device are known: --model, --device)"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("decode tok/s, one stream (memory-bandwidth roof)", "prefill tok/s (compute roof)"))
    several = len(per_run) > 1
    n_rows = 0
    for k, info, rows in per_run:
        c = colour(k)
        for col, phase in ((1, "decode"), (2, "prefill")):
            rs = [r for r in rows if r["phase"] == phase]
            if not rs:
                continue
            n_rows = max(n_rows, len(rs) * len(per_run))
            ys = [esc((f"{info.id} · " if several else "") + (f"{r['prompt_tokens']:g}-token prompt" if r["prompt_tokens"] else "any prompt"))
                  for r in rs]
            fig.add_trace(go.Bar(x=[r["ceiling_tok_s"] for r in rs], y=ys, orientation="h", name=f"{_label(info)} · ceiling",
                                 legendgroup=info.id, showlegend=col == 1, marker={"color": _pale(c),
                                                                                  "line": {"color": c, "width": 1.5}},
                                 meta={"metric": "ceiling"}, text=[f"{esc(r['binding'])} roof" if r["binding"] else "" for r in rs],
                                 textposition="inside", insidetextanchor="end",
                                 hovertemplate="%{y}<br>ceiling %{x:,.0f} tok/s (%{text})<extra></extra>"), row=1, col=col)
            fig.add_trace(go.Bar(x=[r["attained_tok_s"] for r in rs], y=ys, orientation="h", name=f"{_label(info)} · attained",
                                 legendgroup=info.id, showlegend=col == 1, marker={"color": c}, meta={"metric": "attained"},
                                 text=[f"{_pct_text(r['efficiency'])} of ceiling" if _num(r["efficiency"]) else "" for r in rs],
                                 textposition="outside", cliponaxis=False, textfont={"color": "#222"},
                                 hovertemplate="%{y}<br>attained %{x:,.1f} tok/s<br>%{text}<extra></extra>"), row=1, col=col)
    _layout(fig, "Attained vs physical ceiling per phase (roofline)", "tok/s", "", barmode="overlay", bargap=0.35)
    fig.update_layout(height=max(380, 240 + 55 * n_rows), margin={"l": 130, "r": 30, "t": 70, "b": 130},
                      legend={"orientation": "h", "y": -0.32, "yanchor": "top"})
    fig.update_xaxes(title_text="decode tok/s", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="prefill tok/s (log scale)", type="log", row=1, col=2)
    fig.update_yaxes(autorange="reversed")
    return Plot("ceilings", "attained vs ceiling (roofline)", fig,
                "pale bar: the physical ceiling of that phase (its binding roof named inside); solid bar: attained, "
                "labelled with the stored efficiency. decode: single-stream rate; prefill: server-side rate where "
                "reported, else prompt ÷ TTFT")


# --- several endpoints (bench --target, issue 10) -----------------------------------------------
def endpoint_groups(recs: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """A run's measured records by endpoint (``tags.endpoint``, as :mod:`phasescope.load.routing`
    tags them), in first-seen order. Records without the tag are left out."""
    out: dict[str, list[RequestRecord]] = {}
    for r in measured(recs):
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
        fig.add_trace(go.Bar(x=xs, y=[r[key] for r in rows], name=name, marker={"color": colour(k)},
                             hovertemplate="%{x}<br>" + name + " %{y:.2f} ms<extra></extra>"))
    _layout(fig, "Latency per endpoint", "endpoint", "ms (log)", barmode="group")
    fig.update_yaxes(type="log")
    return Plot("per_endpoint", "latency per endpoint", fig,
                note="Each endpoint's requests alone (records tagged with their endpoint); ITL per token.")


PLOTS: tuple[tuple[str, str, Callable[[list[Run]], Plot | str]], ...] = (
    ("ttft_vs_prompt", "TTFT vs prompt length", plot_ttft_vs_prompt),
    ("ttft_distribution", "TTFT distribution", plot_ttft_distribution),
    ("decode_vs_context", "decode tok/s vs context length", plot_decode_vs_context),
    ("itl_cdf", "ITL distribution", plot_itl_cdf),
    ("throughput_vs_itl", "throughput vs p99 ITL", plot_throughput_vs_itl),
    ("request_timeline", "request timeline", plot_request_timeline),
    ("server_timeline", "server queue / KV timeline", plot_server_timeline),
    ("ceilings", "attained vs ceiling (roofline)", plot_ceilings),
)


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
        if name == "server_timeline":  # the GPU timeline goes under it; [] without GPU telemetry
            from phasescope.report.gpu_plots import gpu_timeline_plots

            plots.extend(gpu_timeline_plots(runs))
    pe = plot_per_endpoint(runs)
    if not isinstance(pe, str):
        plots.append(pe)
    return plots, skipped
