"""The report's twin view (issue 36 item 4): per bench run that stored a ``twin`` block
(:mod:`phasescope.planning.twin`), each predicted percentile with its band beside the measured one with its
95 % interval, labelled with the verdict — the numbers bench stored, never recomputed here.
"""

from __future__ import annotations

from typing import Any

from phasescope.report.figure import Plot, Run, colour, error_bars, esc, layout


def twin_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per (run, metric) of every run whose summary holds an available ``twin`` block: ``run``,
    ``metric``, ``predicted_ms``, ``band_ms``, ``measured_ms``, ``measured_ci_ms``, ``verdict``, ``calibration``."""
    rows: list[dict[str, Any]] = []
    for info, _ in runs:
        s = info.summary if isinstance(info.summary, dict) else {}
        t = s.get("twin")
        if not isinstance(t, dict) or not t.get("available"):
            continue
        for m in t.get("metrics") or []:
            if isinstance(m, dict) and m.get("metric"):
                rows.append({"run": info.id, "calibration": t.get("calibration_run_id"), **m})
    return rows


def plot_twin(runs: list[Run]) -> Plot | str:
    """Predicted (band) against measured (95 % interval) per metric, one pair of markers per metric and run."""
    import plotly.graph_objects as go

    rows = twin_rows(runs)
    if not rows:
        return "no run stored a twin (bench after a probe of the same target and model)"
    several = len({r["run"] for r in rows}) > 1
    xs = [esc(f"{r['run']} · {r['metric']}" if several else r["metric"]) for r in rows]
    fig = go.Figure()
    pred = [r["predicted_ms"] for r in rows]
    meas = [r["measured_ms"] for r in rows]
    fig.add_trace(go.Scatter(x=xs, y=pred, mode="markers", name="predicted (twin band)",
                             marker={"color": colour(0), "symbol": "diamond-open", "size": 11},
                             error_y=error_bars(pred, [r.get("band_ms") for r in rows]),
                             hovertemplate="%{x}<br>predicted %{y:.1f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=meas, mode="markers+text", name="measured (95 % interval)",
                             marker={"color": colour(1), "size": 9},
                             text=[esc(r.get("verdict") or "") for r in rows], textposition="middle right",
                             error_y=error_bars(meas, [r.get("measured_ci_ms") for r in rows]),
                             hovertemplate="%{x}<br>measured %{y:.1f} ms<extra></extra>"))
    layout(fig, "Predicted (twin) against measured", "metric", "ms")
    fig.update_yaxes(rangemode="tozero")
    cal = sorted({str(r["calibration"]) for r in rows})
    return Plot("twin", "predicted against measured", fig,
                note=f"The twin: plan's simulation of each run's workload on the cost model calibrated from "
                     f"{', '.join(cal)}; 'above'/'below' only where the measured interval and the band do not overlap.")
