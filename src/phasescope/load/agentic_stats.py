"""What an agentic run measured (issue 34): ``agentic`` in ``bench --json``.

Per request through :mod:`phasescope.measure.derive` (TTFT, cached prompt tokens); the sessions and
their tags are :mod:`phasescope.load.agentic`'s. Definitions:

* **KV reuse** of a session = Σ cached prompt tokens ÷ Σ prompt tokens over its answered calls, both as
  the server counted them: ``usage.prompt_tokens_details.cached_tokens`` (vLLM, SGLang) or llama.cpp's
  ``timings.cache_n`` (``kv_reuse.source`` says which; None where the server reports neither, e.g. Ollama).
* **Sub-agent prefix reuse** = a forked sub-agent's first call's cached tokens ÷ the tokens it inherited
  from the main call it forked from: that call's prompt tokens, plus its output tokens where the sub-agent
  resends the reply (synthetic sessions, ``inherits_reply``); a replayed trace's sub-agent shares at most
  the parent's prompt. Near 1: the whole inherited context came from the cache (a chat template's few
  tokens around the reply can put it a little above or below).
* **Sub-agent TTFT ratio** = a sub-agent's first call's TTFT ÷ the TTFT of the main call it forked from,
  one sample per sub-agent; its median with a 95 % interval (:func:`phasescope.measure.interval.median_interval`)
  from :data:`MIN_RATIO_SAMPLES` samples on, and a verdict (``faster``: the interval below 1; ``slower``:
  above; else ``cannot tell``). Fewer samples: ``cannot tell`` with the spread (smallest, largest).
* **Waiting vs thinking**: a session's span runs from its first call's send to its last call's last byte;
  ``wait_s`` is the time in it with at least one of its calls in flight (the union of their intervals:
  sub-agents in parallel count once), ``think_s`` the rest (think times, tool time, the client's own).
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.measure import derive
from phasescope.measure.aggregate import measured, median
from phasescope.measure.clock import union_s
from phasescope.measure.interval import median_interval
from phasescope.measure.records import RequestRecord

#: sub-agent TTFT ratios needed before the ratio gets an interval
MIN_RATIO_SAMPLES = 3
#: a sub-agent "reused" its parent's context when the cache served at least this share of it
REUSED_SHARE = 0.5
#: sessions listed one by one in ``agentic.per_session`` (the rest are in the aggregates)
MAX_SESSIONS_LISTED = 200


def _calls(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in measured(records) if (r.tags or {}).get("call") is not None]


def cache_source(records: Sequence[RequestRecord]) -> str | None:
    """Where cached prompt tokens came from: ``usage.prompt_tokens_details.cached_tokens`` or
    ``timings.cache_n`` (llama.cpp); None when no answered call carried a count."""
    known = [r for r in records if r.ok and derive.cached_prompt_tokens(r) is not None]
    if not known:
        return None
    if any((r.server or {}).get("cache_n") is not None for r in known):
        return "timings.cache_n"
    return "usage.prompt_tokens_details.cached_tokens"


def session_rows(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """One row per session: calls sent/ok, sub-agent calls, prompt and cached tokens, KV reuse,
    span, wait and think seconds."""
    by: dict[str, list[RequestRecord]] = {}
    for r in _calls(records):
        by.setdefault(str(r.tags.get("session")), []).append(r)
    rows = []
    for name in sorted(by, key=lambda s: (len(s), s)):
        rs = by[name]
        ok = [r for r in rs if r.ok]
        pts = [r for r in ok if r.prompt_tokens is not None]
        cached = [c for c in (derive.cached_prompt_tokens(r) for r in pts) if c is not None]
        prompt = sum(int(r.prompt_tokens or 0) for r in pts)
        ivs = [(r.t_start_ns, r.t_done_ns) for r in rs if r.t_done_ns]
        span = (max(e for _, e in ivs) - min(s for s, _ in ivs)) / 1e9 if ivs else None
        wait = union_s(ivs) if ivs else None
        rows.append({
            "session": name, "trace_session": rs[0].tags.get("trace_session"), "calls": len(rs), "calls_ok": len(ok),
            "subagent_calls": sum(1 for r in rs if r.tags.get("role") == "subagent"),
            "prompt_tokens": prompt if pts else None,
            "cached_tokens": sum(cached) if len(cached) == len(pts) and pts else None,
            "kv_reuse": (sum(cached) / prompt) if (len(cached) == len(pts) and prompt) else None,
            "span_s": span, "wait_s": wait,
            "think_s": (span - wait) if (span is not None and wait is not None) else None,
            "planned_think_s": sum(float(r.tags.get("think_s") or 0.0) for r in rs),
        })
    return rows


def subagent_pairs(records: Sequence[RequestRecord]) -> list[tuple[RequestRecord, RequestRecord]]:
    """(sub-agent first call, the main call it forked from), both answered."""
    calls = _calls(records)
    by_id = {r.id: r for r in calls}
    out = []
    for r in calls:
        p = r.tags.get("fork_parent")
        if r.tags.get("role") == "subagent" and p and r.ok and p in by_id and by_id[p].ok:
            out.append((r, by_id[p]))
    return out


def ttft_ratio(pairs: Sequence[tuple[RequestRecord, RequestRecord]]) -> dict[str, Any]:
    """The sub-agent TTFT ratio (module docstring): value, interval, n, verdict, spread."""
    xs = []
    for sub, par in pairs:
        a, b = derive.ttft_s(sub), derive.ttft_s(par)
        if a is not None and b is not None and b > 0:
            xs.append(a / b)
    out: dict[str, Any] = {"n": len(xs), "value": median(xs), "ci": None, "method": None,
                           "spread": [min(xs), max(xs)] if xs else None, "verdict": "cannot tell"}
    if len(xs) >= MIN_RATIO_SAMPLES:
        iv = median_interval(xs)
        if iv is not None:
            out.update(value=iv.value, ci=[iv.low, iv.high], method=iv.method)
            out["verdict"] = "faster" if iv.high < 1 else "slower" if iv.low > 1 else "cannot tell"
    return out


def prefix_reuse(pairs: Sequence[tuple[RequestRecord, RequestRecord]]) -> dict[str, Any]:
    """Sub-agent prefix reuse: per sub-agent first call, cached tokens ÷ the tokens it inherited (module docstring)."""
    shares, cached = [], []
    for sub, par in pairs:
        c = derive.cached_prompt_tokens(sub)
        if c is None or not par.prompt_tokens:
            continue
        cached.append(c)
        inherited = par.prompt_tokens + (int(par.output_tokens or 0) if sub.tags.get("inherits_reply") else 0)
        shares.append(c / inherited)
    return {"n": len(shares), "median": median(shares), "min": min(shares) if shares else None,
            "reused": sum(1 for x in shares if x >= REUSED_SHARE), "cached_tokens": cached[:MAX_SESSIONS_LISTED]}


def implied_reuse(records: Sequence[RequestRecord]) -> float | None:
    """The share of prompt tokens a prefix cache that keeps everything could serve: each call can reuse
    the call whose context it continues (``context`` tag: its prompt and its reply), over all prompt
    tokens, from the server's own counts. An upper bound for replayed traces (their messages need not
    extend the earlier call's exactly)."""
    calls = [r for r in _calls(records) if r.ok and r.prompt_tokens]
    by_id = {r.id: r for r in calls}
    total = hit = 0
    for r in calls:
        total += int(r.prompt_tokens or 0)
        prev = by_id.get(str(r.tags.get("context") or ""))
        if prev is not None:
            hit += min(int(prev.prompt_tokens or 0) + int(prev.output_tokens or 0), int(r.prompt_tokens or 0))
    return hit / total if total else None


