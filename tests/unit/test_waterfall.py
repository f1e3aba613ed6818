"""The per-request waterfall derived from client timestamps and the server's own timings, and its
run-level attribution by TTFT band (measure/waterfall.py), on synthetic records."""

from __future__ import annotations

import random

import pytest

from phasescope.measure.interval import bootstrap_ratio_of_sums
from phasescope.measure.records import Event, RequestRecord
from phasescope.measure.waterfall import Bounds, request_waterfall, run_waterfall

MS = 1_000_000


def rec(i: int, *, conn_ms: float = 1.0, net_ms: float = 0.5, queue_ms: float = 0.0, prefill_ms: float = 20.0,
        n_out: int = 5, gap_ms: float = 10.0, prompt: int = 100, cached: int = 0, timings: bool = True,
        headers_late: bool = False) -> RequestRecord:
    """A request whose truth is known: connect, then network, then queue, then prefill, then decode."""
    t0 = 10_000 * MS + i * 7 * MS
    conn = t0 + int(conn_ms * MS)
    headers = conn + int(net_ms * MS)
    first = headers + int(queue_ms * MS) + int(prefill_ms * MS)
    evs = [Event(first + k * int(gap_ms * MS), "content", 1, 3) for k in range(n_out)]
    server = ({"prefill_s": prefill_ms / 1e3, "decode_s": (n_out - 1) * gap_ms / 1e3, "prompt_n": prompt - cached,
               "cache_n": cached, "predicted_n": n_out} if timings else None)
    return RequestRecord(id=f"r{i}", api="llamacpp", target="t", t_start_ns=t0, t_conn_ready_ns=conn,
                         t_headers_ns=first if headers_late else headers, events=evs, t_done_ns=evs[-1].t_ns + MS,
                         prompt_tokens=prompt, output_tokens=n_out, server=server, ok=True)


def test_phases_sum_to_the_clients_e2e_exactly() -> None:
    rnd = random.Random(3)
    for i in range(200):
        r = rec(i, conn_ms=rnd.uniform(0, 3), net_ms=rnd.uniform(0, 2), queue_ms=rnd.uniform(0, 500),
                prefill_ms=rnd.uniform(1, 300), n_out=rnd.randint(1, 50), gap_ms=rnd.uniform(1, 30),
                headers_late=rnd.random() < 0.3)
        w = request_waterfall(r)
        assert w is not None
        parts = w["connect_s"] + w["network_s"] + w["queue_s"] + w["prefill_s"] + w["decode_s"]
        assert parts == pytest.approx(w["e2e_s"], abs=1e-12)
        assert w["derived"] is True


def test_the_phases_match_the_designed_truth() -> None:
    w = request_waterfall(rec(0, conn_ms=2, net_ms=1, queue_ms=300, prefill_ms=40, prompt=1000, cached=600))
    assert w is not None
    assert w["connect_s"] == pytest.approx(0.002) and w["network_s"] == pytest.approx(0.001)
    assert w["queue_s"] == pytest.approx(0.300) and w["prefill_s"] == pytest.approx(0.040)
    assert w["network_client_s"] == pytest.approx(0.003)
    assert (w["cached_tokens"], w["computed_tokens"]) == (600, 400)
    assert w["decode_s"] == pytest.approx(0.040) and w["server_decode_s"] == pytest.approx(0.040)


def test_headers_that_came_with_the_first_token_are_not_network() -> None:
    w = request_waterfall(rec(0, net_ms=1, queue_ms=50, prefill_ms=20, headers_late=True))
    assert w is not None
    assert w["network_s"] == 0 and w["network_note"]
    assert w["queue_s"] == pytest.approx(0.051)


def test_queue_is_never_negative_when_the_server_prefill_reads_longer_than_ttft() -> None:
    r = rec(0, conn_ms=1, net_ms=0, queue_ms=0, prefill_ms=20)
    r.server["prefill_s"] = 0.5  # type: ignore[index]  # another process's clock: longer than TTFT allows
    w = request_waterfall(r)
    assert w is not None
    assert w["queue_s"] == 0 and w["clamped"] is True
    assert w["connect_s"] + w["network_s"] + w["prefill_s"] == pytest.approx(w["ttft_s"], abs=1e-12)


