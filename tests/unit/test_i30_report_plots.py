"""Issue 30 item 7 (and the report parts of item 8): plots fitted to their data — linear axes for
bars and shares, one TTFT histogram per prompt size or experiment, points sorted (and grouped)
before they are joined, bursty counters drawn as rates over a window with a note, an empty panel
replaced by a sentence, the spread drawn wherever a finding talks about it; the comparison's
"What differs" readable, the tune card's header filled, and the TTFT plot's caption describing
only what is drawn.

Every test inspects the plotly figure (data / layout) or the page built from synthetic runs."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import NS, make_record, sequential_run  # noqa: E402

from phasescope.report.html import build_plots, write_report  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402


def _figs(runs: list) -> dict[str, dict[str, Any]]:  # type: ignore[type-arg]
    plots, _ = build_plots(runs)
    return {p.name: p.figure.to_plotly_json() for p in plots}


def _plots(runs: list) -> dict[str, Any]:  # type: ignore[type-arg]
    return {p.name: p for p in build_plots(runs)[0]}


def _axis_of(trace: dict[str, Any], letter: str) -> str:
    """The layout key of a trace's axis: ``xaxis``, ``xaxis2``…"""
    ref = trace.get(f"{letter}axis") or letter
    return f"{letter}axis{ref[1:]}"


def _y_titles(fig: dict[str, Any]) -> list[str]:
    axes = [v for k, v in fig["layout"].items() if k.startswith("yaxis")]
    return [str(((v or {}).get("title") or {}).get("text", "")) for v in axes]


def _probe(sizes: tuple[int, ...] = (200, 2000), *,
           efficiency: float = 0.18) -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    """A probe of two prompt sizes whose TTFTs differ ~10× (200- and 2,000-token prompts), with
    ceilings: the prefill roof is 1 / efficiency × the attained rate."""
    recs = sequential_run(3, seed=4, sizes=sizes, ttft_s=0.02, ttft_per_token_s=2e-3)
    for r in recs:  # probe tags each request with its target size
        r.tags["prompt_tokens_target"] = r.prompt_tokens_requested
    rate = {n: 1 / 2e-3 for n in sizes}
    from phasescope.measure import derive
    from phasescope.measure.aggregate import median

    dec = {n: median([derive.decode_tok_s(r) for r in recs if r.prompt_tokens_requested == n]) for n in sizes}
    summary = {
        "sizes": [{"prompt_tokens_target": n, "prompt_tokens": n, "ttft_s": 0.02 + 2e-3 * n, "decode_tok_s": dec[n],
                   "prefill_tok_s": rate[n], "ok": 3, "requests": 3} for n in sizes],
        "ceilings": {"sizes": [{"prompt_tokens": n, "decode_ceiling_tok_s": 300.0, "decode_efficiency": 0.2,
                                "decode_binding": "bandwidth", "prefill_floor_s": n * efficiency / rate[n],
                                "prefill_efficiency": efficiency} for n in sizes]},
    }
    info = RunInfo(id="r20261204-1000-prob", kind="probe", status="complete", started_at=1.8e9, model="gemma-3-270m",
                   engine="llamacpp", summary=summary)
    return info, recs


# --- bars and shares on linear axes ---------------------------------------------------------------
def _two_endpoint_run() -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    from report_synth import concurrent_run

    fast = concurrent_run((2,), 12, seed=5, ttft_s=0.05, itl_s=0.01)
    slow = concurrent_run((2,), 12, seed=6, ttft_s=0.5, itl_s=0.05)
    for r in fast:
        r.tags["endpoint"] = "http://a:1"
    for r in slow:
        r.tags["endpoint"] = "http://b:2"
    return RunInfo(id="r-ep", kind="bench", status="complete", started_at=1e9, model="m", summary={}), fast + slow


