"""Console output for ``explain`` / ``experiment``: findings first, then one table per experiment.

Output only: every number shown was computed by the experiments and the diagnosis.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

_STYLE = {"problem": "bold red", "limit": "bold yellow", "info": "cyan"}


def _f(x: Any, fmt: str = "{:.3g}", scale: float = 1.0) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    try:
        return fmt.format(float(x) * scale)
    except (TypeError, ValueError):
        return str(x)


def render_findings(doc: dict[str, Any], console: Console, engine: str | None = None) -> None:
    findings = doc.get("findings", [])
    if not findings:
        console.print("[bold]No findings[/bold]: nothing in the data called for a change.")
    for f in findings:
        body = [Text(f["cause"])]
        body.append(Text("evidence:", style="bold"))
        body.extend(Text(f"  • {e['text']}") for e in f["evidence"])
        if f["advice"]:
            body.append(Text("what to change:", style="bold"))
            for a in f["advice"]:
                who = "" if a["engine"] == "any" else f"[{a['engine']}] "
                body.append(Text(f"  → {who}{a['change']} — {a['why']}"))
        console.print(Panel(Group(*body), title=f"[{_STYLE.get(f['severity'], '')}]{f['severity']}: {f['id']}",
                            title_align="left", expand=True))
    for u in doc.get("undecided", []):
        reason = str(u["reason"])
        for tail in (": cannot tell", ", cannot tell"):  # the line already starts with it
            reason = reason[: -len(tail)] if reason.endswith(tail) else reason
        console.print(f"[yellow]cannot tell[/yellow] {u['id']}: {reason}")


def render_experiments(exps: dict[str, Any], console: Console) -> None:
    for name, e in exps.items():
        t = _TABLES.get(name)
        if t is not None:
            console.print(t(e))
        info = e.get("info") or {}
        if info.get("skipped"):
            console.print(f"[dim]{name}: skipped — {info['skipped']}[/dim]")


def _ps(e: dict[str, Any]) -> Table:
    t = Table(title="prompt-scaling: TTFT vs prompt length (output fixed)", title_justify="left")
    for c in ("prompt tokens", "n", "TTFT s", "server prefill tok/s", "decode tok/s", "1 / typical gap tok/s"):
        t.add_column(c, justify="right")
    for p in e["points"]:
        step = p.get("decode_step_s")
        t.add_row(str(p["prompt_tokens"]), str(p["n"]), _f(p["ttft_s"]), _f(p["server_prefill_tok_s"], "{:.0f}"),
                  _f(p["decode_tok_s"], "{:.1f}"), _f(1 / step if step else None, "{:.1f}"))
    fit = e.get("fit") or {}
    t.caption = (f"TTFT = {_f(fit.get('a_s'))} s + {_f(fit.get('b_s_per_token'))}·n + {_f(fit.get('c_s_per_token2'))}·n²"
                 f" (R² {_f(fit.get('r2'), '{:.3f}')}); prefill {_f(e.get('prefill_tok_s'), '{:.0f}')} tok/s, quadratic share "
                 f"{_f(e.get('quadratic_share'), '{:.0%}')}, decode change {_f(e.get('decode_change_pct'), '{:+.1f}')} %")
    return t


def _pc(e: dict[str, Any]) -> Table:
    t = Table(title="prefix-cache: a shared system prompt, cold vs repeated", title_justify="left")
    for c in ("", "TTFT s"):
        t.add_column(c, justify="right" if c else "left")
    t.add_row(f"new {e.get('system_prompt_tokens')}-token system prompt (n={e.get('n_cold')})", _f(e.get("ttft_first_s")))
    t.add_row(f"same system prompt, new user turn (n={e.get('n_repeat')})", _f(e.get("ttft_repeat_s")))
    t.add_row("user turn alone", _f(e.get("ttft_short_s")))
    sv = e.get("server") or {}
    t.caption = (f"cache detected: {_f(e.get('cache_detected')) if e.get('cache_detected') is not None else 'cannot tell'}"
                 f" — {e.get('reason', '')}; server says: {_f(sv.get('says_cached')) if sv.get('says_cached') is not None else '–'}"
                 f" ({sv.get('source') or 'no server signal'})")
    return t


def _slowdown_text(e: dict[str, Any]) -> str:
    """``slowdown 32.0 %`` or, when decode was faster at the longest context, ``1.9× faster`` —
    a rate never falls by more than 100 %."""
    sd = e.get("slowdown_pct")
    if sd is None:
        return "slowdown –"
    if sd <= -10:
        return f"decode {1 - sd / 100:.2f}× as fast at the longest context"
    if sd < 0:
        return f"decode {-sd:.1f} % faster at the longest context"
    return f"slowdown {sd:.1f} %"


def _cf(e: dict[str, Any]) -> Table:
    t = Table(title="context-fill: decode speed vs context", title_justify="left")
    for c in ("context tokens", "n", "decode tok/s", "± spread", "server decode tok/s", "predicted tok/s"):
        t.add_column(c, justify="right")
    for p in e["points"]:
        t.add_row(str(p["context_tokens"]), str(p["n"]), _f(p["decode_tok_s"], "{:.1f}"),
                  _f(p.get("spread"), "{:.0%}"), _f(p["server_decode_tok_s"], "{:.1f}"),
                  _f(p.get("predicted_decode_tok_s"), "{:.1f}"))
    pred = (e.get("prediction") or {}).get("slowdown_pct")
    verdict = {True: "slows", False: "flat"}.get(e.get("slows"), "cannot tell")
    t.caption = (f"{_slowdown_text(e)} (bandwidth model: {_f(pred, '{:.1f}')} %; spread ±{_f(e.get('noise_pct'), '{:.0f}')} %): "
                 f"{verdict}{' — ' + e['reason'] if e.get('reason') else ''}; "
                 f"fit {_f(e.get('per_token_s_per_ctx_token'), '{:+.3g}', 1e6)} µs per output token per context token. "
                 f"decode tok/s = 1 / typical token gap, best repetition")
    return t


def _bt(e: dict[str, Any]) -> Table:
    t = Table(title="batching: concurrency vs throughput and latency", title_justify="left")
    for c in ("concurrency", "n", "output tok/s", "per-user tok/s", "ITL p50 ms", "ITL p99 ms", "TTFT p99 s"):
        t.add_column(c, justify="right")
    for lv in e["levels"]:
        t.add_row(str(lv["concurrency"]), str(lv["n"]), _f(lv["output_tok_s"], "{:.1f}"),
                  _f(lv["per_user_decode_tok_s"], "{:.1f}"), _f(lv["itl_p50_s"], "{:.1f}", 1e3),
                  _f(lv["itl_p99_s"], "{:.1f}", 1e3), _f(lv["ttft_p99_s"]))
    knee = e.get("knee_concurrency")
    t.caption = (f"knee at concurrency {knee}" if knee else
                 ("no knee within the levels tested" if e.get("knee_reached") is False else "knee: cannot tell")) + \
        f" (bound {e.get('max_concurrency_bound')}: {e.get('bound_source')})"
    return t


def _pi(e: dict[str, Any]) -> Table:
    t = Table(title="prefill-interference: a long prompt lands mid-generation", title_justify="left")
    t.add_column("", justify="left")
    t.add_column("value", justify="right")
    t.add_row("running streams", str(e.get("n_streams")))
    t.add_row("injected prompt tokens / TTFT s", f"{e.get('injected_prompt_tokens')} / {_f(e.get('injected_ttft_s'))}")
    t.add_row("usual gap ms", _f(e.get("itl_baseline_s"), "{:.1f}", 1e3))
    t.add_row("longest gap during the prefill ms", _f(e.get("itl_max_during_s"), "{:.1f}", 1e3))
    t.add_row("spike ×", _f(e.get("spike_x"), "{:.1f}"))
    t.add_row("spike duration s", _f(e.get("spike_duration_s")))
    t.add_row("tokens per stream during the prefill", _f(e.get("tokens_during_prefill"), "{:.0f}"))
    if e.get("client_stall_s"):  # the gaps above are already net of it; say that it happened
        t.add_row("this client's own stalls ms (longest)",
                  f"{_f(e.get('client_stall_s'), '{:.0f}', 1e3)} ({_f(e.get('client_stall_max_s'), '{:.0f}', 1e3)})")
    t.caption = e.get("reason", "")
    return t


def _q(e: dict[str, Any]) -> Table:
    t = Table(title="queue: waiting requests and KV usage under load", title_justify="left")
    t.add_column("", justify="left")
    t.add_column("value", justify="right")
    t.add_row("concurrency", str(e.get("concurrency")))
    t.add_row("/metrics samples", str(len(e.get("samples") or [])))
    t.add_row("waiting max / mean", f"{_f(e.get('waiting_max'), '{:.0f}')} / {_f(e.get('waiting_mean'), '{:.1f}')}")
    t.add_row("share of samples with a queue", _f(e.get("waiting_share"), "{:.0%}"))
    t.add_row("KV usage max", _f(e.get("kv_usage_max"), "{:.0%}"))
    t.add_row("TTFT p50 / p99 s", f"{_f(e.get('ttft_p50_s'))} / {_f(e.get('ttft_p99_s'))}")
    t.add_row("share of all TTFT outside prefill (Σ waiting ÷ Σ TTFT)", _f(e.get("ttft_queue_share_total"), "{:.0%}"))
    sh = [x for x in e.get("ttft_queue_shares") or [] if isinstance(x, (int, float))]
    t.add_row("per request: median (min–max)",
              f"{_f(e.get('ttft_queue_share'), '{:.0%}')} ({min(sh):.0%}–{max(sh):.0%})" if sh else "–")
    t.caption = e.get("reason", "")
    return t


def _cv(e: dict[str, Any]) -> Table:
    t = Table(title="conversation: the history resent every turn", title_justify="left")
    for c in ("turn", "n", "prompt tokens", "cached tokens", "TTFT s", "decode tok/s"):
        t.add_column(c, justify="right")
    for r in e.get("turns") or []:
        t.add_row(str(r["turn"]), str(r["n"]), _f(r.get("prompt_tokens"), "{:.0f}"), _f(r.get("cached_tokens"), "{:.0f}"),
                  _f(r.get("ttft_s")), _f(r.get("decode_tok_s"), "{:.1f}"))
    hc = e.get("history_cached")
    pred = e.get("predicted_slowdown_pct")
    t.caption = (f"history cached: {'cannot tell' if hc is None else ('yes' if hc else 'no')} — {e.get('reason', '')}; "
                 f"decode slowdown {_f(e.get('decode_slowdown_pct'), '{:.1f}')} %"
                 + (f" (bandwidth model {pred:.1f} %)" if pred is not None else "")
                 + (f"; {e.get('fill_sessions')} sessions at once: {e.get('fill_reason')}" if e.get("fill_reason") else ""))
    return t


_TABLES = {"prompt-scaling": _ps, "prefix-cache": _pc, "context-fill": _cf, "batching": _bt,
           "prefill-interference": _pi, "queue": _q, "conversation": _cv}
