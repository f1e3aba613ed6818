"""report on a tune run: the tune table and one plot per metric across settings, measured vs predicted."""

from __future__ import annotations

from pathlib import Path

from phasescope.report.html import build_plots, write_report
from phasescope.report.tune_plots import OPTIONAL, PLOTTED, tune_html, tune_plots
from phasescope.store import RunInfo

EVIL = "<script>alert(1)</script>"


def _setting(i, ub, decode, ttft, pred_decode=None, pred_ttft=None, status="ok"):
    if status != "ok":
        return {"index": i, "label": f"ub={ub}", "params": {"ub": ub}, "status": "failed", "reason": EVIL,
                "metrics": None, "vs_baseline": None, "predicted_vs_baseline": None}
    m = {"decode_tok_s": decode, "ttft_p50_s": ttft, "itl_p50_s": 1 / decode, "throughput_tok_s": decode * 0.8,
         "itl_p99_s": 2 / decode, "itl_max_s": 3 / decode}
    return {"index": i, "label": f"ub={ub}", "params": {"ub": ub}, "status": "ok", "metrics": m,
            "predicted_vs_baseline": None if pred_decode is None else
            {"decode_tok_s": pred_decode, "ttft_p50_s": pred_ttft, "itl_p50_s": 1 / pred_decode, "throughput_tok_s": None}}


def _tune_run():
    rows = [_setting(0, "512", 60.0, 0.10, 1.0, 1.0), _setting(1, "32", 66.0, 0.15, 0.87, 1.4),
            _setting(2, "64", 0, 0, status="failed"), _setting(3, "128", 63.0, 0.12)]
    base = rows[0]["metrics"]
    for r in rows:
        if r["status"] == "ok":
            r["vs_baseline"] = {k: r["metrics"][k] / base[k] for k in base}
    summary = {"tune_id": "tune-0123456789", "workload": "probe", "mode": "grid", "settings": rows,
               "finding": ["ub=32: plan predicted decode 0.87×, measured 1.10×"],
               "prediction": {"calibrated_from": "r-base", "reason": None}}
    return RunInfo(id="r-tune", kind="tune", status="complete", started_at=1e9, summary=summary), []


def test_a_tune_run_gets_one_plot_per_metric_with_measured_and_predicted_ratios():
    info, recs = _tune_run()
    plots = tune_plots([(info, recs)])
    assert [p.name for p in plots] == [f"tune_{k}" for k, _, _ in PLOTTED if k not in OPTIONAL]
    by = {p.name: p.figure.to_plotly_json()["data"] for p in plots}
    rows = [r for r in info.summary["settings"] if r["status"] == "ok"]
    meas, pred = by["tune_decode_tok_s"]
    assert list(meas["x"]) == ["#1 ub=512", "#2 ub=32", "#4 ub=128"]  # the failed setting is not plotted
    assert list(meas["y"]) == [r["vs_baseline"]["decode_tok_s"] for r in rows]
    assert list(pred["y"]) == [1.0, 0.87, None]  # no prediction for #4: a gap, not a made-up point
    assert len(by["tune_itl_p99_s"]) == 1  # plan predicts no p99: the measured line only
    assert "#4 ub=128" in next(p for p in plots if p.name == "tune_decode_tok_s").note


def test_the_report_page_has_the_tune_table_and_plots_and_escapes_reasons(tmp_path: Path):
    info, recs = _tune_run()
    res = write_report([(info, recs)], tmp_path / "t.html")
    page = (tmp_path / "t.html").read_text()
    for k, _, _ in PLOTTED:
        if k not in OPTIONAL:
            assert f'id="plot-tune_{k}"' in page and f"tune_{k}" in res.plots
    assert "TTFT of the long prompts" not in page  # no setting measured it: no empty column, no empty plot
    assert "<h2>Tune</h2>" in page and "tune tune-0123456789" in page
    assert "66.0 tok/s<br>measured 1.10×<br><i>plan 0.87×</i>" in page
    assert "calibrated from the baseline run r-base" in page
    assert EVIL not in page.split('<script id="ps-specs"')[0]  # the failed reason is escaped in the table


def test_runs_without_a_tune_get_no_tune_section_or_plots():
    other = RunInfo(id="r1", kind="probe", status="complete", started_at=0.0, summary={"settings": [{"x": 1}]})
    assert tune_html([(other, [])]) == "" and tune_plots([(other, [])]) == []
    plots, skipped = build_plots([(other, [])])
    assert not any(p.name.startswith("tune_") for p in plots) and not any(k.startswith("tune") for k in skipped)


def test_the_long_prompts_ttft_is_plotted_and_tabled_when_the_tune_measured_it(tmp_path: Path):
    """A bench tune with long prompts (the chunked-prefill trade-off, issue 18) stores ttft_long_p50_s: it gets
    its plot and a table column with its value and measured ratio (plan predicts no such metric today; a stored
    prediction would be drawn beside it like the others')."""
    info, recs = _tune_run()
    rows = [r for r in info.summary["settings"] if r["status"] == "ok"]
    for r, v in zip(rows, (3.41, 7.15, 5.0)):
        r["metrics"]["ttft_long_p50_s"] = v
        r["vs_baseline"]["ttft_long_p50_s"] = v / 3.41
    plots = {p.name: p for p in tune_plots([(info, recs)])}
    (meas,) = plots["tune_ttft_long_p50_s"].figure.to_plotly_json()["data"]  # no prediction: the measured line only
    assert [round(y, 2) for y in meas["y"]] == [1.0, 2.1, 1.47]
    write_report([(info, recs)], tmp_path / "t.html")
    page = (tmp_path / "t.html").read_text()
    assert "<th>TTFT of the long prompts</th>" in page
    assert "7150.0 ms<br>measured 2.10×</td>" in page
