"""report: every plot from records + summary, offline page, server strings escaped, skipped plots named."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import concurrent_run, sequential_run  # noqa: E402

from phasescope.errors import InputError  # noqa: E402
from phasescope.report.html import (  # noqa: E402
    PLOTS,
    build_plots,
    endpoint_rows,
    esc,
    find_ceilings,
    find_timeline,
    write_report,
)
from phasescope.store import RunInfo  # noqa: E402

EVIL = "<script>alert('pwned')</script>"


def full_runs() -> list:  # type: ignore[type-arg]
    # the shapes probe and bench store: ceilings.sizes rows, server_metrics.timeline rows
    probe_summary = {
        "sizes": [{"prompt_tokens": n, "ttft_s": 0.05} for n in (256, 1024, 2048)],
        "ceilings": {"sizes": [{"prompt_tokens": n, "decode_ceiling_tok_s": 180.0 - n / 100, "prefill_floor_s": n / 1e5}
                               for n in (256, 1024, 2048)]},
        "findings": [{"id": "x", "severity": "problem", "cause": "<img src=x onerror=alert(1)> slow prefill",
                      "evidence": [{"what": "TTFT", "value": 0.09, "unit": "s", "source": "probe n=8"}],
                      "advice": [{"engine": "llamacpp", "change": "--ubatch-size 512", "why": "</li><script>x()</script>"}]}],
    }
    probe = RunInfo(id="r1", kind="probe", status="complete", started_at=1e9, model=EVIL, summary=probe_summary,
                    target="http://127.0.0.1:8080/v1",
                    params={"note": EVIL}, error=None)
    recs = sequential_run(6, seed=1, sizes=(256, 1024, 2048), ttft_per_token_s=2e-5, model=EVIL)
    recs[0].error_message = EVIL
    tl = [{"t_s": t, "wall_s": 1.7e9 + t, "running": min(8, 2 * t), "waiting": max(0, 2 * t - 8), "kv_usage": t / 10,
           "generation_tok_s": 100.0 * min(t, 4), "prompt_tok_s": 1000.0} for t in range(10)]
    bench = RunInfo(id="r2", kind="bench", status="partial", started_at=1e9 + 60, model="gemma",
                    summary={"server_metrics": {"available": True, "timeline": tl}},
                    error="interrupted")
    return [(probe, recs), (bench, concurrent_run((1, 2, 4), 8, seed=2))]


def test_all_plots_present(tmp_path: Path) -> None:
    res = write_report(full_runs(), tmp_path / "r.html")
    # the records carry llama.cpp's timings: the two waterfalls follow the plots of PLOTS
    assert res.plots == [name for name, _, _ in PLOTS] + ["waterfall_slowest", "waterfall_bands"]
    assert res.skipped == {}
    page = (tmp_path / "r.html").read_text()
    for name in res.plots:
        assert f'id="plot-{name}"' in page
    assert res.size_bytes == (tmp_path / "r.html").stat().st_size


def test_offline_self_contained(tmp_path: Path) -> None:
    write_report(full_runs(), tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert not re.search(r"<script[^>]+src\s*=", page, re.I)
    assert not re.search(r"<link[^>]+href\s*=", page, re.I)
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # the page without inline code
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", markup, re.I)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("Plotly.register") >= 1 and page.count("plotly.js v") == 1  # the library, inlined once
    assert len(page) > 3_000_000


def test_server_strings_escaped(tmp_path: Path) -> None:
    write_report(full_runs(), tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert EVIL not in page and "<img src=x" not in page and "</li><script>" not in page
    # exactly our own five script elements: error hook, plotly, specs (JSON), data (JSON), init
    assert len(re.findall(r"<script[\s>]", page)) == 5
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page or "&lt;script&gt;alert('pwned')&lt;/script&gt;" in page
    specs = re.search(r'<script id="ps-specs" type="application/json">(.*?)</script>', page, re.S)
    assert specs and "<" not in specs.group(1)  # JSON cannot close its script element
    data = re.search(r'<script id="ps-data" type="application/json">(.*?)</script>', page, re.S)
    assert data and "<" not in data.group(1)


def test_skips_plots_without_data_and_says_why(tmp_path: Path) -> None:
    one = RunInfo(id="r9", kind="probe", status="partial", started_at=0.0, model="m", summary=None)
    failed = sequential_run(0, seed=3, errors=4)  # nothing succeeded: nothing to plot
    res = write_report([(one, failed)], tmp_path / "r.html")
    assert res.plots == [] and set(res.skipped) == {name for name, _, _ in PLOTS}
    page = (tmp_path / "r.html").read_text()
    assert "Not plotted" in page
    for reason in res.skipped.values():
        assert reason.split("(")[0].strip() in page


def test_single_size_probe_has_ttft_plot_without_fit() -> None:
    one = RunInfo(id="r9", kind="probe", status="complete", started_at=0.0, model="m")
    plots, skipped = build_plots([(one, sequential_run(5, seed=3))])
    names = [p.name for p in plots]
    # one prompt size: no TTFT-vs-prompt column of dots (issue 19) but the TTFT distribution
    assert names == ["ttft_distribution", "itl_cdf", "waterfall_slowest", "waterfall_bands"]  # + timings' waterfalls
    assert "one prompt length (256 tokens)" in skipped["ttft_vs_prompt"]
    assert set(skipped) == {"ttft_vs_prompt", "decode_vs_context", "throughput_vs_itl", "request_timeline",
                            "server_timeline", "ceilings"}


def _explain_run() -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    """An explain run: prompt-scaling requests (TTFT = 20 ms + 50 µs/token) and context-fill requests
    at short prompts with long TTFTs (their long context was sent before), stored with explain's fit."""
    sizes = (128, 512, 1024, 2048, 4096)
    scaling = sequential_run(3, seed=4, sizes=sizes, ttft_s=0.02, ttft_per_token_s=5e-5, jitter=0.01)
    for r in scaling:
        r.tags = {"experiment": "prompt-scaling", "phase": "measure", "prompt_tokens_target": r.prompt_tokens}
    other = sequential_run(4, seed=5, sizes=(100, 300), ttft_s=0.4, jitter=0.3)
    for r in other:
        r.tags = {"experiment": "context-fill", "phase": "measure", "context_target": 8000}
    fit = {"a_s": 0.0201, "b_s_per_token": 4.9e-5, "c_s_per_token2": 1e-10, "r2": 0.981, "n_points": 5}
    points = [{"prompt_tokens": n, "n": 3, "ttft_s": 0.02 + 5e-5 * n, "ttft_min_s": 0.0199 + 5e-5 * n} for n in sizes]
    info = RunInfo(id="r7", kind="explain", status="complete", started_at=0.0, model="m",
                   summary={"experiments": {"prompt-scaling": {"fit": fit, "points": points}}})
    return info, scaling + other


