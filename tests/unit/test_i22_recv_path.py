"""Issue 22, the receive path's per-event shortcuts give what the full path gives.

* ``_OpenAI.on_message`` takes the common token chunk (one choice with text, no usage, timings,
  finish or token ids) on a short path; every other shape goes the full way. Both must record
  the same events, counts, finish reason and kept text for every shape a server sends;
* the SSE loop decodes each event with the JSON decoder's C scanner alone when the value fills the
  payload, and falls back to the decoder for whitespace around it, trailing data and errors.
"""

from __future__ import annotations

import json

import pytest

from phasescope import errors as E
from phasescope.apis import _http, _records, openai
from phasescope.apis.base import GenRequest, Target

SHAPES = [
    {"choices": [{"index": 0, "text": " the", "logprobs": None, "finish_reason": None}]},
    {"choices": [{"index": 0, "text": " fox", "logprobs": None, "finish_reason": "length", "stop_reason": None}]},
    {"choices": [{"index": 0, "text": "", "finish_reason": None}]},
    {"choices": [{"index": 0, "text": None, "finish_reason": None}]},
    {"choices": [{"index": 0, "text": "x", "token_ids": [5, 6]}]},
    {"choices": [{"index": 0, "text": "", "token_ids": [7]}]},
    {"choices": [{"index": 0, "text": " a"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                      "total_tokens": 5}},
    {"choices": [{"index": 0, "text": " a"}], "usage": None},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
    {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
    {"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "stop"}]},
    {"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]},
    {"choices": [{"index": 0, "delta": {"reasoning_content": "so"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "t"}]}}]},
    {"choices": [{"index": 0, "delta": None}]},
    {"choices": [{"index": 0, "delta": "odd"}]},
    {"choices": [{"index": 0, "delta": {"content": "ok"}}], "timings": {"prompt_ms": 5.0, "predicted_ms": 9.0,
                                                                       "prompt_n": 3, "predicted_n": 2}},
    {"choices": [{"index": 0, "delta": {"content": "ok"}}], "error": "ignored beside choices"},
    {"choices": [{"index": 0, "text": 7}]},
]


def _proto(chat: bool, keep_text: bool) -> openai._OpenAI:
    t = Target("http://127.0.0.1:1", api="chat" if chat else "openai", model="m", engine="vllm")
    r = GenRequest(prompt="p", max_tokens=8, keep_text=keep_text)
    cls = openai._Chat if chat else openai._Completions
    return cls(t, r, _records.new_record(t, r))


def _state(p: openai._OpenAI) -> tuple:
    r = p.rec
    return ([e.to_list() for e in r.events], r.finish_reason, r.prompt_tokens, r.output_tokens, r.server,
            list(p._text), p._cum, p._finish_seen, p._reasoning_events)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_the_short_path_records_what_the_full_path_records(chat: bool, keep_text: bool, shape: int) -> None:
    msg = SHAPES[shape]
    short, full = _proto(chat, keep_text), _proto(chat, keep_text)
    outcome = []
    for _p, fn in ((short, short.on_message), (full, full._on_message)):
        try:
            fn(json.loads(json.dumps(msg)), 1234)
            outcome.append(None)
        except (E.MalformedEventError, E.ServerStreamError) as exc:
            outcome.append(type(exc))
    assert outcome[0] == outcome[1]
    assert _state(short) == _state(full)


def test_the_short_path_is_taken_for_a_plain_token_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _proto(False, False)
    monkeypatch.setattr(p, "_on_message", lambda *a: pytest.fail("the common chunk took the full path"))
    p.on_message(SHAPES[0], 5)
    assert [e.to_list() for e in p.rec.events] == [[5, "content", None, 4]]


@pytest.mark.parametrize("text", ['{"a":1}', ' {"a": [1, 2]}', '{"a":1} \t', "[1,2]", '"s"', "3", "null",
                                  '{"é":"\\ud83d\\ude00"}'])
def test_the_scanner_decodes_what_json_loads_decodes(text: str) -> None:
    assert _http._scan_json(text) == json.loads(text)


@pytest.mark.parametrize("bad", ['{"a":1}x', "", "{", '{"a":1}{"b":2}', "nope"])
def test_a_bad_payload_is_still_one_malformed_event_line(bad: str) -> None:
    t = Target("http://127.0.0.1:1", api="openai", model="m")
    with pytest.raises(E.MalformedEventError) as ei:
        _http._decode_json(bad.encode(), t, "/v1/completions")
    assert "\n" not in str(ei.value) and "malformed event (not JSON)" in str(ei.value)
