"""From probe records to the phase card's numbers (pure functions; no I/O).

Per prompt size, every aggregate through :mod:`phasescope.measure.aggregate` (the same numbers
``show`` and the report print for the run; per-record definitions in
:mod:`phasescope.measure.derive`):

* ``ttft_s`` — median client TTFT (request start → first content/reasoning event);
* ``ttft_net_s`` — median TTFT from connection ready (connection setup subtracted);
* ``ttfo_s`` — median time to first *output* token (request start → first answer event, after any
  reasoning); equal to ``ttft_s`` when the model did not reason; ``reasoning_tokens`` /
  ``answer_tokens`` — median per request (0 reasoning tokens without reasoning);
  ``reasoning_tok_s`` / ``answer_tok_s`` — median decode rate inside each phase (None without two
  tokens of that kind);
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
from phasescope.measure import interval as I
from phasescope.measure.records import RequestRecord

_med = A.median


#: the figures whose repeats decide when ``--repeat auto`` stops, and that an ``unstable`` warning names
STOP_FIGURES = ("ttft_s", "decode_tok_s")
#: the words for each figure in sentences and warnings
FIGURE_WORDS = {"ttft_s": "TTFT", "ttfo_s": "TTFO", "decode_tok_s": "decode rate", "ttft_net_s": "TTFT net of connection",
                "prefill_tok_s": "prefill rate", "itl_p50_s": "ITL p50", "itl_p99_s": "ITL p99",
                "tpot_s": "TPOT", "e2e_s": "E2E"}


def _around(value: float | None, samples: list[float | None]) -> I.Interval | None:
    """The interval of a figure reported as ``value`` from its per-request samples (the run-to-run
    spread: one sample per repeat); the reported value always lies inside it."""
    if value is None:
        return None
    iv = I.median_interval(samples)
    if iv is None:
        return I.single(value)
    if iv.value == value:
        return iv
    return I.Interval(value, min(iv.low, value), max(iv.high, value), iv.n, iv.method, iv.confidence, iv.min, iv.max)


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _itl_q(r: RequestRecord, q: float) -> float | None:
    xs = D.itl_s(r)
    return A.percentile(xs, q) if xs else None


def stop_intervals(recs: list[RequestRecord]) -> dict[str, I.Interval]:
    """The :data:`STOP_FIGURES` intervals of one size's records (those it has samples for)."""
    ok = A.successful(A.measured(recs))
    out = {}
    for key in STOP_FIGURES:
        iv = I.median_interval([A.REQUEST_FNS[key](r) for r in ok])
        if iv is not None:
            out[key] = iv
    return out


def is_stable(recs: list[RequestRecord], rel: float = I.STABLE_REL) -> bool:
    """``--repeat auto``'s stop rule: every :data:`STOP_FIGURES` interval of the median is within ±``rel``."""
    ivs = stop_intervals(recs)
    return bool(ivs) and all(iv.tight(rel) for iv in ivs.values())


