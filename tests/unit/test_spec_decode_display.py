"""Speculative decoding shown where it is measured: watch's snapshot and dashboard (vLLM / llama.cpp counters,
SGLang gauges) and the report's phase card (probe's per-size and bench's run-level ``spec_decode``)."""

from __future__ import annotations

import pytest
from rich.console import Console

from phasescope.metrics import Timeline, parse_snapshot
from phasescope.metrics.dashboard import render
from phasescope.metrics.watch import WatchState


def _vllm(drafts: float, drafted: float, accepted: float, gen: float) -> str:
    lab = 'engine="0",model_name="m"'
    return "\n".join([
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} 1",
        "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{lab}}} {gen}",
        "# TYPE vllm:spec_decode_num_drafts_total counter", f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {drafted}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
    ]) + "\n"


def _sglang(length: float, rate: float, gen: float) -> str:
    return "\n".join([
        "# TYPE sglang:num_running_reqs gauge", 'sglang:num_running_reqs{model_name="m",tp_rank="0"} 1',
        "# TYPE sglang:generation_tokens_total counter", f'sglang:generation_tokens_total{{model_name="m",tp_rank="0"}} {gen}',
        "# TYPE sglang:spec_accept_length gauge", f'sglang:spec_accept_length{{model_name="m",tp_rank="0"}} {length}',
        "# TYPE sglang:spec_accept_rate gauge", f'sglang:spec_accept_rate{{model_name="m",tp_rank="0"}} {rate}',
    ]) + "\n"


def _tl(*texts: str) -> Timeline:
    tl = Timeline(window_s=60)
    for i, t in enumerate(texts):
        tl.add(parse_snapshot(t, t_ns=int(i * 10e9)))
    return tl


def _screen(tl: Timeline) -> str:
    st = WatchState(url="http://x", interval_s=1, window_s=60, timeline=tl, summary=tl.summary())
    con = Console(width=160, record=True)
    con.print(render(st))
    return con.export_text()


def test_watch_reads_vllm_spec_counters_over_the_window() -> None:
    # over the window: 100 verified steps, 400 drafted, 300 accepted → 75 %, (300 + 100) / 100 = 4 tokens per step
    tl = _tl(_vllm(50, 200, 100, 1000), _vllm(150, 600, 400, 1400))
    s = tl.summary()
    assert s["spec_acceptance_rate"] == pytest.approx(0.75)
    assert s["spec_tokens_per_step"] == pytest.approx(4.0)
    screen = _screen(tl)
    assert "speculation: accepted / drafted" in screen and "75" in screen
    assert "tokens per verified step" in screen and "4.00" in screen


def test_watch_reads_sglang_spec_gauges() -> None:
    tl = _tl(_sglang(2.5, 0.6, 100), _sglang(3.5, 0.8, 500))
    s = tl.summary()  # the engine's gauges as they stand now (set per logged decode batch), like watch's other gauges
    assert s["spec_acceptance_rate"] == pytest.approx(0.8)
    assert s["spec_tokens_per_step"] == pytest.approx(3.5)


def test_watch_without_speculation_shows_no_spec_rows() -> None:
    tl = _tl(_vllm(0, 0, 0, 100).split("# TYPE vllm:spec")[0], _vllm(0, 0, 0, 200).split("# TYPE vllm:spec")[0])
    s = tl.summary()
    assert s["spec_acceptance_rate"] is None and s["spec_tokens_per_step"] is None
    assert "verified step" not in _screen(tl)


def _sd(drafted: int | None, accepted: int, tps: float, source: str = "llamacpp_timings") -> dict:
    return {"drafted": drafted, "accepted": accepted, "acceptance_rate": accepted / drafted if drafted else None,
            "mean_accepted_len": tps - 1, "tokens_per_step": tps, "source": source, "steps": 10}


def test_report_probe_card_shows_spec_decode_per_size() -> None:
    from phasescope.report.sections import _probe_card

    sizes = [{"prompt_tokens": 200, "ttft_s": 0.1, "spec_decode": _sd(60, 48, 4.2)},
             {"prompt_tokens": 800, "ttft_s": 0.3}]
    html = _probe_card(sizes, {})
    assert "speculation: accepted / drafted" in html and "48 / 60 (80%)" in html
    assert "tokens per verified step" in html and "4.20" in html
    assert "verified step" not in _probe_card([{"prompt_tokens": 200, "ttft_s": 0.1}], {})


def test_report_bench_card_shows_run_spec_decode() -> None:
    from phasescope.report.sections import _bench_card

    s = {"median_ttft_ms": 10.0, "spec_decode": _sd(None, 120, 2.5, "inferred")}
    html = _bench_card(s)
    assert "speculation: accepted / drafted" in html and "120 / ? (inferred)" in html and "2.50" in html
    assert "verified step" not in _bench_card({"median_ttft_ms": 10.0})
