"""Issue 30 item 6: plan's conversations are a closed loop — a turn is sent only after the previous
reply completed in the simulation (plus think time), so no session has two turns in flight and the
KV the sessions hold is bounded by what 32 users can hold at once."""

from __future__ import annotations

import numpy as np
import pytest

from phasescope.planning.api import PlanOptions, build_spec, run_plan
from phasescope.planning.planner import run_once

ISSUE = dict(model="llama-3.1-8b", device="l40s", dataset="conversation", users=32, turns=6,
             system_prompt_len=1000, turn_input_len=200, output_len=200, save=False)


def _spans(res):  # (send, last token) per simulated request, in send order
    return [(s.t_send, s.t_last) for s in res.sim.seqs]


def _overlaps(spans) -> int:
    """Most spans open at once, by brute force over every send instant (independent of peak_in_flight)."""
    return max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)


def test_issue_case_never_holds_more_than_the_users_can():
    spec, _, _ = build_spec(PlanOptions(**ISSUE))
    res, out = run_once(spec)
    s = out["summary"]
    # 32 users, one request each at most: the records show ≤ 32 in flight (the open loop had up to 96)
    assert _overlaps(_spans(res)) <= 32
    assert s["peak_in_flight"] == _overlaps(_spans(res))
    # every session's prompt + reply is ≤ 1000 + 6·200 + 5·200 + 200 = 3,400 tokens
    longest = max(p + o for p, o in zip(res.input_tokens, res.output_tokens))
    assert longest <= 3400
    assert round(s["max_kv_usage"] * spec.cost.kv_pool_tokens) <= 32 * 3400  # the issue: 108,800 tokens, 53 %
    assert s["limited_by"] != "kv_pool"
    assert s["completed"] == 32 * 6 and s["failed"] == 0


@pytest.mark.parametrize("think", [0.0, 2.5])
@pytest.mark.parametrize("policy", ["vllm", "llamacpp"])
def test_no_session_ever_has_two_turns_in_flight(think, policy):
    o = PlanOptions(**{**ISSUE, "users": 8, "turns": 5, "think_time_s": think, "policy": policy,
                       "kv_pool_tokens": 200_000})
    spec, _, _ = build_spec(o)
    res, out = run_once(spec)
    seqs = res.sim.seqs
    by: dict[int, list] = {}
    for i, s in enumerate(seqs):
        by.setdefault(int(res.sim.reqs.session[i]), []).append((int(res.sim.reqs.turn[i]), s))
    assert len(by) == 8
    for turns in by.values():
        turns.sort(key=lambda x: x[0])
        assert [k for k, _ in turns] == list(range(5))
        for (_, a), (_, b) in zip(turns, turns[1:]):
            # the next turn leaves after this reply's last token, plus the think time (simulated clock)
            assert b.t_send == pytest.approx(a.t_last + think, abs=1e-9)
            assert b.t_send >= a.t_last
    assert out["summary"]["max_turns_in_flight_per_session"] == 1
    assert out["summary"]["peak_in_flight"] <= 8


def test_plan_json_carries_the_contract_keys():
    d = run_plan(PlanOptions(**{**ISSUE, "users": 4, "turns": 3}))
    s = d["summary"]
    assert s["peak_in_flight"] <= 4 and s["max_turns_in_flight_per_session"] == 1
    assert (d["peak_in_flight"], d["max_turns_in_flight_per_session"]) == (s["peak_in_flight"], 1)  # top level too
    assert d["config"]["workload"]["session_facts"]["loop"] == "closed"
    single = run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", concurrency=3, num_requests=12, save=False))
    assert single["summary"]["peak_in_flight"] == 3
    assert "max_turns_in_flight_per_session" not in single["summary"]


def test_peak_in_flight_counts_touching_spans_once():
    from phasescope.planning.metrics import peak_in_flight

    # b is sent the instant a ends (think time 0): never two in flight
    assert peak_in_flight(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == 1
    assert peak_in_flight(np.array([0.0, 0.5, 0.7]), np.array([1.0, 2.0, 0.8])) == 3
    assert peak_in_flight(np.array([np.nan]), np.array([1.0])) == 0


def _llamacpp(users, slots=4):
    o = PlanOptions(model="llama-3.1-8b", device="l40s", dataset="conversation", users=users, turns=4,
                    system_prompt_len=200, turn_input_len=50, output_len=50, policy="llamacpp", max_num_seqs=slots,
                    kv_pool_tokens=65536, save=False)
    spec, _, _ = build_spec(o)
    return run_once(spec)


def test_llamacpp_slots_keep_one_sessions_history():
    """llama.cpp keeps one prompt per slot: with more sessions than slots a turn whose slot another session
    took since reuses only the shared system prompt; with one slot per session every later turn hits its
    whole history. (Before: any slot that had held any prefix served any session's history.)"""
    res, out = _llamacpp(users=4)
    seqs, r = res.sim.seqs, res.sim.reqs
    later = [s for i, s in enumerate(seqs) if r.turn[i] > 0]
    assert all(s.cached == s.prefix for s in later)  # 4 sessions on 4 slots: each keeps its own
    res, out = _llamacpp(users=12)
    seqs, r = res.sim.seqs, res.sim.reqs
    later = [s for i, s in enumerate(seqs) if r.turn[i] > 0]
    assert all(s.cached in (s.prefix, 200) for s in later)  # the whole history, or the system prompt alone
    assert any(s.cached == 200 < s.prefix for s in later)  # 12 sessions on 4 slots overwrite each other
    assert out["summary"]["prefix_hit_share"] < out["summary"]["implied_hit_share"] - 0.05


def test_stored_records_let_a_user_check_the_closed_loop():
    from phasescope.planning.metrics import to_records

    spec, _, _ = build_spec(PlanOptions(**{**ISSUE, "users": 3, "turns": 3, "think_time_s": 1.0}))
    res, _ = run_once(spec)
    recs = list(to_records(res, model="m"))
    by: dict[int, list] = {}
    for r in recs:
        by.setdefault(r.tags["session"], []).append(r)
    assert sorted(by) == [0, 1, 2]
    for rs in by.values():
        rs.sort(key=lambda r: r.tags["turn"])
        assert [r.tags["turn"] for r in rs] == [1, 2, 3]
        assert all(b.t_start_ns >= a.t_done_ns for a, b in zip(rs, rs[1:]))  # the next turn after the reply