@pytest.mark.parametrize("case", ["roofline", "per_endpoint"])
def test_no_bar_is_drawn_on_a_log_axis(case: str) -> None:
    # a bar's length is its value: on a log axis "18 % of ceiling" was drawn ~45 % as long as the ceiling
    runs = [_probe()] if case == "roofline" else [_two_endpoint_run()]
    fig = _figs(runs)["ceilings" if case == "roofline" else "per_endpoint"]
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert bars
    for t in bars:
        value_axis = _axis_of(t, "x" if t.get("orientation") == "h" else "y")
        assert (fig["layout"].get(value_axis) or {}).get("type") != "log", (t.get("name"), value_axis)


def test_the_roofline_bars_are_drawn_in_proportion_to_the_efficiency() -> None:
    fig = _figs([_probe(efficiency=0.18)])["ceilings"]
    pre = [t for t in fig["data"] if t["type"] == "bar" and t.get("xaxis") == "x2"]
    ceil = next(t for t in pre if t["meta"]["metric"] == "ceiling")
    att = next(t for t in pre if t["meta"]["metric"] == "attained")
    for a, c in zip(att["x"], ceil["x"]):
        assert a / c == pytest.approx(0.18, rel=1e-6)
    assert fig["layout"]["xaxis2"].get("rangemode") == "tozero"


# --- one TTFT histogram per prompt size / experiment ----------------------------------------------
def _hist_values(fig: dict[str, Any]) -> list[list[float]]:
    return [list(t["x"]) for t in fig["data"] if t["type"] == "histogram"]


def test_ttft_histograms_do_not_pool_prompt_sizes() -> None:
    info, recs = _probe()
    fig = _figs([(info, recs)])["ttft_distribution"]
    hists = _hist_values(fig)
    assert len(hists) == 2  # one per prompt size
    from phasescope.measure import derive

    by_size = {n: sorted(derive.ttft_s(r) * 1e3 for r in recs if r.prompt_tokens_requested == n) for n in (200, 2000)}
    assert sorted(sorted(h) for h in hists) == sorted(by_size.values())
    # each size in its own panel (its own x axis), named after the size
    axes = {t.get("xaxis") or "x" for t in fig["data"] if t["type"] == "histogram"}
    assert len(axes) == 2
    titles = " ".join(a.get("text", "") for a in fig["layout"].get("annotations") or [])
    assert "200-token prompt" in titles and "2000-token prompt" in titles


def _explain() -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    """An explain run: prompt-scaling at two sizes, a queue experiment whose TTFT is mostly waiting,
    a batching experiment at concurrency 1 and 4, and prefix-cache's cold and repeat requests."""
    rng = random.Random(7)
    recs = []
    t = 10 * NS
    i = 0

    def add(exp: str, n: int, ttft: float, size: int, **tags: Any) -> None:
        nonlocal t, i
        for _ in range(n):
            r = make_record(i, rng, t_start_ns=t, prompt_tokens=size, ttft_s=ttft,
                            tags={"experiment": exp, "phase": "measure", **tags})
            recs.append(r)
            t = (r.t_done_ns or t) + NS // 100
            i += 1

    add("prompt-scaling", 4, 0.05, 128, prompt_tokens_target=128)
    add("prompt-scaling", 4, 0.60, 2048, prompt_tokens_target=2048)
    add("queue", 6, 2.0, 256)
    add("batching", 4, 0.08, 256, concurrency=1)
    add("batching", 4, 0.30, 256, concurrency=4)
    add("prefix-cache", 3, 0.90, 535, phase="cold")
    add("prefix-cache", 4, 0.08, 535, phase="repeat")
    return RunInfo(id="r-expl", kind="explain", status="complete", started_at=1e9, model="m", summary={}), recs


def test_ttft_histograms_do_not_pool_every_explain_experiment() -> None:
    info, recs = _explain()
    fig = _figs([(info, recs)])["ttft_distribution"]
    hists = [t for t in fig["data"] if t["type"] == "histogram"]
    # prompt-scaling × 2 sizes, queue, batching × 2 levels, prefix-cache cold and repeat: seven populations
    assert len(hists) == 7
    from phasescope.measure import derive

    pops = {}
    for r in recs:
        key = (r.tags["experiment"], r.tags["phase"], r.tags.get("prompt_tokens_target"), r.tags.get("concurrency"))
        pops.setdefault(key, []).append(derive.ttft_s(r) * 1e3)
    assert sorted(sorted(t["x"]) for t in hists) == sorted(sorted(v) for v in pops.values())
    titles = " ".join(a.get("text", "") for a in fig["layout"].get("annotations") or [])
    assert "queue" in titles and "batching" in titles and "prompt-scaling" in titles
    assert "prefix-cache · cold" in titles and "prefix-cache · repeat" in titles


