"""The report's waterfalls (issue 35): where each request's time went, from the records
(:mod:`phasescope.measure.waterfall`: the client's clock and the server's own timings, queue derived).

* ``waterfall_slowest`` — the slowest requests by TTFT (up to :data:`SLOWEST`), one horizontal bar each:
  network and client, queue, prefill, decode laid end to end from the request's start;
* ``waterfall_bands`` — "where the time went": per run and TTFT band (p50, p90, p99), the shares of TTFT
  (shares of sums over the band, with their 95 % bootstrap intervals in the hover).

Both are drawn only when a run's requests carry the server's timings (llama.cpp ``timings``, Ollama
durations); without them queue and prefill cannot be told apart and the plots are left out.
"""

from __future__ import annotations

from typing import Any

from phasescope.measure.waterfall import attach_spans, network_estimate_ns, request_waterfall, run_waterfall
from phasescope.report.figure import Plot, Run, colour, esc, layout, ok_records

#: requests drawn in the slowest-requests waterfall
SLOWEST = 8
#: (key, legend name, colour index) of each phase, in the order it happens
PHASES = (("network_client", "network and client", 3), ("queue", "queue (derived)", 1),
          ("prefill", "prefill", 0), ("decode", "decode", 2))


def _timed(runs: list[Run]) -> list[tuple[Any, dict[str, Any]]]:
    out = []
    for info, recs in runs:
        attach_spans(recs, info.summary if isinstance(info.summary, dict) else None)
        net = network_estimate_ns(recs)
        for r in ok_records(recs):
            if r.tags.get("warmup"):
                continue
            w = request_waterfall(r, network_ns=net)
            if w is not None and w["prefill_s"] is not None:
                out.append((info, w))
    return out


def plot_waterfall_slowest(runs: list[Run]) -> Plot | str:
    """The slowest requests' waterfalls, one bar per request, phases end to end (ms)."""
    import plotly.graph_objects as go

    rows = sorted(_timed(runs), key=lambda iw: iw[1]["ttft_s"], reverse=True)[:SLOWEST]
    if not rows:
        return "no request carried the server's own timings (llama.cpp timings, Ollama durations): queue and prefill cannot be told apart"
    several = len({i.id for i, _ in rows}) > 1
    ys = [esc(f"{i.id} · {w['id']}" if several else w["id"]) for i, w in rows][::-1]
    fig = go.Figure()
    for key, name, c in PHASES:
        xs = [w[f"{key}_s"] * 1e3 for _, w in rows][::-1]
        fig.add_trace(go.Bar(y=ys, x=xs, orientation="h", name=name, marker={"color": colour(c)},
                             hovertemplate="%{y}<br>" + esc(name) + " %{x:.1f} ms<extra></extra>"))
    fig.update_layout(barmode="stack")
    layout(fig, "Where the slowest requests' time went", "ms from the request's start", "request")
    return Plot("waterfall_slowest", "waterfall of the slowest requests", fig,
                note="Each bar one request, its phases end to end: network and client (connect, and the headers' "
                     "round trip where they came before the prefill), queue (derived: TTFT less the server's own "
                     "prompt time and the network), prefill (the server's prompt time), decode (first to last token).")


def plot_waterfall_bands(runs: list[Run]) -> Plot | str:
    """Stacked shares of TTFT per run and TTFT band (shares of sums over each band's requests)."""
    import plotly.graph_objects as go

    cols: list[tuple[str, dict[str, Any]]] = []
    for info, recs in runs:
        attach_spans(recs, info.summary if isinstance(info.summary, dict) else None)
        wf = run_waterfall([r for r in recs if not r.tags.get("warmup")])
        for band, b in (wf.get("bands") or {}).items():
            cols.append((f"{esc(info.id)}<br>{band}" if len(runs) > 1 else band, b))
    if not cols:
        return "no request carried the server's own timings: the share of TTFT in queue and in prefill is unknown"
    xs = [c for c, _ in cols]  # escaped above
    fig = go.Figure()
    for key, name, c in PHASES[:3]:
        sh = [(b["shares"].get(key) or {}) for _, b in cols]
        ys = [s.get("value", 0.0) * 100 for s in sh]
        cis = [esc(f"{s['ci'][0] * 100:.0f}–{s['ci'][1] * 100:.0f} %") if s.get("ci") else "" for s in sh]
        ns = [b["n"] for _, b in cols]
        fig.add_trace(go.Bar(x=xs, y=ys, name=name, marker={"color": colour(c)}, customdata=list(zip(cis, ns)),
                             hovertemplate="%{x}<br>" + esc(name) + " %{y:.0f} % of TTFT (%{customdata[0]}, "
                             "%{customdata[1]} requests)<extra></extra>"))
    fig.update_layout(barmode="stack")
    layout(fig, "Where the time went, by TTFT band", "TTFT band", "% of TTFT")
    fig.update_yaxes(range=[0, 100])
    return Plot("waterfall_bands", "where the time went", fig,
                note="Bands of TTFT: p50 = requests in [p50, p90), p90 = [p90, p99), p99 = the slowest from p99 up. "
                     "Each share is the band's Σ phase ÷ Σ TTFT (never a median of per-request shares).")
