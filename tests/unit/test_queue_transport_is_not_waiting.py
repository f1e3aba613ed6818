"""Time every request spends outside the server's prefill even on an idle server (the network, HTTP,
tokenization) is not waiting in a queue. The held-out matrix's llama-server behind a 120 ms network
(40 slots, 2 requests at once) got "At 2 concurrent requests most of TTFT is waiting, not prefill"
beside "128 ms of every TTFT does not depend on the prompt" from the same run (issue 30)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from explain_synth import rec  # noqa: E402

from phasescope.diagnose import diagnose  # noqa: E402
from phasescope.experiments import batching, queue  # noqa: E402
from phasescope.experiments.queue import QueueSample  # noqa: E402


def _level(c: int, ttft: float, prefill: float, n: int = 4) -> list:
    return [rec("batching", "measure", ttft=ttft, server={"prefill_s": prefill}, concurrency=c, worker=w, i=0)
            for w in range(n)]


def test_batching_does_not_call_a_slow_network_a_queue():
    # 128 ms of every TTFT lies outside prefill at concurrency 1 and 2 alike: transport, not a queue
    b = batching.analyze(_level(1, 0.168, 0.040) + _level(2, 0.170, 0.041))
    top = b.levels[-1]
    assert top.queue_share_total == pytest.approx(0.129 / 0.170, rel=1e-3)  # the documented ratio stays
    assert top.wait_share_total == pytest.approx(0.0, abs=0.02)  # beyond level 1's 128 ms: nothing
    assert diagnose({"batching": b}).get("ttft-queueing") is None


def test_batching_still_sees_a_real_queue_behind_a_slow_network():
    b = batching.analyze(_level(1, 0.168, 0.040) + _level(4, 2.0, 0.040))
    assert b.levels[-1].wait_share_total == pytest.approx((2.0 - 0.040 - 0.128) / 2.0, rel=1e-3)
    f = diagnose({"batching": b}).get("ttft-queueing")
    assert f is not None and "most of TTFT is waiting" in f.cause


def _q(ttft: float, prefill: float, n: int = 16) -> list:
    return [rec("queue", "measure", ttft=ttft, server={"prefill_s": prefill}, concurrency=n, worker=i) for i in range(n)]


def test_queue_subtracts_the_calibrated_overhead_before_it_calls_time_waiting():
    idle = [QueueSample(i * 0.2, 0.0, 16.0, None) for i in range(10)]
    r = queue.analyze(_q(0.16, 0.03), idle, overhead_s=0.125)
    assert r.ttft_queue_share_total == pytest.approx(0.13 / 0.16, rel=1e-3)  # the contract key is unchanged
    assert r.ttft_wait_share_total == pytest.approx(0.005 / 0.16, rel=1e-2)
    assert r.queueing is False, r.reason
    real = queue.analyze(_q(1.0, 0.03), [QueueSample(i * 0.2, 4.0, 12.0, None) for i in range(10)], overhead_s=0.125)
    assert real.queueing is True
    no_metrics = queue.analyze(_q(0.16, 0.03), overhead_s=0.125)
    assert no_metrics.queueing is False, no_metrics.reason


def test_no_queue_is_not_read_from_a_run_in_which_nothing_finished_or_ran():
    # the held-out matrix's TGI server (2 slots, 150 ms network): the queue experiment's 2.4 s share ran out
    # before any of its 8 requests finished, /metrics never showed one running, and it said "no queue"
    stopped = [rec("queue", "measure", ttft=0.3, concurrency=8, worker=i, ok=False) for i in range(8)]
    for r in stopped:
        r.error_kind = "stopped_by_client"
    empty = [QueueSample(i * 0.2, 0.0, 0.0, None) for i in range(6)]
    r = queue.analyze(stopped, empty)
    assert r.queueing is None, r.reason
    assert "finished" in r.reason
    # the samples saw nothing running while requests did finish (no server timing to fall back on): they
    # missed the load
    done = [rec("queue", "measure", ttft=0.3, concurrency=8, worker=i) for i in range(8)]
    r2 = queue.analyze(done, empty)
    assert r2.queueing is None, r2.reason
