"""The ``conversation`` experiment's rule (issue 17): is a chat's history paid again every turn, how
much does decode slow as it grows, and when do sessions fill the KV pool? Kept apart from
:mod:`phasescope.diagnose.rules` (the single-request experiments' rules) because it reads one
experiment's per-turn table and has its own thresholds; :data:`phasescope.diagnose.rules.RULES`
runs it with the others."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phasescope.diagnose.claims import LOWER, differ, overlap_reason, rate_fmt, stored
from phasescope.diagnose.findings import Diagnosis, Evidence, Finding, Undecided
from phasescope.diagnose.knobs import advice_for
from phasescope.diagnose.thresholds import (
    CONVERSATION_DECODE_MIN_PCT,
    LONG_CONTEXT_PROBLEM_PCT,
)

if TYPE_CHECKING:
    from phasescope.diagnose.rules import Ceilings


def _ms(x: float) -> float:
    return x * 1e3


def _decode_iv(t: Any) -> Any:
    rng = getattr(t, "decode_tok_s_range", None)
    return stored(t.decode_tok_s, getattr(t, "decode_tok_s_ci", None), t.n, rng)


def _slope_excludes_zero(cv: Any) -> bool:
    ci = getattr(cv, "ttft_slope_s_per_token_ci", None)
    return bool(ci) and ci[0] is not None and ci[0] > 0


def rule_conversation(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    """Experiment ``conversation`` (issue 17): is the history of a chat paid again every turn, and how
    much does decode slow as it grows?"""
    cv = r.get("conversation")
    if cv is None:
        return
    turns = cv.turns
    src = f"conversation: client TTFT over {len(turns)} turns × {max((t.n for t in turns), default=0)} sessions"
    if len(turns) >= 2:
        first, last = turns[0], turns[-1]
        ev = [
            Evidence(f"TTFT at turn 1 ({first.prompt_tokens or 0:.0f} prompt tokens)", first.ttft_s, "s", src),
            Evidence(f"TTFT at turn {last.turn} ({last.prompt_tokens or 0:.0f} prompt tokens)", last.ttft_s, "s", src),
        ]
        if cv.slope_share is not None:
            ev.append(Evidence("TTFT growth as a share of re-prefilling the history", 100 * cv.slope_share, "%",
                               "conversation: fit of TTFT against prompt tokens / calibrated prefill rate"))
        if last.cached_tokens is not None:
            ev.append(Evidence(f"cached prompt tokens at turn {last.turn}", last.cached_tokens, "tokens",
                               "server responses (usage.cached_tokens / timings.cache_n)"))
    else:
        ev = []
    if cv.history_cached is None:
        diag.undecided.append(Undecided("conversation", cv.reason or "the conversation's cache use could not be decided"))
    elif cv.history_cached is False and cv.evicted_at_turn is None and not _slope_excludes_zero(cv):
        # "every turn prefills the history again" rests on a fit slope: claimed only when its interval excludes 0
        ci = getattr(cv, "ttft_slope_s_per_token_ci", None)
        spread = (f"{ci[0] * 1e6:.0f}–{ci[1] * 1e6:.0f} µs per token over {getattr(cv, 'ttft_slope_n', 0)} "
                  f"(prompt, TTFT) points"
                  if ci else "no interval")
        diag.undecided.append(Undecided(
            "conversation", f"cannot tell whether each turn prefills the history again: TTFT grew "
                            f"{(cv.ttft_slope_s_per_token or 0) * 1e6:.0f} µs per prompt token ({spread}), an interval "
                            f"that does not exclude 0 (no growth) — the turns' TTFTs are noisier than the effect"))
    elif cv.history_cached is False or cv.evicted_at_turn is not None:
        why = (f"the history is cached for the first turns but not at turn {cv.evicted_at_turn}: it outgrew what the "
               "server keeps" if cv.history_cached and cv.evicted_at_turn is not None else
               "each turn prefills the whole history again")
        diag.findings.append(Finding(
            "conversation-history-recomputed", "problem",
            f"Chat turns get slower as the conversation grows: {why} (TTFT {(turns[0].ttft_s or 0) * 1e3:.0f} ms at "
            f"turn 1 → {(turns[-1].ttft_s or 0) * 1e3:.0f} ms at turn {turns[-1].turn}).",
            ev, advice_for("conversation_cache", diag.engine)))
    else:
        diag.findings.append(Finding(
            "conversation-cache-working", "info",
            f"Resent chat history is served from the prefix cache: TTFT stays near turn 1's "
            f"({(turns[0].ttft_s or 0) * 1e3:.0f} → {(turns[-1].ttft_s or 0) * 1e3:.0f} ms) while the prompt grows "
            f"{turns[0].prompt_tokens or 0:.0f} → {turns[-1].prompt_tokens or 0:.0f} tokens.", ev))
    slow = cv.decode_slowdown_pct
    if slow is not None and slow >= CONVERSATION_DECODE_MIN_PCT and len(turns) >= 2:
        a, b = _decode_iv(turns[0]), _decode_iv(turns[-1])
        if differ(a, b) != LOWER:  # a slowdown the sessions' intervals do not support
            diag.undecided.append(Undecided("conversation-decode-slowdown", overlap_reason(
                "decode slows as the history grows", "decode at turn 1", a, f"decode at turn {turns[-1].turn}", b, rate_fmt)))
            slow = None
    if slow is not None and slow >= CONVERSATION_DECODE_MIN_PCT and len(turns) >= 2:
        first, last = turns[0], turns[-1]
        dev = [Evidence("decode rate at turn 1", first.decode_tok_s, "tok/s", src),
               Evidence(f"decode rate at turn {last.turn}", last.decode_tok_s, "tok/s", src),
               Evidence("decode slowdown over the conversation", slow, "%", src)]
        pred = ""
        if cv.predicted_slowdown_pct is not None:
            dev.append(Evidence("slowdown the bandwidth model predicts", cv.predicted_slowdown_pct, "%",
                                "theory: (weights + KV·context) bytes per step"))
            pred = f"; the bandwidth model predicts {cv.predicted_slowdown_pct:.0f} %"
        diag.findings.append(Finding(
            "conversation-decode-slowdown", "problem" if slow >= LONG_CONTEXT_PROBLEM_PCT else "info",
            f"Decode slows as the history grows: {first.decode_tok_s:.1f} → {last.decode_tok_s:.1f} tok/s "
            f"({slow:.0f} % slower at {last.prompt_tokens or 0:.0f} tokens of history{pred}).",
            dev, advice_for("long_context", diag.engine)))


    if cv.fill_queue_turn is not None:
        fev = [Evidence("concurrent sessions", cv.fill_sessions, "", "conversation: fill phase"),
               Evidence("first turn at which requests waited", cv.fill_queue_turn, "", "/metrics waiting requests"),
               Evidence("waiting requests (max)", cv.fill_waiting_max, "", "/metrics")]
        if cv.fill_history_tokens is not None:
            fev.append(Evidence("history in the KV pool at that turn (all sessions)", cv.fill_history_tokens, "tokens",
                                "server prompt counts"))
        if cv.fill_kv_usage_max is not None:
            fev.append(Evidence("KV-cache usage peak", 100 * cv.fill_kv_usage_max, "%", "/metrics"))
        diag.findings.append(Finding(
            "conversation-sessions-fill-kv", "problem",
            f"Long chat sessions fill the KV pool: with only {cv.fill_sessions} sessions in flight, requests began to "
            f"wait at turn {cv.fill_queue_turn}"
            + (f", when the sessions held {cv.fill_history_tokens:.0f} tokens of history" if cv.fill_history_tokens else "")
            + ".", fev, advice_for("kv_pool_full", diag.engine)))
