"""The report's waterfalls: the slowest requests' phases end to end and the shares of TTFT by band, drawn
from the records only when they carry the server's timings (report/waterfall_plots.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_waterfall import rec  # noqa: E402

from phasescope.report.plots import build_plots  # noqa: E402
from phasescope.report.waterfall_plots import plot_waterfall_bands, plot_waterfall_slowest  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402


def _run(run_id: str, recs: list) -> tuple:
    return RunInfo(id=run_id, kind="bench", status="complete", started_at=0.0, engine="llamacpp"), recs


def test_both_waterfalls_are_drawn_for_a_queued_run_and_a_prefill_run() -> None:
    queued = _run("rq", [rec(i, queue_ms=800.0 if i % 4 == 0 else 50.0, prefill_ms=5.0) for i in range(40)])
    prefill = _run("rp", [rec(i, queue_ms=0.0, prefill_ms=300.0) for i in range(10)])
    plots, _ = build_plots([queued, prefill])
    names = [p.name for p in plots]
    assert "waterfall_slowest" in names and "waterfall_bands" in names
    bands = plot_waterfall_bands([queued, prefill])
    assert not isinstance(bands, str)
    traces = {t.name: t for t in bands.figure.data}
    xs = list(traces["queue (derived)"].x)
    q = dict(zip(xs, traces["queue (derived)"].y))
    p = dict(zip(xs, traces["prefill"].y))
    assert q["rq<br>p99"] > 90 and p["rp<br>p99"] > 90
    slow = plot_waterfall_slowest([queued, prefill])
    assert not isinstance(slow, str)
    assert all(len(t.x) == 8 for t in slow.figure.data)  # the 8 slowest requests, one bar each


def test_no_waterfall_without_server_timings() -> None:
    run = _run("rn", [rec(i, timings=False) for i in range(5)])
    assert isinstance(plot_waterfall_slowest([run]), str) and isinstance(plot_waterfall_bands([run]), str)
    plots, _ = build_plots([run])
    assert not any(p.name.startswith("waterfall") for p in plots)
