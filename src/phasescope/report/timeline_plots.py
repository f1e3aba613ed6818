"""The report's timelines of one run: the per-request phases (waited, prefilled, decoded) with how
many requests were in prefill and in decode at each moment, and the server's queue, KV cache and token
rates from its ``/metrics`` (the GPU's own timeline is :mod:`phasescope.report.gpu_plots`).
"""

from __future__ import annotations

import math
from typing import Any

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.report.figure import (
    DASH,
    METRIC_LABEL,
    PHASE_COLOURS,
    Plot,
    Run,
    colour,
    esc,
    label,
    layout,
    ok_records,
    raw_label,
)
from phasescope.store import RunInfo

#: at most this many requests per run in the request timeline (the first ones by start time)
TIMELINE_MAX_REQUESTS = 400


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
        ok = ok_records(recs)
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
                        subplot_titles=[esc(raw_label(i)) for _, i, _ in chosen] + ["requests in each phase"])
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
                                     name=f"{label(info)} · in {phase}", legendgroup=info.id, meta={"metric": phase},
                                     hovertemplate=f"%{{x:.3f}} s<br>%{{y}} in {phase}<extra></extra>"), row=n + 1, col=1)
    if not server_prefill:
        notes.append("no server prompt timings: each bar's orange part is its whole TTFT (the server's queue and the "
                     "prefill together); grey is only the client-side wait")
    layout(fig, "Requests over time: waited, prefilled, decoded (prefill and decode sharing the device)", "", "")
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
                    x=tl["t_s"], y=ys, mode="lines", name=f"{label(info)} · {METRIC_LABEL.get(name, esc(name))}",
                    legendgroup=info.id, meta={"metric": name},
                    line={"color": colour(k), "dash": DASH.get(name, "solid"), "shape": "hv" if name in QUEUE_SERIES else "linear"},
                    hovertemplate=f"%{{x:.1f}} s<br>{METRIC_LABEL.get(name, esc(name))} %{{y:.3g}}<extra></extra>"),
                    row=row, col=1)
        kw: dict[str, Any] = {"range": [0, 100]} if scale == 100.0 else {"rangemode": "tozero"}
        fig.update_yaxes(title_text=title, row=row, col=1, **kw)
    layout(fig, "Server queue, KV cache and token rates during the run (server /metrics)", "", "")
    fig.update_layout(height=260 + 170 * len(used))
    fig.update_xaxes(title_text="time since start (s)", row=len(used), col=1)
    return Plot("server_timeline", "server queue / KV timeline", fig,
                "solid / dashed / dotted: one metric each (see the legend); one colour per run")
