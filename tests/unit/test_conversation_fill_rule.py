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
