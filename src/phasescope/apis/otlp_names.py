"""Each engine's OpenTelemetry spans in engine-neutral names: one table per engine, each checked at its source.

:func:`server_spans` turns the spans of one run (:func:`phasescope.apis.otlp.parse_traces`) into one dict per
request — ``queue_s``, ``prefill_s``, ``decode_s``, ``ttft_s``, ``e2e_s`` (seconds), ``request_id``, ``engine``,
``trace_id`` — which :func:`phasescope.apis.otlp.join_spans` sets on the record as ``server_span``. The three
engines report a request three ways:

* **vLLM** — one span per request (``llm_request``) whose *attributes* carry the latencies in seconds
  (:data:`VLLM_ATTRS`; ``vllm/tracing.py`` ``SpanAttributes``, main at 03b8a674).
* **SGLang** — one span per request *stage* (``--enable-trace --otlp-traces-endpoint``): the stage is the span's
  name and its duration is the span's own, end − start (:data:`SGLANG_STAGES`;
  ``python/sglang/srt/tracing/trace_metric_wrapper.py`` ``RequestStage``, commit 386d28b2, over the span
  machinery of ``python/sglang/srt/tracing/trace.py`` at 021a8923: a ``Bootstrap Room`` span that continues the
  caller's ``traceparent``, a request span ``"<role> Req <rid[:8]>"`` with attribute ``rid``, a thread span per
  process, and a slice span per stage under it). A stage may be cut in several slices (``decode_loop`` per
  scheduling round, ``chunked_prefill`` per chunk): each key is the union of its slices' intervals, so nested
  or repeated slices are counted once.
* **TGI** — one span per HTTP request named after its handler (:data:`TGI_HANDLERS`) whose attributes are Rust
  ``Duration`` Debug strings (``"12.345ms"``, ``"1.5s"``, ``"850µs"``): ``queue_time``, ``validation_time``,
  ``inference_time``, ``total_time``, ``time_per_token`` (:data:`TGI_ATTRS`; ``router/src/server.rs``
  ``#[instrument(fields(…))]`` and ``span.record(…)``, TGI main at db931fcf). TGI times no per-request prefill
  (its ``prefill`` span is per batch, ``backends/v3/src/client/grpc_client.rs``): ``inference_s`` is prefill +
  decode, and the waterfall derives prefill from the client's TTFT (:mod:`phasescope.measure.waterfall`). TGI
  exports over OTLP/gRPC only (``router/src/logging.rs``: the tonic exporter): ``--otlp-listen grpc://…``.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from phasescope.measure.clock import union_s

#: vLLM span attribute → the engine-neutral key (seconds, or a count for ``*_tokens``)
VLLM_ATTRS = {
    "gen_ai.request.id": "request_id",
    "gen_ai.latency.time_in_queue": "queue_s",
    "gen_ai.latency.time_to_first_token": "ttft_s",
    "gen_ai.latency.time_in_model_prefill": "prefill_s",
    "gen_ai.latency.time_in_model_decode": "decode_s",
    "gen_ai.latency.e2e": "e2e_s",
    "gen_ai.usage.prompt_tokens": "prompt_tokens",
    "gen_ai.usage.completion_tokens": "output_tokens",
}

#: SGLang stage span name (``RequestStage.*.stage_name``) → the engine-neutral key its duration adds to
SGLANG_STAGES = {
    "prefill_waiting": "queue_s",  # RequestStage.PREFILL_WAITING: "equal to observe_queue_time"
    "prefill_forward": "prefill_s",  # RequestStage.PREFILL_FORWARD
    "chunked_prefill": "prefill_s",  # RequestStage.PREFILL_CHUNKED_FORWARD, one slice per chunk
    "decode_loop": "decode_s",  # RequestStage.DECODE_LOOP, one slice per scheduling round
    "tokenize": "tokenize_s",  # RequestStage.TOKENIZE (before the queue: outside queue and prefill)
}
#: the SGLang request span's attribute that holds its request id (``trace_req_start``: ``attrs = {"rid": …}``)
SGLANG_RID = "rid"

#: TGI's handler spans (``router/src/server.rs``: ``generate``, ``generate_stream``, ``completions``,
#: ``chat_completions``, each ``#[instrument(skip_all, fields(total_time, validation_time, queue_time, …))]``)
TGI_HANDLERS = ("generate", "generate_stream", "completions", "chat_completions")
#: TGI handler-span attribute (a Rust ``Duration`` Debug string) → the engine-neutral key; in server.rs
#: ``validation_time = queued − start_time``, ``queue_time = start − queued``, ``inference_time = now − start``,
#: ``total_time = start_time.elapsed()``, ``time_per_token = inference_time / generated_tokens``
TGI_ATTRS = {
    "queue_time": "queue_s",
    "validation_time": "validation_s",
    "inference_time": "inference_s",
    "total_time": "e2e_s",
    "time_per_token": "time_per_token_s",
}

_RUST_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ns|µs|μs|us|ms|s)\s*$")
_UNIT_S = {"ns": 1e-9, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def rust_duration_s(v: Any) -> float | None:
    """A Rust ``Duration`` Debug string (``"12.345ms"``, ``"1.5s"``, ``"850µs"``, ``"0ns"``) in seconds; a number
    passes through; anything else is None."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = _RUST_DURATION.match(str(v)) if isinstance(v, str) else None
    return float(m.group(1)) * _UNIT_S[m.group(2)] if m else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def vllm_span(span: dict[str, Any]) -> dict[str, Any] | None:
    """One vLLM span's latencies in engine-neutral names, or None when it carries none."""
    attrs = span.get("attributes") or {}
    out: dict[str, Any] = {}
    for k, name in VLLM_ATTRS.items():
        v = attrs.get(k)
        if v is None:
            continue
        if name == "request_id":
            out[name] = str(v)
        elif _num(v) is not None:
            out[name] = int(v) if name.endswith("tokens") else float(v)
    if not any(k.endswith("_s") for k in out):
        return None
    out.update(engine="vllm", trace_id=span.get("trace_id"), span_name=span.get("name"))
    return out