def size_summary(n_target: int, recs: list[RequestRecord]) -> dict[str, Any]:
    recs = A.measured(recs)
    ok = A.successful(recs)
    point = A.point_summary(recs)
    prompt_tokens = _med([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None])
    gaps: list[float] = [g for r in ok for g in D.event_gaps_s(r)]
    srv_recs = [r for r in ok if r.server]
    server: dict[str, Any] | None = None
    intervals: dict[str, I.Interval | None] = {
        "ttft_s": _around(point["ttft_s"], [D.ttft_s(r) for r in ok]),
        "ttft_net_s": _around(_med([D.ttft_net_s(r) for r in ok]), [D.ttft_net_s(r) for r in ok]),
        "ttfo_s": _around(_med([D.ttfo_s(r) for r in ok]), [D.ttfo_s(r) for r in ok]),
        "prefill_tok_s": _around(point["prefill_tok_s"], [D.prefill_tok_s(r) for r in ok]),
        "decode_tok_s": _around(point["decode_tok_s"], [D.decode_tok_s(r) for r in ok]),
        "tpot_s": _around(point["tpot_s"], [D.tpot_s(r) for r in ok]),
        # the pooled per-token percentile, with the spread of the per-request percentile across repeats
        "itl_p50_s": _around(point["itl_p50_s"], [_itl_q(r, 50) for r in ok]),
        "itl_p99_s": _around(point["itl_p99_s"], [_itl_q(r, 99) for r in ok]),
        "e2e_s": _around(point["e2e_s"], [D.e2e_s(r) for r in ok]),
    }
    if srv_recs:
        s_ttft = [(r.server or {}).get("ttft_s") for r in srv_recs]
        s_pre = [D.server_prefill_tok_s(r) for r in srv_recs]
        s_dec = [D.server_decode_tok_s(r) for r in srv_recs]
        server = {
            "source": srv_recs[0].server.get("source") if srv_recs[0].server else None,
            "ttft_s": _med(s_ttft),
            "prefill_s": _med([(r.server or {}).get("prefill_s") for r in srv_recs]),
            "prefill_tok_s": _med(s_pre),
            "decode_tok_s": _med(s_dec),
            "prompt_n": _med([(r.server or {}).get("prompt_n") for r in srv_recs]),
            "cache_n": _med([(r.server or {}).get("cache_n") for r in srv_recs]),
            "load_s": _med([(r.server or {}).get("load_s") for r in srv_recs]),
        }
        s_ivs = {"ttft_s": I.median_interval(s_ttft), "prefill_s": I.median_interval(
            [(r.server or {}).get("prefill_s") for r in srv_recs]), "prefill_tok_s": I.median_interval(s_pre),
                 "decode_tok_s": I.median_interval(s_dec)}
        for k, iv in s_ivs.items():
            server[f"{k}_ci"] = I.to_ci(iv)
        server["intervals"] = {k: iv.to_json() for k, iv in s_ivs.items() if iv is not None}
    out_tokens = _med([float(r.output_tokens) for r in ok if r.output_tokens is not None])
    out: dict[str, Any] = {
        "prompt_tokens_target": n_target,
        "prompt_tokens": int(prompt_tokens) if prompt_tokens is not None else None,
        "prompt_tokens_source": ok[0].prompt_tokens_source if ok else None,
        "requests": len(recs),
        "ok": len(ok),
        "repeats": len(recs),
        "n": len(ok),
        "ttft_s": point["ttft_s"],
        "ttft_net_s": _med([D.ttft_net_s(r) for r in ok]),
        "ttft_min_s": min((t for t in (D.ttft_s(r) for r in ok) if t is not None), default=None),
        "ttfo_s": _med([D.ttfo_s(r) for r in ok]),
        "reasoning_tokens": _int(_med([float(D.reasoning_tokens(r)) for r in ok])),
        "answer_tokens": _int(_med([None if (a := D.answer_tokens(r)) is None else float(a) for r in ok])),
        "reasoning_tok_s": _med([D.reasoning_tok_s(r) for r in ok]),
        "answer_tok_s": _med([D.answer_tok_s(r) for r in ok]),
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
    for k, iv in intervals.items():
        out[f"{k}_ci"] = I.to_ci(iv)
    out["intervals"] = {k: iv.to_json() for k, iv in intervals.items() if iv is not None}
    # the figures the sentences rest on whose repeats disagree (a spread known and wider than ±10 %)
    out["unstable"] = [k for k in STOP_FIGURES if (iv := intervals.get(k)) is not None and iv.known and not iv.tight()]
    sd = D.spec_decode_run(ok)  # speculative decoding: only where the server speculates (issue 33)
    if sd is not None:
        out["spec_decode"] = sd
    return out


def size_interval(s: dict[str, Any], key: str) -> I.Interval | None:
    """A size row's interval of ``key`` (``intervals`` as stored; else ``<key>_ci`` with ``n``; else the
    bare value as one sample, whose spread is unknown, as in runs stored before intervals)."""
    v = s.get(key)
    if not isinstance(v, (int, float)):
        return None
    d = (s.get("intervals") or {}).get(key)
    if isinstance(d, dict):
        try:
            return I.Interval.from_json(d)
        except (KeyError, TypeError, ValueError):
            pass
    ci = s.get(f"{key}_ci")
    n = int(s.get("n") or s.get("ok") or 1)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci) and n >= 2:
        return I.Interval(float(v), float(ci[0]), float(ci[1]), n, "stored")
    return I.single(float(v))


