"""summarize(): vllm-bench-serve keys and definitions checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from phasescope.errors import InputError
from phasescope.load.summary import max_concurrency_sweep, parse_goodput, parse_percentiles, summarize
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000


def rec(i: int, start_ms: float, events: list[tuple[float, int | None]], *, out: int | None, ok: bool = True,
        src: str = "usage", sched_ms: float | None = None, slot_ms: float | None = None,
        prompt: int | None = 10, worker: str | None = None, wall0: int = 0, kind: str | None = None) -> RequestRecord:
    r = RequestRecord(id=f"r{i}", api="openai", target="http://127.0.0.1:1", ok=ok, worker=worker)
    r.t_start_ns = int(start_ms * MS)
    r.wall_start_ns = wall0 + int(start_ms * MS)
    r.t_scheduled_ns = int((sched_ms if sched_ms is not None else start_ms) * MS)
    r.tags = {"t_slot_ns": int((slot_ms if slot_ms is not None else start_ms) * MS)}
    r.events = [Event(int((start_ms + t) * MS), "content", n, 3) for t, n in events]
    if events:
        r.t_done_ns = int((start_ms + events[-1][0] + 10) * MS)
    r.output_tokens = out
    r.output_tokens_source = src if out is not None else None
    r.prompt_tokens = prompt
    r.prompt_tokens_source = "usage" if prompt is not None else None
    if not ok:
        r.error_kind = kind or "http"
        r.error_message = "HTTP 500"
    return r


@pytest.fixture
def three() -> list[RequestRecord]:
    r1 = rec(1, 0, [(100, None), (120, None), (140, None)], out=3)
    # one event with 4 tokens: per-token ITL 25 ms ×4, per-event gap 100 ms
    r2 = rec(2, 1000, [(200, 1), (300, 4)], out=5, sched_ms=900, slot_ms=950)
    r3 = rec(3, 500, [], out=None, ok=False)
    return [r1, r2, r3]


def test_counts_and_throughput(three: list[RequestRecord]) -> None:
    s = summarize(three, t0_ns=0)
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["errors_by_kind"] == {"http": 1}
    # last completion: r2 t_done = 1000 + 300 + 10 ms
    assert s["duration"] == pytest.approx(1.31)
    assert s["total_output_tokens"] == 8
    assert s["total_input_tokens"] == 20
    assert s["request_throughput"] == pytest.approx(2 / 1.31)
    assert s["output_throughput"] == pytest.approx(8 / 1.31)
    assert s["total_token_throughput"] == pytest.approx(28 / 1.31)


def test_latency_stats_match_hand_values(three: list[RequestRecord]) -> None:
    s = summarize(three, t0_ns=0, percentiles=[50, 99])
    assert s["mean_ttft_ms"] == pytest.approx(150)
    assert s["median_ttft_ms"] == pytest.approx(150)
    assert s["std_ttft_ms"] == pytest.approx(50)
    assert s["p99_ttft_ms"] == pytest.approx(199)  # linear interpolation, as np.percentile
    assert s["mean_tpot_ms"] == pytest.approx((20 + 25) / 2)
    assert s["mean_e2el_ms"] == pytest.approx((140 + 300) / 2)
    # per-token ITL: [20, 20, 25, 25, 25, 25]; per-event gaps: [20, 20, 100]
    assert s["mean_itl_ms"] == pytest.approx(140 / 6)
    assert s["p50_itl_ms"] == pytest.approx(25)
    assert s["mean_event_gap_ms"] == pytest.approx(140 / 3)
    assert s["p99_event_gap_ms"] == pytest.approx(20 + 0.98 * 80)
    # client queue: r1 0 ms, r2 50 ms (scheduled 900, slot 950)
    assert s["mean_client_queue_time_ms"] == pytest.approx(25)
    assert s["mean_e2el_including_client_queue_ms"] == pytest.approx((140 + 350) / 2)


def test_vllm_keys_present(three: list[RequestRecord]) -> None:
    s = summarize(three)
    for k in ("completed", "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
              "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms",
              "mean_e2el_ms", "p99_e2el_ms", "std_itl_ms", "max_concurrent_requests", "max_output_tokens_per_s",
              "request_goodput", "total_input_tokens", "total_output_tokens", "duration", "failed"):
        assert k in s


@pytest.mark.parametrize(
    "slo,good",
    [({"ttft": 150}, 1), ({"tpot": 22}, 1), ({"e2el": 200}, 1), ({"ttft": 250, "tpot": 30}, 2),
     ({"ttft": 99}, 0), ({"ttft": 250, "e2el": 299}, 1)],
)
def test_goodput(three: list[RequestRecord], slo: dict[str, float], good: int) -> None:
    s = summarize(three, t0_ns=0, goodput=slo)
    assert s["goodput_completed"] == good
    assert s["request_goodput"] == pytest.approx(good / 1.31)


def test_warmup_excluded() -> None:
    w = rec(0, 0, [(5, None), (6, None)], out=2)
    w.tags["warmup"] = True
    r = rec(1, 100, [(10, None), (20, None)], out=2)
    s = summarize([w, r])
    assert s["completed"] == 1 and s["num_requests"] == 1
    assert s["mean_ttft_ms"] == pytest.approx(10)


def test_count_disagreement_warns() -> None:
    # usage says 10 tokens, but the stream carried 3 single-token events with known counts
    r = rec(1, 0, [(10, 1), (20, 1), (30, 1)], out=10)
    s = summarize([r])
    assert any("disagree" in w["message"] and w["kind"] == "token_count_mismatch" for w in s["count_warnings"])
    ok = rec(2, 0, [(10, 1), (20, 1), (30, 1)], out=3)
    assert not any("disagree" in w["message"] for w in summarize([ok])["count_warnings"])
    assert summarize([ok])["token_count_source"]["output"] == {"usage": 1}


def test_events_only_counts_flagged() -> None:
    r = rec(1, 0, [(10, None), (20, None)], out=None)
    s = summarize([r])
    assert s["total_output_tokens"] == 2
    assert s["token_count_source"]["output"] == {"events": 1}
    assert any("no usage" in w["message"] and w["kind"] == "no_server_counts" for w in s["count_warnings"])


def test_peak_concurrency_exact_and_tokens_per_s() -> None:
    # three overlapping requests then a late one: peak 3 (vLLM 0.33 1-s buckets would say more)
    rs = [rec(i, i * 10, [(100, None), (200, None)], out=2) for i in range(3)]
    rs.append(rec(9, 5000, [(100, None), (200, None)], out=2))
    s = summarize(rs, t0_ns=0)
    assert s["max_concurrent_requests"] == 3
    assert s["max_output_tokens_per_s"] == 6
    assert max_concurrency_sweep([(0, 1), (1, 2)]) == 1  # touching intervals do not overlap


def test_multiworker_wall_clock_duration() -> None:
    # two processes with unrelated monotonic clocks, aligned by wall_start_ns
    a = rec(1, 0, [(100, None), (200, None)], out=2, worker="w0", wall0=10**18)
    b = rec(2, 7_000_000, [(100, None), (200, None)], out=2, worker="w1", wall0=10**18 - 7_000_000 * MS + 500 * MS)
    s = summarize([a, b])
    # a: wall 0..210 ms; b: wall 500..710 ms → 0.71 s
    assert s["duration"] == pytest.approx(0.71)
    assert s["max_concurrent_requests"] == 1


def test_empty_and_all_failed() -> None:
    s = summarize([])
    assert s["completed"] == 0 and s["mean_ttft_ms"] is None
    f = rec(1, 0, [], out=None, ok=False, kind="connect")
    s = summarize([f])
    assert s["failed"] == 1 and s["errors_by_kind"] == {"connect": 1}
    assert s["mean_ttft_ms"] is None


def test_parse_goodput_and_percentiles() -> None:
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput("ttft:500 e2el:2000") == {"ttft": 500.0, "e2el": 2000.0}
    for bad in (["itl:5"], ["ttft"], ["ttft:x"], ["ttft:-1"]):
        with pytest.raises(InputError):
            parse_goodput(bad)
    assert parse_percentiles("50,90,99.9") == (50.0, 90.0, 99.9)
    with pytest.raises(InputError):
        parse_percentiles("0,101")
    s = summarize([rec(1, 0, [(10, None), (20, None)], out=2)], percentiles=[99.9])
    assert "p99.9_ttft_ms" in s and not math.isnan(s["p99.9_ttft_ms"])