def test_two_runs_of_the_same_sizes_share_each_size_panel() -> None:
    a, b = _probe(), _probe()
    b = (RunInfo(id="r-other", kind="probe", status="complete", started_at=1.8e9 + 60, model="gemma-3-270m",
                 summary=b[0].summary), b[1])
    fig = _figs([a, b])["ttft_distribution"]
    hists = [t for t in fig["data"] if t["type"] == "histogram"]
    assert len(hists) == 4 and len({t.get("xaxis") or "x" for t in hists}) == 2


# --- points sorted / grouped before they are joined -----------------------------------------------
def _decode_run() -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    """Context-fill-like requests at 4 nominal contexts, 3 repeats each, whose tokenised prompt
    lengths scatter by a few tokens, interleaved in time; plus concurrent batching requests whose
    per-request decode rate is far lower at the same context (not a single-stream point), and
    untagged conversation sessions that decoded at the same time (found by their overlap)."""
    rng = random.Random(3)
    recs = []
    i = 0
    t = 10 * NS
    for _rep in range(3):
        for ctx in (2048, 512, 1024, 256):
            r = make_record(i, rng, t_start_ns=t, prompt_tokens=ctx, output_tokens=33, itl_s=0.01 * (1 + ctx / 2048),
                            tags={"experiment": "context-fill", "context_target": ctx})
            r.prompt_tokens = ctx + rng.randrange(-3, 4)
            recs.append(r)
            t = (r.t_done_ns or t) + NS // 100
            i += 1
    for k in range(4):
        r = make_record(i, rng, t_start_ns=t + k * 1000, prompt_tokens=600, output_tokens=33, itl_s=0.08,
                        tags={"experiment": "batching", "concurrency": 4})
        recs.append(r)
        i += 1
    t = max(r.t_done_ns or 0 for r in recs) + NS
    for k in range(3):  # sessions of a conversation at once, untagged: they overlap in time
        r = make_record(i, rng, t_start_ns=t + k * NS // 10, prompt_tokens=1024, output_tokens=33, itl_s=0.06,
                        tags={"experiment": "conversation", "context_target": 1024})
        recs.append(r)
        i += 1
    return RunInfo(id="r-ctx", kind="explain", status="complete", started_at=1e9, model="m", summary={}), recs


def test_the_decode_median_line_is_one_point_per_context_in_order() -> None:
    fig = _figs([_decode_run()])["decode_vs_context"]
    line = next(t for t in fig["data"] if "median" in (t.get("name") or ""))
    xs = list(line["x"])
    assert xs == sorted(xs)
    assert len(xs) == 4  # one median per nominal context, not one vertex per request
    ys = list(line["y"])
    assert all(a >= b for a, b in zip(ys, ys[1:]))  # the designed decline, no zig-zag
    # the concurrent requests are not single-stream decode: drawn apart, never joined into the median
    conc = [t for t in fig["data"] if "concurrent" in (t.get("name") or "")]
    assert conc and all(t.get("mode") == "markers" for t in conc)


