"""Server-metrics timelines from real-format expositions of vLLM, SGLang, TGI and llama.cpp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phasescope.load.server_metrics import compare_ttft, summarize_snapshots
from phasescope.metrics import parse_snapshot

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"

CASES = [
    # file, engine, generation counter sample name, waiting gauge name, running gauge name
    ("vllm_0.33.txt", "vllm", "vllm:generation_tokens_total", "vllm:num_requests_waiting", "vllm:num_requests_running"),
    ("sglang_0.5.23.txt", "sglang", "sglang:generation_tokens_total", "sglang:num_queue_reqs", "sglang:num_running_reqs"),
    ("tgi_3.3_full.txt", "tgi", "tgi_request_generated_tokens_sum", "tgi_queue_size", "tgi_batch_current_size"),
    ("llamacpp_rendered.txt", "llamacpp", "llamacpp:tokens_predicted_total", "llamacpp:requests_deferred",
     "llamacpp:requests_processing"),
]


def _lines(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.match(re.escape(name) + r"(\{| )", ln)]


def _bump(text: str, name: str, add: float) -> str:
    out = []
    for ln in text.splitlines():
        if re.match(re.escape(name) + r"(\{| )", ln):
            head, val = ln.rsplit(" ", 1)
            ln = f"{head} {float(val) + add}"
        out.append(ln)
    return "\n".join(out) + "\n"


def _set(text: str, name: str, value: float) -> str:
    out = []
    for ln in text.splitlines():
        if re.match(re.escape(name) + r"(\{| )", ln):
            head, _ = ln.rsplit(" ", 1)
            ln = f"{head} {value}"
        out.append(ln)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("fname,engine,gen,waiting,running", CASES)
def test_timeline_from_exposition(fname: str, engine: str, gen: str, waiting: str, running: str) -> None:
    path = DATA / fname
    if not path.exists():
        pytest.fail(f"missing exposition sample {path}")
    t1 = path.read_text()
    w0 = sum(float(ln.rsplit(" ", 1)[1]) for ln in _lines(t1, waiting))
    r0 = sum(float(ln.rsplit(" ", 1)[1]) for ln in _lines(t1, running))
    n_gen_series = len(_lines(t1, gen))
    assert n_gen_series >= 1
    # second scrape 2 s later: 100 more tokens per series, queue drained, 5 running
    t2 = _set(_set(_bump(t1, gen, 100.0), waiting, 0.0), running, 5.0)
    t3 = _bump(t2, gen, 50.0)
    snaps = [parse_snapshot(t, t_ns=ns) for t, ns in ((t1, 0), (t2, 2_000_000_000), (t3, 3_000_000_000))]
    res = summarize_snapshots(snaps, t0_ns=0)
    assert res.available and res.engine == engine
    tl = res.timeline
    assert [r["t_s"] for r in tl] == [0.0, 2.0, 3.0]
    assert tl[0]["waiting"] == pytest.approx(w0) and tl[1]["waiting"] == 0.0
    assert tl[0]["running"] == pytest.approx(r0) and tl[1]["running"] == 5.0
    assert tl[1]["generation_tok_s"] == pytest.approx(100.0 * n_gen_series / 2.0)
    assert tl[2]["generation_tokens"] == pytest.approx(150.0 * n_gen_series)
    s = res.summary
    assert s["max_waiting"] == pytest.approx(w0)
    assert s["max_running"] == pytest.approx(max(r0, 5.0))
    # waiting > 0 only in the first interval (0 → 2 s)
    assert s["time_with_queue_s"] == pytest.approx(2.0 if w0 > 0 else 0.0)
    assert s["generation_tokens"] == pytest.approx(150.0 * n_gen_series)


def test_vllm_kv_and_ttft_histogram() -> None:
    t1 = (DATA / "vllm_0.33.txt").read_text()
    t2 = _set(t1, "vllm:kv_cache_usage_perc", 0.5)
    res = summarize_snapshots([parse_snapshot(t1, t_ns=0), parse_snapshot(t2, t_ns=10**9)], t0_ns=0)
    assert res.summary["kv_usage_peak"] == pytest.approx(0.5)
    assert res.timeline[0]["kv_usage"] == pytest.approx(0.0421)


def test_unavailable_and_compare() -> None:
    res = summarize_snapshots([], t0_ns=0)
    assert not res.available and res.reason
    assert compare_ttft({"mean_ttft_ms": 120.0, "median_ttft_ms": 110.0},
                        {"server_ttft_mean_ms": 100.0, "server_ttft_p50_ms": 95.0}) == {
        "client_mean_ttft_ms": 120.0, "server_mean_ttft_ms": 100.0, "client_minus_server_mean_ms": 20.0,
        "client_median_ttft_ms": 110.0, "server_p50_ttft_ms": 95.0}
    assert compare_ttft({"mean_ttft_ms": None}, {"server_ttft_mean_ms": 1.0}) is None
