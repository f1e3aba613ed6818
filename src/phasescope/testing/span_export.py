"""The behaviour fake's OpenTelemetry spans, one exporter per engine, each named as that engine names them
(:mod:`phasescope.apis.otlp_names` holds the names and their sources): sent with the official SDK and its OTLP
exporter (HTTP protobuf, or gRPC for a ``grpc://`` endpoint; the test extra), continuing the caller's
``traceparent``, so the receiver is tested against real OTLP bytes.

Every function takes the request's moments on the fake's ``time.perf_counter`` clock — arrival, prefill start
(``p0``), first token (``p1``), last token — and sets each span's start and end on the wall clock
(:func:`wall_ns`), so a span's own duration is the designed one to the nanosecond.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

#: the instrumentation scope each engine's tracer is named with
SCOPES = {"vllm": "vllm.entrypoints.openai", "sglang": "sglang server", "tgi": "text_generation_router"}


def tracer_for(endpoint: str, flavour: str) -> tuple[Any, Any]:
    """(provider, tracer) exporting to ``endpoint`` (``http://…/v1/traces`` or ``grpc://HOST:PORT``) every 50 ms."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter: Any
    if endpoint.startswith("grpc://"):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        exporter = GrpcExporter(endpoint=endpoint, insecure=True)  # as vllm/tracing.py and SGLang's trace.py pass it
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    return provider, provider.get_tracer(SCOPES.get(flavour, SCOPES["vllm"]))


def wall_ns(t_perf: float, now_perf: float, now_ns: int) -> int:
    """A ``perf_counter`` moment on the wall clock (ns), anchored at one (``now_perf``, ``now_ns``) pair."""
    return now_ns - int(round((now_perf - t_perf) * 1e9))


def rust_duration(seconds: float) -> str:
    """``seconds`` as Rust's ``Duration`` Debug prints it (TGI's span attributes): ``1.5s``, ``12.345678ms``,
    ``850µs``, ``0ns``."""
    ns = max(0, int(round(seconds * 1e9)))

    def trim(x: str) -> str:
        return x.rstrip("0").rstrip(".") if "." in x else x

    if ns >= 1_000_000_000:
        return trim(f"{ns / 1e9:.9f}") + "s"
    if ns >= 1_000_000:
        return trim(f"{ns / 1e6:.6f}") + "ms"
    if ns >= 1_000:
        return trim(f"{ns / 1e3:.3f}") + "µs"
    return f"{ns}ns"


def _parent(headers: Mapping[str, str]) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({k.lower(): v for k, v in headers.items()})


def export_vllm(tracer: Any, headers: Mapping[str, str], truth: dict[str, Any], prompt_tokens: int,
                output_tokens: int, model: str) -> None:
    """One ``llm_request`` span whose attributes carry the latencies (``vllm/tracing.py`` ``SpanAttributes``)."""
    from opentelemetry.trace import SpanKind

    attrs = {"gen_ai.request.id": truth["request_id"], "gen_ai.response.model": model,
             "gen_ai.usage.prompt_tokens": prompt_tokens, "gen_ai.usage.completion_tokens": output_tokens,
             "gen_ai.latency.time_in_queue": truth["queue_s"], "gen_ai.latency.time_to_first_token": truth["ttft_s"],
             "gen_ai.latency.e2e": truth["e2e_s"], "gen_ai.latency.time_in_model_prefill": truth["prefill_s"],
             "gen_ai.latency.time_in_model_decode": truth["decode_s"]}
    now = time.time_ns()
    span = tracer.start_span("llm_request", context=_parent(headers), kind=SpanKind.SERVER, attributes=attrs,
                             start_time=now - int(truth["e2e_s"] * 1e9))
    span.end(end_time=now)


def export_sglang(tracer: Any, headers: Mapping[str, str], rid: str, arrival: float, p0: float, p1: float,
                  last: float) -> None:
    """SGLang's request tree (``python/sglang/srt/tracing/trace.py``): a ``Bootstrap Room`` span continuing the
    caller's trace, the request span ``" Req <rid[:8]>"`` with ``rid``, a scheduler thread span, and one slice
    span per stage (``trace_metric_wrapper.RequestStage``): ``prefill_waiting`` (arrival → prefill start),
    ``prefill_forward`` (→ first token), ``decode_loop`` (→ last token) in two rounds, as SGLang slices it."""
    from opentelemetry import trace

    now_perf, now = time.perf_counter(), time.time_ns()

    def w(t: float) -> int:
        return wall_ns(t, now_perf, now)

    room = tracer.start_span("Bootstrap Room 0x0", context=_parent(headers), start_time=w(arrival),
                             attributes={"bootstrap_room": "0x0"})
    req = tracer.start_span(f" Req {rid[:8]}", context=trace.set_span_in_context(room), start_time=w(arrival),
                            attributes={"rid": rid})
    thread = tracer.start_span("Scheduler (host:fake | pid:0)", context=trace.set_span_in_context(req),
                               start_time=w(arrival), attributes={"thread_label": "Scheduler"})
    under = trace.set_span_in_context(thread)
    mid = p1 + (last - p1) / 2
    for name, a, b in (("prefill_waiting", arrival, p0), ("prefill_forward", p0, p1), ("decode_loop", p1, mid),
                       ("decode_loop", mid, last)):
        tracer.start_span(name, context=under, start_time=w(a)).end(end_time=w(b))
    for sp in (thread, req, room):
        sp.end(end_time=w(last))


def export_tgi(tracer: Any, headers: Mapping[str, str], handler: str, arrival: float, p0: float, last: float,
               output_tokens: int) -> None:
    """TGI's handler span (``router/src/server.rs``: ``chat_completions``, ``completions``, …) whose attributes are
    Rust ``Duration`` Debug strings: ``validation_time`` (0 here: the fake validates nothing), ``queue_time``
    (arrival → batch start), ``inference_time`` (→ last token), ``total_time``, ``time_per_token``."""
    from opentelemetry.trace import SpanKind

    now_perf, now = time.perf_counter(), time.time_ns()
    inference = last - p0
    attrs = {"total_time": rust_duration(last - arrival), "validation_time": rust_duration(0.0),
             "queue_time": rust_duration(p0 - arrival), "inference_time": rust_duration(inference),
             "time_per_token": rust_duration(inference / max(1, output_tokens)), "seed": "None",
             "code.namespace": "text_generation_router::server"}
    span = tracer.start_span(handler, context=_parent(headers), kind=SpanKind.INTERNAL, attributes=attrs,
                             start_time=wall_ns(arrival, now_perf, now))
    span.end(end_time=wall_ns(last, now_perf, now))
