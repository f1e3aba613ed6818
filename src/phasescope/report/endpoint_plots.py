"""The report's view of a run whose requests went to several endpoints (``bench --target``, issue
10): the records by endpoint (``tags.endpoint``), one row of numbers per endpoint
(:func:`phasescope.load.summary.summarize` over that endpoint's records alone — what ``bench``
prints per endpoint) and the latency bars per endpoint.
"""

from __future__ import annotations

from typing import Any

from phasescope.measure.aggregate import measured
from phasescope.measure.records import RequestRecord
from phasescope.report.figure import Plot, Run, colour, esc, layout


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
    """Grouped bars per endpoint of each multi-endpoint run: p50/p99 TTFT (left) and p50/p99 ITL
    (right), each on its own linear axis — a bar's length is its value (TTFT and ITL differ by orders
    of magnitude, which one log axis hid by shortening the long bars)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = endpoint_rows(runs)
    if not rows:
        return "no run sent requests to more than one endpoint"
    several = len({r["run"] for r in rows}) > 1
    xs = [esc(f"{r['run']} · {r['endpoint']}" if several else r["endpoint"]) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT per endpoint", "ITL per endpoint (per token)"),
                        horizontal_spacing=0.1)
    for k, (key, name, col) in enumerate((("median_ttft_ms", "p50 TTFT", 1), ("p99_ttft_ms", "p99 TTFT", 1),
                                          ("median_itl_ms", "p50 ITL", 2), ("p99_itl_ms", "p99 ITL", 2))):
        fig.add_trace(go.Bar(x=xs, y=[r[key] for r in rows], name=name, marker={"color": colour(k)},
                             hovertemplate="%{x}<br>" + name + " %{y:.2f} ms<extra></extra>"), row=1, col=col)
    layout(fig, "Latency per endpoint", "endpoint", "TTFT (ms)", barmode="group")
    fig.update_xaxes(title_text="endpoint", row=1, col=2)
    fig.update_yaxes(title_text="ITL (ms)", row=1, col=2)
    fig.update_yaxes(rangemode="tozero")
    return Plot("per_endpoint", "latency per endpoint", fig,
                note="Each endpoint's requests alone (records tagged with their endpoint); ITL per token; "
                     "linear axes (a bar's length is its value).")