def test_ttft_plot_draws_explains_own_fit_not_a_refit() -> None:
    info, recs = _explain_run()
    plots, _ = build_plots([(info, recs)])
    plot = next(p for p in plots if p.name == "ttft_vs_prompt")
    fit = next(t for t in plot.figure.data if "fit" in t.name)
    # the stored coefficients, drawn as stored (a refit over all records gets another line and a poor R²)
    assert "explain's fit" in fit.name and "R² 0.981" in fit.name
    for x, y in zip(fit.x, fit.y):
        assert y == pytest.approx((0.0201 + 4.9e-5 * x + 1e-10 * x * x) * 1e3, rel=1e-12)
    dots = next(t for t in plot.figure.data if t.name.endswith("· TTFT"))
    assert len(dots.x) == 15  # the prompt-scaling requests only, not context-fill's
    fitted = next(t for t in plot.figure.data if "fitted points" in t.name)
    assert list(fitted.x) == [128, 512, 1024, 2048, 4096]
    assert list(fitted.y) == pytest.approx([(0.0199 + 5e-5 * n) * 1e3 for n in fitted.x])


def test_ttft_plot_without_a_stored_fit_draws_the_stored_medians() -> None:
    sizes = (128, 1024, 4096)
    recs = sequential_run(3, seed=4, sizes=sizes, ttft_s=0.02, ttft_per_token_s=5e-5)
    stored = [{"prompt_tokens": n, "ttft_s": 0.1 + n / 1e4} for n in sizes]  # what probe stored
    one = RunInfo(id="r9", kind="probe", status="complete", started_at=0.0, model="m", summary={"sizes": stored})
    plots, _ = build_plots([(one, recs)])
    plot = next(p for p in plots if p.name == "ttft_vs_prompt")
    assert not any("fit" in t.name for t in plot.figure.data)
    line = next(t for t in plot.figure.data if "median TTFT" in t.name)
    assert list(line.x) == list(sizes) and list(line.y) == pytest.approx([(0.1 + n / 1e4) * 1e3 for n in sizes])
    # no stored summary: the median of each length's requests (measure.aggregate.median)
    bare = RunInfo(id="r8", kind="bench", status="complete", started_at=0.0, model="m")
    plots, _ = build_plots([(bare, recs)])
    line = next(t for t in next(p for p in plots if p.name == "ttft_vs_prompt").figure.data if "median TTFT" in t.name)
    from phasescope.measure import derive
    from phasescope.measure.aggregate import median
    want = [median([derive.ttft_s(r) for r in recs if r.prompt_tokens == n]) * 1e3 for n in sizes]
    assert list(line.y) == want


