"""The held-out scenario matrix's truth (phasescope.testing.heldout_matrix) and the judge's grading of
near-threshold effects: pure, no server runs here (tests/integration/test_explain_heldout_matrix.py
runs explain on the cells)."""

from __future__ import annotations

from phasescope.testing.explain_matrix import EFFECTS, SPEEDS, judge, scenario
from phasescope.testing.heldout_matrix import CELLS, SUBSET, grade, knee_shows_at


def test_cells_state_their_truth_and_differ_from_the_pair_matrix():
    flavours = {c.behaviour.flavour for c in CELLS}
    assert {"sglang", "tgi", "llamacpp"} <= flavours
    for c in CELLS:
        assert set(c.must) | set(c.may) <= set(EFFECTS), c.name
        assert not set(c.must) & set(c.may), c.name
        assert c.why and c.budget_s >= 20, c.name
        assert c.behaviour.jitter_s > 0, f"{c.name}: every held-out cell runs under designed noise"
        # not a cell of the pair matrix: that one has no jitter, 32 slots, 32-token chunks, vLLM, at SPEEDS
        twin = scenario((), c.behaviour.decode_step_s) if c.behaviour.decode_step_s in SPEEDS else None
        assert twin is None or (c.behaviour.flavour, c.behaviour.slots) != (twin.flavour, twin.slots), c.name
    assert sum(c.behaviour.decode_step_s not in SPEEDS for c in CELLS) >= len(CELLS) // 2
    assert any(len(c.must) >= 3 for c in CELLS)  # combinations the pair matrix does not run
    assert any(c.may for c in CELLS) and any(not c.must and not c.may for c in CELLS)
    assert set(SUBSET) <= {c.name for c in CELLS}


def _doc(*ids: str, undecided: dict | None = None, experiments: dict | None = None) -> dict:
    return {"findings": [{"id": i} for i in ids], "undecided": [{"id": k, "reason": v} for k, v in (undecided or {}).items()],
            "experiments": experiments or {}}


def test_a_near_threshold_effect_may_be_named_or_not():
    assert judge((), _doc("long-context-decode-penalty"), may=("ctx",))[0] == "right"
    assert judge((), _doc(), may=("ctx",))[0] == "right"
    assert judge((), _doc("long-context-decode-penalty"))[0] == "wrong"  # absent: the claim is false
    # a queue the experiment's own load makes (12 slots, 16 requests) may be named; it does not license a knee
    assert judge((), _doc("ttft-queueing"), may=("queue",))[0] == "right"
    assert judge((), _doc("ttft-queueing", "batching-knee"), may=("queue",))[0] == "wrong"
    # big prefill chunks: a stall claim either way is allowed; chunks of one step: an unchunked stall is wrong
    pi_unchunked = {"prefill-interference": {"chunked_prefill_likely": False}}
    assert judge((), _doc("prefill-interference", experiments=pi_unchunked), may=("stall",))[0] == "right"
    assert judge((), _doc("prefill-interference", experiments=pi_unchunked))[0] == "wrong"


def test_knee_shows_at_sets_when_batching_scales_is_wrong():
    levels = [{"concurrency": c, "output_tok_s": 10.0 * c} for c in (1, 2, 4)]
    doc = _doc("batching-scales", experiments={"batching": {"levels": levels}})
    assert judge(("batch",), doc)[0] == "cannot tell"  # default: the knee shows from 8
    assert judge(("batch",), doc, knee_shows_at=4)[0] == "wrong"  # a knee at 2 shows by 4


def test_conversation_findings_are_graded_too():
    assert judge((), _doc("conversation-history-recomputed"))[0] == "wrong"  # the cache is on
    assert judge(("nocache",), _doc("prefix-cache-absent", "conversation-history-recomputed"))[0] == "right"
    assert judge(("nocache",), _doc("prefix-cache-absent", "conversation-cache-working"))[0] == "wrong"
    assert judge(("queue",), _doc("ttft-queueing", "conversation-sessions-fill-kv"))[0] == "wrong"  # no KV pool limit
    assert judge((), _doc("conversation-decode-slowdown"))[0] == "wrong"
    assert judge((), _doc("conversation-decode-slowdown"), may=("ctx",))[0] == "right"


def test_grade_reads_the_cells_truth():
    cell = next(c for c in CELLS if c.name == "tgi net 50ms @5ms")
    assert grade(cell, _doc("ttft-fixed-overhead"))[0] == "wrong"  # 50 ms is under the 100 ms that counts
    assert grade(cell, _doc())[0] == "right"


def test_the_stated_knees_are_the_computed_ones():
    # a cell's knee_shows_at for batch alone (no queue, no network) is what its step costs give
    for c in CELLS:
        b = c.behaviour
        if "batch" in c.must and "queue" not in c.must and not b.network_rtt_s:
            assert c.knee_shows_at == knee_shows_at(b), c.name
    for c in CELLS:  # a cost too small for a knee is an absent effect, never a "must"
        if c.behaviour.decode_s_per_seq and "batch" not in c.must + c.may:
            assert knee_shows_at(c.behaviour) is None, c.name


def test_a_stall_claim_over_small_chunks_is_wrong_even_when_it_says_they_were_split():
    cell = next(c for c in CELLS if c.name == "llamacpp nocache @8ms")  # chunks of 16 tokens: 0.2 of a step
    chunked = {"prefill-interference": {"chunked_prefill_likely": True}}
    assert grade(cell, _doc("prefix-cache-absent", "prefill-interference", experiments=chunked))[0] == "wrong"
    assert grade(cell, _doc("prefix-cache-absent", "prefill-no-stall"))[0] == "right"
    tgi = next(c for c in CELLS if c.name == "tgi healthy @40ms")  # chunks of 64 (+ attention): over a step
    assert grade(tgi, _doc("prefill-interference", experiments=chunked))[0] == "right"