# --- bursty counters and empty panels --------------------------------------------------------------
def _llamacpp_bench(kv: bool = False) -> tuple[RunInfo, list]:  # type: ignore[type-arg]
    """A llama.cpp bench's /metrics timeline: the generation counter moves only when requests
    finish (a burst of 240 tokens every 4 s), so the scrape-to-scrape rate is 0, then a spike."""
    from tests_i19 import bench_records  # type: ignore[import-not-found]

    tl = []
    total = 0.0
    for k in range(41):
        t = k * 0.5
        step = 240.0 if k and k % 8 == 0 else 0.0
        total += step
        tl.append({"t_s": t, "running": 4, "waiting": 0, "kv_usage": (0.3 if kv else None),
                   "prefix_cache_hit_rate": None, "generation_tok_s": None if k == 0 else step / 0.5,
                   "prompt_tok_s": None, "generation_tokens": total, "prompt_tokens": 0.0})
    summary = {"completed": 24, "failed": 0, "median_ttft_ms": 80.0, "server_metrics": {
        "available": True, "engine": "llamacpp", "interval_s": 0.5, "timeline": tl,
        "notes": ["llama.cpp adds generated tokens when a request finishes: generation_tok_s lags and is bursty."]}}
    info = RunInfo(id="r-lcpp", kind="bench", status="complete", started_at=1e9, model="m", engine="llamacpp",
                   summary=summary, params={"max_concurrency": 4})
    return info, bench_records(24, seed=1)


@pytest.fixture(autouse=True)
def _i19_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tests_i19", Path(__file__).with_name("test_i19_report_plots.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    monkeypatch.setitem(sys.modules, "tests_i19", mod)


def test_a_bursty_counter_is_drawn_as_a_rate_over_a_window_with_a_note() -> None:
    info, recs = _llamacpp_bench()
    p = _plots([(info, recs)])["server_timeline"]
    fig = p.figure.to_plotly_json()
    gen = next(t for t in fig["data"] if (t.get("meta") or {}).get("metric") == "generation_tok_s")
    ys = [y for y in gen["y"] if y is not None]
    mean = 240.0 * 5 / 20.0  # 5 bursts of 240 tokens in 20 s: 60 tok/s
    # raw it reads 0 and then 480 tok/s spikes; over a window ≥ the burst period it stays near the mean
    assert max(ys) <= 2.5 * mean and max(ys) < 480 / 2
    assert "window" in (gen.get("name") or "") and "window" in p.note and "finishes" in p.note


def test_an_empty_kv_panel_is_replaced_by_a_sentence() -> None:
    info, recs = _llamacpp_bench(kv=False)
    p = _plots([(info, recs)])["server_timeline"]
    fig = p.figure.to_plotly_json()
    # no KV series has a value: no "(%)" panel drawn empty, but a sentence saying why
    titles = _y_titles(fig)
    assert not any("KV" in t for t in titles)
    assert "KV cache" in p.note and "does not export" in p.note
    info, recs = _llamacpp_bench(kv=True)
    fig = _figs([(info, recs)])["server_timeline"]
    titles = _y_titles(fig)
    assert any("KV" in t for t in titles)