def test_summary_shapes() -> None:
    # bench: server_metrics.timeline is a list of rows; wall clock and cumulative counters are not plotted
    rows = [{"t_s": 0, "wall_s": 1.7e9, "running": 1, "kv_usage": 0.5, "generation_tokens": 0.0},
            {"t_s": 1, "wall_s": 1.7e9 + 1, "running": 2, "kv_usage": None, "generation_tokens": 10.0}]
    assert find_timeline({"server_metrics": {"timeline": rows}}) == {"t_s": [0, 1], "running": [1, 2], "kv_usage": [0.5, None]}
    assert find_timeline({"server_timeline": {"t": [0, 1], "waiting": [0, 3]}}) == {"t_s": [0, 1], "waiting": [0, 3]}
    assert find_timeline({"timeline": {"running": [1]}}) is None
    assert find_timeline({"server_metrics": None}) is None
    # probe: ceilings.sizes rows with a decode ceiling and a prefill floor per prompt size
    probe = {"ceilings": {"sizes": [{"prompt_tokens": 200, "decode_ceiling_tok_s": 900.0, "prefill_floor_s": 0.001},
                                    {"prompt_tokens": 2000, "decode_ceiling_tok_s": 850.0, "prefill_floor_s": 0.02}]}}
    assert find_ceilings(probe) == [{"prompt_tokens": 200.0, "decode_tok_s": 900.0, "prefill_tok_s": 200000.0},
                                    {"prompt_tokens": 2000.0, "decode_tok_s": 850.0, "prefill_tok_s": 100000.0}]
    assert find_ceilings({"a": [{"decode_ceiling_tok_s": 100}], "prefill_ceiling_tok_s": 5000}) == [
        {"prompt_tokens": None, "decode_tok_s": 100.0, "prefill_tok_s": 5000.0}]
    assert find_ceilings({"ceilings": None, "decode_ceiling_tok_s": True}) == []


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        write_report([], tmp_path / "r.html")
    f = tmp_path / "file"
    f.write_text("x")
    one = RunInfo(id="r9", kind="probe", status="complete", started_at=0.0)
    with pytest.raises(InputError, match="cannot write"):
        write_report([(one, [])], f / "r.html")


def _two_endpoint_run() -> tuple:  # type: ignore[type-arg]
    # a bench run routed round-robin over a fast and a slow endpoint (second one's name is hostile)
    fast = "http://127.0.0.1:8001"
    slow = "http://127.0.0.1:8002/" + EVIL
    recs = concurrent_run((2,), 12, seed=5)
    slow_recs = concurrent_run((2,), 12, seed=6, ttft_s=0.5, itl_s=0.05)
    for r in recs:
        r.tags["endpoint"] = fast
    for r in slow_recs:
        r.tags["endpoint"] = slow
    summary = {"endpoints": [
        {"endpoint": fast, "server_metrics": {"available": True, "engine": "vllm",
                                              "summary": {"max_running": 2.0, "kv_usage_peak": 0.25,
                                                          "generation_tokens": 384.0}}},
        {"endpoint": slow, "server_metrics": {"available": False, "reason": "HTTP 501 " + EVIL, "summary": {}}}]}
    info = RunInfo(id="r7", kind="bench", status="complete", started_at=1e9, model="m", summary=summary)
    return (info, recs + slow_recs), fast, slow