def test_without_server_timings_queue_and_prefill_are_one_share_and_counted_missing() -> None:
    w = request_waterfall(rec(0, queue_ms=30, timings=False))
    assert w is not None
    assert w["queue_s"] is None and w["prefill_s"] is None and w["server_s"] == pytest.approx(0.050)
    out = run_waterfall([rec(i, timings=False) for i in range(4)])
    assert out["unattributed"] == 4 and out["spans_missing"] == 4 and out["spans_joined"] == 0 and out["sentence"] is None


def test_bounds_sit_beside_prefill_and_decode() -> None:
    b = Bounds(prefill_floor_s=lambda n: n * 1e-5, decode_ceiling_tok_s=lambda ctx: 200.0)
    w = request_waterfall(rec(0, prefill_ms=40, prompt=1000, cached=600, n_out=5, gap_ms=10), b)
    assert w is not None
    assert w["prefill_floor_s"] == pytest.approx(0.004)  # the 400 computed tokens, not the 600 cached
    assert w["prefill_vs_floor"] == pytest.approx(10.0)
    assert w["decode_floor_s"] == pytest.approx(4 / 200) and w["decode_vs_floor"] == pytest.approx(2.0)


def test_band_shares_are_shares_of_sums_not_medians_of_shares() -> None:
    # p99 band of 100 requests = the slowest one or two; make the slowest two differ in mix
    recs = [rec(i, queue_ms=0, prefill_ms=10) for i in range(98)]
    recs.append(rec(98, conn_ms=0, net_ms=0, queue_ms=900, prefill_ms=100))  # TTFT 1000: 90 % queue
    recs.append(rec(99, conn_ms=0, net_ms=0, queue_ms=0, prefill_ms=1001))   # TTFT 1001: 0 % queue
    out = run_waterfall(recs)
    p99 = out["bands"]["p99"]
    members_ttft = 1.000 + 1.001
    if p99["n"] == 2:
        assert p99["shares"]["queue"]["value"] == pytest.approx(0.9 / members_ttft)  # 45 %: neither 90 % nor 0 %
    else:  # only the slowest one: 0 % queue, all prefill
        assert p99["shares"]["queue"]["value"] == pytest.approx(0.0, abs=1e-9)
    for band in out["bands"].values():
        total = sum(band["shares"][p]["value"] for p in ("queue", "prefill", "network_client"))
        assert total == pytest.approx(1.0)


def test_a_queued_tail_is_attributed_to_queue_with_an_interval_and_a_sentence() -> None:
    rnd = random.Random(1)
    recs = [rec(i, queue_ms=(rnd.uniform(600, 900) if i % 10 == 0 else 0.0), prefill_ms=rnd.uniform(20, 40))
            for i in range(200)]
    b = Bounds(prefill_floor_s=lambda n: 0.01, decode_ceiling_tok_s=lambda ctx: None)
    out = run_waterfall(recs, b)
    p99 = out["bands"]["p99"]
    q = p99["shares"]["queue"]
    assert q["value"] > 0.9 and q["ci"][0] <= q["value"] <= q["ci"][1]
    assert out["bands"]["p50"]["shares"]["queue"]["value"] < 0.05
    assert set(p99) >= {"queue_s", "prefill_s", "decode_s", "network_client_s"}
    assert out["sentence"].startswith("Of p99 TTFT") and "was queue" in out["sentence"] and "× its floor" in out["sentence"]


def test_ratio_of_sums_interval_resamples_pairs() -> None:
    iv = bootstrap_ratio_of_sums([1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0])
    assert iv is not None and iv.value == 0.5 and iv.low == iv.high == 0.5
    assert bootstrap_ratio_of_sums([], []) is None
    assert bootstrap_ratio_of_sums([1.0], [0.0]) is None


def test_a_late_headers_round_trip_beyond_the_runs_fastest_is_queue_not_network() -> None:
    # llama-server answers the headers only once an HTTP worker took the request: a busy server's come late
    fast = rec(0, net_ms=0.5, queue_ms=0, prefill_ms=20)
    late = rec(1, net_ms=800, queue_ms=0, prefill_ms=20)  # 800 ms before the headers: the server's wait
    out = run_waterfall([fast, late])
    w = max(out["slowest"], key=lambda x: x["ttft_s"])
    assert w["network_s"] == pytest.approx(0.0005) and w["queue_s"] == pytest.approx(0.7995)
    assert "queue" in w["network_note"]
    parts = w["connect_s"] + w["network_s"] + w["queue_s"] + w["prefill_s"] + w["decode_s"]
    assert parts == pytest.approx(w["e2e_s"], abs=1e-12)