def agentic_section(records: Sequence[RequestRecord], spec: dict[str, Any],
                    facts: dict[str, Any] | None = None, planned: int | None = None) -> dict[str, Any]:
    """``agentic`` of ``bench --json`` (keys documented in docs/commands/bench.md)."""
    calls = _calls(records)
    ok = [r for r in calls if r.ok]
    rows = session_rows(records)
    pairs = subagent_pairs(records)
    pts = [r for r in ok if r.prompt_tokens is not None]
    cs = [c for c in (derive.cached_prompt_tokens(r) for r in pts) if c is not None]
    total_p = sum(int(r.prompt_tokens or 0) for r in pts)
    reuse = [x["kv_reuse"] for x in rows if x["kv_reuse"] is not None]
    waits = [x["wait_s"] for x in rows if x["wait_s"] is not None]
    thinks = [x["think_s"] for x in rows if x["think_s"] is not None]
    forks = {(str(r.tags.get("session")), r.tags.get("fork")) for r in calls if r.tags.get("fork") is not None}
    subagents = {(str(r.tags.get("session")), r.tags.get("agent")) for r in calls if r.tags.get("role") == "subagent"}
    return {
        **spec,
        **({"trace": facts} if facts else {}),
        "sessions": len(rows),
        "calls_sent": len(calls),
        "calls_ok": len(ok),
        "calls_planned": planned if planned is not None else (facts or {}).get("calls_planned"),
        "forks": len(forks),
        "subagents": len(subagents),
        "subagent_calls": sum(1 for r in calls if r.tags.get("role") == "subagent"),
        "kv_reuse": {
            "source": cache_source(ok),
            "overall": (sum(cs) / total_p) if (cs and len(cs) == len(pts) and total_p) else None,
            "session_median": median(reuse),
            "session_min": min(reuse) if reuse else None,
            "session_max": max(reuse) if reuse else None,
            "implied": implied_reuse(records),
        },
        "subagent_prefix_reuse": prefix_reuse(pairs),
        "subagent_ttft_ratio": ttft_ratio(pairs),
        "wait_s": {"total": sum(waits) if waits else None, "session_median": median(waits)},
        "think_s": {"total": sum(thinks) if thinks else None, "session_median": median(thinks)},
        "wait_share": (sum(waits) / (sum(waits) + sum(thinks))) if waits and (sum(waits) + sum(thinks)) > 0 else None,
        "per_session": rows[:MAX_SESSIONS_LISTED],
        "per_session_truncated": len(rows) > MAX_SESSIONS_LISTED,
    }