#: a decode change within this many percent between the prompt sizes reads as "independent of prompt length"
SAME_DECODE_PCT = 5.0
#: the most decode may move between the sizes for the run to show the phases apart (``phases_separate``):
#: the whole interval of the change must lie within ±this
SEPARATE_DECODE_PCT = 15.0
#: TTFT at least this share of the prompt's growth (``ttft_scaling``): prefill is the TTFT
PREFILL_SCALING = 0.5
#: a TTFT growth within this share of the smaller prompt's TTFT is noise, not prefill (no marginal rate)
TTFT_NOISE_REL = 0.05
#: TTFT grew at least this much (the low end of its ratio) for "part of TTFT is fixed overhead"
OVERHEAD_RATIO = 1.5
#: the server's own prompt time at least this share of the client's TTFT: the overhead is inside the server
INSIDE_SERVER_SHARE = 0.8


def _ms_s(x: float) -> str:
    return f"{x * 1000:,.0f} ms" if x < 10 else f"{x:,.1f} s"


def _rate_s(x: float) -> str:
    return f"{x:,.0f} tok/s" if x >= 100 else f"{x:.1f} tok/s"


def _spread(iv: I.Interval, fmt: Any) -> str:
    """The figure with the range of its repeats, always (a "cannot tell" names the spread it rests on)."""
    if iv.n < 2:
        return f"{fmt(iv.value)} (1 run)"
    lo = iv.min if iv.min is not None else iv.low
    hi = iv.max if iv.max is not None else iv.high
    return f"{fmt(iv.value)} ({fmt(lo)}–{fmt(hi)}, {iv.n} runs)"


def _unstable_names(pairs: list[tuple[int, I.Interval]], word: str, fmt: Any) -> str:
    return "; ".join(f"the {p}-token {word}'s repeats disagree: {_spread(iv, fmt)}" for p, iv in pairs)


def robust(iv: I.Interval) -> bool:
    """An interval a claim may rest on even when it is wider than ±10 %: the distribution-free one of the
    median (order statistics, from 6 repeats on), whose coverage holds whatever shape a stall gives the
    repeats. A log-t interval of 2–5 repeats assumes a shape that one stalled repeat breaks, so a wide one
    carries no claim."""
    return iv.method == "order-stat"


def _wide_note(pairs: list[tuple[int, I.Interval]], word: str, fmt: Any) -> str:
    """The spread of the wide figures a claim still rests on, shown with the claim."""
    return "; ".join(f"the {p}-token {word}'s repeats spread {_spread(iv, fmt)}, and even the ends of its "
                     "interval show this" for p, iv in pairs)


