"""One mapping table per engine: exposed Prometheus names → phasescope's canonical names.

Names, labels and meanings come from each server's own source (vLLM 0.33.0 ``vllm/v1/metrics/loggers.py``,
with the renamed/removed names of older versions; SGLang 0.5.23 ``sglang/srt/observability/metrics_collector.py``;
TGI 3.3.x; llama.cpp ``tools/server/server.cpp`` at 0c1e57098).
For every canonical name the table lists candidate sources, current name first; the first one the
scrape contains wins (so a vLLM 0.8 server is read through ``vllm:gpu_cache_usage_perc`` and a
0.33 server through ``vllm:kv_cache_usage_perc``).

Canonical names (units in brackets):

histograms [s]: ``ttft`` (arrival → first token, incl. queue), ``itl`` (gap between outputs),
``tpot`` (per-request decode time / (n−1)), ``e2e``, ``queue_time``, ``prefill_time``,
``decode_time``; TGI batch forwards ``prefill_step`` / ``decode_step``.

gauges: ``running``, ``waiting`` [requests], ``kv_usage`` [fraction 0..1],
``prefix_cache_hit_rate_gauge`` [fraction, engine-computed], ``prompt_tok_s_gauge`` /
``generation_tok_s_gauge`` [tokens/s, engine-computed; llama.cpp resets them at every scrape].

counters: ``prompt_tokens`` (all prompt tokens, cached included), ``prompt_tokens_computed``
(prefilled, cache hits excluded), ``prompt_tokens_cached``, ``generation_tokens`` [tokens];
``prefix_cache_hits`` / ``prefix_cache_queries`` [tokens]; ``preemptions``;
``requests_finished``; ``prefill_seconds`` / ``decode_seconds`` [s of engine time];
``decode_calls`` [engine steps].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SourceKind = Literal["gauge", "counter", "histogram", "hist_sum"]


@dataclass(frozen=True)
class Source:
    """Where one canonical value comes from in an engine's exposition.

    ``name``: the exposed name (for counters with or without ``_total``; for histograms the base
    name without ``_bucket``). ``kind``: ``hist_sum`` reads a histogram's ``_sum`` as a counter (e.g.
    TGI's input-length histogram sums to prompt tokens). ``labels``: keep only series whose label has
    one of these values. ``scale``: multiply values (e.g. percent → fraction).
    """

    name: str
    kind: SourceKind
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    scale: float = 1.0
    note: str = ""


@dataclass(frozen=True)
class EngineProfile:
    """An engine's table plus what it cannot tell us (shown as notes next to null values)."""

    name: str
    title: str
    prefix: str
    table: dict[str, tuple[Source, ...]]
    #: labels that duplicate series rather than split load (SGLang: every TP rank reports the same)
    dedupe_labels: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def _s(name: str, kind: SourceKind, **kw: object) -> Source:
    labels = kw.pop("labels", {})
    assert isinstance(labels, dict)
    return Source(name, kind, labels=tuple((k, tuple(v)) for k, v in labels.items()), **kw)  # type: ignore[arg-type]


