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
* ``ttft_distribution`` — histogram (% of requests) and step CDF of TTFT, one row per population.
* ``decode_vs_context`` — per-request decode tok/s vs mean context during decode
  (prompt + (output − 1)/2 tokens), when contexts differ by ≥ 10 %; the line joins the median per
  nominal context of the requests that decoded alone, in order of context.
* ``itl_cdf`` — empirical CDF of per-token inter-token latency (:func:`~phasescope.measure.derive.itl_s`).
* ``throughput_vs_itl`` — output throughput vs p99 ITL, one point per load level (records tagged
  ``concurrency``, or bench runs of one model and target), drawn with two or more levels.
* ``request_timeline`` and ``server_timeline`` — :mod:`phasescope.report.timeline_plots` (and the GPU
  timeline under them, :mod:`phasescope.report.gpu_plots`),
* ``ceilings`` — the roofline view, :mod:`phasescope.report.ceiling_plots`,
* ``per_endpoint`` (only when a run's records went to more than one endpoint, ``bench --target``),
  :mod:`phasescope.report.endpoint_plots`.
* ``twin`` (only when a bench run stored a twin block) — predicted against measured, :mod:`phasescope.report.twin_plots`.
* ``waterfall_slowest`` and ``waterfall_bands`` (only when requests carry the server's own timings) — where the
  time went, :mod:`phasescope.report.waterfall_plots`.

Which requests one histogram or one median line may hold — by experiment, phase, load and prompt size,
and which decoded alone — is :mod:`phasescope.report.populations`' (never 200- and 2,000-token
prompts in one histogram, never a batch's share joined into a single-stream line).

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
    error_bars,
    esc,
    has_spread,
    is_num,
    label,
    layout,
    ok_records,
    range_text,
    sample_ci,
)
from phasescope.store import RunInfo
from phasescope.report.ceiling_plots import plot_ceilings, stored_sizes
from phasescope.report.endpoint_plots import endpoint_groups, endpoint_rows, plot_per_endpoint  # noqa: F401
from phasescope.report.gpu_plots import gpu_timeline_plots
from phasescope.report.populations import (  # noqa: F401  (ttft_populations, size_clusters: re-exported)
    SIZE_FACTOR,
    decoding_alone,
    nominal_size,
    size_clusters,
    ttft_populations,
)
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
    drew_fit = drew_median = drew_server = drew_ci = False
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
            drew_server = True
            sx, sy = zip(*srv)
            fig.add_trace(go.Scatter(x=sx, y=[y * 1e3 for y in sy], mode="markers", name=label(info) + " · server prefill",
                                     legendgroup=g, marker={"color": c, "symbol": "x", "size": 7, "opacity": 0.6},
                                     hovertemplate="prompt %{x} tok<br>server prefill %{y:.2f} ms<extra></extra>"))
        if fit is not None:
            drew_fit = True
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
        by: dict[float, list[float]] = {}
        for r in ok:  # each size's TTFTs, by the size it was sent at (and by its counted length)
            t = derive.ttft_s(r)
            n = nominal_size(r)
            if t is not None and n is not None:
                by.setdefault(n, []).append(t)
        if not med:
            by = {}
            for x, y in pts:
                by.setdefault(x, []).append(y)
            med = [(x, median(by[x])) for x in sorted(by)]  # type: ignore[misc]
        stored = stored_sizes(info.summary)
        cis = [sample_ci((stored.get(x) or {}).get("ttft_s_ci"), by.get(x) or []) for x, _ in med]
        drew_median = True
        drew_ci = drew_ci or any(ci is not None for ci in cis)
        fig.add_trace(go.Scatter(x=[x for x, _ in med], y=[y * 1e3 for _, y in med], mode="lines+markers",
                                 line={"color": c}, marker={"color": c, "symbol": "diamond", "size": 9}, legendgroup=g,
                                 error_y=error_bars([y for _, y in med], cis, 1e3),
                                 name=label(info) + " · median TTFT per prompt length",
                                 hovertemplate="prompt %{x} tok<br>median TTFT %{y:.2f} ms<extra></extra>"))
    if not fig.data:
        if not seen:
            return "no successful request with a known prompt length and a first token"
        return (f"one prompt length ({range_text(seen, 'tokens')}): nothing to scale against; "
                "see the TTFT distribution (probe or explain vary the prompt)")
    layout(fig, "TTFT vs prompt length (prefill)", "prompt tokens", "TTFT (ms)")
    fig.update_yaxes(rangemode="tozero")
    # the caption names only the lines drawn: a probe stores no fit, so it gets no "dashed" line to look for
    notes = ["dots: one request each (TTFT at the client)"]
    if drew_server:
        notes.append("crosses: the server's own prompt time for the same request")
    if drew_fit:
        notes.append("dashed: explain's own fit TTFT ≈ a + b·n + c·n² over its best TTFT per length, as it stored "
                     "it (diamonds: the points it fitted)")
    if drew_median:
        notes.append("solid: the median TTFT per prompt length (the probe's stored median per size where it has one)"
                     + ("; its bars: the 95 % interval of that median (the stored one, else from the repeats)"
                        if drew_ci else ""))
    return Plot("ttft_vs_prompt", "TTFT vs prompt length", fig, "; ".join(notes))


def _cdf(values: list[float], n: int = 800) -> tuple[list[float], list[float]]:
    """The empirical CDF as a step line (drawn with ``shape="hv"``): with up to ``n`` values each
    one's step, from (min, 0) to (max, 1); more values are sampled at ``n`` quantiles. (Joining three
    quantiles with straight lines drew three requests as a smooth distribution.)"""
    v = sorted(values)
    if len(v) <= n:
        return [v[0], *v], [0.0, *((i + 1) / len(v) for i in range(len(v)))]
    qs = np.linspace(0, 1, n)
    return np.quantile(np.asarray(v), qs).tolist(), qs.tolist()


#: at most this many TTFT populations get a histogram row (the largest); the rest are named in the note
MAX_TTFT_PANELS = 8
#: a population of fewer requests gets no histogram (its TTFTs are in "TTFT vs prompt length")
MIN_HIST_REQUESTS = 3


def plot_ttft_distribution(runs: list[Run]) -> Plot | str:
    """Histogram (% of requests) and CDF of TTFT, one row per population (:func:`ttft_populations`:
    experiment, load level, prompt size), each with its own TTFT axis; the runs overlaid in each row,
    one colour per run."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels: dict[str, list[tuple[int, RunInfo, list[float]]]] = {}
    order: dict[str, tuple[Any, ...]] = {}
    single: list[str] = []
    for k, (info, recs) in enumerate(runs):
        for key, name, ttft in ttft_populations(recs):
            if len(ttft) < MIN_HIST_REQUESTS or len(set(ttft)) < 2:
                single.append(name)
                continue
            panels.setdefault(name, []).append((k, info, ttft))
            order.setdefault(name, key)
    if not panels:
        if single:
            return (f"fewer than {MIN_HIST_REQUESTS} requests (or one distinct TTFT) per prompt size or experiment: "
                    "no distribution to draw (see TTFT vs prompt length)")
        return "fewer than two distinct TTFTs (no successful streamed requests)"
    # the most-sampled populations get the rows, drawn in order of experiment, load and size
    biggest = sorted(panels, key=lambda n: (-max(len(t) for _, _, t in panels[n]), order[n]))
    left_out = sorted(biggest[MAX_TTFT_PANELS:], key=lambda n: order[n])
    names = sorted(biggest[:MAX_TTFT_PANELS], key=lambda n: order[n])
    n = len(names)
    titles = [t for name in names for t in (f"{esc(name)} · histogram", f"{esc(name)} · CDF")]
    fig = make_subplots(rows=n, cols=2, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=min(0.12, 0.5 / n) if n > 1 else 0.1)
    for row, name in enumerate(names, start=1):
        for k, info, ttft in panels[name]:
            c = colour(k)
            p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
            legend = f"{label(info)} · {esc(name)} (p50 {p50:.1f} ms, p99 {p99:.1f} ms, n={len(ttft)})"
            fig.add_trace(go.Histogram(x=ttft, histnorm="percent", name=legend, legendgroup=info.id, opacity=0.55,
                                       marker={"color": c}, nbinsx=min(40, max(8, len(ttft) // 3)),
                                       hovertemplate="TTFT %{x} ms<br>%{y:.1f} % of requests<extra></extra>"),
                          row=row, col=1)
            xs, qs = _cdf(ttft)
            fig.add_trace(go.Scatter(x=xs, y=qs, mode="lines", line={"color": c, "width": 2, "shape": "hv"},
                                     name=legend,
                                     legendgroup=info.id, showlegend=False,
                                     hovertemplate="TTFT %{x:.2f} ms<br>fraction ≤ %{y:.3f}<extra></extra>"),
                          row=row, col=2)
        fig.update_yaxes(title_text="% of requests", row=row, col=1)
        fig.update_yaxes(title_text="fraction ≤ x", range=[0, 1.02], row=row, col=2)
    layout(fig, "Time to first token, per request (prefill + wait)", "", "", barmode="overlay")
    fig.update_xaxes(title_text="TTFT (ms)", row=n, col=1)
    fig.update_xaxes(title_text="TTFT (ms)", row=n, col=2)
    fig.update_layout(height=260 + 240 * n, legend={"orientation": "h", "y": -0.4 / n - 0.04, "yanchor": "top"})
    notes = [f"one row per experiment, phase, load level and prompt size (sizes within {SIZE_FACTOR:g}× of each other "
             "are one; their TTFTs differ by design and are never pooled), each with its own TTFT axis"]
    if left_out:
        notes.append(f"not drawn ({len(left_out)} more, fewer requests): {', '.join(left_out)}")
    if single:
        few = list(dict.fromkeys(single))
        notes.append(f"fewer than {MIN_HIST_REQUESTS} requests each, no histogram ({len(few)}): "
                     + ", ".join(few[:12]) + (" …" if len(few) > 12 else ""))
    return Plot("ttft_distribution", "TTFT distribution", fig, "; ".join(notes))


# --- decode -------------------------------------------------------------------------------------
def plot_decode_vs_context(runs: list[Run]) -> Plot | str:
    """Per-request decode tok/s vs the mean context during decode (prompt + (output − 1)/2 tokens).
    The line is the median per nominal context (the size the request was sent at,
    :func:`~phasescope.report.populations.nominal_size`,
    clustered by :func:`size_clusters`), joined in order of context — one vertex per context,
    not one per request. Requests that shared the server with others (:func:`decoding_alone`: another
    request in flight while they decoded, or ``tags.concurrency`` > 1) are drawn apart as markers and
    never joined into the single-stream line: their per-request rate is the batch's share, not the
    speed at that context."""
    import plotly.graph_objects as go

    fig = go.Figure()
    seen: list[float] = []
    for k, (info, recs) in enumerate(runs):
        single: list[tuple[float, float, float | None]] = []
        shared: dict[Any, list[tuple[float, float]]] = {}
        ok = ok_records(recs)
        alone = decoding_alone(ok)
        for r in ok:
            v = derive.decode_tok_s(r)
            p = r.prompt_tokens or r.prompt_tokens_requested
            n = derive.output_tokens(r)
            if v is None or not p or not n:
                continue
            x = p + (n - 1) / 2
            c = r.tags.get("concurrency")
            if id(r) in alone and not (is_num(c) and float(c) > 1):
                single.append((x, v, nominal_size(r)))
            else:
                shared.setdefault(float(c) if is_num(c) else None, []).append((x, v))
        xs_all = [x for x, _, _ in single] + [x for pts in shared.values() for x, _ in pts]
        seen.extend(xs_all)
        if not has_spread(xs_all):
            continue
        c = colour(k)
        if single:
            pts = sorted(single)
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", name=label(info),
                                     legendgroup=info.id, marker={"color": c, "size": 7, "opacity": 0.7},
                                     hovertemplate="context %{x:.0f} tok<br>%{y:.1f} tok/s<extra></extra>"))
            nominal = [p[2] if p[2] is not None else p[0] for p in pts]
            groups = []
            for lo, hi in size_clusters(nominal):
                g = [(x, y) for (x, y, _), nm in zip(pts, nominal) if lo <= nm <= hi]
                if g:
                    groups.append((median([x for x, _ in g]), median([y for _, y in g]), len(g)))
            groups.sort()
            if len(groups) >= 2:
                fig.add_trace(go.Scatter(
                    x=[g[0] for g in groups], y=[g[1] for g in groups], mode="lines+markers", line={"color": c},
                    marker={"color": c, "symbol": "diamond", "size": 9}, legendgroup=info.id,
                    text=[f"{g[2]} requests" for g in groups], name=label(info) + " · median per context",
                    hovertemplate="context %{x:.0f} tok<br>median %{y:.1f} tok/s (%{text})<extra></extra>"))
        for j, (cc, pts) in enumerate(sorted(shared.items(), key=lambda kv: -1.0 if kv[0] is None else kv[0])):
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", legendgroup=info.id,
                name=f"{label(info)} · concurrent requests (c={cc:g})" if cc is not None else
                f"{label(info)} · concurrent requests (decoded while others were in flight)",
                marker={"color": c, "symbol": ("x", "cross", "triangle-up", "square-open")[j % 4], "size": 7,
                        "opacity": 0.5},
                hovertemplate="context %{x:.0f} tok<br>%{y:.1f} tok/s per request, shared<extra></extra>"))
    if not fig.data:
        if not seen:
            return "no decode rates (needs streamed requests of two or more tokens)"
        return f"one context length ({range_text([round(x) for x in seen], 'tokens')}): nothing to scale against"
    layout(fig, "Decode tok/s vs context length (decode)", "mean context during decode (tokens)", "decode tok/s per request")
    fig.update_yaxes(rangemode="tozero")
    return Plot("decode_vs_context", "decode tok/s vs context length", fig,
                "dots: one request each that decoded alone; line: their median per context the requests were sent "
                "at, in order of context; crosses: requests that decoded while others were in flight (a batch's "
                "share, not joined)")


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
            x=xs, y=qs, mode="lines", line={"color": colour(k), "width": 2, "shape": "hv"}, legendgroup=info.id,
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
    # a tune run has no requests of its own: its settings' runs do (say that, not "no successful request")
    tune_only = bool(runs) and all(i.kind == "tune" and not recs for i, recs in runs)
    for name, _, fn in PLOTS:
        res = fn(runs)
        if isinstance(res, str):
            if tune_only:
                ids = [str(r.get("run_id")) for i, _ in runs for r in ((i.summary or {}).get("settings") or [])
                       if isinstance(r, dict) and r.get("run_id")]
                res = ("a tune run stores no requests of its own; each setting's run does"
                       + (f" (phasescope report {' '.join(ids[:4])}{' …' if len(ids) > 4 else ''})" if ids else ""))
            skipped[name] = res
        else:
            plots.append(res)
        if name == "server_timeline":  # the GPU timeline goes under it; [] without GPU telemetry
            plots.extend(gpu_timeline_plots(runs))
    pe = plot_per_endpoint(runs)
    if not isinstance(pe, str):
        plots.append(pe)
    from phasescope.report.twin_plots import plot_twin

    tw = plot_twin(runs)  # bench's twin: predicted against measured (issue 36), only when a run stored one
    if not isinstance(tw, str):
        plots.append(tw)
    from phasescope.report.waterfall_plots import plot_waterfall_bands, plot_waterfall_slowest

    for wfp in (plot_waterfall_slowest(runs), plot_waterfall_bands(runs)):  # only with the server's timings
        if not isinstance(wfp, str):
            plots.append(wfp)
    from phasescope.report.tune_plots import tune_plots

    plots.extend(tune_plots(runs))  # a tune run: one plot per metric across its settings; [] otherwise
    return plots, skipped
