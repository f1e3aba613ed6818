"""Summarize a load run: the metrics of ``vllm bench serve`` with the same names and meanings, plus
the numbers it lacks (per-event gaps apart from per-token ITL, client queue time, achieved rate,
errors by kind, token-count sources).

One job: records in, one summary dict out, with every definition documented here beside its code.

Definitions (vLLM: ``vllm/benchmarks/serve.py:calculate_metrics``; per-record math in
:mod:`phasescope.measure.derive`):

* ``duration`` (s) — t0 (first dispatch) → last completion. Multi-process runs measure it on the
  wall clock: each record's end is ``wall_start_ns + (end − t_start)`` (a duration on one process's
  monotonic clock, placed on the shared wall clock).
* ``completed`` / ``failed`` — successful / failed requests (warm-ups excluded);
  ``errors_by_kind`` counts failures by ``error_kind``.
* ``request_throughput`` = completed / duration; ``output_throughput`` = Σ output tokens / duration;
  ``total_token_throughput`` = (Σ input + Σ output tokens) / duration (successful requests only).
* ``ttft`` — request start → first token-carrying event (role-only deltas are not tokens).
* ``ttfo`` — request start → first *answer* token (time to first output token: reasoning events
  are not answer); equal to ``ttft`` for a request without reasoning, so every run has the keys
  ``{stat}_ttfo_ms``; a request that never left its reasoning has no TTFO sample.
* ``reasoning_tokens`` / ``answer_tokens`` — Σ over successful requests of the output split
  (:func:`phasescope.measure.derive.reasoning_tokens`; 0 reasoning tokens without reasoning);
  ``median_reasoning_tok_s`` / ``median_answer_tok_s`` — median per-request decode rate inside
  each phase (None when no request had two tokens of that kind).
* ``tpot`` — (E2EL − TTFT) / (output tokens − 1), only for requests with > 1 token ("excl. 1st token").
* ``itl`` — **per token**: an event carrying k tokens after a gap g contributes k samples of g/k.
  vLLM's ``itl`` is per SSE event; with one token per event the two are identical. The per-event
  numbers are reported as ``event_gap`` so multi-token events (speculative decoding,
  ``--stream-interval``, packet coalescing) cannot be mistaken for slow tokens.
* ``e2el`` — request start → last token-carrying event.
* ``client_queue_time`` — scheduled send time → a concurrency slot was free (the ``--max-concurrency``
  cap); ``e2el_including_client_queue`` = client queue + e2el (vLLM names) (what the user behind the cap waited).
* statistics: ``mean``, ``median``, ``std`` (population), ``pXX`` (numpy linear interpolation),
  all in ms, as vLLM (``np.percentile``), computed by :mod:`phasescope.measure.aggregate` — the
  median is ``percentile(·, 50)`` there, so ``median_ttft_ms`` is 1000 × the TTFT ``show`` prints
  for the same records. Key pattern ``{stat}_{metric}_ms``.
* ``request_goodput`` — requests meeting **every** given SLO (``ttft``, ``ttfo``, ``tpot``, ``e2el`` in ms;
  a 1-token request's TPOT counts as 0, as in vLLM) ÷ duration.
* ``max_concurrent_requests`` — exact sweep-line maximum of in-flight requests;
  ``max_output_tokens_per_s`` — most output **tokens** (not events) in any 1-s bucket after t0.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np


from phasescope.errors import InputError
from phasescope.measure import aggregate, derive
from phasescope.measure.derive import client_output_count, end_ns, input_tokens_sourced, output_tokens_sourced
from phasescope.measure.records import RequestRecord
from phasescope.measure.warnings import MeasurementWarning, warn

DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
GOODPUT_METRICS = ("ttft", "ttfo", "tpot", "e2el")
METRICS = ("ttft", "ttfo", "tpot", "itl", "event_gap", "e2el", "client_queue_time", "e2el_including_client_queue")


def parse_percentiles(text: str | Sequence[float] | None) -> tuple[float, ...]:
    """``"50,90,99"`` → (50.0, 90.0, 99.0); each in (0, 100]."""
    if text is None:
        return DEFAULT_PERCENTILES
    if isinstance(text, str):
        parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
        try:
            vals = tuple(float(p) for p in parts)
        except ValueError:
            raise InputError(f"--percentiles takes numbers like 50,90,99 (got {text!r})") from None
    else:
        vals = tuple(float(p) for p in text)
    if not vals or any(not 0 < p <= 100 for p in vals):
        raise InputError("--percentiles values must be in (0, 100]")
    return vals


def parse_ms_pairs(
    specs: Iterable[str] | str | None, *, allowed: Sequence[str], usage: str, aliases: dict[str, str] | None = None
) -> dict[str, float]:
    """``"ttft:500 itl:50"``, ``"ttft:500,itl:50"`` or a list of such → ``{"ttft": 500.0, "itl": 50.0}``
    (milliseconds, each > 0). The one parser behind ``--goodput`` and every ``--slo``; ``usage`` is the
    sentence a bad value is reported with."""
    if not specs:
        return {}
    if isinstance(specs, str):
        specs = [specs]
    out: dict[str, float] = {}
    for s in specs:
        for part in str(s).replace(",", " ").split():
            key, sep, val = part.partition(":")
            key = key.strip().lower()
            key = (aliases or {}).get(key, key)
            if not sep or key not in allowed:
                raise InputError(f"{usage} (got {part!r})")
            try:
                ms = float(val)
            except ValueError:
                raise InputError(f"{usage}: the value for {key} must be milliseconds (got {val!r})") from None
            if not ms > 0:
                raise InputError(f"{usage}: the value for {key} must be positive (got {val!r})")
            out[key] = ms
    return out


def parse_goodput(specs: Iterable[str] | str | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` (or one space-separated string) → {"ttft": 500.0, ...} in ms.
    Same syntax as ``vllm bench serve --goodput``, plus ``ttfo`` (time to the first answer token)."""
    return parse_ms_pairs(specs, allowed=GOODPUT_METRICS, usage="--goodput takes ttft:MS ttfo:MS tpot:MS e2el:MS")


