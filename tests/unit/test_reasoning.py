"""Reasoning output: TTFO, reasoning/answer token split and rates (measure.derive), the ``<think>``
span reader (apis._think) through the chat/completions parser, and ``--goodput ttfo:``."""

from __future__ import annotations

import pytest

from phasescope.apis import _records, openai
from phasescope.apis.base import GenRequest, Target
from phasescope.measure import derive as D
from phasescope.measure.records import Event, RequestRecord


def _proto(cls=openai._Chat, api="chat"):
    t = Target("http://127.0.0.1:1", api=api, model="m", engine="vllm")
    r = GenRequest(prompt="p")
    return cls(t, r, _records.new_record(t, r))


def _chat(p, deltas, *, usage=None):
    """Feed ``deltas`` (text for content, ("r", text) for delta.reasoning_content) at t = 10, 20, ..."""
    p.rec.t_start_ns = 0
    p.on_message({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, 5)
    for i, d in enumerate(deltas):
        delta = {"reasoning_content": d[1]} if isinstance(d, tuple) else {"content": d}
        p.on_message({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}, 10 * (i + 1))
    if usage is not None:
        p.on_message({"choices": [], "usage": usage}, 10 * (len(deltas) + 1))
    p.finish()
    return p.rec


def _kinds(rec):
    return [e.kind for e in rec.token_events()]


# --- derive ---------------------------------------------------------------------------------------
def _rec(kinds, *, t0=0, step=10, output_tokens=None, reasoning_tokens=None):
    r = RequestRecord(id="x", api="chat", target="t", t_start_ns=t0, ok=True)
    r.events = [Event(t0 + step * (i + 1), k, None, 1) for i, k in enumerate(kinds)]
    r.output_tokens, r.reasoning_tokens = output_tokens, reasoning_tokens
    return r


def test_ttfo_is_the_first_answer_event_and_ttft_the_first_token():
    r = _rec(["reasoning"] * 3 + ["content"] * 2)
    assert D.ttft_s(r) == 10 / 1e9
    assert D.ttfo_s(r) == 40 / 1e9
    assert (D.reasoning_tokens(r), D.answer_tokens(r)) == (3, 2)
    assert D.reasoning_tok_s(r) == pytest.approx(2 / (20 / 1e9))
    assert D.answer_tok_s(r) == pytest.approx(1 / (10 / 1e9))


def test_no_reasoning_ttfo_equals_ttft_and_zero_reasoning_tokens():
    r = _rec(["content"] * 4, output_tokens=4)
    assert D.ttfo_s(r) == D.ttft_s(r) == 10 / 1e9
    assert D.reasoning_tokens(r) == 0
    assert D.answer_tokens(r) == 4
    assert D.reasoning_tok_s(r) is None
    assert D.answer_tok_s(r) == D.decode_tok_s(r)


def test_only_reasoning_has_no_ttfo():
    r = _rec(["reasoning"] * 3)
    assert D.ttfo_s(r) is None and D.ttft_s(r) is not None
    assert (D.reasoning_tokens(r), D.answer_tokens(r)) == (3, 0)


def test_server_reasoning_count_wins_and_a_zero_beside_reasoning_events_does_not():
    # usage says 10 output tokens over 5 events (2 per event): events split them evenly
    r = _rec(["reasoning"] * 3 + ["content"] * 2, output_tokens=10)
    assert (D.reasoning_tokens(r), D.answer_tokens(r)) == (6, 4)
    r.reasoning_tokens = 7  # the server's completion_tokens_details.reasoning_tokens
    assert (D.reasoning_tokens(r), D.answer_tokens(r)) == (7, 3)
    r.reasoning_tokens = 0  # SGLang's usage.reasoning_tokens without a reasoning parser
    assert D.reasoning_tokens(r) == 6


# --- the parser: reasoning_content deltas and <think> spans ---------------------------------------
def test_reasoning_content_deltas_then_answer():
    rec = _chat(_proto(), [("r", "Let"), ("r", " me"), "The", " answer"],
                usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
    assert _kinds(rec) == ["reasoning", "reasoning", "content", "content"]
    assert D.ttft_s(rec) == 10 / 1e9 and D.ttfo_s(rec) == 30 / 1e9
    assert (D.reasoning_tokens(rec), D.answer_tokens(rec)) == (2, 2)


def test_think_span_across_deltas_is_reasoning():
    rec = _chat(_proto(), ["<think>", "Let", " me", " see", "</think>", "\n\nThe", " answer"])
    assert _kinds(rec) == ["reasoning"] * 5 + ["content"] * 2
    assert D.ttft_s(rec) == 10 / 1e9 and D.ttfo_s(rec) == 60 / 1e9
    assert (D.reasoning_tokens(rec), D.answer_tokens(rec)) == (5, 2)


def test_think_tags_split_across_deltas_are_found():
    rec = _chat(_proto(), ["\n", "<thi", "nk>hmm", " ok</th", "ink", ">", "Yes", "."])
    assert _kinds(rec) == ["reasoning"] * 6 + ["content"] * 2
    assert D.ttfo_s(rec) == 70 / 1e9


def test_close_tag_and_answer_in_one_delta_start_the_answer_there():
    rec = _chat(_proto(), ["<think>a", " b</think>Yes", " no"])
    assert _kinds(rec) == ["reasoning", "content", "content"]
    assert D.ttfo_s(rec) == 20 / 1e9


def test_bare_close_tag_makes_the_text_before_it_reasoning():
    # the chat template put <think> in the prompt (DeepSeek-R1-0528, Qwen3 thinking models)
    rec = _chat(_proto(), ["Let", " me", " think", "</think>", "Four", "."])
    assert _kinds(rec) == ["reasoning"] * 4 + ["content"] * 2
    assert D.ttfo_s(rec) == 50 / 1e9


def test_plain_answers_and_tags_later_in_the_answer_stay_answer():
    rec = _chat(_proto(), ["Use", " a", " <think>", " tag", " <b>"])
    assert _kinds(rec) == ["content"] * 5
    assert D.ttfo_s(rec) == D.ttft_s(rec)
    assert D.reasoning_tokens(rec) == 0
    assert rec.reasoning_tokens is None


def test_after_a_span_a_later_think_tag_is_answer_text():
    rec = _chat(_proto(), ["<think>", "x", "</think>", "A", "<think>", "B"])
    assert _kinds(rec) == ["reasoning"] * 3 + ["content"] * 3


def test_think_span_in_completion_text():
    p = _proto(openai._Completions, api="openai")
    p.rec.t_start_ns = 0
    for i, t in enumerate(["<think>", "hm", "</think>", "Paris"]):
        p.on_message({"choices": [{"index": 0, "text": t, "finish_reason": None}]}, 10 * (i + 1))
    p.finish()
    assert _kinds(p.rec) == ["reasoning"] * 3 + ["content"]
    assert D.ttfo_s(p.rec) == 40 / 1e9


def test_sglang_top_level_reasoning_tokens_is_read():
    rec = _chat(_proto(), [("r", "a"), ("r", "b"), ("r", "c"), "d"],
                usage={"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12, "reasoning_tokens": 7})
    assert rec.reasoning_tokens == 7
    assert (D.reasoning_tokens(rec), D.answer_tokens(rec)) == (7, 2)


# --- goodput ttfo: --------------------------------------------------------------------------------
def test_goodput_accepts_ttfo_and_judges_the_answer_wait():
    from phasescope.load.summary import parse_goodput, summarize

    assert parse_goodput("ttfo:250 ttft:100") == {"ttfo": 250.0, "ttft": 100.0}
    fast = _rec(["reasoning", "content"], step=int(50e6))  # TTFT 50 ms, TTFO 100 ms
    slow = _rec(["reasoning"] * 5 + ["content"], step=int(50e6))  # TTFO 300 ms
    for i, r in enumerate((fast, slow)):
        r.id = str(i)
    s = summarize([fast, slow], goodput={"ttfo": 250.0}, duration_s=1.0)
    assert s["goodput_completed"] == 1
    assert summarize([fast, slow], goodput={"ttft": 60.0}, duration_s=1.0)["goodput_completed"] == 2
    assert s["median_ttfo_ms"] == pytest.approx(200.0)
    assert s["p99_ttfo_ms"] == pytest.approx(100 + 200 * 0.99)
    assert s["median_ttft_ms"] == pytest.approx(50.0)
    assert s["reasoning_tokens"] == 6 and s["answer_tokens"] == 2


def test_bench_summary_without_reasoning_has_ttfo_equal_to_ttft():
    from phasescope.load.summary import summarize

    recs = [_rec(["content"] * 3, step=int(10e6) * (i + 1), output_tokens=3) for i in range(3)]
    for i, r in enumerate(recs):
        r.id = str(i)
    s = summarize(recs, duration_s=1.0)
    for k in ("mean", "median", "p99"):
        assert s[f"{k}_ttfo_ms"] == s[f"{k}_ttft_ms"]
    assert s["reasoning_tokens"] == 0 and s["answer_tokens"] == 9


def test_goodput_usage_line_names_ttfo():
    from phasescope.errors import InputError
    from phasescope.load.summary import parse_goodput

    with pytest.raises(InputError, match="ttfo"):
        parse_goodput("itl:5")


def test_think_span_on_llamacpp_native_completion():
    from phasescope.apis import llamacpp

    p = _proto(llamacpp._Native, api="llamacpp")
    p.rec.t_start_ns = 0
    for i, t in enumerate(["<think>", "hm", "</think>", "Paris"]):
        p.on_message({"content": t, "tokens": [i], "stop": False}, 10 * (i + 1))
    p.on_message({"content": "", "stop": True, "tokens_predicted": 4, "tokens_evaluated": 3}, 50)
    p.finish()
    assert _kinds(p.rec) == ["reasoning"] * 3 + ["content"]
    assert D.ttfo_s(p.rec) == 40 / 1e9 and (D.reasoning_tokens(p.rec), D.answer_tokens(p.rec)) == (3, 1)


def test_sweep_slo_accepts_ttfo_on_its_p99():
    from phasescope.load.sweep import parse_slo, within_slo

    slo = parse_slo("ttfo:50 itl:10")
    assert slo == {"ttfo": 50.0, "itl": 10.0}
    assert within_slo({"p99_ttfo_ms": 40.0, "p99_itl_ms": 5.0}, slo) is True
    assert within_slo({"p99_ttfo_ms": 60.0, "p99_itl_ms": 5.0}, slo) is False
