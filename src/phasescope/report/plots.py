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
* ``request_timeline`` and ``server_timeline`` — :mod:`phasescope.report.timeline_plots` (and the GPU
  timeline under them, :mod:`phasescope.report.gpu_plots`),
* ``ceilings`` — the roofline view, :mod:`phasescope.report.ceiling_plots`,
* ``per_endpoint`` (only when a run's records went to more than one endpoint, ``bench --target``).

Colours, dashes, the layout and HTML escaping are :mod:`phasescope.report.figure`'s; :data:`PLOTS` and
:func:`build_plots` put every figure of the report in its order.
"""

from __future__ import annotations

import math
from typing import Any, Callable
from urllib.parse import urlsplit

import numpy as np

from phasescope.measure import derive
from phasescope.measure.aggregate import METRIC_BY_KEY, measured, median, percentile, point_value, samples_of
from phasescope.measure.records import RequestRecord
from phasescope.report.figure import (
    Plot,
    Run,
    colour,
    esc,
    has_spread,
    is_num,
    label,
    layout,
    ok_records,
    range_text,
)
from phasescope.store import RunInfo
from phasescope.report.ceiling_plots import plot_ceilings, stored_sizes
from phasescope.report.gpu_plots import gpu_timeline_plots
from phasescope.report.timeline_plots import plot_request_timeline, plot_server_timeline


# --- prefill ------------------------------------------------------------------------------------
def stored_ttft_fit(summary: Any) -> dict[str, Any] | None:
    """explain's own prompt-scaling fit, as it stored it (``experiments["prompt-scaling"].fit``:
    ``a_s``, ``b_s_per_token``, ``c_s_per_token2``, ``r2``) with the points it fitted (each
    length's best TTFT, ``ttft_min_s``, else its median) — the report draws this fit, it never
    fits again over every record of the run (which mixes in the other experiments' requests)."""
    exps = summary.get("experiments") if isinstance(summary, dict) else None
    ps = exps.get("prompt-scaling") if isinstance(exps, dict) else None
    fit = ps.get("fit") if isinstance(ps, dict) else None
    if not isinstance(fit, dict) or not all(is_num(fit.get(k)) for k in ("a_s", "b_s_per_token", "c_s_per_token2")):
        return None
    pts = []
    for p in ps.get("points") or []:
        if isinstance(p, dict) and is_num(p.get("prompt_tokens")):
            y = p.get("ttft_min_s") if is_num(p.get("ttft_min_s")) else p.get("ttft_s")
            if is_num(y):
                pts.append((float(p["prompt_tokens"]), float(y)))
    return {"a": float(fit["a_s"]), "b": float(fit["b_s_per_token"]), "c": float(fit["c_s_per_token2"]),
            "r2": float(fit["r2"]) if is_num(fit.get("r2")) else None, "points": pts}


def _stored_size_medians(summary: Any) -> list[tuple[float, float]]:
    """(prompt tokens, median TTFT) per size from a probe summary's ``sizes``."""
    return sorted((n, float(s["ttft_s"])) for n, s in stored_sizes(summary).items() if is_num(s.get("ttft_s")))


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
        ok = ok_records(recs)
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
        fig.add_trace(go.Scatter(x=xs, y=[y * 1e3 for y in ys], mode="markers", name=label(info) + " · TTFT",
                                 legendgroup=g, marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="prompt %{x} tok<br>TTFT %{y:.2f} ms<extra></extra>"))
        srv = [(float(r.prompt_tokens or r.prompt_tokens_requested or 0), (r.server or {}).get("prefill_s")) for r in ok]
        srv = [(x, float(y)) for x, y in srv if x and isinstance(y, (int, float))]
        if srv:
            sx, sy = zip(*srv)
            fig.add_trace(go.Scatter(x=sx, y=[y * 1e3 for y in sy], mode="markers", name=label(info) + " · server prefill",
                                     legendgroup=g, marker={"color": c, "symbol": "x", "size": 7, "opacity": 0.6},
                                     hovertemplate="prompt %{x} tok<br>server prefill %{y:.2f} ms<extra></extra>"))
        if fit is not None:
            a, b, cc = fit["a"], fit["b"], fit["c"]
            gx = np.linspace(0, max(xs) * 1.05, 120)
            r2 = f" (R² {fit['r2']:.3f})" if fit["r2"] is not None else ""
            fig.add_trace(go.Scatter(
                x=gx.tolist(), y=[(a + b * x + cc * x * x) * 1e3 for x in gx], mode="lines",
                line={"color": c, "dash": "dash"}, legendgroup=g,
                name=f"{label(info)} · explain's fit: {a * 1e3:.3g} ms + {b * 1e6:.3g} µs·n + {cc * 1e9:.3g} ns·n²{r2}",
                hoverinfo="skip"))
            if fit["points"]:
                fx, fy = zip(*fit["points"])
                fig.add_trace(go.Scatter(x=fx, y=[y * 1e3 for y in fy], mode="markers", legendgroup=g,
                                         name=label(info) + " · fitted points (best of each length)",
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
                                 name=label(info) + " · median TTFT per prompt length",
                                 hovertemplate="prompt %{x} tok<br>median TTFT %{y:.2f} ms<extra></extra>"))
    if not fig.data:
        if not seen:
            return "no successful request with a known prompt length and a first token"
        return (f"one prompt length ({range_text(seen, 'tokens')}): nothing to scale against; "
                "see the TTFT distribution (probe or explain vary the prompt)")
    layout(fig, "TTFT vs prompt length (prefill)", "prompt tokens", "TTFT (ms)")
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
        ttft = [t * 1e3 for t in (derive.ttft_s(r) for r in ok_records(recs)) if t is not None]
        if len(set(ttft)) < 2:
            continue
        c = colour(k)
        p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
        name = f"{label(info)} (p50 {p50:.1f} ms, p99 {p99:.1f} ms, n={len(ttft)})"
        fig.add_trace(go.Histogram(x=ttft, histnorm="percent", name=name, legendgroup=info.id, opacity=0.55,
                                   marker={"color": c}, nbinsx=min(40, max(8, len(ttft) // 3)),
                                   hovertemplate="TTFT %{x} ms<br>%{y:.1f} % of requests<extra></extra>"), row=1, col=1)
        xs, qs = _cdf(ttft)
        fig.add_trace(go.Scatter(x=xs, y=qs, mode="lines", line={"color": c, "width": 2}, name=name, legendgroup=info.id,
                                 showlegend=False, hovertemplate="TTFT %{x:.2f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"),
                      row=1, col=2)
    if not fig.data:
        return "fewer than two distinct TTFTs (no successful streamed requests)"
    layout(fig, "Time to first token, per request (prefill + wait)", "TTFT (ms)", "% of requests", barmode="overlay")
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
        for r in ok_records(recs):
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
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=label(info), legendgroup=info.id,
                                 marker={"color": c, "size": 7, "opacity": 0.7},
                                 hovertemplate="context %{x:.0f} tok<br>%{y:.1f} tok/s<extra></extra>"))
        by: dict[int, list[float]] = {}
        for x, y in pts:
            by.setdefault(round(x), []).append(y)
        mx = sorted(by)
        fig.add_trace(go.Scatter(x=mx, y=[median(by[x]) for x in mx], mode="lines", line={"color": c}, legendgroup=info.id,
                                 name=label(info) + " · median", hoverinfo="skip"))
    if not fig.data:
        if not seen:
            return "no decode rates (needs streamed requests of two or more tokens)"
        return f"one context length ({range_text([round(x) for x in seen], 'tokens')}): nothing to scale against"
    layout(fig, "Decode tok/s vs context length (decode)", "mean context during decode (tokens)", "decode tok/s per request")
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
            name=f"{label(info)} (p50 {p50:.2f} ms, p99 {p99:.2f} ms, n={len(s.pooled_itl())} tokens)",
            hovertemplate="ITL %{x:.3f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"))
    if not fig.data:
        return "no streamed request with two or more tokens"
    layout(fig, "Inter-token latency distribution (CDF, per token)", "ITL (ms, log scale)", "fraction of tokens ≤ x")
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
            names[key] = label(info)
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
            order = float(c) if is_num(c) else (float(rate) if is_num(rate) else math.inf)
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
    layout(fig, "Throughput vs p99 ITL across load levels", "p99 inter-token latency (ms)", "output throughput (tok/s)")
    fig.update_yaxes(rangemode="tozero")
    return Plot("throughput_vs_itl", "throughput vs p99 ITL", fig)


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
    layout(fig, "Latency per endpoint", "endpoint", "ms (log)", barmode="group")
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
            plots.extend(gpu_timeline_plots(runs))
    pe = plot_per_endpoint(runs)
    if not isinstance(pe, str):
        plots.append(pe)
    from phasescope.report.tune_plots import tune_plots

    plots.extend(tune_plots(runs))  # a tune run: one plot per metric across its settings; [] otherwise
    return plots, skipped
