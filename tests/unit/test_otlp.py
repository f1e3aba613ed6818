"""OTLP traces into records (apis/otlp.py): the traceparent phasescope sends, OTLP/JSON and OTLP/protobuf
export bodies (the protobuf one encoded by the official OpenTelemetry SDK encoder, where installed), vLLM's
attribute names in engine-neutral keys, the join by trace id or request id, and the waterfall from a span."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from phasescope import errors as E
from phasescope.apis.otlp import join_spans, parse_traces, server_span, trace_id_for, traceparent_for
from phasescope.measure.waterfall import request_waterfall, run_waterfall

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_waterfall import rec  # noqa: E402

VLLM = {"gen_ai.request.id": "cmpl-r1-0", "gen_ai.latency.time_in_queue": 0.3,
        "gen_ai.latency.time_to_first_token": 0.345, "gen_ai.latency.time_in_model_prefill": 0.04,
        "gen_ai.latency.time_in_model_decode": 0.04, "gen_ai.latency.e2e": 0.39, "gen_ai.usage.prompt_tokens": 1000}


def _json_body(trace_id: str, attrs: dict) -> bytes:
    def val(v):
        if isinstance(v, str):
            return {"stringValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"doubleValue": v}

    span = {"traceId": trace_id, "spanId": "00f067aa0ba902b7", "name": "llm_request", "startTimeUnixNano": "1",
            "endTimeUnixNano": "2", "attributes": [{"key": k, "value": val(v)} for k, v in attrs.items()]}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def test_traceparent_is_w3c_and_carries_the_records_trace_id() -> None:
    tp = traceparent_for("r1")
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", tp)
    assert tp.split("-")[1] == trace_id_for("r1") != trace_id_for("r2")


def test_otlp_json_spans_map_vllms_names_to_engine_neutral_keys() -> None:
    spans = parse_traces(_json_body(trace_id_for("r1"), VLLM), "application/json")
    ss = server_span(spans[0])
    assert ss is not None
    assert ss["queue_s"] == 0.3 and ss["prefill_s"] == 0.04 and ss["ttft_s"] == 0.345 and ss["decode_s"] == 0.04
    assert ss["e2e_s"] == 0.39 and ss["request_id"] == "cmpl-r1-0" and ss["prompt_tokens"] == 1000
    assert server_span({"attributes": {"http.method": "POST"}}) is None


def test_a_body_that_is_not_otlp_is_an_input_error() -> None:
    with pytest.raises(E.InputError):
        parse_traces(b"{not json", "application/json")
    with pytest.raises(E.InputError):
        parse_traces(b"x", "text/plain")


def test_join_by_trace_id_else_by_an_embedded_request_id() -> None:
    a, b, c = rec(1), rec(2), rec(3)
    a.id, b.id, c.id = "r1", "run-7", "run-70"
    spans = parse_traces(_json_body(trace_id_for("r1"), VLLM), "application/json")
    spans += parse_traces(_json_body("ab" * 16, {**VLLM, "gen_ai.request.id": "chatcmpl-run-7-0"}), "application/json")
    assert join_spans([a, b, c], spans) == 2
    assert a.server_span["trace_id"] == trace_id_for("r1")
    assert b.server_span["request_id"] == "chatcmpl-run-7-0" and c.server_span is None  # run-70 is not run-7


def test_the_waterfall_from_a_span_uses_the_servers_queue_and_prefill_and_sums_exactly() -> None:
    r = rec(0, conn_ms=2, net_ms=3, queue_ms=300, prefill_ms=40)  # client TTFT 345 ms
    r.server = None
    r.server_span = {"queue_s": 0.3, "prefill_s": 0.04, "ttft_s": 0.342, "decode_s": 0.04}
    w = request_waterfall(r)
    assert w is not None and w["source"] == "span" and w["derived"] is False
    assert w["queue_s"] == pytest.approx(0.3) and w["prefill_s"] == pytest.approx(0.04)
    assert w["network_client_s"] == pytest.approx(0.005) and w["client_minus_server_ttft_s"] == pytest.approx(0.003)
    parts = w["network_client_s"] + w["queue_s"] + w["prefill_s"] + w["decode_s"]
    assert parts == pytest.approx(w["e2e_s"], abs=1e-12)
    out = run_waterfall([r, rec(1)])
    assert out["spans_joined"] == 1 and out["spans_missing"] == 1 and out["unattributed"] == 0


def test_otlp_protobuf_from_the_official_sdk_encoder() -> None:
    pytest.importorskip("opentelemetry.proto")
    pytest.importorskip("opentelemetry.sdk")
    enc = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    mem = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(mem))
    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent_for("r1")})  # as vLLM continues it
    with tp.get_tracer("vllm.entrypoints").start_as_current_span("llm_request", context=ctx) as span:
        for k, v in VLLM.items():
            span.set_attribute(k, v)
    body = enc.encode_spans(mem.get_finished_spans()).SerializeToString()
    spans = parse_traces(body, "application/x-protobuf")
    assert spans[0]["trace_id"] == trace_id_for("r1")
    ss = server_span(spans[0])
    assert ss is not None and ss["queue_s"] == 0.3 and ss["prefill_s"] == 0.04 and ss["request_id"] == "cmpl-r1-0"


def test_otlp_listen_without_the_extra_says_what_to_install(monkeypatch, capsys) -> None:
    import phasescope.apis.otlp as O
    from phasescope.cli import run

    monkeypatch.setattr(O, "otlp_proto_available", lambda: False)
    assert run(["bench", "http://127.0.0.1:9", "--otlp-listen", "127.0.0.1:4318"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'phasescope[otlp]'" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_otlp_listen_forms_name_the_protocol() -> None:
    from phasescope import errors as E
    from phasescope.apis.otlp import parse_listen_url

    assert parse_listen_url("127.0.0.1:4318") == ("http", "127.0.0.1", 4318)
    assert parse_listen_url("http://0.0.0.0:4318/") == ("http", "0.0.0.0", 4318)
    assert parse_listen_url("grpc://127.0.0.1:4317") == ("grpc", "127.0.0.1", 4317)
    assert parse_listen_url("GRPC://[::1]:4317") == ("grpc", "::1", 4317)
    for bad in ("udp://127.0.0.1:4317", "grpc://127.0.0.1", "grpc://:4317", "127.0.0.1:99999", ""):
        with pytest.raises(E.InputError, match="expected HOST:PORT"):
            parse_listen_url(bad)


def test_rust_duration_strings_from_tgi_read_as_seconds() -> None:
    from phasescope.apis.otlp_names import rust_duration_s
    from phasescope.testing.span_export import rust_duration

    assert rust_duration_s("12.345678ms") == pytest.approx(0.012345678)
    assert rust_duration_s("1.5s") == 1.5 and rust_duration_s("850µs") == pytest.approx(850e-6)
    assert rust_duration_s("0ns") == 0.0 and rust_duration_s(0.25) == 0.25
    assert rust_duration_s("soon") is None and rust_duration_s(None) is None
    for x in (0.0, 3e-7, 4.2e-5, 0.0123456789, 1.25, 62.0):  # the fake writes them as Rust's Debug does
        assert rust_duration_s(rust_duration(x)) == pytest.approx(x, abs=1e-9)


def test_tgi_handler_span_and_sglang_stage_spans_map_to_engine_neutral_keys() -> None:
    from phasescope.apis.otlp_names import server_spans

    tgi = {"trace_id": "aa", "name": "generate_stream", "attributes": {
        "queue_time": "120ms", "validation_time": "1.5ms", "inference_time": "2.25s", "total_time": "2.3715s"}}
    other = {"trace_id": "bb", "name": "generate_stream", "attributes": {"parameters": "…"}}  # no durations: none
    ms = 1_000_000
    sgl = [{"trace_id": "cc", "name": " Req 0123abcd", "start_ns": 1, "end_ns": 900 * ms,
            "attributes": {"rid": "0123abcdef"}},
           {"trace_id": "cc", "name": "prefill_waiting", "start_ns": 100 * ms, "end_ns": 300 * ms},
           {"trace_id": "cc", "name": "prefill_forward", "start_ns": 300 * ms, "end_ns": 350 * ms},
           {"trace_id": "cc", "name": "chunked_prefill", "start_ns": 300 * ms, "end_ns": 320 * ms},  # inside: once
           {"trace_id": "cc", "name": "decode_loop", "start_ns": 350 * ms, "end_ns": 600 * ms},
           {"trace_id": "cc", "name": "decode_loop", "start_ns": 600 * ms, "end_ns": 800 * ms}]
    got = {s["engine"]: s for s in server_spans([tgi, other, *sgl])}
    assert set(got) == {"tgi", "sglang"}
    t = got["tgi"]
    assert t["queue_s"] == pytest.approx(0.12) and t["validation_s"] == pytest.approx(0.0015)
    assert t["inference_s"] == 2.25 and t["e2e_s"] == pytest.approx(2.3715) and "prefill_s" not in t
    s = got["sglang"]
    assert s["request_id"] == "0123abcdef" and s["trace_id"] == "cc"
    assert s["queue_s"] == pytest.approx(0.2) and s["prefill_s"] == pytest.approx(0.05)
    assert s["decode_s"] == pytest.approx(0.45) and s["ttft_s"] == pytest.approx(0.25) and s["e2e_s"] == pytest.approx(0.7)
