"""What a conversation run measured (issue 17): per turn (``turns`` in ``bench --json``), per session
(``conversation``), and how much of the prompt the workload lets a prefix cache serve.

Every aggregate goes through :mod:`phasescope.measure.aggregate` (one warm-up rule, one median), per
request through :mod:`phasescope.measure.derive`; the sessions themselves are
:mod:`phasescope.load.conversation`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from phasescope.measure import derive
from phasescope.measure.aggregate import cached_share, measured, median, percentile
from phasescope.measure.records import RequestRecord

if TYPE_CHECKING:
    from phasescope.load.conversation import ConversationSpec


def _measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The measured turns: :func:`phasescope.measure.aggregate.measured` (the one warm-up rule), with a turn index."""
    return [r for r in measured(records) if isinstance((r.tags or {}).get("turn"), int)]


def turn_rows(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """``turns`` of ``bench --json``: per turn index, over the successful turns of every session —
    ``n``, ``prompt_tokens_mean`` (as the server counted them), ``cached_tokens_mean`` (from the
    server's counters; None where it reports none, e.g. Ollama), ``median_ttft_ms``, ``p99_ttft_ms``,
    ``median_itl_ms`` and ``decode_tok_s`` (median of the per-request decode rates)."""
    by: dict[int, list[RequestRecord]] = {}
    for r in _measured(records):
        if r.ok:
            by.setdefault(int(r.tags["turn"]), []).append(r)
    rows = []
    for turn in sorted(by):
        rs = by[turn]
        pts = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        cs = [c for c in (derive.cached_prompt_tokens(r) for r in rs) if c is not None]
        ttft = [t * 1000 for t in (derive.ttft_s(r) for r in rs) if t is not None]
        itl = [x * 1000 for r in rs for x in derive.itl_s(r)]
        dec = [d for d in (derive.decode_tok_s(r) for r in rs) if d is not None]
        outs = [r.output_tokens for r in rs if r.output_tokens is not None]
        rows.append({
            "turn": turn, "n": len(rs),
            "prompt_tokens_mean": sum(pts) / len(pts) if pts else None,
            "cached_tokens_mean": sum(cs) / len(cs) if cs else None,
            "median_ttft_ms": median(ttft), "p99_ttft_ms": percentile(ttft, 99),
            "median_itl_ms": median(itl), "decode_tok_s": median(dec),
            "output_tokens_mean": sum(outs) / len(outs) if outs else None,
        })
    return rows


def expected_cache_share(records: Sequence[RequestRecord]) -> float | None:
    """The share of prompt tokens a perfect prefix cache serves in these sessions: each turn after
    the first can reuse the previous turn's whole prompt (the history it resends), and a first turn
    the system prompt when an earlier turn sent the same one (shared, or the same user's); implied
    hits over all prompt tokens, from the server's own counts."""
    by: dict[str, dict[int, int]] = {}
    firsts: list[tuple[int, str, int, int]] = []  # (send instant, system key, system tokens, prompt)
    starts: dict[str, int] = {}  # system key → the earliest send of any turn with it
    for r in _measured(records):
        if r.ok and r.prompt_tokens:
            by.setdefault(str(r.tags.get("session")), {})[int(r.tags["turn"])] = int(r.prompt_tokens)
            key = str(r.tags.get("system_key") or "")
            if int(r.tags.get("system_tokens") or 0) > 0:
                starts[key] = min(starts.get(key, r.t_start_ns), r.t_start_ns)
                if r.tags["turn"] == 1:
                    firsts.append((r.t_start_ns, key, int(r.tags["system_tokens"]), int(r.prompt_tokens)))
    total = hit = 0
    for turns in by.values():
        for t, p in turns.items():
            total += p
            if t - 1 in turns:
                hit += min(turns[t - 1], p)
    for t0, key, sys_tokens, p in firsts:
        if starts.get(key, t0) < t0:  # someone sent this system prompt before
            hit += min(sys_tokens, p)
    return hit / total if total else None


def conversation_section(records: Sequence[RequestRecord], spec: ConversationSpec) -> dict[str, Any]:
    """``conversation`` of ``bench --json``: the spec, sessions completed, session time to
    complete (first turn's send → last turn's last byte, think times included), the share of prompt
    tokens the server served from its cache (and where the count came from), the share a perfect
    prefix cache would serve, and each turn's prompt growth over the one before it."""
    meas = _measured(records)
    sessions: dict[str, list[RequestRecord]] = {}
    for r in meas:
        sessions.setdefault(str(r.tags.get("session")), []).append(r)
    times, complete = [], 0
    for rs in sessions.values():
        want = int(rs[0].tags.get("turns") or 0)
        ok = [r for r in rs if r.ok]
        if len(ok) == want and want:
            complete += 1
            ends = [r.t_done_ns for r in ok if r.t_done_ns]
            if ends:
                times.append((max(ends) - min(r.t_start_ns for r in ok)) / 1e9)
    answered = [r for r in meas if r.ok]
    share = cached_share(answered)
    known = [r for r in answered if r.prompt_tokens and derive.cached_prompt_tokens(r) is not None]
    src = None
    if known:
        src = "usage" if any(r.cached_prompt_tokens is not None and (r.server or {}).get("cache_n") is None
                             for r in meas if r.ok) else "timings"
    return {
        **spec.to_dict(),
        "sessions_started": len(sessions),
        "sessions_completed": complete,
        "turns_sent": len(meas),
        "turns_ok": sum(1 for r in meas if r.ok),
        "session_time_s": {"mean": sum(times) / len(times) if times else None, "median": median(times),
                           "p99": percentile(times, 99), "max": max(times) if times else None},
        "cache_share": share,
        "cache_share_source": src,
        "cache_share_known_turns": len(known),
        "expected_cache_share": expected_cache_share(records),
        "prompt_growth": prompt_growth(records),
        "template_tokens_constant_in_session": template_constant_in_sessions(records),
    }


def prompt_growth(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Per turn ≥ 2: how much the prompt grew over the previous turn of the same session, against
    what was appended (previous reply's tokens — as the server's tokenizer counts the resent text
    where it has ``/tokenize``, else as generated — + this turn's new content tokens). The
    difference is the chat template's per-turn tokens — a constant when the history is resent intact."""
    by: dict[str, dict[int, RequestRecord]] = {}
    for r in _measured(records):
        if r.ok:
            by.setdefault(str(r.tags.get("session")), {})[int(r.tags["turn"])] = r
    rows: dict[int, list[tuple[int, int]]] = {}
    for turns in by.values():
        for t, r in turns.items():
            prev = turns.get(t - 1)
            if prev is None or r.prompt_tokens is None or prev.prompt_tokens is None or prev.output_tokens is None:
                continue
            # content_tokens counts the history as sent: previous reply + this turn's new message
            appended = int(r.tags.get("content_tokens", 0)) - int(prev.tags.get("content_tokens", 0))
            rows.setdefault(t, []).append((int(r.prompt_tokens) - int(prev.prompt_tokens), appended))
    out = []
    for t in sorted(rows):
        g = rows[t]
        out.append({"turn": t, "n": len(g), "growth_mean": sum(a for a, _ in g) / len(g),
                    "appended_mean": sum(b for _, b in g) / len(g),
                    "template_tokens": sorted({a - b for a, b in g})})
    return out


def template_constant_in_sessions(records: Sequence[RequestRecord]) -> bool | None:
    """Whether, in every session, each turn's prompt grew by what was appended plus the *same*
    number of template tokens (None: no session with two growth steps). Across sessions the number
    may differ by a token: where a reply meets the template's markers the tokenizer can merge one."""
    by: dict[str, dict[int, RequestRecord]] = {}
    for r in _measured(records):
        if r.ok:
            by.setdefault(str(r.tags.get("session")), {})[int(r.tags["turn"])] = r
    seen = False
    for turns in by.values():
        extra = set()
        for t, r in turns.items():
            prev = turns.get(t - 1)
            if prev is None or r.prompt_tokens is None or prev.prompt_tokens is None:
                continue
            appended = int(r.tags.get("content_tokens", 0)) - int(prev.tags.get("content_tokens", 0))
            extra.add(int(r.prompt_tokens) - int(prev.prompt_tokens) - appended)
        if len(extra) > 1:
            return False
        if len([t for t in turns if t - 1 in turns]) >= 2:
            seen = True
    return True if seen else None
