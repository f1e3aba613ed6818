"""What explain shows of each experiment, as text: one view that the console, the report's card and
any other page render, so a number can never read one way in the terminal and another in the HTML.

Every view is built from the experiment's JSON (``to_jsonable`` of its result, as the run stores it):
each experiment's spec names its view (:mod:`phasescope.experiments.spec`); the console
(:mod:`phasescope.experiments.render`) turns a :class:`View` into a rich table, the report's phase card
(:func:`card_tables`) takes rows of the same views, cell for cell. Nothing here computes a figure: it
picks the result's own fields and formats them once.

Pure: no I/O, no rich.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


def fmt(x: Any, spec: str = "{:.3g}", scale: float = 1.0) -> str:
    """One value as the views print it: "–" when unknown, yes/no for booleans."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    try:
        return spec.format(float(x) * scale)
    except (TypeError, ValueError):
        return str(x)


@dataclass
class View:
    """A table: ``columns`` (the first one names the row) and ``rows`` of formatted cells, with a caption.
    ``kind`` ``points``: one row per measured point (prompt length, context, level, turn); ``pairs``: one
    row per figure (label, value)."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""
    kind: str = "points"

    def column(self, label: str) -> list[str]:
        i = self.columns.index(label)
        return [r[i] for r in self.rows]


# -- prompt-scaling ---------------------------------------------------------------------------------
PS_COLUMNS = ("prompt tokens", "n", "TTFT s", "server prefill tok/s", "decode tok/s", "1 / typical gap tok/s")


def prompt_scaling(e: dict[str, Any]) -> View:
    v = View("prompt-scaling", "prompt-scaling: TTFT vs prompt length (output fixed)", list(PS_COLUMNS))
    for p in e.get("points") or []:
        step = p.get("decode_step_s")
        v.rows.append([str(p.get("prompt_tokens")), str(p.get("n")), fmt(p.get("ttft_s")), fmt(p.get("server_prefill_tok_s"), "{:.0f}"),
                       fmt(p.get("decode_tok_s"), "{:.1f}"), fmt(1 / step if step else None, "{:.1f}")])
    fit = e.get("fit") or {}
    v.caption = (f"TTFT = {fmt(fit.get('a_s'))} s + {fmt(fit.get('b_s_per_token'))}·n + "
                 f"{fmt(fit.get('c_s_per_token2'))}·n² (R² {fmt(fit.get('r2'), '{:.3f}')}); prefill "
                 f"{fmt(e.get('prefill_tok_s'), '{:.0f}')} tok/s, quadratic share {fmt(e.get('quadratic_share'), '{:.0%}')}, "
                 f"decode change {fmt(e.get('decode_change_pct'), '{:+.1f}')} %. TTFT and decode tok/s: medians over "
                 f"the repetitions; 1 / typical gap: the median gap within a request, best repetition")
    return v


# -- prefix-cache -----------------------------------------------------------------------------------
def prefix_cache(e: dict[str, Any]) -> View:
    v = View("prefix-cache", "prefix-cache: a shared system prompt, cold vs repeated", ["", "TTFT s"], kind="pairs")
    v.rows = [[f"new {e.get('system_prompt_tokens')}-token system prompt (n={e.get('n_cold')})", fmt(e.get("ttft_first_s"))],
              [f"same system prompt, new user turn (n={e.get('n_repeat')})", fmt(e.get("ttft_repeat_s"))],
              ["user turn alone", fmt(e.get("ttft_short_s"))]]
    sv = e.get("server") or {}
    cd = e.get("cache_detected")
    says = sv.get("says_cached")
    v.caption = (f"cache detected: {fmt(cd) if cd is not None else 'cannot tell'} — {e.get('reason', '')}; server says: "
                 f"{fmt(says) if says is not None else '–'} ({sv.get('source') or 'no server signal'})")
    return v


# -- context-fill -----------------------------------------------------------------------------------
CF_DECODE = "decode tok/s"
CF_PREDICTED = "predicted tok/s"
CF_SERVER = "server decode tok/s (stalls included)"
CF_COLUMNS = ("context tokens", "n", CF_DECODE, "± spread", CF_SERVER, CF_PREDICTED)


def slowdown_text(e: dict[str, Any]) -> str:
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


def context_fill(e: dict[str, Any]) -> View:
    v = View("context-fill", "context-fill: decode speed vs context", list(CF_COLUMNS))
    for p in e.get("points") or []:
        v.rows.append([str(p.get("context_tokens")), str(p.get("n")), fmt(p.get("decode_tok_s"), "{:.1f}"),
                       fmt(p.get("spread"), "{:.0%}"), fmt(p.get("server_decode_tok_s"), "{:.1f}"),
                       fmt(p.get("predicted_decode_tok_s"), "{:.1f}")])
    pred = (e.get("prediction") or {}).get("slowdown_pct")
    verdict = {True: "slows", False: "flat"}.get(e.get("slows"), "cannot tell")
    v.caption = (f"{slowdown_text(e)} (bandwidth model: {fmt(pred, '{:.1f}')} %; spread ±{fmt(e.get('noise_pct'), '{:.0f}')} %): "
                 f"{verdict}{' — ' + e['reason'] if e.get('reason') else ''}; "
                 f"fit {fmt(e.get('per_token_s_per_ctx_token'), '{:+.3g}', 1e6)} µs per output token per context token. "
                 f"decode tok/s = 1 / typical token gap, best repetition (the figure the finding and the prediction use); "
                 f"the server's decode timing includes every stall of the step loop")
    return v


# -- batching ---------------------------------------------------------------------------------------
def batching(e: dict[str, Any]) -> View:
    v = View("batching", "batching: concurrency vs throughput and latency",
             ["concurrency", "n", "output tok/s", "per-user tok/s", "ITL p50 ms", "ITL p99 ms", "TTFT p99 s"])
    for lv in e.get("levels") or []:
        v.rows.append([str(lv.get("concurrency")), str(lv.get("n")), fmt(lv.get("output_tok_s"), "{:.1f}"),
                       fmt(lv.get("per_user_decode_tok_s"), "{:.1f}"), fmt(lv.get("itl_p50_s"), "{:.1f}", 1e3),
                       fmt(lv.get("itl_p99_s"), "{:.1f}", 1e3), fmt(lv.get("ttft_p99_s"))])
    knee = e.get("knee_concurrency")
    v.caption = (f"knee at concurrency {knee}" if knee else
                 ("no knee within the levels tested" if e.get("knee_reached") is False else "knee: cannot tell")) + \
        f" (bound {e.get('max_concurrency_bound')}: {e.get('bound_source')})"
    return v


# -- prefill-interference ---------------------------------------------------------------------------
def prefill_interference(e: dict[str, Any]) -> View:
    v = View("prefill-interference", "prefill-interference: a long prompt lands mid-generation", ["", "value"],
             kind="pairs")
    v.rows = [
        ["running streams", str(e.get("n_streams"))],
        ["injected prompt tokens / TTFT s", f"{e.get('injected_prompt_tokens')} / {fmt(e.get('injected_ttft_s'))}"],
        ["usual gap ms", fmt(e.get("itl_baseline_s"), "{:.1f}", 1e3)],
        ["longest gap during the prefill ms", fmt(e.get("itl_max_during_s"), "{:.1f}", 1e3)],
        ["spike ×", fmt(e.get("spike_x"), "{:.1f}")],
        ["spike duration s", fmt(e.get("spike_duration_s"))],
        ["tokens per stream during the prefill", fmt(e.get("tokens_during_prefill"), "{:.0f}")],
    ]
    if e.get("client_stall_s"):  # the gaps above are already net of it; say that it happened
        v.rows.append(["this client's own stalls ms (longest)",
                       f"{fmt(e.get('client_stall_s'), '{:.0f}', 1e3)} ({fmt(e.get('client_stall_max_s'), '{:.0f}', 1e3)})"])
    v.caption = e.get("reason", "")
    return v


# -- queue ------------------------------------------------------------------------------------------
def queue(e: dict[str, Any]) -> View:
    v = View("queue", "queue: waiting requests and KV usage under load", ["", "value"], kind="pairs")
    sh = [x for x in e.get("ttft_queue_shares") or [] if isinstance(x, (int, float))]
    v.rows = [
        ["concurrency", str(e.get("concurrency"))],
        ["/metrics samples", str(len(e.get("samples") or []))],
        ["waiting max / mean", f"{fmt(e.get('waiting_max'), '{:.0f}')} / {fmt(e.get('waiting_mean'), '{:.1f}')}"],
        ["share of samples with a queue", fmt(e.get("waiting_share"), "{:.0%}")],
        ["KV usage max", fmt(e.get("kv_usage_max"), "{:.0%}")],
        ["TTFT p50 / p99 s", f"{fmt(e.get('ttft_p50_s'))} / {fmt(e.get('ttft_p99_s'))}"],
        ["share of all TTFT outside prefill (Σ waiting ÷ Σ TTFT)", fmt(e.get("ttft_queue_share_total"), "{:.0%}")],
        ["per request: median (min–max)",
         f"{fmt(e.get('ttft_queue_share'), '{:.0%}')} ({min(sh):.0%}–{max(sh):.0%})" if sh else "–"],
    ]
    v.caption = e.get("reason", "")
    return v


# -- conversation -----------------------------------------------------------------------------------
def conversation(e: dict[str, Any]) -> View:
    v = View("conversation", "conversation: the history resent every turn",
             ["turn", "n", "prompt tokens", "cached tokens", "TTFT s", "decode tok/s"])
    for r in e.get("turns") or []:
        v.rows.append([str(r.get("turn")), str(r.get("n")), fmt(r.get("prompt_tokens"), "{:.0f}"),
                       fmt(r.get("cached_tokens"), "{:.0f}"), fmt(r.get("ttft_s")), fmt(r.get("decode_tok_s"), "{:.1f}")])
    hc = e.get("history_cached")
    pred = e.get("predicted_slowdown_pct")
    v.caption = (f"history cached: {'cannot tell' if hc is None else ('yes' if hc else 'no')} — {e.get('reason', '')}; "
                 + _slowdown_words(e)
                 + (f" (bandwidth model {pred:.1f} %)" if pred is not None else "")
                 + (f"; {e.get('fill_sessions')} sessions at once: {e.get('fill_reason')}" if e.get("fill_reason") else ""))
    return v


def _slowdown_words(e: dict[str, Any]) -> str:
    """The decode slowdown from the first to the last turn, stated only where the two turns' intervals part
    (the rule diagnose's conversation finding keeps); else "cannot tell" with both rates."""
    from phasescope.diagnose.claims import CANNOT_TELL, differ, stored

    turns = e.get("turns") or []
    slow = e.get("decode_slowdown_pct")
    if slow is None or len(turns) < 2:
        return f"decode slowdown {fmt(slow, '{:.1f}')} %"
    a, b = (stored(t.get("decode_tok_s"), t.get("decode_tok_s_ci"), t.get("n"), t.get("decode_tok_s_range"))
            for t in (turns[0], turns[-1]))
    if differ(a, b) == CANNOT_TELL:
        return (f"decode slowdown: cannot tell ({fmt(turns[0].get('decode_tok_s'), '{:.1f}')} → "
                f"{fmt(turns[-1].get('decode_tok_s'), '{:.1f}')} tok/s, turn {turns[0].get('turn')} → "
                f"{turns[-1].get('turn')}: their intervals overlap or rest on one request)")
    return f"decode slowdown {fmt(slow, '{:.1f}')} %"


# -- the report's phase card: rows of the same views ------------------------------------------------
#: the experiments the card shows (it is narrow): their view, which columns of it (first, last and two
#: points between) and the head of each point's column
CARD: dict[str, tuple[Callable[[dict[str, Any]], View], tuple[str, ...], str]] = {
    "prompt-scaling": (prompt_scaling, ("TTFT s", "server prefill tok/s", "1 / typical gap tok/s"), "{}-token prompt"),
    "context-fill": (context_fill, (CF_DECODE, CF_PREDICTED), "{} tokens of context"),
}


def pick(n: int, k: int = 4) -> list[int]:
    """At most ``k`` indices of ``n`` points, first and last always, evenly between."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def card_tables(exps: dict[str, Any]) -> list[tuple[list[str], list[tuple[str, list[str]]]]]:
    """(header, rows) per experiment the card shows: the console's cells, transposed — each row a column
    of the view (its label and its cells at up to four points)."""
    out = []
    for name, e in exps.items():
        if name not in CARD or not isinstance(e, dict):
            continue
        draw, cols, head_of = CARD[name]
        v = draw(e)
        if not v.rows:
            continue
        idx = pick(len(v.rows))
        head = [v.name] + [head_of.format(v.rows[i][0]) for i in idx]
        rows = []
        for c in cols:
            cells = v.column(c)
            if any(cells[i] != "–" for i in idx):
                rows.append((c, [cells[i] for i in idx]))
        out.append((head, rows))
    return out
