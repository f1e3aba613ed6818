"""Issue 19: plots chosen by the data — no degenerate axis, units that match the ticks, one colour
per run, a readable parameters table, the phase card on top and a comparison view."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_axes import degenerate_axes, trace_colour  # noqa: E402
from report_synth import NS, make_record, sequential_run  # noqa: E402

from phasescope.report.html import build_plots, write_report  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402


def bench_records(n: int, seed: int, *, concurrency: int = 4, ttft_s: float = 0.08, itl_s: float = 0.012,
                  tokens: tuple[int, ...] = (256, 257, 258)) -> list:  # type: ignore[type-arg]
    """A bench run as llama.cpp gives it: one requested prompt length whose tokenised length varies
    by a token or two, ``concurrency`` requests in flight, arrivals scheduled, server timings."""
    rng = random.Random(seed)
    out = []
    t = 5 * NS
    for i in range(n):
        start = t + (i % concurrency) * NS // 50
        r = make_record(i, rng, t_start_ns=start, prompt_tokens=256, output_tokens=24, ttft_s=ttft_s, itl_s=itl_s)
        r.prompt_tokens = tokens[i % len(tokens)]
        r.t_scheduled_ns = start - rng.randrange(0, NS // 20)
        out.append(r)
        if i % concurrency == concurrency - 1:
            t = max(x.t_done_ns or 0 for x in out[-concurrency:]) + NS // 100
    return out


def bench_info(run_id: str, *, kv: float = 0.5, started: float = 1.8e9) -> RunInfo:
    tl = [{"t_s": float(t), "wall_s": 1.8e9 + t, "running": 4 if 0 < t < 8 else 0, "waiting": 1 if 2 < t < 5 else 0,
           "kv_usage": kv * t / 9, "prefix_cache_hit_rate": 0.25 + 0.07 * t, "generation_tok_s": 90.0 + t,
           "prompt_tok_s": 800.0 - t} for t in range(10)]
    summary = {"completed": 32, "failed": 0, "median_ttft_ms": 80.0, "p99_ttft_ms": 120.0, "median_itl_ms": 12.0,
               "p99_itl_ms": 20.0, "median_tpot_ms": 12.5, "output_throughput": 300.0, "request_throughput": 3.0,
               "server_metrics": {"available": True, "engine": "llamacpp", "timeline": tl}}
    params = {"num_prompts": 32, "max_concurrency": 4, "request_rate": "inf", "input_len": 256, "output_len": 24,
              "workload": {"dataset": "random", "seed": 0, "prompts": {"unique": True, "prefix": "x" * 400}}}
    return RunInfo(id=run_id, kind="bench", status="complete", started_at=started, ended_at=started + 30,
                   model="gemma-3-270m", engine="llamacpp", engine_version="b1-0c1e570",
                   target="http://127.0.0.1:8080", params=params, summary=summary)


def one_bench() -> list:  # type: ignore[type-arg]
    return [(bench_info("r20261201-1000-aaaa"), bench_records(32, seed=1))]


def two_bench() -> list:  # type: ignore[type-arg]
    return [(bench_info("r20261201-1000-aaaa"), bench_records(32, seed=1)),
            (bench_info("r20261201-1100-bbbb", kv=0.8, started=1.8e9 + 3600), bench_records(32, seed=2, itl_s=0.02))]


def figs(runs: list) -> dict:  # type: ignore[type-arg]
    plots, _ = build_plots(runs)
    return {p.name: p.figure.to_plotly_json() for p in plots}


def test_one_bench_run_has_no_plot_with_a_single_x_value() -> None:
    f = figs(one_bench())
    assert f, "a bench run must have plots"
    bad = {name: degenerate_axes(fig) for name, fig in f.items() if degenerate_axes(fig)}
    assert bad == {}
    # a prompt length that only varies by tokenisation (256–258) is not a prompt-scaling plot,
    # and one load level is not a throughput/latency curve
    assert "ttft_vs_prompt" not in f and "throughput_vs_itl" not in f


def test_one_bench_run_gets_distributions_and_a_request_timeline() -> None:
    plots, skipped = build_plots(one_bench())
    names = [p.name for p in plots]
    assert "ttft_distribution" in names and "itl_cdf" in names and "request_timeline" in names
    assert "one prompt length" in skipped["ttft_vs_prompt"] and "256" in skipped["ttft_vs_prompt"]
    tl = next(p for p in plots if p.name == "request_timeline").figure.to_plotly_json()
    names = {t.get("name") for t in tl["data"]}
    # each request: waited, prefilled (server prompt time), decoded; and how many were in each phase
    assert {"waiting", "prefill", "decode"} <= names
    assert any(n and "in prefill" in n for n in names) and any(n and "in decode" in n for n in names)
    recs = one_bench()[0][1]
    dec = next(t for t in tl["data"] if t.get("name") == "decode")
    spans = [(a, b) for a, b in zip(dec["x"][0::3], dec["x"][1::3])]
    assert len(spans) == len(recs)
    t0 = min(r.t_scheduled_ns or r.t_start_ns for r in recs)
    first = sorted(recs, key=lambda r: r.t_start_ns)[0]
    from phasescope.measure import derive
    assert spans[0][0] == pytest.approx((derive.first_token_ns(first) - t0) / 1e9, abs=1e-6)


def test_percent_axes_hold_percent_values() -> None:
    fig = figs(one_bench())["server_timeline"]
    lay = fig["layout"]
    pct_axes = {k.replace("axis", "") for k, v in lay.items() if k.startswith("yaxis") and "(%)" in
                str(((v or {}).get("title") or {}).get("text", ""))}
    assert pct_axes, "the KV / prefix-cache axis is in %"
    on_pct = [t for t in fig["data"] if (t.get("yaxis") or "y") in pct_axes]
    assert on_pct
    vals = [v for t in on_pct for v in t["y"] if v is not None]
    assert max(vals) > 1.5 and max(vals) <= 100  # 0.25…0.88 as fractions must read 25…88 %
    # llama.cpp: no KV usage, prefix-cache hits all 0 — plotly's own range for all-zero data is
    # 0…0.95, which under a "(%)" title reads as fractions (the screenshot): the % axis
    # spans 0–100 whatever the data; and (issue 30) hits at 0 % at every scrape with no KV usage are
    # no panel at all (a line on the axis read as an empty panel) but a sentence in the note
    info, recs = one_bench()[0]
    for row in info.summary["server_metrics"]["timeline"]:
        row["kv_usage"] = None
        row["prefix_cache_hit_rate"] = 0.0 if row["t_s"] else 0.02
    flat = figs([(info, recs)])["server_timeline"]["layout"]
    pct = [v for k, v in flat.items() if k.startswith("yaxis") and "(%)" in str(((v or {}).get("title") or {}).get("text", ""))]
    assert pct and all(list(v.get("range") or []) == [0, 100] for v in pct)
    for row in info.summary["server_metrics"]["timeline"]:
        row["prefix_cache_hit_rate"] = 0.0
    p = next(p for p in build_plots([(info, recs)])[0] if p.name == "server_timeline")
    flat = p.figure.to_plotly_json()["layout"]
    assert not [k for k, v in flat.items()
                if k.startswith("yaxis") and "(%)" in str(((v or {}).get("title") or {}).get("text", ""))]
    assert "prefix-cache hits 0 % at every scrape" in p.note
    for k, v in lay.items():  # no axis claims % while its data are fractions
        if k.startswith("yaxis") and "(%)" not in str(((v or {}).get("title") or {}).get("text", "")):
            ax = k.replace("axis", "")
            assert not any("kv" in (t.get("name") or "").lower() for t in fig["data"] if (t.get("yaxis") or "y") == ax)


def test_one_dash_per_metric_one_colour_per_run() -> None:
    fig = figs(two_bench())["server_timeline"]
    dash_of: dict[str, set] = {}
    colour_of: dict[str, set] = {}
    for t in fig["data"]:
        run, metric = t["legendgroup"], t["meta"]["metric"]
        dash_of.setdefault(metric, set()).add((t.get("line") or {}).get("dash"))
        colour_of.setdefault(run, set()).add(trace_colour(t))
    assert all(len(d) == 1 for d in dash_of.values()), dash_of
    assert len({next(iter(d)) for d in dash_of.values()}) >= 2
    assert all(len(c) == 1 for c in colour_of.values()) and len({next(iter(c)) for c in colour_of.values()}) == 2


def test_two_run_report_overlays_both_runs_with_distinct_colours_and_a_legend() -> None:
    runs = two_bench()
    ids = [i.id for i, _ in runs]
    f = figs(runs)
    for name in ("ttft_distribution", "itl_cdf", "server_timeline"):
        fig = f[name]
        colours = {}
        for t in fig["data"]:
            for rid in ids:
                if rid in (t.get("name") or "") or rid == t.get("legendgroup"):
                    colours.setdefault(rid, set()).add(trace_colour(t))
        assert set(colours) == set(ids), name
        assert colours[ids[0]].isdisjoint(colours[ids[1]]), name
        assert fig["layout"].get("showlegend") is not False
        assert any(t.get("showlegend") is not False for t in fig["data"])
    assert not {n: degenerate_axes(g) for n, g in f.items() if degenerate_axes(g)}


def test_parameters_are_a_table_not_truncated_json(tmp_path: Path) -> None:
    write_report(one_bench(), tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert '"max_concurrency": 4' not in page and "..." not in page.split("<script")[0]
    params = re.search(r"<table class=\"params[^\"]*\".*?</table>", page, re.S)
    assert params, "a parameters table"
    assert "<td>max_concurrency</td><td>4</td>" in params.group(0)
    assert "<td>workload.prompts.unique</td><td>true</td>" in params.group(0)
    assert "x" * 400 in params.group(0)  # nothing cut off


def test_phase_card_comes_first(tmp_path: Path) -> None:
    probe = RunInfo(id="r20261201-0900-cccc", kind="probe", status="complete", started_at=1.8e9, model="gemma",
                    summary={"sizes": [{"prompt_tokens": n, "ttft_s": 0.02 + n * 1e-5, "decode_tok_s": 150.0 - n / 100,
                                        "itl_p50_s": 0.0066, "itl_p99_s": 0.009, "prefill_tok_s": 9000.0}
                                       for n in (128, 1024)],
                             "ceilings": {"sizes": [{"prompt_tokens": n, "decode_ceiling_tok_s": 600.0,
                                                     "decode_efficiency": 0.25, "decode_binding": "bandwidth",
                                                     "prefill_floor_s": n / 4e5, "prefill_efficiency": 0.31}
                                                    for n in (128, 1024)]},
                             "findings": [{"id": "f1", "severity": "limit", "cause": "decode is bandwidth bound"}]})
    write_report([(probe, sequential_run(4, seed=3, sizes=(128, 1024)))], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    body = page.split("<body>", 1)[1]
    card = re.search(r'<section class="card".*?</section>', body, re.S)
    assert card, "a phase card"
    assert body.index('<section class="card"') < body.index('class="ps-plot"')
    c = card.group(0)
    for text in ("TTFT", "decode", "ceiling", "efficiency", "25%", "31%", "bandwidth", "decode is bandwidth bound"):
        assert text in c, text
    assert "30.2 ms" in c and "149" in c  # the stored numbers themselves (1024-token TTFT, 128-token decode)


def test_comparison_view_has_verdicts_and_environment_differences(tmp_path: Path) -> None:
    runs = two_bench()
    runs[1][0].params["max_concurrency"] = 8
    runs[1][0].summary["host"] = {"load_1m": 3.5, "cpu_busy_pct": 80.0}
    runs[0][0].summary["host"] = {"load_1m": 0.2, "cpu_busy_pct": 5.0}
    write_report(runs, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    sec = re.search(r'<section class="comparison".*?</section>', page, re.S)
    assert sec, "a comparison section"
    s = sec.group(0)
    assert "verdict" in s and ("worse" in s or "better" in s or "within noise" in s)
    assert "ITL p50" in s
    # the runs differ in a parameter: shown as a difference, and the compare warning with it
    assert re.search(r"<tr class=diff><td>max_concurrency</td><td>4</td><td>8</td>", s)
    assert re.search(r"<tr class=diff><td>host.load_1m</td><td>0.2</td><td>3.5</td>", s)


def test_cli_report_two_runs_and_compare_html(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from phasescope.cli import app
    from phasescope.store import open_store

    st = open_store(tmp_path / "store")
    ids = []
    for info, recs in two_bench():
        with st.recording(info.kind, info.target, info.params, model=info.model, engine=info.engine) as run:
            for r in recs:
                run.add(r)
            run.finish(info.summary)
            ids.append(run.id)
    out = tmp_path / "cmp.html"
    r = CliRunner().invoke(app, ["compare", ids[0], ids[1], "--html", str(out), "--store", str(tmp_path / "store")])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert '<section class="comparison"' in page and ids[0] in page and ids[1] in page
    spec = json.loads(re.search(r'<script id="ps-specs" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert spec and not [s["id"] for s in spec if degenerate_axes(s)]


def test_comparison_renders_fields_compare_adds_later() -> None:
    # compare grows (host contention, "not comparable" verdicts with reasons): the view shows what is there
    from phasescope.report.sections import comparison_html

    runs = two_bench()
    c = {"a": {"id": runs[0][0].id}, "b": {"id": runs[1][0].id}, "confidence": 0.95, "min_change": 0.01,
         "warnings": ["host load differs"], "comparable": False, "not_comparable_reasons": ["CPU busy 80 % vs 5 %"],
         "host": {"a": {"load_1m": 0.2}, "b": {"load_1m": 3.5}},
         "metrics": [{"metric": "ttft_s", "label": "TTFT", "unit": "s", "group": "all", "a": 0.08, "b": 0.09,
                      "n_a": 32, "n_b": 32, "change": 0.125, "ci_low": None, "ci_high": None,
                      "verdict": "not comparable", "reason": "host contention differs"}]}
    h = comparison_html(runs, [c])
    assert "host load differs" in h and "comparable: false" in h and "CPU busy 80 % vs 5 %" in h
    assert "not comparable" in h and "host contention differs" in h
    assert "host.a.load_1m" in h and "3.5" in h
    assert comparison_html(runs, [{"a": {"id": "x"}, "b": {"id": "y"}}])  # nothing but ids: still renders
