"""Bench's self-checks: was the prefix cache hit, was the first request cold, are there enough
samples for the percentiles printed? Each answer is a :class:`MeasurementWarning` in the summary.

Prefix-cache hits are read from every source the server offers, per request where it can:
``usage.prompt_tokens_details.cached_tokens`` (vLLM, SGLang, OpenAI), llama.cpp ``timings.cache_n``
(both in :attr:`RequestRecord.cached_prompt_tokens` / ``server["cache_n"]``), and run-wide from the
server's ``/metrics`` counters (vLLM ``prefix_cache_hits/queries``, SGLang cached tokens, in
``server_metrics.summary.prefix_cache_hit_rate``). The *expected* hit rate of the workload is 0 for
unique prompts, and for a shared-prefix workload at most ``prefix_len/(prefix_len + input_len)``
(every request reusing its group's prefix; the warm-ups may have cached it). ``prefix_cache_hits`` fires when
the measured rate exceeds the expected one by more than :data:`HIT_MARGIN` (5 points: llama.cpp
reuses a matching BOS token on every request, ~0.4 % of a 256-token prompt).
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.measure import derive
from phasescope.measure.aggregate import cached_share, successful
from phasescope.measure.records import RequestRecord
from phasescope.measure.warnings import MeasurementWarning, warn

#: measured hit rate above expected + this → prefix_cache_hits
HIT_MARGIN = 0.05
#: fewer completed requests than this and a p99 is not a p99
MIN_FOR_P99 = 20
#: the first request is "cold" when its TTFT exceeds the median of the rest by this factor
COLD_FACTOR = 3.0


def expected_hit_rate(cfg: Any, n: int, workload: Any = None) -> float:
    """The most a correct run can hit: 0 for unique prompts; with a shared prefix, every request
    reusing its group's prefix (the warm-ups may already have cached each group's); a conversation's
    or a Mooncake trace's implied rate (issue 17). The workload knows which
    (:meth:`phasescope.load.datasets.Workload.expected_hit_rate`)."""
    return _workload(cfg, workload).expected_hit_rate(n)


def _workload(cfg: Any, workload: Any) -> Any:
    if workload is not None:
        return workload
    from phasescope.load.datasets import workload_for

    return workload_for(cfg)


def prefix_cache_section(cfg: Any, records: Sequence[RequestRecord], server_metrics: dict[str, Any] | None,
                         workload: Any = None) -> dict[str, Any]:
    """``prefix_cache``: hit rate per request source and from /metrics, and what was expected."""
    ok = successful(records)
    known = [(c, r.prompt_tokens) for r in ok if r.prompt_tokens and (c := derive.cached_prompt_tokens(r)) is not None]
    rec_rate = cached_share(ok)
    hits = sum(1 for c, p in known if c >= 2 and c > 0.01 * p)
    srv = ((server_metrics or {}).get("summary") or {}).get("prefix_cache_hit_rate") if server_metrics else None
    rates = [x for x in (rec_rate, srv) if isinstance(x, (int, float))]
    return {
        "hit_rate": max(rates) if rates else None,
        "hit_rate_requests": rec_rate,
        "hit_rate_server_metrics": srv,
        "requests_with_hits": hits if known else None,
        "requests_known": len(known),
        "expected_hit_rate": expected_hit_rate(cfg, len(ok), workload),
        "reuse_prompts": bool(cfg.reuse_prompts),
    }


def bench_warnings(cfg: Any, summary: dict[str, Any], records: Sequence[RequestRecord],
                   warmups: Sequence[RequestRecord], workload: Any = None) -> list[MeasurementWarning]:
    out: list[MeasurementWarning] = []
    pc = summary.get("prefix_cache") or {}
    rate, exp = pc.get("hit_rate"), pc.get("expected_hit_rate") or 0.0
    if rate is not None and rate > exp + HIT_MARGIN:
        src = ", ".join(f"{k.replace('hit_rate_', '').replace('_', ' ')} {pc[k]:.3f}"
                        for k in ("hit_rate_requests", "hit_rate_server_metrics") if pc.get(k) is not None)
        out.append(warn(
            "prefix_cache_hits", "reused" if cfg.reuse_prompts else "unexpected",
            {"hit_rate": rate, "expected_hit_rate": exp, "hit_rate_requests": pc.get("hit_rate_requests"),
             "hit_rate_server_metrics": pc.get("hit_rate_server_metrics"),
             "requests_with_hits": pc.get("requests_with_hits")},
            rate_pct=rate * 100, sources=src, expected_pct=exp * 100))
    done = int(summary.get("completed") or 0)
    pcts = [float(p) for p in summary.get("percentiles") or []]
    high = [p for p in pcts if p >= 99]
    if 0 < done < MIN_FOR_P99 and high:
        out.append(warn(
            "too_few_samples", "p99", {"completed": done, "percentiles": high, "min_for_p99": MIN_FOR_P99},
            completed=done, percentile=high[-1], more=_workload(cfg, workload).more_requests(MIN_FOR_P99)))
    ok = sorted((r for r in records if r.ok), key=lambda r: r.t_start_ns)
    if not warmups and len(ok) >= 4:
        t = [derive.ttft_s(r) for r in ok]
        first, rest = t[0], sorted(x for x in t[1:] if x is not None)
        if first is not None and rest:
            med = rest[len(rest) // 2]
            if med > 0 and first > COLD_FACTOR * med and first - med > 0.05:
                out.append(warn("cold_start", "no_warmup", {"first_ttft_ms": first * 1000, "median_ttft_ms": med * 1000},
                                first_ms=first * 1000, times=first / med, median_ms=med * 1000))
    return out


def server_build(detected: Any) -> dict[str, Any] | None:
    """What the engine says about its build, flags and model file (llama.cpp ``/props`` and
    ``/v1/models`` meta; the detected version elsewhere), so ``compare`` can tell two servers apart."""
    if detected is None:
        return None
    props = getattr(detected, "props", None) or {}
    meta = getattr(detected, "model_meta", None) or {}
    dgs = props.get("default_generation_settings") or {}
    path = props.get("model_path")
    out = {
        "engine": getattr(detected, "engine", None),
        "version": getattr(detected, "version", None),
        "build_info": props.get("build_info"),
        "model_file": str(path).replace("\\", "/").rsplit("/", 1)[-1] if path else None,
        "model_size_bytes": meta.get("size"),
        "model_ftype": meta.get("ftype"),
        "total_slots": props.get("total_slots"),
        "n_ctx": dgs.get("n_ctx") or meta.get("n_ctx"),
    }
    return {k: v for k, v in out.items() if v is not None} or None