def tgi_span(span: dict[str, Any]) -> dict[str, Any] | None:
    """One TGI handler span's durations in engine-neutral names (no ``prefill_s``: TGI times none per request),
    or None when it is not one."""
    attrs = span.get("attributes") or {}
    if span.get("name") not in TGI_HANDLERS or "queue_time" not in attrs:
        return None
    out: dict[str, Any] = {}
    for k, name in TGI_ATTRS.items():
        s = rust_duration_s(attrs.get(k))
        if s is not None:
            out[name] = s
    if "queue_s" not in out:
        return None
    out.update(engine="tgi", trace_id=span.get("trace_id"), span_name=span.get("name"))
    return out


def sglang_spans(spans: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """SGLang's stage spans, one dict per trace (request): each key the union of its stages' intervals
    (:data:`SGLANG_STAGES`), ``request_id`` the trace's ``rid`` attribute, ``ttft_s`` queue + prefill start to end
    (the first queue slice's start to the last prefill slice's end), ``e2e_s`` the first stage's start to the last's end."""
    by_trace: dict[str, dict[str, list[tuple[int, int]]]] = {}
    rid: dict[str, str] = {}
    for s in spans:
        tid = str(s.get("trace_id") or "")
        if not tid:
            continue
        r = (s.get("attributes") or {}).get(SGLANG_RID)
        if isinstance(r, str) and r:
            rid.setdefault(tid, r.split("_")[-1])  # trace.py drops the MultiTokenizer worker prefix the same way
        key = SGLANG_STAGES.get(str(s.get("name") or ""))
        a, b = int(s.get("start_ns") or 0), int(s.get("end_ns") or 0)
        if key is not None and b >= a > 0:
            by_trace.setdefault(tid, {}).setdefault(key, []).append((a, b))
    out = []
    for tid, stages in by_trace.items():
        if "queue_s" not in stages and "prefill_s" not in stages:
            continue
        d: dict[str, Any] = {k: union_s(v) for k, v in stages.items()}
        ttft = [iv for k in ("queue_s", "prefill_s") for iv in stages.get(k, [])]
        if "prefill_s" in stages:
            d["ttft_s"] = (max(b for _, b in stages["prefill_s"]) - min(a for a, _ in ttft)) / 1e9
        every = [iv for v in stages.values() for iv in v]
        d["e2e_s"] = (max(b for _, b in every) - min(a for a, _ in every)) / 1e9
        if tid in rid:
            d["request_id"] = rid[tid]
        d.update(engine="sglang", trace_id=tid, span_name="prefill_waiting/prefill_forward/decode_loop")
        out.append(d)
    return out


def server_spans(spans: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every request's span(s) among ``spans`` in engine-neutral names: vLLM's and TGI's one span each,
    SGLang's stage spans gathered by trace."""
    spans = list(spans)
    out: list[dict[str, Any]] = []
    for s in spans:
        one = vllm_span(s) or tgi_span(s)
        if one is not None:
            out.append(one)
    out += sglang_spans(spans)
    return out