def verdict(sizes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one-minute test between the smallest and the largest prompt size, drawn from intervals.

    Every claim needs the intervals to support it (:func:`phasescope.measure.interval.compare` and
    :func:`~phasescope.measure.interval.ratio`); a figure whose repeats disagree (its interval wider
    than ±10 %, ``unstable``) carries no claim, and one request per size carries none either: the
    sentence then says "cannot tell" with the spread.

    - "prefill is the TTFT and it scales": TTFT clearly grew (the intervals do not overlap) and the low
      end of its ratio is at least :data:`PREFILL_SCALING` of the prompt's ratio;
    - "part of TTFT is fixed overhead": the high end of the ratio is under that, and the low end at least
      :data:`OVERHEAD_RATIO`; where it sits is said only from the server's own prompt time;
    - "TTFT barely grew": the high end is under both;
    - decode "independent of prompt length" / "a separate phase": the whole interval of the decode
      change lies within ±:data:`SEPARATE_DECODE_PCT`; a fall or rise is named only where the decode
      intervals do not overlap.

    ``phases_separate``: both halves hold (prefill scales, decode bounded); the text calls decode "a
    separate phase" exactly then. ``marginal_prefill_tok_s``: Δprompt ÷ ΔTTFT (fixed overhead removed),
    ``None`` unless even the low end of ΔTTFT is above :data:`TTFT_NOISE_REL` of the smaller TTFT (with its interval in
    ``marginal_prefill_tok_s_ci``)."""
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
    t_lo, t_hi = size_interval(lo, "ttft_s"), size_interval(hi, "ttft_s")
    assert t_lo is not None and t_hi is not None
    ttft_ratio = t_hi.value / t_lo.value
    r_ttft = I.ratio(t_hi, t_lo) if t_lo.low > 0 and t_hi.low >= 0 else None
    d_lo, d_hi = size_interval(lo, "decode_tok_s"), size_interval(hi, "decode_tok_s")
    decode_change = (d_hi.value / d_lo.value - 1.0) * 100.0 if (d_lo and d_hi and d_lo.value and d_hi.value) else None
    r_dec = (I.ratio(d_hi, d_lo) if decode_change is not None and d_lo and d_hi and d_lo.low > 0 and d_hi.low >= 0
             else None)
    unstable = [(p, key, iv) for p, s in ((p_lo, lo), (p_hi, hi)) for key in STOP_FIGURES
                if (iv := size_interval(s, key)) is not None and iv.known and not iv.tight()]
    scaling = ttft_ratio / prompt_ratio
    lines: list[str] = []

    # -- TTFT: does prefill scale? -------------------------------------------------------------------
    ttft_claim = "cannot_tell"
    grew = I.compare(t_lo, t_hi) == I.HIGHER
    # an unstable figure carries no claim, unless its interval is distribution-free: then a claim its whole
    # interval supports stands, and says the spread it rests on
    bad_t = [(p, iv) for p, k, iv in unstable if k == "ttft_s" and not robust(iv)]
    wide_t = [(p, iv) for p, k, iv in unstable if k == "ttft_s" and robust(iv)]
    wide = f" ({_wide_note(wide_t, 'TTFT', _ms_s)})" if wide_t else ""
    span = f"TTFT {_spread(t_lo, _ms_s)} → {_spread(t_hi, _ms_s)} for a ×{prompt_ratio:.1f} longer prompt"
    if not (t_lo.known and t_hi.known) or r_ttft is None:
        lines.append(f"cannot tell how TTFT scales from one request per size ({span}); repeat with --repeat auto")
    elif bad_t:
        lines.append(f"cannot tell how TTFT scales with the prompt: {_unstable_names(bad_t, 'TTFT', _ms_s)}")
    elif grew and r_ttft.low / prompt_ratio >= PREFILL_SCALING:
        ttft_claim = "prefill_scales"
        lines.append(f"TTFT grew ×{ttft_ratio:.1f} for a ×{prompt_ratio:.1f} longer prompt: prefill is the TTFT "
                     f"and it scales with prompt length{wide}")
    elif r_ttft.high / prompt_ratio < PREFILL_SCALING and r_ttft.low >= OVERHEAD_RATIO:
        ttft_claim = "fixed_overhead"
        lines.append(f"TTFT grew ×{ttft_ratio:.1f} (×{r_ttft.low:.1f}–×{r_ttft.high:.1f}) for a "
                     f"×{prompt_ratio:.1f} longer prompt: part of TTFT is fixed overhead that does not grow with "
                     f"the prompt{_where(lo, t_lo)}{wide}")
    elif r_ttft.high / prompt_ratio < PREFILL_SCALING and r_ttft.high < OVERHEAD_RATIO:
        ttft_claim = "flat"
        lines.append(f"TTFT barely grew (×{ttft_ratio:.1f}) for a ×{prompt_ratio:.1f} longer prompt: prefill is not "
                     f"what you wait for (fixed overhead dominates, or a prefix cache served the prompt){wide}")
    else:
        lines.append(f"cannot tell how much of TTFT is prefill: TTFT ×{ttft_ratio:.1f} (×{r_ttft.low:.1f}–"
                     f"×{r_ttft.high:.1f}) for a ×{prompt_ratio:.1f} longer prompt, a range on both sides of the "
                     f"×{PREFILL_SCALING * prompt_ratio:.1f} that would show prefill scaling with it")

    # -- marginal prefill rate: the extra tokens over the extra time removes fixed overhead -----------
    marginal = marginal_ci = None
    if not bad_t and t_lo.known and t_hi.known:
        dt_low, dt_high = t_hi.low - t_lo.high, t_hi.high - t_lo.low
        dt = t_hi.value - t_lo.value
        if dt_low > TTFT_NOISE_REL * min(t_lo.value, t_hi.value) and dt > 0:  # noise is no rate
            marginal = (p_hi - p_lo) / dt
            marginal_ci = [(p_hi - p_lo) / dt_high, (p_hi - p_lo) / dt_low]

    # -- decode: a separate phase? --------------------------------------------------------------------
    bad_d = [(p, iv) for p, k, iv in unstable if k == "decode_tok_s" and not robust(iv)]
    wide_d = [(p, iv) for p, k, iv in unstable if k == "decode_tok_s" and robust(iv)]
    bounded = r_dec is not None and (r_dec.low - 1) * 100 >= -SEPARATE_DECODE_PCT and \
        (r_dec.high - 1) * 100 <= SEPARATE_DECODE_PCT
    separate = bool(ttft_claim == "prefill_scales" and bounded and not bad_d and d_lo is not None
                    and d_hi is not None and d_lo.known and d_hi.known)
    if decode_change is not None and d_lo is not None and d_hi is not None:
        sentence = _decode_sentence(d_lo, d_hi, r_dec, decode_change, bad_d, bounded, separate, ttft_ratio)
        if wide_d and not sentence.startswith("cannot tell"):
            sentence += f" ({_wide_note(wide_d, 'decode rate', _rate_s)})"
        lines.append(sentence)
        if not separate and bounded and not bad_d and d_lo.known and d_hi.known and ttft_claim in ("flat",
                                                                                                  "fixed_overhead"):
            # decode held still, but with a TTFT that does not track the prompt this run has no prefill phase to show
            lines.append("this run does not show the two phases apart: TTFT did not grow as the prompt did")
    return {
        "prompt_ratio": prompt_ratio,
        "ttft_ratio": ttft_ratio,
        "ttft_ratio_ci": I.to_ci(r_ttft),
        "ttft_scaling": scaling,
        "ttft_claim": ttft_claim,
        "decode_change_pct": decode_change,
        "decode_change_pct_ci": None if r_dec is None else [(r_dec.low - 1) * 100, (r_dec.high - 1) * 100],
        "marginal_prefill_tok_s": marginal,
        "marginal_prefill_tok_s_ci": marginal_ci,
        "phases_separate": separate,
        "unstable": [{"prompt_tokens": p, "figure": k, "value": iv.value, "ci": iv.ci, "n": iv.n}
                     for p, k, iv in unstable],
        "text": lines,
    }


def _where(lo: dict[str, Any], t_lo: I.Interval) -> str:
    """Where the fixed overhead sits, said only from the server's own prompt time (llama.cpp
    ``prompt_ms``) against the client's TTFT; nothing when the server reports none."""
    srv = size_interval(lo.get("server") or {}, "ttft_s") if isinstance(lo.get("server"), dict) else None
    if srv is None or not srv.known or not t_lo.tight() or not srv.tight() or t_lo.value <= 0:
        return ""
    share = srv.value / t_lo.value
    if share >= INSIDE_SERVER_SHARE or I.compare(srv, t_lo) == I.CANNOT_TELL:
        return (f" — inside the server: its own prompt time is {100 * min(share, 1.0):.0f}% of the client's TTFT, "
                "so not the network")
    if I.compare(srv, t_lo) == I.HIGHER:
        return (f" — {_ms_s(t_lo.value - srv.value)} of it is outside the server (network, HTTP, queueing): "
                f"its own prompt time is {100 * share:.0f}% of the client's TTFT")
    return ""