# --- spread where the finding talks about it (tune) -------------------------------------------------
def _tune_store(tmp_path: Path, decode_means: tuple[float, ...] = (60.0, 62.0), jitter: float = 0.15):
    """A store with one probe run per setting (real records, repeats that overlap) and the tune run
    that refers to them, as tune stores it."""
    from phasescope.store import open_store
    from phasescope.tuning.table import finding, row_metrics, with_ratios

    st = open_store(tmp_path / "store")
    rows = []
    for k, d in enumerate(decode_means):
        recs = sequential_run(4, seed=10 + k, itl_s=1 / d, jitter=jitter, output_tokens=24)
        with st.recording("probe", "http://127.0.0.1:9", {"sizes": [256]}, model="gemma-3-270m",
                          engine="llamacpp") as run:
            for r in recs:
                run.add(r)
            run.finish({"sizes": []})
            rid = run.id
        m, samples = row_metrics(recs)
        rows.append({"index": k, "label": f"ub={512 // (k + 1)}", "params": {"ub": str(512 // (k + 1))},
                     "status": "ok", "run_id": rid, "metrics": m, "samples": samples, "vs_baseline": None,
                     "predicted_vs_baseline": None, "ceiling": None, "ceiling_ratio": None, "bytes_ratio": None,
                     "summary": {"model": "gemma-3-270m", "engine": "llamacpp", "engine_version": "b1-0c1e570"}})
    with_ratios(rows)
    text = finding(rows)
    for r in rows:
        r.pop("samples")
    doc = {"tune_id": "tune-abc", "workload": "probe", "mode": "grid", "serve": None, "baseline": {"ub": "512"},
           "settings": rows, "finding": text, "prediction": {"reason": "no plan"}, "n_ok": len(rows), "n_failed": 0}
    with st.recording("tune", None, {"tune_id": "tune-abc"}) as run:
        run.finish(doc)
        tid = run.id
    return st, st.get(tid), text


def test_tune_plots_draw_the_repeat_spread_the_finding_speaks_of(tmp_path: Path) -> None:
    st, info, text = _tune_store(tmp_path)
    assert any("TTFT: cannot tell, within the repeat spread" in t for t in text)  # the designed overlap
    p = _plots([(info, st.load_records(info.id))])["tune_ttft_p50_s"]
    fig = p.figure.to_plotly_json()
    meas = next(t for t in fig["data"] if t.get("name", "").startswith("measured"))
    err = meas.get("error_y") or {}
    assert err.get("type") == "data" and err.get("array") is not None and err.get("arrayminus") is not None
    assert all(v > 0 for v in err["array"]) and all(v > 0 for v in err["arrayminus"])
    # the bar of setting #2 reaches into the baseline's own spread: "cannot tell" is visible
    hi_base = meas["y"][0] + err["array"][0]
    lo_2 = meas["y"][1] - err["arrayminus"][1]
    assert lo_2 < hi_base
    assert "spread" in p.note or "range" in p.note
    # the settings are categories on the x axis, in the tune's order (a numeric guess hid every point)
    assert fig["layout"]["xaxis"].get("type") == "category"
    assert list(fig["layout"]["xaxis"]["categoryarray"]) == list(meas["x"])


def test_tune_plots_are_not_zoomed_into_a_sliver(tmp_path: Path) -> None:
    st, info, _ = _tune_store(tmp_path, decode_means=(60.0, 60.6), jitter=0.001)
    fig = _plots([(info, [])])["tune_ttft_p50_s"].figure.to_plotly_json()
    rng = fig["layout"]["yaxis"].get("range")
    assert rng is not None and rng[0] <= 0.9 and rng[1] >= 1.1  # a 1 % change does not fill the plot


def test_the_tune_card_header_names_the_tune_not_question_marks(tmp_path: Path) -> None:
    st, info, _ = _tune_store(tmp_path)
    write_report([(info, [])], tmp_path / "t.html")
    page = (tmp_path / "t.html").read_text()
    import re

    head = re.search(r"<div class=cardhead>(.*?)</div>", page, re.S).group(1)  # type: ignore[union-attr]
    assert "?" not in head
    assert "gemma-3-270m" in head and "llamacpp" in head and "probe" in head and "2 settings" in head


# --- the report's text ---------------------------------------------------------------------------------
def test_what_differs_renders_host_processes_readably() -> None:
    from phasescope.report.sections import comparison_html

    a, b = _probe(), _probe()
    a[0].summary = {**a[0].summary, "host": {"before": {"other_cpu_share": 0.02, "top_other": []}}}
    b = (RunInfo(id="r-b", kind="probe", status="complete", started_at=2e9, model="gemma-3-270m",
                 summary={**b[0].summary, "host": {"before": {"other_cpu_share": 0.283, "top_other": [
                     {"pid": 21177, "comm": "python", "cpu_share": 0.0678},
                     {"pid": 1, "comm": "process_api", "cpu_share": 0.0023}]}}}), b[1])
    h = comparison_html([a, b], [{"a": {"id": a[0].id}, "b": {"id": "r-b"}, "metrics": []}])
    assert '{"pid"' not in h and "&quot;pid&quot;" not in h and "[]" not in h
    assert "python (pid 21177) 6.8 %" in h and "process_api (pid 1) 0.2 %" in h
    assert "28.3 %" in h  # a share reads as a percentage


def test_the_ttft_caption_describes_only_lines_that_are_drawn() -> None:
    p = _plots([_probe()])["ttft_vs_prompt"]
    fig = p.figure.to_plotly_json()
    dashed = [t for t in fig["data"] if (t.get("line") or {}).get("dash") == "dash"]
    if "dashed" in p.note:
        assert dashed, p.note
    else:
        assert not dashed
    assert "median" in p.note


def test_a_cdf_of_a_few_requests_is_a_step_per_request() -> None:
    # three repeats joined by straight lines read as a smooth distribution
    info, recs = _probe()
    fig = _figs([(info, recs)])["ttft_distribution"]
    cdfs = [t for t in fig["data"] if t["type"] == "scatter"]
    assert len(cdfs) == 2
    for t in cdfs:
        assert (t.get("line") or {}).get("shape") == "hv"
        assert list(t["y"]) == [0.0, 1 / 3, 2 / 3, 1.0]
        assert list(t["x"]) == sorted(t["x"])


def test_the_first_panel_of_a_subplot_figure_keeps_its_axis_title() -> None:
    # the common layout set yaxis_title="" after the panels were titled: the top panel read unlabelled
    info, recs = _llamacpp_bench(kv=True)
    tl = _figs([(info, recs)])["server_timeline"]["layout"]
    assert (tl["yaxis"].get("title") or {}).get("text") == "requests"
    td = _figs([_probe()])["ttft_distribution"]["layout"]
    assert (td["yaxis"].get("title") or {}).get("text") == "% of requests"


def test_sizes_apart_by_design_are_never_binned_together_and_lone_requests_get_no_histogram() -> None:
    # explain's prompt-scaling sends one or two requests per size: no histogram of two unlike requests
    rng = random.Random(2)
    recs = []
    t = 10 * NS
    for i, n in enumerate((32, 74, 32, 74, 32, 74, 150, 390)):
        r = make_record(i, rng, t_start_ns=t, prompt_tokens=n, ttft_s=0.01 + n * 1e-4)
        recs.append(r)
        t = (r.t_done_ns or t) + NS // 100
    info = RunInfo(id="r-s", kind="probe", status="complete", started_at=1e9, model="m")
    p = _plots([(info, recs)])["ttft_distribution"]
    fig = p.figure.to_plotly_json()
    hists = [sorted(t["x"]) for t in fig["data"] if t["type"] == "histogram"]
    from phasescope.measure import derive

    want = {n: sorted(derive.ttft_s(r) * 1e3 for r in recs if r.prompt_tokens_requested == n) for n in (32, 74)}
    assert sorted(hists) == sorted(want.values())  # 32 and 74 apart; 150 and 390 (one each) not drawn
    assert "150-token prompt" in p.note and "390-token prompt" in p.note


def test_medians_and_attained_rates_carry_their_interval() -> None:
    # every number with its interval: the median TTFT per size (the stored ttft_s_ci) and the
    # attained decode rate (from the repeats where no interval is stored) get error bars
    info, recs = _probe()
    for s in info.summary["sizes"]:
        s["ttft_s_ci"] = [s["ttft_s"] * 0.8, s["ttft_s"] * 1.5]
    f = _figs([(info, recs)])
    med = next(t for t in f["ttft_vs_prompt"]["data"] if "median" in (t.get("name") or ""))
    err = med["error_y"]
    for y, plus, minus in zip(med["y"], err["array"], err["arrayminus"]):
        assert plus == pytest.approx(0.5 * y) and minus == pytest.approx(0.2 * y)
    from phasescope.measure import derive
    from phasescope.measure.interval import median_interval

    att = next(t for t in f["ceilings"]["data"] if t["meta"]["metric"] == "attained" and t.get("xaxis") in (None, "x"))
    iv = median_interval([derive.decode_tok_s(r) for r in recs if r.prompt_tokens_requested == 200])
    assert att["error_x"]["array"][0] == pytest.approx(iv.high - att["x"][0])
    assert att["error_x"]["arrayminus"][0] == pytest.approx(att["x"][0] - iv.low)
