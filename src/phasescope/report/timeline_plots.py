"""The report's timelines of one run: the per-request phases (waited, prefilled, decoded) with how
many requests were in prefill and in decode at each moment, and the server's queue, KV cache and token
rates from its ``/metrics`` (the GPU's own timeline is :mod:`phasescope.report.gpu_plots`).
"""

from __future__ import annotations

import math
from typing import Any

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.report.populations import in_flight_steps
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
        sec = lambda t: (t - t0) / 1e9  # noqa: E731, B023 (called only in this iteration)
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
            xs, ys = in_flight_steps(spans)
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
#: the cumulative counter behind each rate (bench's timeline rows carry both)
CUMULATIVE = {"generation_tok_s": "generation_tokens", "prompt_tok_s": "prompt_tokens"}
#: engines whose token counters move in bursts: llama.cpp adds a request's tokens when it finishes
BURSTY_ENGINES = frozenset({"llamacpp"})
#: a bursty counter's rate is drawn over a trailing window of at least this many scrape intervals…
WINDOW_SCRAPES = 5
#: … and at least this many times the run's median request duration (its tokens land at its end)
WINDOW_REQUESTS = 2.0


def find_timeline(summary: dict[str, Any] | None, extra: tuple[str, ...] = ()) -> dict[str, list[Any]] | None:
    """A ``{"t_s": [...], series: [...]}`` timeline from a summary: ``server_metrics.timeline``
    (bench), ``server_timeline`` or ``timeline``; either a list of samples or a dict of lists.
    Only the series in :data:`QUEUE_SERIES`, :data:`FRACTION_SERIES` and :data:`RATE_SERIES`, and
    those named in ``extra`` (the cumulative counters, :data:`CUMULATIVE`)."""
    if not isinstance(summary, dict):
        return None
    cands = [summary.get("server_timeline"), summary.get("timeline")]
    sm = summary.get("server_metrics")
    if isinstance(sm, dict):
        cands = [sm.get("timeline"), sm.get("server_timeline"), *cands]
    wanted = QUEUE_SERIES + FRACTION_SERIES + RATE_SERIES + tuple(extra)
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

def timeline_engine(summary: Any, info: RunInfo | None = None) -> str | None:
    """The engine the stored ``/metrics`` timeline came from (``server_metrics.engine``, else the run's)."""
    sm = summary.get("server_metrics") if isinstance(summary, dict) else None
    eng = sm.get("engine") if isinstance(sm, dict) else None
    return eng or (info.engine if info is not None else None)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def windowed_rate(t: list[Any], rate: list[Any], total: list[Any] | None, window_s: float) -> list[float | None]:
    """The rate over the trailing ``window_s`` at each sample: (counter now − counter at the newest
    sample at least ``window_s`` earlier, else the first) ÷ the seconds between them. The counter is
    ``total`` (cumulative) where stored, else Σ rate·Δt. None before the second sample."""
    n = len(t)
    cum: list[float | None] = []
    if total is not None and sum(_num(v) for v in total) >= 2:
        cum = [float(v) if _num(v) else None for v in total]
    else:
        acc = 0.0
        for i in range(n):
            if i and _num(rate[i]) and _num(t[i]) and _num(t[i - 1]):
                acc += float(rate[i]) * (float(t[i]) - float(t[i - 1]))
            cum.append(acc if _num(t[i]) else None)
    out: list[float | None] = []
    base = 0
    for i in range(n):
        if not _num(t[i]) or cum[i] is None:
            out.append(None)
            continue
        while base + 1 < i and _num(t[base + 1]) and float(t[base + 1]) <= float(t[i]) - window_s:
            base += 1
        j = base
        while j < i and (cum[j] is None or not _num(t[j])):
            j += 1
        dt = float(t[i]) - float(t[j]) if j < i else 0.0
        out.append((cum[i] - cum[j]) / dt if dt > 0 else None)  # type: ignore[operator]
    return out


