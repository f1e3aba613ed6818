"""From probe records to the phase card's numbers (pure functions; no I/O).

Per prompt size, every aggregate through :mod:`phasescope.measure.aggregate` (the same numbers
``show`` and the report print for the run; per-record definitions in
:mod:`phasescope.measure.derive`):

* ``ttft_s`` — median client TTFT (request start → first content/reasoning event);
* ``ttft_net_s`` — median TTFT from connection ready (connection setup subtracted);
* ``prefill_tok_s`` — median over requests of prompt_tokens / TTFT (client view: includes HTTP,
  queueing and the first decode step, so it is a lower bound on the engine's prefill rate);
* ``decode_tok_s`` — median over requests of (output − 1) / (last token − first token);
* ``tpot_s``, ``e2e_s`` — medians over requests;
* ``itl_p50_s`` / ``itl_p99_s`` — per-token inter-token latency pooled over the size's requests
  (an event carrying k tokens contributes k samples of gap/k);
* ``event_gap_p50_s`` — per-event gaps (what ``vllm bench serve`` calls ITL);
* ``server`` — medians of the server's own timings when the API reports them (llama.cpp
  ``timings``, Ollama durations): ``ttft_s`` (llama.cpp ``prompt_ms``; Ollama load +
  prompt_eval_duration), ``prefill_tok_s`` (evaluated tokens / prefill time; null when the evaluated
  count is unknown, e.g. Ollama with a possibly cached prompt), ``decode_tok_s`` ((n − 1) / decode
  time), ``cache_n``; ``null`` when the server reports nothing.

The one-minute test (seed article): between the smallest and the largest prompt, TTFT should grow
about as the prompt does (prefill is compute-bound, ∝ tokens) while the decode rate barely moves
(decode is bandwidth-bound, reading the same weights per token). :func:`verdict` says so in words
and sets ``phases_separate`` only when the run shows both halves; its sentences call decode "a separate
phase" only then.
"""

from __future__ import annotations

from typing import Any

from phasescope.measure import aggregate as A
from phasescope.measure import derive as D
from phasescope.measure.records import RequestRecord

_med = A.median


def size_summary(n_target: int, recs: list[RequestRecord]) -> dict[str, Any]:
    recs = A.measured(recs)
    ok = A.successful(recs)
    point = A.point_summary(recs)
    prompt_tokens = _med([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None])
    gaps: list[float] = [g for r in ok for g in D.event_gaps_s(r)]
    srv_recs = [r for r in ok if r.server]
    server: dict[str, Any] | None = None
    if srv_recs:
        server = {
            "source": srv_recs[0].server.get("source") if srv_recs[0].server else None,
            "ttft_s": _med([(r.server or {}).get("ttft_s") for r in srv_recs]),
            "prefill_s": _med([(r.server or {}).get("prefill_s") for r in srv_recs]),
            "prefill_tok_s": _med([D.server_prefill_tok_s(r) for r in srv_recs]),
            "decode_tok_s": _med([D.server_decode_tok_s(r) for r in srv_recs]),
            "prompt_n": _med([(r.server or {}).get("prompt_n") for r in srv_recs]),
            "cache_n": _med([(r.server or {}).get("cache_n") for r in srv_recs]),
            "load_s": _med([(r.server or {}).get("load_s") for r in srv_recs]),
        }
    out_tokens = _med([float(r.output_tokens) for r in ok if r.output_tokens is not None])
    return {
        "prompt_tokens_target": n_target,
        "prompt_tokens": int(prompt_tokens) if prompt_tokens is not None else None,
        "prompt_tokens_source": ok[0].prompt_tokens_source if ok else None,
        "requests": len(recs),
        "ok": len(ok),
        "ttft_s": point["ttft_s"],
        "ttft_net_s": _med([D.ttft_net_s(r) for r in ok]),
        "ttft_min_s": min((t for t in (D.ttft_s(r) for r in ok) if t is not None), default=None),
        "connect_s": _med([D.connect_s(r) for r in ok]),
        "prefill_tok_s": point["prefill_tok_s"],
        "decode_tok_s": point["decode_tok_s"],
        "tpot_s": point["tpot_s"],
        "itl_p50_s": point["itl_p50_s"],
        "itl_p99_s": point["itl_p99_s"],
        "event_gap_p50_s": A.percentile(gaps, 50),
        "e2e_s": point["e2e_s"],
        "output_tokens": int(out_tokens) if out_tokens is not None else None,
        "output_tokens_source": ok[0].output_tokens_source if ok else None,
        "stopped_early": sum(1 for r in ok if r.stopped_early),
        "cached_prompt_tokens": _med([float(r.cached_prompt_tokens) for r in ok if r.cached_prompt_tokens is not None]),
        "server": server,
    }