def _decode_sentence(d_lo: I.Interval, d_hi: I.Interval, r_dec: I.Interval | None, change: float,
                     bad: list[tuple[int, I.Interval]], bounded: bool, separate: bool, ttft_ratio: float) -> str:
    span = f"{_spread(d_lo, _rate_s)} → {_spread(d_hi, _rate_s)}"
    if not (d_lo.known and d_hi.known) or r_dec is None:
        return f"cannot tell whether decode changed from one request per size ({span})"
    if bad:
        return f"cannot tell whether decode changed: {_unstable_names(bad, 'decode rate', _rate_s)}"
    c_lo, c_hi = (r_dec.low - 1) * 100, (r_dec.high - 1) * 100
    side = I.compare(d_lo, d_hi)
    if side == I.CANNOT_TELL:
        if bounded:
            moved = ("decode rate did not change (within 1%)" if round(change) == 0
                     else f"decode rate did not change beyond the repeats' spread ({change:+.0f}%)")
            return (f"{moved}: decode is a separate phase, independent of prompt length" if separate
                    else f"{moved}: decode is independent of prompt length")
        return (f"cannot tell whether decode changed: {span}, a change anywhere from {c_lo:+.0f}% to {c_hi:+.0f}%")
    if side == I.LOWER:
        if bounded:
            return (f"decode rate fell {-change:.0f}% while TTFT grew ×{ttft_ratio:.1f}: decode is a separate phase; "
                    "only the longer KV cache it reads each step slows it a little" if separate
                    else f"decode rate fell {-change:.0f}%: only the longer KV cache it reads each step slows it a "
                    "little")
        if c_hi < -SEPARATE_DECODE_PCT:
            return (f"decode rate fell {-change:.0f}% with the longer context: attention/KV reads are a visible part "
                    "of each step")
        return (f"decode rate fell {-change:.0f}% ({-c_hi:.0f}–{-c_lo:.0f}%) with the longer context: the KV "
                "cache it reads each step slows it")
    if bounded:
        return (f"decode rate rose {change:.0f}%: decode is a separate phase; a longer prompt cannot speed it up, so "
                "the difference is noise (drift between the rounds)" if separate
                else f"decode rate rose {change:.0f}%: a longer prompt cannot speed decode up, so the difference is "
                "noise (drift between the rounds)")
    return (f"decode rate rose {change:.0f}% with the longer prompt: drift or contention between the rounds, not the "
            "prompt; rerun on a quiet machine")


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