def rate_window_s(t: list[Any], recs: list[RequestRecord]) -> float:
    """How long a window a bursty counter's rate is drawn over: :data:`WINDOW_SCRAPES` scrape
    intervals, and :data:`WINDOW_REQUESTS` × the median request duration (a request's tokens are
    counted when it ends), whichever is longer."""
    ts = sorted(float(x) for x in t if _num(x))
    gaps = sorted(b - a for a, b in zip(ts, ts[1:]) if b > a)
    step = gaps[len(gaps) // 2] if gaps else 1.0
    from phasescope.measure.aggregate import median

    e2e = median([derive.e2e_s(r) for r in ok_records(recs)])
    return max(WINDOW_SCRAPES * step, WINDOW_REQUESTS * (e2e or 0.0))


def zero_hits_any(found: list[Any]) -> bool:
    return any(any(_num(v) for v in tl.get("prefix_cache_hit_rate") or []) for *_, tl in found)


#: the sentence for a panel no run has a value for
_NO_PANEL = {
    "requests": "no running / waiting requests: the server's /metrics does not export them",
    "percent": "no KV cache usage or prefix-cache hits: the server's /metrics does not export them",
    "rates": "no token rates: the server's /metrics does not export token counters",
}


def plot_server_timeline(runs: list[Run]) -> Plot | str:
    """Up to three panels over the run, each with its own unit: requests (running, waiting,
    preemptions), % (KV cache, prefix-cache hits: the stored fractions × 100), server tok/s. A panel
    no run has a value for is not drawn empty: the note says which and why. A bursty engine's token
    counters (:data:`BURSTY_ENGINES`: llama.cpp counts a request's tokens when it finishes, so the
    scrape-to-scrape rate is 0 and then a spike) are drawn as the rate over a trailing window
    (:func:`rate_window_s`), and the legend and note say so."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = (("requests", QUEUE_SERIES, 1.0), ("percent", FRACTION_SERIES, 100.0), ("rates", RATE_SERIES, 1.0))
    found = [(k, info, recs, tl) for k, (info, recs) in enumerate(runs)
             if (tl := find_timeline(info.summary, tuple(CUMULATIVE.values()))) is not None]

    def has(tl: dict[str, list[Any]], name: str) -> bool:
        return any(_num(v) for v in tl.get(name) or [])

    def shows(tl: dict[str, list[Any]], name: str) -> bool:
        """A series worth a line: any value, except prefix-cache hits that are 0 at every scrape (a line
        on the axis reads as an empty panel: the note says it instead)."""
        if name == "prefix_cache_hit_rate":
            return any(_num(v) and v > 0 for v in tl.get(name) or [])
        return has(tl, name)

    used = [p for p in panels if any(shows(tl, s) for *_, tl in found for s in p[1])]
    if not used:
        return "no server metrics timeline in the runs' summaries (bench records one when the server exposes /metrics)"
    notes = ["solid / dashed / dotted: one metric each (see the legend); one colour per run"]
    for key, series, _ in panels:
        if (key, series, _) in used:
            continue
        why = _NO_PANEL[key]
        if key == "percent" and any(timeline_engine(i.summary, i) == "llamacpp" for _, i, _, _ in found):
            why = ("no KV cache panel: llama.cpp (builds since 2025-05) does not export KV cache usage on /metrics"
                   + ("" if zero_hits_any(found) else ", and no prefix-cache hit rate was recorded"))
        notes.append(why)
    zero_hits = [i.id for _, i, _, tl in found
                 if has(tl, "prefix_cache_hit_rate") and not shows(tl, "prefix_cache_hit_rate")]
    if zero_hits:
        notes.append(f"prefix-cache hits 0 % at every scrape ({', '.join(zero_hits)}): no prompt reused a cached "
                     "prefix (unique prompts)")
    if any(p[0] == "percent" for p in used):
        missing_kv = [i.id for _, i, _, tl in found if not (has(tl, "kv_usage") or has(tl, "kv_cache_usage"))]
        if missing_kv:
            eng = {timeline_engine(i.summary, i) for _, i, _, _ in found if i.id in missing_kv}
            who = "llama.cpp (builds since 2025-05)" if eng == {"llamacpp"} else "the server's /metrics"
            notes.append(f"no KV cache usage for {', '.join(missing_kv)}: {who} does not export it")
    fig = make_subplots(rows=len(used), cols=1, shared_xaxes=True, vertical_spacing=0.07)
    windows: list[str] = []
    for row, (key, series, scale) in enumerate(used, start=1):
        drawn = []
        for k, info, recs, tl in found:
            bursty = timeline_engine(info.summary, info) in BURSTY_ENGINES
            w = rate_window_s(tl["t_s"], recs) if bursty and key == "rates" else None
            for name in series:
                vals = tl.get(name)
                if not vals or not shows(tl, name):
                    continue
                drawn.append(name)
                if w is not None:
                    ys: list[Any] = windowed_rate(tl["t_s"], vals, tl.get(CUMULATIVE[name]), w)
                else:
                    ys = [None if not _num(v) else v * scale for v in vals]
                what = METRIC_LABEL.get(name, esc(name))
                legend = f"{label(info)} · {what}" + (f" (over {w:.1f} s windows)" if w is not None else "")
                fig.add_trace(go.Scatter(
                    x=tl["t_s"], y=ys, mode="lines", name=legend, legendgroup=info.id, meta={"metric": name},
                    line={"color": colour(k), "dash": DASH.get(name, "solid"), "shape": "hv" if name in QUEUE_SERIES else "linear"},
                    hovertemplate=f"%{{x:.1f}} s<br>{what} %{{y:.3g}}<extra></extra>"),
                    row=row, col=1)
            if w is not None:
                windows.append(f"{info.id}: {w:.1f} s")
        if key == "percent":
            parts = list(dict.fromkeys("KV cache" if n in ("kv_usage", "kv_cache_usage") else "prefix-cache hits"
                                       for n in drawn))
            title = " / ".join(parts) + " (%)"
        else:
            title = "requests" if key == "requests" else "server tok/s"
        kw: dict[str, Any] = {"range": [0, 100]} if scale == 100.0 else {"rangemode": "tozero"}
        fig.update_yaxes(title_text=title, row=row, col=1, **kw)
    if windows:
        notes.append("llama.cpp adds a request's tokens to its counters when the request finishes, so the rate "
                     "from one scrape to the next reads 0 while requests decode and then spikes: its token rates "
                     f"are drawn over a trailing window ({'; '.join(windows)}: ≥ {WINDOW_SCRAPES} scrapes and ≥ "
                     f"{WINDOW_REQUESTS:g}× the median request), and they lag the work by up to one request")
    layout(fig, "Server queue, KV cache and token rates during the run (server /metrics)", "", "")
    fig.update_layout(height=260 + 170 * len(used))
    fig.update_xaxes(title_text="time since start (s)", row=len(used), col=1)
    return Plot("server_timeline", "server queue / KV timeline", fig, "; ".join(notes))
