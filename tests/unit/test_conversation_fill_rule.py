"""Issue 30 (held-out matrix): "Long chat sessions fill the KV pool" must rest on a queue that lasts,
on a pool that is full. Seen on a 16-slot fake with no pool limit: one /metrics sample of 20 caught a
request between its arrival and the next scheduler step (waiting 1) while KV usage peaked at 2.3 %,
and explain said the sessions' histories filled the KV pool."""

from __future__ import annotations

from phasescope.diagnose import diagnose
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.conversation import NAME, ConversationResult, analyze_fill

#: (t, waiting, kv usage, highest turn in flight, requests in flight): the held-out run's samples
TRANSIENT = [(0.2 * i, 1.0 if i == 12 else 0.0, 0.011 + 0.0006 * i, 1 + i // 4, 4) for i in range(20)]


def _res() -> ConversationResult:
    return ConversationResult(info=ExperimentInfo(name=NAME))


def test_one_sample_caught_between_steps_is_no_full_pool():
    res = _res()
    analyze_fill(res, [], TRANSIENT, 4)
    assert res.fill_queue_turn is None, res.fill_reason
    assert res.fill_waiting_max == 1.0  # the sample is kept as evidence, not as a cause
    assert "conversation-sessions-fill-kv" not in diagnose({NAME: res}).ids()


def test_a_lasting_queue_on_a_near_empty_pool_is_not_the_pool():
    res = _res()
    samples = [(0.2 * i, 1.0 if i >= 10 else 0.0, 0.02, 1 + i // 4, 4) for i in range(20)]
    analyze_fill(res, [], samples, 4)
    assert res.fill_queue_turn is None
    assert "2%" in res.fill_reason and "KV" in res.fill_reason, res.fill_reason
    assert "conversation-sessions-fill-kv" not in diagnose({NAME: res}).ids()


def test_a_lasting_queue_on_a_full_pool_is_claimed():
    res = _res()
    samples = [(0.2 * i, 2.0 if i >= 10 else 0.0, min(1.0, 0.3 + 0.06 * i), 1 + i // 4, 4) for i in range(20)]
    analyze_fill(res, [], samples, 4)
    assert res.fill_queue_turn == 3, res.fill_reason
    assert "conversation-sessions-fill-kv" in diagnose({NAME: res}).ids()


def test_a_lasting_queue_without_a_kv_gauge_is_claimed():
    # llama.cpp exports no KV usage since 2025-05: the lasting queue alone decides
    res = _res()
    samples = [(0.2 * i, 1.0 if i >= 8 else 0.0, None, 1 + i // 4, 4) for i in range(20)]
    analyze_fill(res, [], samples, 4)
    assert res.fill_queue_turn == 3


def test_waits_no_longer_than_a_scheduler_step_are_no_full_pool():
    # the held-out matrix's TGI server at 40 ms a token (64 slots, no KV gauge): 4 sessions sending
    # 16-token turns of ~0.8 s each arrive ~5 times a second and each waits up to a step for the
    # scheduler, so ~20 % of the /metrics samples catch one "waiting" — explain said the sessions'
    # histories filled the KV pool
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from explain_synth import rec

    recs = [rec(NAME, "fill", t0=0.8 * (i // 4), ttft=0.1, gap=0.045, n_out=16, turn=1 + i // 4, session=i % 4)
            for i in range(20)]
    samples = [(0.2 * i, 1.0 if i % 5 == 2 else 0.0, None, 1 + i // 4, 4) for i in range(20)]  # 20 % of samples
    res = _res()
    analyze_fill(res, recs, samples, 4)
    assert res.fill_queue_turn is None, res.fill_reason
    assert "scheduler step" in res.fill_reason, res.fill_reason
    # a queue in most samples from turn 3 on is still a full pool, whatever the step
    lasting = [(0.2 * i, 1.0 if i >= 8 else 0.0, None, 1 + i // 4, 4) for i in range(20)]
    res2 = _res()
    analyze_fill(res2, recs, lasting, 4)
    assert res2.fill_queue_turn == 3, res2.fill_reason
