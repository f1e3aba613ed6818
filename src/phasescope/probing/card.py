"""The phase card: the probe result as a rich table and a few sentences (presentation only)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from phasescope.probing.summary import size_interval
from phasescope.theory.hw import local_profile_note


def _ms(x: float | None) -> str:
    return "—" if x is None else (f"{x * 1000:.1f} ms" if x < 10 else f"{x:.2f} s")


def _rate(x: float | None) -> str:
    return "—" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def _pct(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x * 100:.1f}%" if x < 0.1 else f"{x * 100:.0f}%"


def _range_ms(lo: float, hi: float) -> str:
    """A compact range of seconds in one unit: ``330–1,269 ms``, ``5.48–7.04 s``, ``4.1–9.8 ms``."""
    if hi >= 1:
        return f"{lo:.2f}–{hi:.2f} s"
    if hi < 0.01:
        return f"{lo * 1000:.1f}–{hi * 1000:.1f} ms"
    return f"{lo * 1000:,.0f}–{hi * 1000:,.0f} ms"


def _range_rate(lo: float, hi: float) -> str:
    return f"{lo:,.0f}–{hi:,.0f}" if hi >= 100 else f"{lo:.1f}–{hi:.1f}"


def _wide(row: dict[str, Any], key: str) -> tuple[float, float, int] | None:
    """(lowest, highest repeat, n) of a figure whose 95 % interval is wider than ±10 %; None where tight
    or where the spread is unknown (one repeat: the too_few_samples warning says so)."""
    if row.get(key) is None:
        return None
    iv = size_interval(row, key)
    if iv is None or not iv.known or iv.tight():
        return None
    return (iv.min if iv.min is not None else iv.low), (iv.max if iv.max is not None else iv.high), iv.n


def _cell(row: dict[str, Any], key: str, fmt: Any) -> str:
    """The figure, plain where its interval is tight, else with the range of its repeats on a second
    line: ``953.0 ms`` / ``(248–3,414 ms, 3 runs)``."""
    v = row.get(key)
    if v is None:
        return "—"
    w = _wide(row, key)
    if w is None:
        return fmt(v)
    rng = _range_rate(w[0], w[1]) if fmt is _rate else _range_ms(w[0], w[1])
    return f"{fmt(v)}\n({rng}, {w[2]} runs)"


def _itl(row: dict[str, Any]) -> str:
    text = f"{_ms(row.get('itl_p50_s'))} / {_ms(row.get('itl_p99_s'))}"
    for key, word in (("itl_p50_s", "p50"), ("itl_p99_s", "p99")):
        w = _wide(row, key)
        if w is not None:
            text += f"\n({word} {_range_ms(w[0], w[1])}, n={w[2]})"  # n=: fits a column of an 80-col card
    return text


def _spec(sd: dict[str, Any] | None) -> str:
    if not sd:
        return "—"
    if sd.get("drafted") is None:
        return f"{sd['accepted']} / ? (inferred)"
    rate = sd.get("acceptance_rate")
    return f"{sd['accepted']} / {sd['drafted']}" + (f" ({rate:.0%})" if rate is not None else "")


def _any_wide(sizes: list[dict[str, Any]]) -> bool:
    for s in sizes:
        for row in (s, s.get("server") or {}):
            for key in (row.get("intervals") or {}):
                iv = size_interval(row, key)
                if iv is not None and iv.known and not iv.tight():
                    return True
    return False


def render(result: dict[str, Any]) -> Panel:
    sizes = result.get("sizes") or []
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("")
    for s in sizes:
        t.add_column(f"{s.get('prompt_tokens') or s.get('prompt_tokens_target')}-token prompt", justify="right")

    def row(label: str, vals: list[str], style: str | None = None) -> None:
        t.add_row(Text(label, style=style or ""), *vals)

    srv = [s.get("server") or {} for s in sizes]
    t.add_row(Text("PREFILL", style="bold cyan"), *["" for _ in sizes])
    row("  TTFT (client)", [_cell(s, "ttft_s", _ms) for s in sizes])
    row("  TTFT net of connection", [_cell(s, "ttft_net_s", _ms) for s in sizes])
    if any(x.get("ttft_s") is not None for x in srv):
        row("  TTFT server-side", [_cell(x, "ttft_s", _ms) for x in srv])
    row("  prefill tok/s (client)", [_cell(s, "prefill_tok_s", _rate) for s in sizes])
    if any(x.get("prefill_tok_s") is not None for x in srv):
        row("  prefill tok/s (server)", [_cell(x, "prefill_tok_s", _rate) for x in srv])
    t.add_row(Text("DECODE", style="bold magenta"), *["" for _ in sizes])
    row("  decode tok/s (client)", [_cell(s, "decode_tok_s", _rate) for s in sizes])
    if any(x.get("decode_tok_s") is not None for x in srv):
        row("  decode tok/s (server)", [_cell(x, "decode_tok_s", _rate) for x in srv])
    row("  ITL p50 / p99 per token", [_itl(s) for s in sizes])
    if any(s.get("spec_decode") for s in sizes):  # speculative decoding: what each verified step emitted
        row("  speculation: accepted / drafted", [_spec(s.get("spec_decode")) for s in sizes])
        row("  tokens per verified step", [f"{sd['tokens_per_step']:.2f}" if (sd := s.get("spec_decode")) else "—"
                                           for s in sizes])
    if any(s.get("reasoning_tokens") for s in sizes):  # a reasoning model: the answer's wait and the split
        t.add_row(Text("REASONING", style="bold green"), *["" for _ in sizes])
        row("  TTFO (first answer token)", [_cell(s, "ttfo_s", _ms) for s in sizes])
        row("  reasoning / answer tokens", [f"{s.get('reasoning_tokens')} / {s.get('answer_tokens')}" for s in sizes])
        row("  reasoning tok/s", [_cell(s, "reasoning_tok_s", _rate) for s in sizes])
        row("  answer tok/s", [_cell(s, "answer_tok_s", _rate) for s in sizes])
    ce = result.get("ceilings")
    if ce:
        crow = {r.get("prompt_tokens"): r for r in ce.get("sizes", [])}
        cr = [crow.get(s.get("prompt_tokens") or s.get("prompt_tokens_target"), {}) for s in sizes]
        t.add_row(Text("CEILINGS", style="bold yellow"), *["" for _ in sizes])
        row("  decode ceiling tok/s", [_rate(c.get("decode_ceiling_tok_s")) for c in cr])
        if any(c.get("decode_ceiling_per_step_tok_s") for c in cr):  # the roof × tokens per verified step
            dm = (ce.get("draft_model_spec") or {}).get("id")
            row("  … per verified step" + (f" (draft {dm})" if dm else " (no draft counted)"),
                [_rate(c.get("decode_ceiling_per_step_tok_s")) for c in cr])
        row("  decode efficiency", [_pct(c.get("decode_efficiency")) for c in cr])
        row("  prefill floor", [_ms(c.get("prefill_floor_s")) for c in cr])
        row("  prefill efficiency", [_pct(c.get("prefill_efficiency")) for c in cr])
    parts: list[Any] = [t]
    notes: list[str] = []
    v = result.get("verdict")
    if v:
        notes.append("[bold]One-minute test:[/bold] " + "; ".join(v["text"]) + ".")
    reps = [s.get("repeats") for s in sizes if s.get("repeats") is not None]
    plan = result.get("plan") or {}
    if _any_wide(sizes):
        notes.append("[dim](a–b, n runs): the range of a figure's repeats (n of them), shown where the 95% "
                     "interval of its median is wider than ±10%; plain figures are within it.[/dim]")
    if reps and plan.get("repeat") == "auto":
        notes.append(f"[dim]repeats per size: {' / '.join(map(str, reps))} (--repeat auto: until TTFT and decode "
                     f"are within ±10%, at most {plan.get('max_repeat')}).[/dim]")
    w = result.get("warmup")
    if w and w.get("ttft_s") is not None:
        s = f"warm-up TTFT {_ms(w['ttft_s'])}"
        cs = w.get("cold_start_s")
        if cs is not None:
            s += f" (cold-start extra {_ms(cs)})" if cs > 0.001 else " (no measurable cold-start penalty)"
        if w.get("load_s"):
            s += f"; server load_duration {_ms(w['load_s'])}"
        notes.append(s + " — excluded from the numbers above.")
    early = sum(s.get("stopped_early") or 0 for s in sizes)
    if early:
        notes.append(f"[yellow]{early} request(s) stopped before --max-tokens (the server has no ignore_eos or ignored it).[/yellow]")
    src = {s.get("prompt_tokens_source") for s in sizes} - {None}
    if src:
        notes.append(f"prompt lengths from: {', '.join(sorted(src))}; output counts from: "
                     f"{', '.join(sorted({s.get('output_tokens_source') for s in sizes} - {None}))}.")
    syn = result.get("synthetic")
    if isinstance(syn, dict):
        notes.append(f"[bold]synthetic weights[/bold]: the shapes of {escape(str(syn.get('shape')))} "
                     f"({escape(str(syn.get('name')))}, tokenizer {escape(str(syn.get('vocab')))}); "
                     "the timings are that shape's on this machine, the text is meaningless.")
    if ce:
        d = ce.get("device") or {}
        m = ce.get("model_spec") or {}
        notes.append(f"ceilings for model {m.get('id')} ({m.get('origin')}) on {d.get('name') or d.get('id')} "
                     f"({d.get('mem_bandwidth_gb_s')} GB/s)." + escape(local_profile_note(d)))
        if m.get("chosen_by"):
            notes.append(f"model shape: {escape(str(m['chosen_by']))}.")
    elif result.get("ceilings_note"):
        notes.append(f"[dim]no ceilings: {result['ceilings_note']}[/dim]")
    wf = (result.get("waterfall") or {}).get("sentence")
    if wf:
        notes.append(escape(str(wf)) + ".")
    if result.get("records_path"):
        notes.append(f"[dim]records: {result['records_path']}" + (f"  run: {result['run_id']}" if result.get("run_id") else "") + "[/dim]")
    parts.append(Text.from_markup("\n" + "\n".join(notes)))
    engine, api = result.get("engine"), result.get("api")
    how = engine if engine == api or not api else f"{engine}, api {api}"  # fits an 80-column terminal
    title = f"phasescope probe — {result.get('model') or '?'} @ {result.get('target')} ({how})"
    return Panel(Group(*parts), title=title, title_align="left")