VLLM = EngineProfile(
    name="vllm",
    title="vLLM",
    prefix="vllm:",
    table={
        "ttft": (_s("vllm:time_to_first_token_seconds", "histogram"),),
        # renamed from time_per_output_token_seconds in 0.11 (same computation and buckets)
        "itl": (
            _s("vllm:inter_token_latency_seconds", "histogram"),
            _s("vllm:time_per_output_token_seconds", "histogram", note="pre-0.11 name"),
        ),
        "tpot": (_s("vllm:request_time_per_output_token_seconds", "histogram"),),
        "e2e": (_s("vllm:e2e_request_latency_seconds", "histogram"),),
        "queue_time": (_s("vllm:request_queue_time_seconds", "histogram"),),
        "prefill_time": (_s("vllm:request_prefill_time_seconds", "histogram"),),
        "decode_time": (_s("vllm:request_decode_time_seconds", "histogram"),),
        "running": (_s("vllm:num_requests_running", "gauge"),),
        "waiting": (_s("vllm:num_requests_waiting", "gauge"),),
        "kv_usage": (
            _s("vllm:kv_cache_usage_perc", "gauge"),
            _s("vllm:gpu_cache_usage_perc", "gauge", note="pre-0.10 name"),
        ),
        "prefix_cache_hits": (
            _s("vllm:prefix_cache_hits_total", "counter"),
            _s("vllm:gpu_prefix_cache_hits_total", "counter", note="pre-0.10 name"),
        ),
        "prefix_cache_queries": (
            _s("vllm:prefix_cache_queries_total", "counter"),
            _s("vllm:gpu_prefix_cache_queries_total", "counter", note="pre-0.10 name"),
        ),
        # V0 (≤ 0.7) exported only a hit-rate gauge
        "prefix_cache_hit_rate_gauge": (_s("vllm:gpu_prefix_cache_hit_rate", "gauge", note="V0"),),
        "preemptions": (_s("vllm:num_preemptions_total", "counter"),),
        "prompt_tokens": (_s("vllm:prompt_tokens_total", "counter"),),
        "prompt_tokens_computed": (
            _s("vllm:prompt_tokens_by_source_total", "counter", labels={"source": ("local_compute",)}),
        ),
        "prompt_tokens_cached": (_s("vllm:prompt_tokens_cached_total", "counter"),),
        "generation_tokens": (_s("vllm:generation_tokens_total", "counter"),),
        "requests_finished": (_s("vllm:request_success_total", "counter"),),
        # prefill speed on computed tokens = Δkv_computed_tokens_sum / Δprefill_time_sum (server-apis §1.5)
        "prefill_tokens_timed": (_s("vllm:request_prefill_kv_computed_tokens", "hist_sum"),),
        "prefill_seconds": (_s("vllm:request_prefill_time_seconds", "hist_sum"),),
        "decode_seconds": (_s("vllm:request_decode_time_seconds", "hist_sum"),),
        # V0 engine-computed throughputs (removed in V1)
        # speculative decoding (vllm/v1/spec_decode/metrics.py): verified steps, drafted, accepted
        "spec_drafts": (_s("vllm:spec_decode_num_drafts_total", "counter"),),
        "spec_draft_tokens": (_s("vllm:spec_decode_num_draft_tokens_total", "counter"),),
        "spec_accepted_tokens": (_s("vllm:spec_decode_num_accepted_tokens_total", "counter"),),
        "prompt_tok_s_gauge": (_s("vllm:avg_prompt_throughput_toks_per_s", "gauge", note="V0"),),
        "generation_tok_s_gauge": (_s("vllm:avg_generation_throughput_toks_per_s", "gauge", note="V0"),),
    },
)

SGLANG = EngineProfile(
    name="sglang",
    title="SGLang",
    prefix="sglang:",
    table={
        "ttft": (_s("sglang:time_to_first_token_seconds", "histogram"),),
        "itl": (
            _s("sglang:inter_token_latency_seconds", "histogram"),
            _s("sglang:time_per_output_token_seconds", "histogram", note="removed name (#4914)"),
        ),
        "tpot": (_s("sglang:request_time_per_output_token_seconds", "histogram"),),
        "e2e": (_s("sglang:e2e_request_latency_seconds", "histogram"),),
        "queue_time": (_s("sglang:queue_time_seconds", "histogram"),),
        "running": (_s("sglang:num_running_reqs", "gauge"),),
        "waiting": (_s("sglang:num_queue_reqs", "gauge"),),
        "kv_usage": (_s("sglang:token_usage", "gauge"),),
        "prefix_cache_hit_rate_gauge": (_s("sglang:cache_hit_rate", "gauge", note="last prefill batch"),),
        "preemptions": (_s("sglang:num_retracted_requests_total", "counter"),),
        # live counters (updated every log interval) first, request-finish counters as fallback
        "prompt_tokens": (
            _s("sglang:realtime_tokens_total", "counter", labels={"mode": ("prefill_compute", "prefill_cache")}),
            _s("sglang:prompt_tokens_total", "counter"),
        ),
        "prompt_tokens_computed": (
            _s("sglang:realtime_tokens_total", "counter", labels={"mode": ("prefill_compute",)}),
        ),
        "prompt_tokens_cached": (
            _s("sglang:realtime_tokens_total", "counter", labels={"mode": ("prefill_cache",)}),
            _s("sglang:cached_tokens_total", "counter"),
        ),
        "generation_tokens": (
            _s("sglang:realtime_tokens_total", "counter", labels={"mode": ("decode",)}),
            _s("sglang:generation_tokens_total", "counter"),
        ),
        "requests_finished": (_s("sglang:num_requests_total", "counter"),),
        "generation_tok_s_gauge": (_s("sglang:gen_throughput", "gauge"),),
        # speculative decoding, set by the scheduler per logged decode batch: tokens per verify step
        # (bonus token included) and accepted ÷ drafted
        "spec_accept_length": (_s("sglang:spec_accept_length", "gauge"),),
        "spec_accept_rate": (_s("sglang:spec_accept_rate", "gauge"),),
    },
    dedupe_labels=(("tp_rank", "0"),),
    notes=("SGLang: no prefill/decode time histograms; prefix-cache hit rate = cached / prompt tokens.",),
)

