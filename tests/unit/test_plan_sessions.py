"""plan --dataset conversation|mooncake: session prompts, LRU prefix hits, simulated vs implied share."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasescope.errors import InputError
from phasescope.load.traces import read_mooncake
from phasescope.planning import sessions
from phasescope.planning.api import PlanOptions, run_plan


def _conv(**kw):
    args = dict(users=3, turns=4, system_len=50, turn_input_len=20, output_len=10, think_time_s=1.0,
                session_rate=None, pool_tokens=100_000, caching=True)
    args.update(kw)
    return sessions.conversation(**args)


def _drive(w, turn_s=0.5):
    """Run the closed loop with every turn taking ``turn_s`` alone (no server): rows of
    (send time, session, turn, prompt, output, hit) in send order."""
    import heapq

    loop = w.loop.fresh()
    ev = [(t, 1, u, 0) for t, u in loop.first_sends()]  # kind 0 = a turn ends, 1 = a turn is sent
    heapq.heapify(ev)
    rows = []
    while ev:
        t, kind, u, k = heapq.heappop(ev)
        if kind == 1:
            p, o, h = loop.on_send(u, k)
            rows.append((t, u, k, p, o, h))
            heapq.heappush(ev, (t + turn_s, 0, u, k))
        else:
            nxt = loop.on_done(u, k, t)
            if nxt is not None:
                heapq.heappush(ev, (nxt, 1, u, k + 1))
    return rows, loop


def test_prompts_grow_by_exactly_the_previous_turns():
    rows, _ = _drive(_conv())
    by_session: dict[int, list[tuple[int, int]]] = {}
    for _, u, _k, p, o, _ in rows:
        by_session.setdefault(u, []).append((p, o))
    assert len(by_session) == 3
    for turns in by_session.values():
        assert turns[0][0] == 50 + 20
        for (p0, o0), (p1, _) in zip(turns, turns[1:]):
            assert p1 == p0 + o0 + 20  # the whole previous turn resent + this turn's input
    assert sessions.conversation_prompts(4, 50, 20, 10) == [70, 100, 130, 160]


def test_later_turns_hit_the_previous_history():
    w = _conv(users=1)
    rows, loop = _drive(w)
    hits = [r[5] for r in rows]
    assert hits == [0, 80, 110, 140]  # turn 1: nobody computed the system prompt yet; then prompt + reply
    assert w.implied_hit_share == pytest.approx(sum(hits) / sum(r[3] for r in rows))
    assert loop.lru_hit_share() == pytest.approx(w.implied_hit_share)


def test_a_turn_is_sent_only_after_the_previous_reply_and_the_think_time():
    rows, _ = _drive(_conv(users=2, think_time_s=1.0), turn_s=0.5)
    for u in (0, 1):
        sends = [t for t, uu, *_ in rows if uu == u]
        assert all(b - a == pytest.approx(0.5 + 1.0) for a, b in zip(sends, sends[1:]))


@pytest.mark.parametrize("kw", [{"caching": False}, {"pool_tokens": 0}])
def test_no_hits_with_caching_off_or_no_pool(kw):
    w = _conv(**kw)
    rows, loop = _drive(w)
    assert all(r[5] == 0 for r in rows)
    assert loop.lru_hit_share() == 0
    assert w.implied_hit_share > 0.5  # the workload still implies hits; the cache could not keep them


def test_small_pool_evicts_histories():
    (_, full), (_, small) = _drive(_conv(users=6)), _drive(_conv(users=6, pool_tokens=300))
    assert 0 < small.lru_hit_share() < full.lru_hit_share()


def test_bad_conversation_input():
    with pytest.raises(InputError):
        _conv(turns=0)
    with pytest.raises(InputError):
        _conv(think_time_s=-1)


@settings(max_examples=25, deadline=None)
@given(users=st.integers(1, 6), turns=st.integers(1, 5), system=st.integers(0, 300),
       inp=st.integers(1, 200), out=st.integers(1, 64), think=st.floats(0, 5),
       pool=st.integers(0, 6000), policy=st.sampled_from(["vllm", "llamacpp"]))
def test_simulated_hit_share_at_most_implied(users, turns, system, inp, out, think, pool, policy):
    o = PlanOptions(model="llama-3.1-8b", device="l40s", dataset="conversation", users=users, turns=turns,
                    system_prompt_len=system, turn_input_len=inp, output_len=out, think_time_s=think,
                    kv_pool_tokens=max(pool, 16384 if policy == "llamacpp" else 0) or 50_000,
                    policy=policy, save=False)
    try:
        d = run_plan(o)
    except InputError:
        return  # nothing fit the pool: nothing to compare
    s = d["summary"]
    assert 0 <= s["prefix_hit_share"] <= s["implied_hit_share"] + 1e-12
    assert s["implied_hit_share"] <= 1


def _trace(tmp_path, ids):
    p = tmp_path / "mc.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i * 200, "input_length": 1024, "output_length": 8,
                                     "hash_ids": h}) + "\n" for i, h in enumerate(ids)))
    return str(p)


def test_mooncake_shared_vs_distinct_ids(tmp_path):
    shared = _trace(tmp_path, [[1, 2], [1, 2], [1, 3], [4, 5]])
    e = read_mooncake(shared, block_size=512)
    w = sessions.mooncake(e, block_size=512, pool_tokens=100_000, caching=True)
    assert [r[3] for r in w.rows] == [0, 1024, 512, 0]
    assert w.implied_hit_share == pytest.approx(1536 / 4096)
    d = run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="mooncake", dataset_path=shared, save=False))
    assert d["summary"]["prefix_hit_share"] == pytest.approx(d["summary"]["implied_hit_share"])
    assert d["summary"]["cached_prompt_tokens"] == 1536

    distinct = _trace(tmp_path, [[1, 2], [3, 4], [5, 6], [7, 8]])
    d = run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="mooncake", dataset_path=distinct, save=False))
    assert d["summary"]["prefix_hit_share"] == 0 and d["summary"]["implied_hit_share"] == 0
    # a pool of one block keeps only the newest block: the leading block is gone by the next request
    w = sessions.mooncake(read_mooncake(shared, block_size=512), block_size=512, pool_tokens=512, caching=True)
    assert all(r[3] == 0 for r in w.rows)


def test_dataset_conflicts_with_single_shot_arrivals(tmp_path):
    with pytest.raises(InputError, match="--dataset sets the arrivals"):
        run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="conversation", rate=2.0, save=False))
    with pytest.raises(InputError, match="--dataset-path"):
        run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="mooncake", save=False))


@pytest.mark.parametrize("kw", [{"capacity": True, "slo": "ttft:100"}, {"gpus": 2, "tp": 1},
                                {"sweep": "rate=1,2"}, {"disaggregate": "1:1"}])
def test_modes_the_session_lru_cannot_model_are_refused(kw):
    with pytest.raises(InputError):
        run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="conversation", save=False, **kw))


def test_a_cached_history_still_occupies_the_pool_while_its_turn_runs():
    # one user, 2 turns: turn 2 (prompt 50 + 20 + 10 + 20 = 100) skips its 80-token history, but that
    # history is this request's own KV: the pool holds its prompt + output, not only the new tokens
    pool = 5000
    d = run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", dataset="conversation", users=1, turns=2,
                             system_prompt_len=50, turn_input_len=20, output_len=10, kv_pool_tokens=pool, save=False))
    s = d["summary"]
    assert s["cached_prompt_tokens"] == 80
    assert s["max_kv_usage"] * pool >= 100 + 10 - 1e-6