def unstable_warnings(sizes: list[dict[str, Any]], *, auto: bool, max_repeat: int) -> list[Any]:
    """One ``unstable`` warning per figure of :data:`STOP_FIGURES` whose repeats still disagree (its 95 %
    interval of the median wider than ±10 %), naming the size, the figure and its spread."""
    from phasescope.measure.warnings import warn

    out = []
    for s in sizes:
        p = s.get("prompt_tokens") or s.get("prompt_tokens_target")
        for key in STOP_FIGURES:
            iv = size_interval(s, key)
            if iv is None or not iv.known or iv.tight():
                continue
            fmt = _ms_s if key.endswith("_s") and not key.endswith("tok_s") else _rate_s
            out.append(warn(
                "unstable", "auto" if auto else "fixed",
                {"prompt_tokens": p, "figure": key, "value": iv.value, "ci": iv.ci, "n": iv.n, "min": iv.min,
                 "max": iv.max, "spread": iv.spread, "rel_halfwidth": iv.rel_halfwidth},
                prompt_tokens=p, figure=FIGURE_WORDS[key], n=iv.n, max_repeat=max_repeat, spread=_spread(iv, fmt),
                low=fmt(iv.low), high=fmt(iv.high), pct=100 * iv.rel_halfwidth,
                rests=("a sentence rests on it only where its whole interval (distribution-free, from "
                       f"{iv.n} runs) supports the claim" if robust(iv) else "no sentence rests on it")))
    return out


def probe_warnings(result: dict[str, Any], run: Any, host: dict[str, Any] | None,
                   earlier: Any = None) -> list[dict[str, Any]]:
    """The probe's self-checks, as ``--json`` ``warnings`` (dicts): host contention, prompt lengths
    the server counted differently, figures whose repeats still disagree (``unstable``), too few repeats
    for a spread, and a cold first request."""
    from phasescope.measure.host import judge
    from phasescope.measure.warnings import to_json, warn

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
        out.append(warn("token_count_mismatch", "prompt_lengths", {"by_size": {str(k): v for k, v in diffs.items()}},
                        by_size=shown))
    out += unstable_warnings(result.get("sizes") or [], auto=bool(getattr(run.plan, "auto", False)),
                             max_repeat=int(run.plan.repeat))
    if not getattr(run.plan, "auto", False) and run.plan.repeat < 3:
        out.append(warn("too_few_samples", "repeat", {"repeat": run.plan.repeat}, repeat=run.plan.repeat))
    if not run.plan.warmup and run.records:
        first = run.records[0]
        same = [D.ttft_s(r) for r in run.records[1:] if (r.tags or {}).get("prompt_tokens_target")
                == (first.tags or {}).get("prompt_tokens_target")]
        others = _med(same)
        t0 = D.ttft_s(first)
        if t0 is not None and others and t0 > 3 * others and t0 - others > 0.05:
            out.append(warn("cold_start", "first_request", {"first_ttft_ms": t0 * 1000, "median_others_ms": others * 1000},
                            first_ms=t0 * 1000, times=t0 / others))
    return to_json(out)