def _pword(p: float) -> str:
    """vLLM's key form: 99 → "99", 99.9 → "99.9"."""
    return str(int(p)) if float(p).is_integer() else str(p)


def stat_block(name: str, values_s: Sequence[float], percentiles: Sequence[float]) -> dict[str, float | None]:
    """``{mean,median,std,pXX}_{name}_ms`` from seconds (:func:`phasescope.measure.aggregate.distribution`
    × 1000: the median in ms is exactly 1000 × the median ``show`` and ``probe`` print in seconds).
    Empty → None (vLLM would print 0)."""
    d = aggregate.distribution(values_s, percentiles, scale=1000.0)
    out: dict[str, float | None] = {f"{k}_{name}_ms": d[k] for k in ("mean", "median", "std")}
    for p in percentiles:
        out[f"p{_pword(p)}_{name}_ms"] = d[f"p{_pword(p)}"]
    return out


def max_concurrency_sweep(intervals: Sequence[tuple[float, float]]) -> int:
    """Exact maximum overlap of [start, end) intervals (ends sort before starts at equal times)."""
    ev: list[tuple[float, int]] = []
    for a, b in intervals:
        ev.append((a, 1))
        ev.append((b, -1))
    ev.sort(key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def _same_clock(records: Sequence[RequestRecord]) -> bool:
    return len({r.worker for r in records}) <= 1


def summarize(
    records: Sequence[RequestRecord],
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: dict[str, float] | None = None,
    t0_ns: int | None = None,
    duration_s: float | None = None,
    requested_rate: float | None = None,
    count_tolerance: float = 0.05,
) -> dict[str, Any]:
    """The summary dict (flat vLLM-style keys plus phasescope extras; see module docstring).

    Warm-up records are dropped (:func:`phasescope.measure.aggregate.is_measured`). ``t0_ns`` (same clock as the records) marks
    the benchmark start; default: the earliest scheduled/start time. ``duration_s`` overrides the
    computed duration (used when the caller knows it better).
    """
    recs = aggregate.measured(records)
    ok = [r for r in recs if r.ok]
    bad = [r for r in recs if not r.ok]
    pct = tuple(percentiles)

    # --- duration on one clock -------------------------------------------------------------
    if recs and duration_s is None:
        if _same_clock(recs):
            start = t0_ns if t0_ns is not None else min(
                min(r.t_scheduled_ns for r in recs if r.t_scheduled_ns is not None) if any(
                    r.t_scheduled_ns is not None for r in recs) else min(r.t_start_ns for r in recs),
                min(r.t_start_ns for r in recs))
            end = max(end_ns(r) for r in recs)
            duration_s = max(0.0, (end - start) / 1e9)
        else:
            starts = [r.wall_start_ns - (r.t_start_ns - (r.t_scheduled_ns or r.t_start_ns)) for r in recs]
            ends = [r.wall_start_ns + (end_ns(r) - r.t_start_ns) for r in recs]
            duration_s = max(0.0, (max(ends) - min(starts)) / 1e9)
    dur = duration_s or 0.0

    # --- per-request metrics ---------------------------------------------------------------
    ttfts: list[float] = []
    ttfos: list[float] = []
    reasoning_total = 0
    answer_total = 0
    reasoning_rates: list[float] = []
    answer_rates: list[float] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    gaps: list[float] = []
    e2els: list[float] = []
    e2el_q: list[float] = []
    queues: list[float] = []
    in_tok_total = 0
    out_tok_total = 0
    in_sources: Counter[str] = Counter()
    out_sources: Counter[str] = Counter()
    out_mismatch = 0
    out_compared = 0
    in_mismatch = 0
    in_compared = 0
    in_diffs: list[int] = []
    for r in ok:
        n_out, src_out = output_tokens_sourced(r)
        n_in, src_in = input_tokens_sourced(r)
        out_sources[src_out] += 1
        in_sources[src_in] += 1
        out_tok_total += n_out
        in_tok_total += n_in or 0
        cc = client_output_count(r)
        if src_out in ("usage", "server") and cc is not None and r.stream:
            out_compared += 1
            if abs(cc - n_out) > max(1, count_tolerance * n_out):
                out_mismatch += 1
        if (r.prompt_tokens is not None and r.prompt_tokens_requested is not None
                and r.prompt_tokens_source in ("usage", "server")):
            in_compared += 1
            # a prompt sent as token ids has an exact length: any difference is a mismatch;
            # a text prompt's length was calibrated, so a few percent is within what was promised
            exact = (r.tags or {}).get("prompt_source") in ("tokenize", "tokenizer")
            tol = 0 if exact else max(1, count_tolerance * r.prompt_tokens_requested)
            d_in = r.prompt_tokens - r.prompt_tokens_requested
            if abs(d_in) > tol:
                in_mismatch += 1
                in_diffs.append(d_in)
        t = derive.ttft_s(r)
        e = derive.e2e_s(r)
        if t is not None:
            ttfts.append(t)
        to = derive.ttfo_s(r)
        if to is not None:
            ttfos.append(to)
        n_r = derive.reasoning_tokens(r)
        reasoning_total += n_r
        answer_total += max(0, n_out - n_r)
        for rates, v in ((reasoning_rates, derive.reasoning_tok_s(r)), (answer_rates, derive.answer_tok_s(r))):
            if v is not None:
                rates.append(v)
        if e is not None:
            e2els.append(e)
            q = derive.client_queue_s(r)
            if q is not None:
                queues.append(q)
                e2el_q.append(e + q)
        tp = derive.tpot_s(r)
        if tp is not None:
            tpots.append(tp)
        all_tpots.append(tp if tp is not None else 0.0)  # vLLM: a 1-token request's TPOT is 0 for goodput
        itls.extend(derive.itl_s(r))
        gaps.extend(derive.event_gaps_s(r))

    out: dict[str, Any] = {
        "duration": dur,
        "completed": len(ok),
        "failed": len(bad),
        "num_requests": len(recs),
        "errors_by_kind": dict(Counter(r.error_kind or "unknown" for r in bad)),
        "total_input_tokens": in_tok_total,
        "total_output_tokens": out_tok_total,
        "reasoning_tokens": reasoning_total,
        "answer_tokens": answer_total,
        "median_reasoning_tok_s": aggregate.median(reasoning_rates),
        "median_answer_tok_s": aggregate.median(answer_rates),
        "request_throughput": len(ok) / dur if dur > 0 else None,
        "output_throughput": out_tok_total / dur if dur > 0 else None,
        "total_token_throughput": (in_tok_total + out_tok_total) / dur if dur > 0 else None,
    }
    # goodput (vLLM: SLO in ms, request good when every metric ≤ its SLO)
    if goodput:
        good = 0
        for r, t, tp, e in _goodput_rows(ok, all_tpots):
            vals = {"ttft": t, "ttfo": derive.ttfo_s(r), "tpot": tp, "e2el": e}
            if all(vals[k] is not None and vals[k] * 1000.0 <= slo for k, slo in goodput.items()):
                good += 1
        out["request_goodput"] = good / dur if dur > 0 else None
        out["goodput_completed"] = good
        out["goodput_slo_ms"] = dict(goodput)
    else:
        out["request_goodput"] = None

    for name, vals in (("ttft", ttfts), ("ttfo", ttfos), ("tpot", tpots), ("itl", itls), ("event_gap", gaps), ("e2el", e2els),
                       ("client_queue_time", queues), ("e2el_including_client_queue", e2el_q)):
        out.update(stat_block(name, vals, pct))

    # peaks (exact; tokens not events)
    same = _same_clock(recs)
    if recs:
        if same:
            base = t0_ns if t0_ns is not None else min(r.t_start_ns for r in recs)
            iv = [((r.t_start_ns - base) / 1e9, (end_ns(r) - base) / 1e9) for r in recs]
        else:
            wbase = min(r.wall_start_ns for r in recs)
            iv = [((r.wall_start_ns - wbase) / 1e9, (r.wall_start_ns + end_ns(r) - r.t_start_ns - wbase) / 1e9)
                  for r in recs]
        out["max_concurrent_requests"] = max_concurrency_sweep(iv)
        out["max_output_tokens_per_s"] = _peak_tokens_per_s(ok, t0_ns if same else None, same)
    else:
        out["max_concurrent_requests"] = 0
        out["max_output_tokens_per_s"] = None

    # achieved vs requested send rate
    starts = sorted((r.t_start_ns if same else r.wall_start_ns) for r in recs)
    achieved = (len(starts) - 1) / ((starts[-1] - starts[0]) / 1e9) if len(starts) > 1 and starts[-1] > starts[0] else None
    out["requested_rate"] = requested_rate if requested_rate is None or math.isfinite(requested_rate) else None
    out["achieved_rate"] = achieved

    out["token_count_source"] = {"output": dict(out_sources), "input": dict(in_sources)}
    warnings: list[MeasurementWarning] = []
    if out_compared and out_mismatch:
        warnings.append(warn("token_count_mismatch", "output_counts",
                             {"which": "output", "mismatched": out_mismatch, "compared": out_compared},
                             mismatched=out_mismatch, compared=out_compared))
    if in_compared and in_mismatch:
        diffs = sorted(set(in_diffs))
        shown = ", ".join(f"{d:+d}" for d in diffs[:5]) + (" …" if len(diffs) > 5 else "")
        warnings.append(warn("token_count_mismatch", "prompt_counts",
                             {"which": "prompt", "mismatched": in_mismatch, "compared": in_compared,
                              "differences": diffs[:20]},
                             mismatched=in_mismatch, compared=in_compared, differences=shown))
    if "events" in out_sources and len(out_sources) == 1 and ok:
        warnings.append(warn("no_server_counts", "events", {"requests": len(ok)}))
    untrusted = [r for r in recs if isinstance(r.tags, dict) and r.tags.get("untrusted_counts")]
    if untrusted:  # issue 31: a negative usage count is dropped where it is read (measure.derive)
        example = untrusted[0].tags["untrusted_counts"]
        warnings.append(warn("token_count_mismatch", "negative",
                             {"which": "negative", "requests": len(untrusted), "example": example},
                             n=len(untrusted), total=len(recs), example=example))
    out["count_warnings"] = [w.to_dict() for w in warnings]
    out["percentiles"] = list(pct)
    return out


def _goodput_rows(ok: Sequence[RequestRecord], all_tpots: Sequence[float]) -> Iterable[tuple[RequestRecord, float | None, float | None, float | None]]:
    for r, tp in zip(ok, all_tpots):
        yield r, derive.ttft_s(r), tp, derive.e2e_s(r)


def _peak_tokens_per_s(ok: Sequence[RequestRecord], t0_ns: int | None, same_clock: bool) -> float | None:
    """Most output tokens in any 1-s bucket. Per-event counts when known; else the request's total
    output spread evenly over its token events."""
    if not ok:
        return None
    buckets: Counter[int] = Counter()
    base = t0_ns if t0_ns is not None else min(r.t_start_ns for r in ok) if same_clock else None
    wbase = min(r.wall_start_ns for r in ok) if not same_clock else 0
    for r in ok:
        for t_ns, n in derive.token_event_counts(r):
            if same_clock:
                sec = int((t_ns - (base or 0)) // 1_000_000_000)
            else:
                sec = int((r.wall_start_ns + t_ns - r.t_start_ns - wbase) // 1_000_000_000)
            buckets[sec] += n  # type: ignore[assignment]
    return float(max(buckets.values())) if buckets else None


# --- the steady-state window (bench --steady-state) ------------------------------------------------
#: the rule, as the JSON and the docs state it
STEADY_RULE = ("from the moment the requests in flight first reach the target concurrency (ramp-up over) "
               "to the start of the last request (the drain begins: in flight only falls from there); a request "
               "counts when it started after the ramp-up ended and finished by the time the drain began")


def _span_ns(r: RequestRecord, wall: bool) -> tuple[int, int]:
    """(start, end) of a request on one clock: its process's monotonic clock, or the wall clock
    (``wall_start_ns`` + elapsed) when the run had several worker processes."""
    if not wall:
        return r.t_start_ns, end_ns(r)
    return r.wall_start_ns, r.wall_start_ns + (end_ns(r) - r.t_start_ns)


def steady_window(records: Sequence[RequestRecord], *, target_concurrency: int | None = None) -> dict[str, Any]:
    """The steady-state window of a load run (:data:`STEADY_RULE`), from its records alone.

    The target concurrency is ``target_concurrency`` (``--max-concurrency``) when given, capped by the
    most requests ever in flight (fewer requests than the cap never reach it); without a cap (an
    open-loop arrival rate) it is the median, over the requests, of how many were in flight when each
    started (the load the run settled at). Returns the window (``start_s``/``end_s`` after the first
    request's start, ``duration_s``), the counts it excludes (``excluded_ramp``: started during the
    ramp-up; ``excluded_drain``: still running when the drain began) and ``ids`` of the requests inside;
    ``empty`` is True when no request lies wholly inside (then ``reason`` says why).
    """
    recs = aggregate.measured(records)
    wall = not _same_clock(recs)
    spans = [(_span_ns(r, wall), r) for r in recs]
    out: dict[str, Any] = {"rule": STEADY_RULE, "clock": "wall" if wall else "monotonic", "requests_total": len(recs)}
    if len(recs) < 2:
        out.update(empty=True, reason="fewer than two measured requests", ids=[], target_concurrency=None,
                   start_s=None, end_s=None, duration_s=None, excluded_ramp=len(recs), excluded_drain=0)
        return out
    base = min(s for (s, _), _ in spans)
    ev: list[tuple[int, int]] = []
    for (s, e), _ in spans:
        ev.append((s, 1))
        ev.append((e, -1))
    ev.sort(key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    peak = cur = 0
    at_start: list[int] = []
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
        if d == 1:
            at_start.append(cur)
    if target_concurrency:
        target = min(int(target_concurrency), peak)
        how = "--max-concurrency" + (f" {target_concurrency}, capped by the peak in flight {peak}"
                                     if peak < target_concurrency else "")
    else:
        target = max(1, int(math.ceil(float(np.median(at_start)))))
        how = "the median number in flight when each request started (no --max-concurrency)"
    cur = 0
    t_ramp: int | None = None
    for t, d in ev:
        cur += d
        if d == 1 and cur >= target:
            t_ramp = t
            break
    t_drain = max(s for (s, _), _ in spans)
    assert t_ramp is not None
    inside = [r for (s, e), r in spans if s > t_ramp and e <= t_drain]
    ramp = sum(1 for (s, _), _ in spans if s <= t_ramp)
    drain = sum(1 for (s, e), _ in spans if s > t_ramp and e > t_drain)
    out.update(target_concurrency=target, target_from=how, peak_concurrency=peak,
               start_s=(t_ramp - base) / 1e9, end_s=(t_drain - base) / 1e9,
               duration_s=max(0.0, (t_drain - t_ramp) / 1e9), requests_in_window=len(inside),
               excluded_ramp=ramp, excluded_drain=drain, ids=[r.id for r in inside], empty=not inside,
               start_ns=t_ramp, end_ns=t_drain)
    if not inside:
        out["reason"] = (f"no request both started after the ramp-up ({out['start_s']:.3f} s) and finished before the "
                         f"drain ({out['end_s']:.3f} s): send more requests than the concurrency "
                         f"({target}) several times over")
    return out


def steady_summary(records: Sequence[RequestRecord], window: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """:func:`summarize` over the requests inside ``window`` (:func:`steady_window`), with the rates
    taken over the window itself: output tokens streamed inside it (by any request), requests that
    finished inside it, and prompt tokens of requests whose first token came inside it, each ÷ its
    length. Per-request latencies (TTFT, TPOT, ITL, E2EL) are those of the requests wholly inside."""
    keep = set(window.get("ids") or [])
    inside = [r for r in records if r.id in keep]
    out = summarize(inside, duration_s=window.get("duration_s") or None, **kw)
    dur = window.get("duration_s") or 0.0
    if dur <= 0:
        return out
    wall = window.get("clock") == "wall"
    lo, hi = window["start_ns"], window["end_ns"]

    def on_clock(r: RequestRecord, t: int) -> int:
        return r.wall_start_ns + (t - r.t_start_ns) if wall else t

    out_tok = 0.0
    done = 0
    prompt_tok = 0
    for r in aggregate.measured(records):
        if not r.ok:
            continue
        if lo <= on_clock(r, end_ns(r)) <= hi:
            done += 1
        counts = derive.token_event_counts(r)
        for t_ns, n in counts:
            if lo <= on_clock(r, t_ns) <= hi:
                out_tok += n
        if counts and lo <= on_clock(r, counts[0][0]) <= hi:
            prompt_tok += input_tokens_sourced(r)[0] or 0
    out["request_throughput"] = done / dur
    out["output_throughput"] = out_tok / dur
    out["total_token_throughput"] = (out_tok + prompt_tok) / dur
    return out
