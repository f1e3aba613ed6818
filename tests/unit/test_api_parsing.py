"""Wire-format parsing of each client, fed the servers' real message shapes (no network)."""

from __future__ import annotations

import pytest

from phasescope import errors as E
from phasescope.apis import _errors, _http, _records, llamacpp, ollama, openai
from phasescope.apis.base import GenRequest, Target
from phasescope.measure import derive as D


def _proto(cls, api="openai", engine="vllm", **req):
    t = Target("http://127.0.0.1:1", api=api, model="m", engine=engine)
    r = GenRequest(prompt="p", **req)
    return cls(t, r, _records.new_record(t, r))


def test_chat_role_chunk_is_not_first_token_and_usage_counts_win():
    p = _proto(openai._Chat, api="chat")
    p.on_message({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}, 100)
    p.on_message({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}, 200)
    p.on_message({"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "stop"}]}, 300)
    p.on_message({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}, 400)
    p.on_done_marker(500)
    p.rec.t_start_ns = 0
    p.finish()
    kinds = [e.kind for e in p.rec.events]
    assert kinds == ["role", "content", "content", "usage"]
    assert D.ttft_s(p.rec) == 200 / 1e9
    assert (p.rec.prompt_tokens, p.rec.prompt_tokens_source) == (12, "usage")
    assert (p.rec.output_tokens, p.rec.output_tokens_source) == (5, "usage")
    assert p.rec.finish_reason == "stop"
    # 5 tokens over 2 events: per-token ITL spreads the 4 later tokens over the one gap
    assert D.itl_s(p.rec) == pytest.approx([100 / 4 / 1e9] * 4)


def test_llamacpp_role_chunk_with_null_content_and_timings_on_usage_chunk():
    p = _proto(openai._Chat, api="chat", engine="llamacpp")
    p.on_message({"choices": [{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}]}, 1)
    p.on_message({"choices": [{"finish_reason": None, "index": 0, "delta": {"content": "Name"}}]}, 2)
    p.on_message({"choices": [{"finish_reason": "length", "index": 0, "delta": {}}]}, 3)
    p.on_message({"choices": [], "usage": {"completion_tokens": 40, "prompt_tokens": 14, "total_tokens": 54,
                                           "prompt_tokens_details": {"cached_tokens": 9}},
                  "timings": {"cache_n": 9, "prompt_n": 5, "prompt_ms": 30.709, "predicted_n": 40, "predicted_ms": 701.597}}, 4)
    p.finish()
    assert [e.kind for e in p.rec.events] == ["role", "content", "empty", "usage"]
    assert p.rec.cached_prompt_tokens == 9
    assert p.rec.server["prompt_n"] == 5 and p.rec.server["prefill_s"] == pytest.approx(0.030709)
    assert D.server_decode_tok_s(p.rec) == pytest.approx(39 / 0.701597)


def test_reasoning_deltas_start_ttft_and_are_counted_apart():
    p = _proto(openai._Chat, api="chat")
    p.on_message({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, 1)
    p.on_message({"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]}, 2)
    p.on_message({"choices": [{"index": 0, "delta": {"reasoning_content": "so"}}]}, 3)
    p.on_message({"choices": [{"index": 0, "delta": {"content": "42"}}]}, 4)
    p.finish()
    assert [e.kind for e in p.rec.events] == ["role", "reasoning", "reasoning", "content"]
    assert p.rec.reasoning_tokens == 2
    assert D.first_token_ns(p.rec) == 2


def test_continuous_usage_gives_per_event_token_counts():
    p = _proto(openai._Completions)
    for i, (text, cum) in enumerate([("a", 1), ("bcde", 5), ("fgh", 8)]):
        p.on_message({"choices": [{"index": 0, "text": text, "finish_reason": None}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}}, 10 * (i + 1))
    p.on_message({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}}, 40)
    p.finish()
    assert [e.n_tokens for e in p.rec.token_events()] == [1, 4, 3]
    assert D.itl_s(p.rec) == pytest.approx([2.5e-9] * 4 + [10 / 3 * 1e-9] * 3)
    assert D.event_gaps_s(p.rec) == pytest.approx([1e-8, 1e-8])


def test_token_ids_count_tokens_even_without_text():
    p = _proto(openai._Completions)
    p.on_message({"choices": [{"index": 0, "text": "", "token_ids": [7, 8]}]}, 1)
    assert p.rec.events[0].kind == "content" and p.rec.events[0].n_tokens == 2


def test_error_event_and_malformed_shapes_raise_the_right_class():
    p = _proto(openai._Completions)
    with pytest.raises(E.ServerStreamError, match="engine died"):
        p.on_message({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}, 1)
    with pytest.raises(E.MalformedEventError):
        p.on_message({"id": "x"}, 1)
    with pytest.raises(E.MalformedEventError):
        p.on_message([1, 2], 1)


def test_openai_eof_without_done_is_broken_unless_finish_reason_seen():
    p = _proto(openai._Completions)
    p.on_message({"choices": [{"index": 0, "text": "a", "finish_reason": None}]}, 1)
    with pytest.raises(E.StreamBrokenError):
        p.on_eof()
    p.on_message({"choices": [{"index": 0, "text": "b", "finish_reason": "length"}]}, 2)
    p.on_eof()
    assert p.done


def test_openai_body_sends_token_ids_fixed_length_and_usage_option():
    p = _proto(openai._Completions, engine="vllm", prompt_token_ids=[1, 2, 3], max_tokens=7)
    b = p.body()
    assert b["prompt"] == [1, 2, 3] and b["max_tokens"] == 7 and b["min_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream_options"] == {"include_usage": True}
    assert "cache_prompt" not in b
    c = _proto(openai._Chat, api="chat", engine="llamacpp", cache_prompt=False).body()
    assert c["messages"][0]["content"] == "p" and c["cache_prompt"] is False and "min_tokens" not in c


def test_llamacpp_native_progress_events_are_not_tokens_and_final_gives_counts():
    p = _proto(llamacpp._Native, api="llamacpp", engine="llamacpp", max_tokens=3)
    p.on_message({"index": 0, "content": "", "tokens": [0], "stop": False, "prompt_progress": {"total": 10, "cache": 5, "processed": 10}}, 1)
    p.on_message({"index": 0, "content": ":", "tokens": [236787], "stop": False, "tokens_predicted": 1}, 2)
    p.on_message({"index": 0, "content": "\n\n", "tokens": [108], "stop": False, "tokens_predicted": 2}, 3)
    p.on_message({"index": 0, "content": "", "tokens": [], "stop": True, "tokens_predicted": 2, "tokens_evaluated": 10,
                  "stop_type": "eos", "timings": {"cache_n": 5, "prompt_n": 5, "prompt_ms": 28.4, "predicted_n": 2, "predicted_ms": 20.0}}, 4)
    assert p.done
    p.finish()
    assert [e.kind for e in p.rec.events] == ["empty", "content", "content", "usage"]
    assert [e.n_tokens for e in p.rec.token_events()] == [1, 1]
    assert (p.rec.prompt_tokens, p.rec.prompt_tokens_source) == (10, "server")
    assert p.rec.output_tokens == 2 and p.rec.finish_reason == "stop" and p.rec.stopped_early is True
    b = _proto(llamacpp._Native, api="llamacpp", engine="llamacpp", prompt_token_ids=[2, 5], max_tokens=9, cache_prompt=False).body()
    assert b == {"prompt": [2, 5], "n_predict": 9, "temperature": 0.0, "stream": True, "ignore_eos": True, "cache_prompt": False}


def test_ollama_final_with_omitted_zero_fields_and_cached_prompt_semantics():
    p = _proto(ollama._Generate, api="ollama", engine="ollama", max_tokens=4)
    p.on_message({"model": "m", "response": "The", "done": False}, 1)
    # prompt_eval_count present (full prompt since 0.30.1) but the prompt may be cached:
    # the evaluated count is unknown, so no server prefill rate is claimed
    p.on_message({"model": "m", "response": "", "done": True, "done_reason": "stop", "total_duration": 10_706_818_083,
                  "load_duration": 6_338_219_291, "prompt_eval_count": 26, "prompt_eval_duration": 130_079_000}, 2)
    p.finish()
    s = p.rec.server
    assert s["load_s"] == pytest.approx(6.338219291) and s["prompt_n"] is None
    assert D.server_prefill_tok_s(p.rec) is None
    assert s["predicted_n"] == 0 and s["decode_s"] is None  # eval_* omitted (zero)
    assert p.rec.prompt_tokens == 26 and p.rec.output_tokens == 0
    fresh = _proto(ollama._Generate, api="ollama", engine="ollama", tags={"fresh_prompt": True})
    fresh.on_message({"done": True, "prompt_eval_count": 26, "prompt_eval_duration": 130_079_000,
                      "eval_count": 259, "eval_duration": 4_232_710_000}, 1)
    assert D.server_prefill_tok_s(fresh.rec) == pytest.approx(26 / 0.130079)
    assert D.server_decode_tok_s(fresh.rec) == pytest.approx(258 / 4.23271)
    assert fresh.rec.server["load_s"] == 0.0  # load_duration omitted


def test_ollama_chat_thinking_is_reasoning_and_error_line_raises():
    p = _proto(ollama._Chat, api="ollama", engine="ollama")
    p.on_message({"message": {"role": "assistant", "content": "", "thinking": "hm"}, "done": False}, 1)
    p.on_message({"message": {"role": "assistant", "content": "ok"}, "done": False}, 2)
    assert [e.kind for e in p.rec.events] == ["reasoning", "content"]
    with pytest.raises(E.ServerStreamError, match="unexpected EOF"):
        p.on_message({"error": "an error was encountered while running the model: unexpected EOF"}, 3)
    body = _proto(ollama._Generate, api="ollama", engine="ollama", max_tokens=5).body()
    assert body["options"]["num_predict"] == 5 and body["raw"] is True and body["model"] == "m"


@pytest.mark.parametrize("status,body,cls", [
    (401, b'{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}', E.AuthError),
    (403, b'{"error":"forbidden"}', E.AuthError),
    (404, b'{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","code":404}}', E.ModelNotFoundError),
    (404, b'{"error":{"message":"File Not Found","type":"not_found_error","code":404}}', E.WrongApiError),
    (405, b"Method Not Allowed", E.WrongApiError),
    (429, b'{"error":"slow down"}', E.OverloadedError),
    (503, b'{"error":"server busy, please try again.  maximum pending requests exceeded"}', E.OverloadedError),
    (500, b'{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error","type":"server_error"}}', E.HttpError),
])
def test_http_error_mapping(status, body, cls):
    t = Target("http://user:pw@127.0.0.1:1", api_key="sk-secret")
    exc = _errors.http_error(status, body, {"Retry-After": "7"}, t, "/v1/completions")
    assert type(exc) is cls
    assert "sk-secret" not in str(exc) and "pw@" not in str(exc)
    if cls is E.OverloadedError:
        assert exc.retry_after_s == 7.0


def test_retry_after_forms_and_error_text_shapes():
    assert _errors.parse_retry_after("3") == 3.0
    assert _errors.parse_retry_after(None) is None and _errors.parse_retry_after("soon") is None
    assert _errors.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert _errors.error_message_of({"error": {"message": "m"}}) == "m"
    assert _errors.error_message_of({"error": "e"}) == "e"
    assert _errors.error_message_of({"detail": "d"}) == "d"
    assert _http._sse_data(b"data: {}\ndata: x") == b"{}\nx"
    assert _http._sse_data(b": ping") is None


def test_engine_from_metrics_names():
    from phasescope.apis.detect import engine_from_metrics

    assert engine_from_metrics('# HELP x\nvllm:num_requests_running{engine="0"} 1.0\n') == "vllm"
    assert engine_from_metrics("sglang:num_running_reqs 0\n") == "sglang"
    assert engine_from_metrics("tgi_request_count 3\n") == "tgi"
    assert engine_from_metrics("llamacpp:prompt_tokens_total 49\n") == "llamacpp"
    assert engine_from_metrics("python_gc_objects_collected_total 1\n") is None


def test_url_normalisation_and_api_names():
    from phasescope.target import _normalise_url, open_target

    assert _normalise_url("127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert _normalise_url("http://h:1/api/generate") == "http://h:1"
    with pytest.raises(E.InputError):
        open_target("http://h:1", api="grpc")


def test_llamacpp_native_output_held_back_to_the_end_is_counted_at_the_final_event():
    """llama-server sends a partial event only once a token's text is whole UTF-8; a synthetic-weights model
    that emits byte tokens which never form a character sends nothing until the stop event, whose
    tokens_predicted says 8 (clean-clone stop 40: probe then failed "the stream ended without a single token").
    The 8 tokens arrived, at the stop event: that is when the client first saw output."""
    p = _proto(llamacpp._Native, api="llamacpp", engine="llamacpp", max_tokens=8)
    p.on_message({"index": 0, "content": "", "tokens": [], "stop": True, "tokens_predicted": 8, "tokens_evaluated": 64,
                  "stop_type": "limit", "timings": {"prompt_n": 64, "prompt_ms": 12.0, "predicted_n": 8,
                                                    "predicted_ms": 40.0}}, 700)
    p.rec.t_start_ns = 0
    p.finish()
    assert [e.kind for e in p.rec.events] == ["content", "usage"]
    assert [e.n_tokens for e in p.rec.token_events()] == [8]
    assert D.ttft_s(p.rec) == 700 / 1e9 and p.rec.output_tokens == 8
    # a stop event after real tokens adds nothing, and one with nothing predicted stays empty
    q = _proto(llamacpp._Native, api="llamacpp", engine="llamacpp", max_tokens=8)
    q.on_message({"index": 0, "content": "", "tokens": [], "stop": True, "tokens_predicted": 0, "stop_type": "eos"}, 5)
    assert [e.kind for e in q.rec.events] == ["usage"]