TGI = EngineProfile(
    name="tgi",
    title="TGI",
    prefix="tgi_",
    table={
        # tgi_request_mean_time_per_token_duration = inference_time / generated_tokens: includes the
        # prefill, so it is a per-request TPOT, not an inter-token latency
        "tpot": (_s("tgi_request_mean_time_per_token_duration", "histogram"),),
        "e2e": (_s("tgi_request_duration", "histogram"),),
        "queue_time": (_s("tgi_request_queue_duration", "histogram"),),
        "prefill_step": (_s("tgi_batch_forward_duration", "histogram", labels={"method": ("prefill",)}),),
        "decode_step": (_s("tgi_batch_forward_duration", "histogram", labels={"method": ("decode",)}),),
        "running": (_s("tgi_batch_current_size", "gauge"),),
        "waiting": (_s("tgi_queue_size", "gauge"),),
        "prompt_tokens": (_s("tgi_request_input_length", "hist_sum"),),
        "generation_tokens": (_s("tgi_request_generated_tokens", "hist_sum"),),
        "requests_finished": (_s("tgi_request_success", "counter"),),
        "decode_calls": (_s("tgi_batch_inference_count", "counter", labels={"method": ("decode",)}),),
    },
    notes=(
        "TGI exports no TTFT or inter-token histograms: ttft_* and itl_* are null; "
        "tpot_* is inference_time / generated_tokens (prefill included).",
        "TGI exports no KV-cache usage or prefix-cache counters.",
    ),
)

LLAMACPP = EngineProfile(
    name="llamacpp",
    title="llama.cpp",
    prefix="llamacpp:",
    table={
        "running": (_s("llamacpp:requests_processing", "gauge"),),
        "waiting": (_s("llamacpp:requests_deferred", "gauge"),),
        # removed upstream in May 2025 (ggml-org/llama.cpp#13660); older builds still have it
        "kv_usage": (_s("llamacpp:kv_cache_usage_ratio", "gauge", note="pre-2025-05 builds"),),
        "prompt_tokens_computed": (_s("llamacpp:prompt_tokens_total", "counter"),),
        "prompt_tokens_cached": (_s("llamacpp:prompt_tokens_cached_total", "counter"),),
        "generation_tokens": (_s("llamacpp:tokens_predicted_total", "counter"),),
        "prefill_tokens_timed": (_s("llamacpp:prompt_tokens_total", "counter"),),
        "prefill_seconds": (_s("llamacpp:prompt_seconds_total", "counter"),),
        "decode_seconds": (_s("llamacpp:tokens_predicted_seconds_total", "counter"),),
        "decode_tokens_timed": (_s("llamacpp:tokens_predicted_total", "counter"),),
        "decode_calls": (_s("llamacpp:n_decode_total", "counter"),),
        "spec_drafts": (_s("llamacpp:spec_decode_num_drafts_total", "counter"),),
        "spec_draft_tokens": (_s("llamacpp:spec_decode_num_draft_tokens_total", "counter"),),
        "spec_accepted_tokens": (_s("llamacpp:spec_decode_num_accepted_tokens_total", "counter"),),
        "prompt_tok_s_gauge": (_s("llamacpp:prompt_tokens_seconds", "gauge", note="reset at every scrape"),),
        "generation_tok_s_gauge": (_s("llamacpp:predicted_tokens_seconds", "gauge", note="reset at every scrape"),),
    },
    notes=(
        "llama.cpp exports no TTFT/ITL histograms: ttft_* and itl_* quantiles are null; "
        "itl_mean_s ≈ Δtokens_predicted_seconds / Δtokens_predicted (counts the first token, so slightly low).",
        "llama.cpp adds generated tokens when a request finishes: generation_tok_s lags and is bursty.",
        "llama.cpp builds since 2025-05 export no KV-cache usage: kv_usage is null.",
    ),
)

PROFILES: dict[str, EngineProfile] = {p.name: p for p in (VLLM, SGLANG, TGI, LLAMACPP)}

#: every canonical name any table uses
CANONICAL: frozenset[str] = frozenset(k for p in PROFILES.values() for k in p.table)


def detect_engine(names: list[str] | set[str]) -> str | None:
    """The engine whose prefix most exposed metric names carry (``None`` when no prefix matches)."""
    best, best_n = None, 0
    for prof in PROFILES.values():
        legacy = prof.prefix.replace(":", "_")  # OpenMetrics output of prometheus_client escapes ':'
        n = sum(1 for name in names if name.startswith((prof.prefix, legacy)))
        if n > best_n:
            best, best_n = prof.name, n
    return best


def engine_aliases(name: str) -> str:
    """Normalise a user-given engine name (``llama.cpp``, ``llama-server``, ``TGI`` …)."""
    key = name.strip().lower().replace(".", "").replace("-", "").replace("_", "")
    aliases = {
        "vllm": "vllm",
        "sglang": "sglang",
        "tgi": "tgi",
        "textgenerationinference": "tgi",
        "llamacpp": "llamacpp",
        "llamaserver": "llamacpp",
        "llama": "llamacpp",
        "auto": "auto",
    }
    if key not in aliases:
        from phasescope.errors import InputError

        raise InputError(f"unknown engine {name!r}: expected auto, vllm, sglang, tgi or llamacpp")
    return aliases[key]