def test_per_endpoint_section_for_a_multi_endpoint_run(tmp_path: Path) -> None:
    run, fast, slow = _two_endpoint_run()
    res = write_report([run], tmp_path / "r.html")
    assert "per_endpoint" in res.plots and "per_endpoint" not in res.skipped
    page = (tmp_path / "r.html").read_text()
    assert "<h3>Per endpoint</h3>" in page and 'id="plot-per_endpoint"' in page
    assert EVIL not in page and esc(slow) in page
    assert "vllm: max running 2, KV peak 0.250, gen tokens 384" in page
    assert "none (HTTP 501 " in page
    assert len(re.findall(r"<script[\s>]", page)) == 5
    rows = endpoint_rows([run])
    assert [(r["endpoint"], r["requests"], r["share"]) for r in rows] == [(fast, 12, 0.5), (slow, 12, 0.5)]
    # each row is that endpoint's records alone: the slow one's TTFT and ITL are the larger
    assert rows[1]["median_ttft_ms"] > 5 * rows[0]["median_ttft_ms"]
    assert rows[1]["p99_itl_ms"] > 3 * rows[0]["p99_itl_ms"]
    plot = next(p for p in build_plots([run])[0] if p.name == "per_endpoint")
    p50 = next(t for t in plot.figure.data if t.name == "p50 TTFT")
    assert list(p50.y) == [rows[0]["median_ttft_ms"], rows[1]["median_ttft_ms"]]
    assert all("<script>" not in str(x) for x in p50.x)


def test_no_per_endpoint_section_for_one_endpoint(tmp_path: Path) -> None:
    run, fast, _ = _two_endpoint_run()
    info, recs = run
    only_fast = [r for r in recs if r.tags["endpoint"] == fast]
    res = write_report([(info, only_fast), *full_runs()], tmp_path / "r.html")
    assert "per_endpoint" not in res.plots and "per_endpoint" not in res.skipped
    page = (tmp_path / "r.html").read_text()
    assert "Per endpoint" not in page and "plot-per_endpoint" not in page


def test_report_data_is_the_stored_summary_or_what_show_prints(tmp_path: Path) -> None:
    import json

    from phasescope.measure.aggregate import metric_table

    runs = full_runs()
    write_report(runs, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    data = json.loads(re.search(r'<script id="ps-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    probe, bench = data["runs"]
    # the probe run: its stored sizes, as stored
    assert probe["source"] == "summary"
    assert [(p["group"], p["ttft_s"]) for p in probe["points"]] == [(f"prompt_tokens={n}", 0.05) for n in (256, 1024, 2048)]
    # the bench run (no probe-shaped summary): the records through measure.aggregate, = show's table
    assert bench["source"] == "records"
    shown = {(r["group"], r["metric"]): r["value"] for r in metric_table(runs[1][1])}
    assert shown and all(p[m] == v for (g, m), v in shown.items() for p in bench["points"] if p["group"] == g
                         and m != "errors")
    assert {p["group"] for p in bench["points"]} == {g for g, _ in shown}


def test_itl_legend_prints_the_runs_itl_percentiles_as_show_does() -> None:
    from phasescope.measure.aggregate import metric_table

    one = RunInfo(id="r9", kind="probe", status="complete", started_at=0.0, model="m")
    recs = sequential_run(6, seed=8, itl_s=0.004)
    for r in recs[:3]:  # two events at the same instant: a zero gap the log axis cannot draw, but a token
        r.events[2].t_ns = r.events[1].t_ns
    plots, _ = build_plots([(one, recs)])
    trace = next(p for p in plots if p.name == "itl_cdf").figure.data[0]
    shown = {r["metric"]: r for r in metric_table(recs)}
    p50, p99 = shown["itl_p50_s"]["value"] * 1e3, shown["itl_p99_s"]["value"] * 1e3
    assert f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, n={shown['itl_p50_s']['n']} tokens" in trace.name


def test_runs_table_counts_the_warm_ups_apart_as_the_card_and_runs_do() -> None:
    """The report's runs table said ok/requests 21/21 where the phase card said 20 completed: the
    warm-up is no measured request, so it gets its own column (as in `phasescope runs`)."""
    from phasescope.report.sections import runs_table_html

    recs = sequential_run(20, seed=1, warmup=1, errors=2)
    info = RunInfo(id="w1", kind="bench", status="complete", started_at=1e9, model="m", summary={}, params={})
    html = runs_table_html([(info, recs)])
    cells = re.findall(r"<td>([^<]*)</td>", html)
    n_warm = sum(1 for r in recs if (r.tags or {}).get("warmup"))
    meas = [r for r in recs if not (r.tags or {}).get("warmup")]
    assert n_warm == 1 and f"{sum(r.ok for r in meas)}/{len(meas)}" in cells and cells[-1] == str(n_warm)
    assert "warm-up" in html