#: a decode change within this many percent between the prompt sizes reads as "independent of prompt length"
SAME_DECODE_PCT = 5.0
#: the most decode may move between the sizes for the run to show the phases apart (``phases_separate``)
SEPARATE_DECODE_PCT = 15.0
#: TTFT at least this share of the prompt's growth (``ttft_scaling``): prefill is the TTFT
PREFILL_SCALING = 0.5
#: a TTFT growth within this share of the smaller prompt's TTFT is noise, not prefill (no marginal rate)
TTFT_NOISE_REL = 0.05


def ttft_noise_s(lo: dict[str, Any], hi: dict[str, Any]) -> float:
    """The TTFT difference between two sizes that is still noise: :data:`TTFT_NOISE_REL` of the smaller
    TTFT, or the wider measured spread of either size (median − best TTFT), whichever is larger."""
    spreads = [s["ttft_s"] - s["ttft_min_s"] for s in (lo, hi)
               if isinstance(s.get("ttft_min_s"), (int, float)) and s["ttft_s"] >= s["ttft_min_s"]]
    return max([TTFT_NOISE_REL * min(lo["ttft_s"], hi["ttft_s"]), *spreads])


def verdict(sizes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one-minute test between the smallest and the largest prompt size.

    ``phases_separate``: the run shows prefill and decode as two phases — TTFT grew at least
    :data:`PREFILL_SCALING` as fast as the prompt (prefill is the TTFT) while decode moved at most
    :data:`SEPARATE_DECODE_PCT`; the text calls decode "a separate phase" exactly then.
    ``marginal_prefill_tok_s``: Δprompt ÷ ΔTTFT (fixed overhead removed), ``None`` unless ΔTTFT is
    above :func:`ttft_noise_s`."""
    usable = [s for s in sizes if s.get("ttft_s") and (s.get("prompt_tokens") or s.get("prompt_tokens_target"))]
    if len(usable) < 2:
        return None
    lo = min(usable, key=lambda s: s.get("prompt_tokens") or s["prompt_tokens_target"])
    hi = max(usable, key=lambda s: s.get("prompt_tokens") or s["prompt_tokens_target"])
    p_lo = lo.get("prompt_tokens") or lo["prompt_tokens_target"]
    p_hi = hi.get("prompt_tokens") or hi["prompt_tokens_target"]
    if p_hi <= p_lo:
        return None
    prompt_ratio = p_hi / p_lo
    ttft_ratio = hi["ttft_s"] / lo["ttft_s"]
    d_lo, d_hi = lo.get("decode_tok_s"), hi.get("decode_tok_s")
    decode_change = (d_hi / d_lo - 1.0) * 100.0 if (d_lo and d_hi) else None
    # marginal prefill rate: the extra tokens over the extra time removes fixed overhead
    dt = hi["ttft_s"] - lo["ttft_s"]
    marginal = (p_hi - p_lo) / dt if dt > ttft_noise_s(lo, hi) else None  # noise is no rate
    scaling = ttft_ratio / prompt_ratio
    separate = bool(scaling >= PREFILL_SCALING and decode_change is not None
                    and abs(decode_change) <= SEPARATE_DECODE_PCT)
    lines = []
    if scaling >= PREFILL_SCALING:
        lines.append(f"TTFT grew ×{ttft_ratio:.1f} for a ×{prompt_ratio:.1f} longer prompt: prefill is the TTFT and it scales with prompt length")
    elif ttft_ratio >= 1.5:
        lines.append(f"TTFT grew ×{ttft_ratio:.1f} for a ×{prompt_ratio:.1f} longer prompt: part of TTFT is fixed overhead (queueing, network, scheduling)")
    else:
        lines.append(f"TTFT barely grew (×{ttft_ratio:.1f}) for a ×{prompt_ratio:.1f} longer prompt: prefill is not what you wait for "
                     "(fixed overhead dominates, or a prefix cache served the prompt)")
    if decode_change is not None:
        # the sentence must agree with the number beside it: "independent" only within a few percent
        if abs(decode_change) <= SAME_DECODE_PCT:
            # a change that rounds to 0 printed as "-0%" reads as a measured fall: say it did not change
            moved = (f"decode rate changed {decode_change:+.0f}%" if round(decode_change) != 0
                     else "decode rate did not change (within 1%)")
            lines.append(f"{moved}: decode is a separate phase, independent of prompt length" if separate
                         else f"{moved}: decode is independent of prompt length")
        elif -SEPARATE_DECODE_PCT <= decode_change < 0:
            lines.append(f"decode rate fell {-decode_change:.0f}% while TTFT grew ×{ttft_ratio:.1f}: decode is a separate phase; "
                         "only the longer KV cache it reads each step slows it a little" if separate
                         else f"decode rate fell {-decode_change:.0f}%: only the longer KV cache it reads each step slows it a little")
        elif 0 < decode_change <= SEPARATE_DECODE_PCT:
            lines.append(f"decode rate changed {decode_change:+.0f}%: decode is a separate phase; a longer prompt cannot speed "
                         "it up, so the difference is noise" if separate
                         else f"decode rate changed {decode_change:+.0f}%: a longer prompt cannot speed decode up, so the "
                         "difference is noise")
        elif decode_change < 0:
            lines.append(f"decode rate fell {-decode_change:.0f}% with the longer context: attention/KV reads are a visible part of each step")
        else:
            lines.append(f"decode rate rose {decode_change:.0f}% with the longer prompt: noise or contention; repeat with --repeat 5")
        if not separate and scaling < PREFILL_SCALING and abs(decode_change) <= SEPARATE_DECODE_PCT:
            # decode held still, but with a TTFT that does not track the prompt this run has no prefill phase to show
            lines.append("this run does not show the two phases apart: TTFT did not grow with the prompt")
    return {
        "prompt_ratio": prompt_ratio,
        "ttft_ratio": ttft_ratio,
        "ttft_scaling": scaling,
        "decode_change_pct": decode_change,
        "marginal_prefill_tok_s": marginal,
        "phases_separate": separate,
        "text": lines,
    }


def warmup_summary(warm: RequestRecord | None, sizes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Cold start = warm-up TTFT − the steady median TTFT of the same prompt size."""
    if warm is None:
        return None
    t = D.ttft_s(warm)
    n = warm.tags.get("prompt_tokens_target")
    same = next((s for s in sizes if s.get("prompt_tokens_target") == n), None)
    steady = same.get("ttft_s") if same else None
    load = (warm.server or {}).get("load_s") if warm.server else None
    return {
        "ok": warm.ok,
        "ttft_s": t,
        "e2e_s": D.e2e_s(warm),
        "cold_start_s": (t - steady) if (t is not None and steady is not None) else None,
        "load_s": load,
    }


def probe_warnings(result: dict[str, Any], run: Any, host: dict[str, Any] | None,
                   earlier: Any = None) -> list[dict[str, Any]]:
    """The probe's self-checks, as ``--json`` ``warnings`` (dicts): host contention, prompt lengths
    the server counted differently, too few repeats for a spread, and a cold first request."""
    from phasescope.measure.host import judge
    from phasescope.measure.warnings import MeasurementWarning, to_json

    out: list[Any] = list(earlier or [])
    out += judge(host)
    diffs: dict[int, list[int]] = {}
    for r in run.records:
        n = (r.tags or {}).get("prompt_tokens_target")
        exact = (r.tags or {}).get("prompt_source") == "tokenizer"
        if (r.ok and n is not None and r.prompt_tokens is not None and r.prompt_tokens_source in ("usage", "server")
                and r.prompt_tokens != n and (exact or abs(r.prompt_tokens - n) > max(1, 0.05 * n))):
            diffs.setdefault(int(n), []).append(int(r.prompt_tokens))
    if diffs:
        shown = "; ".join(f"asked {n}, server counted {', '.join(map(str, sorted(set(v))))}" for n, v in sorted(diffs.items()))
        out.append(MeasurementWarning(
            "token_count_mismatch",
            f"The server counted other prompt lengths than were asked for ({shown}): prefill rates use the "
            "server's count.", {"by_size": {str(k): v for k, v in diffs.items()}},
            "use an API with a tokenizer endpoint and token-id prompts (--api openai on vLLM, SGLang, llama.cpp)"))
    if run.plan.repeat < 3:
        out.append(MeasurementWarning(
            "too_few_samples",
            f"--repeat {run.plan.repeat}: a median of fewer than 3 requests per size has no spread to judge "
            "noise by.", {"repeat": run.plan.repeat}, "use --repeat 3 or more"))
    if not run.plan.warmup and run.records:
        first = run.records[0]
        same = [D.ttft_s(r) for r in run.records[1:] if (r.tags or {}).get("prompt_tokens_target")
                == (first.tags or {}).get("prompt_tokens_target")]
        others = _med(same)
        t0 = D.ttft_s(first)
        if t0 is not None and others and t0 > 3 * others and t0 - others > 0.05:
            out.append(MeasurementWarning(
                "cold_start",
                f"The first request's TTFT ({t0 * 1000:.0f} ms) was {t0 / others:.1f}× the later "
                "ones of its size, with no warm-up: the median still holds, but the spread does not.",
                {"first_ttft_ms": t0 * 1000, "median_others_ms": others * 1000},
                "drop --no-warmup"))
    return to_json(out)
