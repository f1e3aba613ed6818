"""The explain experiments' pure analyses on synthetic records with known answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasescope.experiments import batching, context_fill, prefill_interference, prefix_cache, prompt_scaling, queue
from phasescope.experiments.common import RESUME_SLACK_NS, ExperimentInfo, read_late_ns
from phasescope.experiments.queue import QueueSample
from explain_synth import S, rec  # noqa: E402

PS, PC, CF, BT, PI, Q = (prompt_scaling.NAME, prefix_cache.NAME, context_fill.NAME, batching.NAME,
                         prefill_interference.NAME, queue.NAME)


# -- prompt-scaling ------------------------------------------------------------------------------
def _scaling(ttft_of, decode_gap_of=lambda n: 0.02, grid=(32, 128, 512, 2048)):
    out = []
    for n in grid:
        for _ in range(2):
            out.append(rec(PS, "measure", ttft=ttft_of(n), gap=decode_gap_of(n), prompt=n, n_out=16,
                           prompt_tokens_target=n))
    return out


def test_prompt_scaling_recovers_the_quadratic_fit_and_flat_decode():
    r = prompt_scaling.analyze(_scaling(lambda n: 0.05 + 1e-3 * n + 2e-7 * n * n))
    assert r.fit is not None
    assert r.fit.a_s == pytest.approx(0.05, rel=1e-3)
    assert r.fit.b_s_per_token == pytest.approx(1e-3, rel=1e-3)
    assert r.fit.c_s_per_token2 == pytest.approx(2e-7, rel=1e-2)
    n = 2048
    assert r.prefill_tok_s == pytest.approx(n / (1e-3 * n + 2e-7 * n * n), rel=1e-3)
    assert r.quadratic_share == pytest.approx(2e-7 * n * n / (1e-3 * n + 2e-7 * n * n), rel=1e-2)
    assert r.ttft_grows is True and r.decode_flat is True
    assert abs(r.decode_change_pct) < 1


def test_prompt_scaling_sees_decode_that_slows_with_the_prompt():
    r = prompt_scaling.analyze(_scaling(lambda n: 0.01 + 1e-4 * n, lambda n: 0.02 * (1 + n / 1024)))
    assert r.decode_change_pct < -50 and r.decode_flat is False


def test_prompt_scaling_decode_from_the_typical_gap_then_the_server():
    # a burst: one 1-s stall in every long-prompt request inflates its mean time per token 4×,
    # but not its median gap
    def burst(n):
        return 0.02

    rs = _scaling(lambda n: 0.01 + 1e-4 * n, burst)
    for r in rs:
        if r.tags["prompt_tokens_target"] == 2048:
            r.events[5].t_ns += 10**9
            for e in r.events[6:]:
                e.t_ns += 10**9
    res = prompt_scaling.analyze(rs)
    assert res.decode_source == "gaps" and res.decode_flat is True and abs(res.decode_change_pct) < 1e-6
    few = _scaling(lambda n: 0.01 + 1e-4 * n)
    for r in few:  # too few tokens for a typical gap: fall back to the server's timing
        r.events = r.events[:3]
        r.output_tokens = 3
        r.server = {"predicted_n": 16, "decode_s": 16 / 50.0}
    assert prompt_scaling.analyze(few).decode_source == "server"


def test_prompt_scaling_flat_ttft_is_not_called_growth():
    r = prompt_scaling.analyze(_scaling(lambda n: 0.2))
    assert r.ttft_grows is False
    assert r.prefill_tok_s is None


def test_relative_fit_keeps_the_intercept_of_short_prompts():
    # one noisy long prompt (+30 %) must not drag the intercept far from the short prompts' TTFT
    def ttft(n):
        return (0.05 + 1e-3 * n) * (1.3 if n == 2048 else 1.0)

    r = prompt_scaling.analyze(_scaling(ttft))
    assert r.fit.a_s == pytest.approx(0.05, abs=0.02)
    assert prompt_scaling.fit_relative([1, 2, 3], [2.0, 3.0, 4.0]).b == pytest.approx(1.0)


def test_prompt_scaling_client_overhead_from_server_timings():
    rs = _scaling(lambda n: 0.3 + 1e-3 * n)
    for r in rs:
        r.server = {"prefill_s": (r.events[0].t_ns - r.t_start_ns) / 1e9 - 0.25}
    assert prompt_scaling.analyze(rs).client_overhead_s == pytest.approx(0.25, abs=1e-6)


def test_prompt_scaling_needs_three_lengths():
    r = prompt_scaling.analyze(_scaling(lambda n: 0.01 + 1e-4 * n, grid=(32, 64)))
    assert r.fit is None and r.notes


def test_geometric_grid_is_increasing_and_ends_at_max():
    g = prompt_scaling.geometric_grid(32, 4000, 6)
    assert g[0] == 32 and g[-1] == 4000 and g == sorted(set(g))


# -- prefix-cache --------------------------------------------------------------------------------
def _pc(cold: float, repeat: float, short: float = 0.05, jitter: float = 0.002, **kw):
    rs = [rec(PC, "short", ttft=short + jitter * (i % 2), prompt=24) for i in range(3)]
    for g in range(2):
        rs.append(rec(PC, "cold", ttft=cold, prompt=1024, system_tokens=1000, group=g, **kw.get("cold_kw", {})))
        for i in range(3):
            rs.append(rec(PC, "repeat", ttft=repeat + jitter * (i % 2), prompt=1024, system_tokens=1000, group=g,
                          **kw.get("rep_kw", {})))
    return rs


def test_prefix_cache_hit_miss_and_cannot_tell():
    hit = prefix_cache.analyze(_pc(cold=1.0, repeat=0.08))
    assert hit.cache_detected is True
    assert hit.ttft_first_s == pytest.approx(1.0) and hit.ttft_repeat_s == pytest.approx(0.081, abs=0.002)
    assert hit.saved_fraction == pytest.approx(0.92, abs=0.01)
    miss = prefix_cache.analyze(_pc(cold=1.0, repeat=0.98))
    assert miss.cache_detected is False
    partial = prefix_cache.analyze(_pc(cold=1.0, repeat=0.6))
    assert partial.cache_detected is None and "partial" in partial.reason
    # the system prompt costs ~3 ms: well inside noise → cannot tell, whatever the repeats did
    tiny = prefix_cache.analyze(_pc(cold=0.053, repeat=0.05, short=0.05, jitter=0.004))
    assert tiny.cache_detected is None and "noise" in tiny.reason


def test_prefix_cache_reads_the_server_view_and_flags_disagreement():
    agree = prefix_cache.analyze(_pc(cold=1.0, repeat=0.08, rep_kw={"cached": 992}, cold_kw={"cached": 0}))
    assert agree.server.says_cached is True and agree.agrees_with_server is True
    assert agree.server.cached_tokens_repeat == 992
    disagree = prefix_cache.analyze(_pc(cold=1.0, repeat=0.08, rep_kw={"cached": 0}))
    assert disagree.server.says_cached is False and disagree.agrees_with_server is False
    assert disagree.cache_detected is None and "server reports" in disagree.reason
    # llama.cpp-style server timings alone (no cached counts): prompt_ms collapses on repeats
    timed = prefix_cache.analyze(_pc(cold=1.0, repeat=0.9, rep_kw={"server": {"prefill_s": 0.85}},
                                     cold_kw={"server": {"prefill_s": 0.95}}))
    assert timed.server.says_cached is False
    via_metrics = prefix_cache.analyze(_pc(cold=1.0, repeat=0.1),
                                       metrics_delta={"prefix_cache_hits": 6000, "prefix_cache_queries": 8000})
    assert via_metrics.server.hit_rate == pytest.approx(0.75) and via_metrics.server.says_cached is True


# -- context-fill ----------------------------------------------------------------------------------
def _cf(per_token_of):
    rs = []
    for L in (64, 256, 1024, 4096):
        for _ in range(2):
            rs.append(rec(CF, "measure", ttft=0.1, gap=per_token_of(L), prompt=L, n_out=32, context_target=L))
    return rs


def test_context_fill_slowdown_fit_and_prediction():
    r = context_fill.analyze(_cf(lambda L: 0.02 + 2e-6 * L), weight_bytes=250e6, kv_bytes_per_token=3072)
    assert r.slows is True and r.slowdown_pct > 20
    assert r.per_token_s_per_ctx_token == pytest.approx(2e-6, rel=0.05)
    assert r.points[0].context_tokens == 64 + 16  # prompt + half the output
    assert r.prediction is not None
    l0, l1 = r.points[0].context_tokens, r.points[-1].context_tokens
    exp = 100 * (1 - (250e6 + l0 * 3072) / (250e6 + l1 * 3072))
    assert r.prediction.slowdown_pct == pytest.approx(exp)
    assert r.measured_over_predicted == pytest.approx(r.slowdown_pct / exp)


def test_context_fill_flat_and_ambiguous():
    assert context_fill.analyze(_cf(lambda L: 0.02)).slows is False
    mid = context_fill.analyze(_cf(lambda L: 0.02 * (1 + 0.08 * (L >= 4096))))
    assert mid.slows is None  # 7-8 %: neither flat nor clearly slower
    assert context_fill.analyze([]).notes


# -- batching ----------------------------------------------------------------------------------------
def _bt(tput_gain: dict[int, float], itl: dict[int, float] | None = None):
    """Level c: c streams of 20 tokens; wall time chosen so aggregate = 100·gain[c] tok/s."""
    rs = []
    for c, gain in tput_gain.items():
        wall = c * 20 / (100 * gain)
        g = (itl or {}).get(c, (wall - 0.05) / 19)
        for w in range(c):
            rs.append(rec(BT, "measure", t0=100 * c, ttft=wall - 19 * g, gap=g, n_out=20, concurrency=c, worker=w))
    return rs


def test_batching_levels_and_knee():
    r = batching.analyze(_bt({1: 1.0, 2: 1.9, 4: 3.6, 8: 3.8}))
    assert [lv.concurrency for lv in r.levels] == [1, 2, 4, 8]
    assert r.levels[0].output_tok_s == pytest.approx(100, rel=1e-3)
    assert r.levels[2].output_tok_s == pytest.approx(360, rel=1e-3)
    assert r.knee_concurrency == 4 and r.knee_reached is True
    assert r.throughput_gain_x == pytest.approx(3.8, rel=1e-3)


def test_batching_still_scaling_and_no_gain():
    up = batching.analyze(_bt({1: 1.0, 2: 1.9, 4: 3.5}))
    assert up.knee_concurrency is None and up.knee_reached is False
    flat = batching.analyze(_bt({1: 1.0, 2: 1.02, 4: 1.05}))
    assert flat.knee_concurrency == 1 and flat.knee_reached is True
    assert batching.analyze(_bt({1: 1.0})).knee_reached is None
    # CPU pattern (engine.md §6): 2 streams gain nothing, 4 gain 2× — not a knee at 1
    cpu = batching.analyze(_bt({1: 1.0, 2: 0.97, 4: 2.0}))
    assert cpu.knee_concurrency is None and cpu.knee_reached is False
    cpu8 = batching.analyze(_bt({1: 1.0, 2: 0.97, 4: 2.0, 8: 2.1}))
    assert cpu8.knee_concurrency == 4


def test_batching_itl_percentiles_per_token():
    r = batching.analyze(_bt({1: 1.0, 4: 3.0}, itl={1: 0.01, 4: 0.02}))
    assert r.levels[0].itl_p50_s == pytest.approx(0.01, rel=1e-3)
    assert r.levels[1].itl_p99_s == pytest.approx(0.02, rel=1e-3)
    assert r.itl_p99_growth_x == pytest.approx(2.0, rel=1e-2)


def test_batching_levels_for_bound():
    assert batching.levels_for(4) == [1, 2, 4]
    assert batching.levels_for(6) == [1, 2, 4, 6]
    assert batching.levels_for(1) == [1]


# -- prefill-interference ----------------------------------------------------------------------------
def _pi(stall: float, inject_ttft: float, gap: float = 0.02, chunks: int = 1):
    """3 streams with 20 ms gaps from t=0; injection sent at 1.0 s; during its prefill the streams'
    gaps grow by ``stall`` in total, spread over ``chunks`` gaps."""
    rs = []
    for i in range(3):
        gaps = []
        t = 0.05
        while t < 1.0:
            gaps.append(gap)
            t += gap
        gaps += [gap + stall / chunks] * chunks + [gap] * 30
        rs.append(rec(PI, "stream", ttft=0.05, gaps=gaps, prompt=32, stream=i))
    rs.append(rec(PI, "inject", t0=1.0, ttft=inject_ttft, n_out=4, prompt=2000))
    return rs


def test_interference_stall_is_seen():
    r = prefill_interference.analyze(_pi(stall=0.5, inject_ttft=0.55))
    assert r.interference is True
    assert r.itl_baseline_s == pytest.approx(0.02, rel=1e-3)
    assert r.itl_max_during_s == pytest.approx(0.52, rel=1e-3)
    assert r.spike_x == pytest.approx(26, rel=1e-2)
    assert r.chunked_prefill_likely is False  # the streams waited out ~the whole prefill


def test_interference_chunked_spread_and_none():
    chunked = prefill_interference.analyze(_pi(stall=0.5, inject_ttft=0.55, chunks=10))
    assert chunked.interference is True and chunked.chunked_prefill_likely is True
    assert chunked.spike_duration_s > 0.4
    none = prefill_interference.analyze(_pi(stall=0.0, inject_ttft=0.5))
    assert none.interference is False
    short = prefill_interference.analyze(_pi(stall=0.0, inject_ttft=0.03))
    assert short.interference is None and "too short" in short.reason
    assert prefill_interference.analyze([]).interference is None


def _pi_client_stall():
    """Streams that decode steadily through the injected prefill (chunked, no stall), but whose client
    stalled 70 ms at 1.2 s: every stream shows one 80 ms gap whose token was read as it resumed."""
    rs, gap = [], 0.02
    for i in range(3):
        gaps, t = [], 0.05
        while t < 1.2:
            gaps.append(gap)
            t += gap
        rs.append(rec(PI, "stream", ttft=0.05, gaps=gaps + [0.08] + [gap] * 40, prompt=32, stream=i))
    rs.append(rec(PI, "inject", t0=1.0, ttft=0.5, n_out=4, prompt=2000))
    b = rs[0].token_events()[len(gaps) + 1].t_ns  # the read right after the stall
    return rs, [(b - int(0.07 * S), b)]


def test_interference_a_client_stall_is_no_server_stall():
    rs, stalls = _pi_client_stall()
    blind = prefill_interference.analyze(rs)  # without the client's own stalls the 80 ms gap is a spike
    assert blind.spike_x == pytest.approx(4, rel=1e-2)  # (one spike per stream: no chunked stall either way)
    r = prefill_interference.analyze(rs, client_stalls_ns=stalls)
    assert r.interference is False, r.reason
    assert r.spike_x == pytest.approx(1.0, rel=1e-2)  # 80 − 70 ms: known only to be ≥ 10 ms, under the usual 20
    assert r.client_stall_s == pytest.approx(0.07, abs=1e-6) and "stalled 70 ms" in " ".join(r.notes)
    info = ExperimentInfo(name=PI, params={"client_stalls_ns": [list(x) for x in stalls]})
    again = prefill_interference.analyze(rs, info)  # a saved result re-analyses the same
    assert again.interference is False and again.spike_x == r.spike_x


def test_interference_a_stall_the_client_was_ready_after_counts_in_full():
    # the same 70 ms stall, but over before the 500 ms freeze ended: the client was waiting when the
    # token came, so the whole gap is the server's
    rs = _pi(stall=0.5, inject_ttft=0.55)
    t_inj = int(1.0 * S)
    r = prefill_interference.analyze(rs, client_stalls_ns=[(t_inj + int(0.1 * S), t_inj + int(0.17 * S))])
    assert r.interference is True and r.itl_max_during_s == pytest.approx(0.52, rel=1e-3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.integers(0, 10**9), d=st.integers(1, 10**9),
       stalls=st.lists(st.tuples(st.integers(0, 2 * 10**9), st.integers(1, 10**8)), max_size=4))
def test_read_late_is_within_the_gap_and_only_from_a_stall_it_came_out_of(a, d, stalls):
    b = a + d
    iv = [(s, s + w) for s, w in stalls]
    late = read_late_ns(a, b, iv)
    assert 0 <= late <= b - a
    if all(not (s < b <= e + RESUME_SLACK_NS) for s, e in iv):
        assert late == 0  # a stall the client was ready after, or one after the read, costs nothing
    else:
        assert late >= min(b - max(a, s) for s, e in iv if s < b <= e + RESUME_SLACK_NS)


# -- queue ----------------------------------------------------------------------------------------------
def _q(server_prefill: float | None = None, ttft: float = 1.0):
    srv = {"prefill_s": server_prefill} if server_prefill is not None else None
    return [rec(Q, "measure", ttft=ttft, server=srv, concurrency=8, worker=i) for i in range(8)]


def test_queue_from_metrics_and_from_server_timings():
    busy = [QueueSample(i * 0.2, 3.0 if i < 8 else 0.0, 4.0, 0.97) for i in range(10)]
    r = queue.analyze(_q(), busy, metrics_source="vllm")
    assert r.queueing is True and r.waiting_max == 3 and r.waiting_share == pytest.approx(0.8)
    assert r.kv_pool_full is True and r.concurrency == 8
    idle = [QueueSample(i * 0.2, 0.0, 2.0, 0.3) for i in range(10)]
    r2 = queue.analyze(_q(), idle)
    assert r2.queueing is False and r2.kv_pool_full is False
    timed = queue.analyze(_q(server_prefill=0.2, ttft=1.0))  # 80 % of TTFT outside prefill
    assert timed.queueing is True and timed.ttft_queue_share == pytest.approx(0.8)
    prompt_bound = queue.analyze(_q(server_prefill=0.95, ttft=1.0))
    assert prompt_bound.queueing is False
    blind = queue.analyze(_q())
    assert blind.queueing is None and "cannot tell" in blind.reason


def _issue30_queue():
    """Issue 30 item 1: six requests at concurrency 6; two waited ~37.6 s for a slot (TTFT 37.73 s, 0.13 s of
    server prefill: 99.7 % waiting), four waited 15 ms of a 1.5 s TTFT (1 %)."""
    out = [rec(Q, "measure", ttft=37.73, server={"prefill_s": 0.13}, concurrency=6, worker=i) for i in range(2)]
    out += [rec(Q, "measure", ttft=1.5, server={"prefill_s": 1.485}, concurrency=6, worker=2 + i) for i in range(4)]
    return out


def test_queue_share_is_time_weighted_over_requests_not_a_median_of_shares():
    r = queue.analyze(_issue30_queue())
    want = (2 * (37.73 - 0.13) + 4 * 0.015) / (2 * 37.73 + 4 * 1.5)
    assert r.ttft_queue_share_total == pytest.approx(want, rel=1e-6)
    assert r.ttft_queue_share == pytest.approx(0.01, abs=1e-6)  # the median of per-request shares stays beside it
    assert sorted(r.ttft_queue_shares) == pytest.approx(sorted([0.01] * 4 + [37.6 / 37.73] * 2), abs=1e-4)
    assert r.ttft_queue_share_total_ci is not None
    lo, hi = r.ttft_queue_share_total_ci
    assert lo <= r.ttft_queue_share_total <= hi
    assert r.queueing is True and f"{want:.0%}" in r.reason, r.reason


def test_conversation_server_cache_share_weighs_turns_by_their_tokens():
    # three short turns fully reused, then two long ones the server recomputed: one vote per turn (median 100 %)
    # said "cached"; by tokens the server reused 540 of 5,600 resent history tokens (10 %)
    from phasescope.experiments import conversation

    prompts, cached = [100, 200, 300, 2000, 3000, 3200], [None, 90, 180, 270, 0, 0]
    recs = []
    for s in range(2):
        for k, (p, c) in enumerate(zip(prompts, cached)):
            recs.append(rec(conversation.NAME, "turn", ttft=0.1 + p * 1e-4, prompt=p, cached=c, session=s, turn=k + 1))
    r = conversation.analyze(recs, prefill_tok_s=1e4)
    assert r.history_cached_share == pytest.approx(540 / 5600)
    assert r.server_says_cached is False