def console_lines(a: dict[str, Any]) -> list[str]:
    """The console's agentic lines of ``bench``."""
    kv = a.get("kv_reuse") or {}
    lines = [f"Agentic: {a.get('sessions')} sessions, {a.get('calls_ok')} of {a.get('calls_sent')} calls answered, "
             f"{a.get('forks')} fork(s) sent {a.get('subagents')} sub-agent(s) ({a.get('subagent_calls')} calls)."]
    if kv.get("source"):
        lines.append(f"KV reuse ({kv['source']}): {kv['overall'] * 100:.1f} % of prompt tokens overall"
                     if kv.get("overall") is not None else f"KV reuse ({kv['source']}): not known for every call")
        if kv.get("session_median") is not None:
            lines[-1] += (f"; per session median {kv['session_median'] * 100:.1f} % "
                          f"(min {kv['session_min'] * 100:.1f} %, max {kv['session_max'] * 100:.1f} %)")
        lines[-1] += "."
    else:
        lines.append("KV reuse: this server reports no cached prompt tokens.")
    pr = a.get("subagent_prefix_reuse") or {}
    if pr.get("n"):
        lines.append(f"Sub-agents' first calls found {pr['median'] * 100:.0f} % (median; min {pr['min'] * 100:.0f} %) "
                     f"of the context they inherited from their parent in the cache; {pr['reused']} of {pr['n']} "
                     f"found at least {REUSED_SHARE * 100:.0f} %.")
    tr = a.get("subagent_ttft_ratio") or {}
    if tr.get("n"):
        if tr.get("ci"):
            lines.append(f"Sub-agent TTFT ÷ parent's: {tr['value']:.2f} (95 % interval {tr['ci'][0]:.2f}–{tr['ci'][1]:.2f}, "
                         f"{tr['n']} sub-agents): {tr['verdict']}.")
        else:
            lines.append(f"Sub-agent TTFT ÷ parent's: cannot tell from {tr['n']} sub-agent(s) "
                         f"(spread {tr['spread'][0]:.2f}–{tr['spread'][1]:.2f}).")
    w, t = (a.get("wait_s") or {}).get("total"), (a.get("think_s") or {}).get("total")
    if w is not None and t is not None:
        lines.append(f"Sessions waited for the server {w:.2f} s and thought {t:.2f} s in all "
                     f"({(a.get('wait_share') or 0) * 100:.0f} % waiting).")
    return lines
