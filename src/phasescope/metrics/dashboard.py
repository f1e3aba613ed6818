"""Rich renderables for the live ``watch`` dashboard (pure functions of a :class:`WatchState`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from phasescope.metrics.watch import WatchState

BARS = "▁▂▃▄▅▆▇█"
TREND = 24  # points in a trend line


def sparkline(values: Sequence[float | None], width: int = TREND) -> str:
    """Unicode trend line of the last ``width`` values, scaled min..max; a gap (·) for missing."""
    vals = list(values)[-width:]
    nums = [v for v in vals if v is not None and math.isfinite(v)]
    if not nums:
        return ""
    lo, hi = min(nums), max(nums)
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append("·")
        elif hi == lo:
            out.append(BARS[0] if hi == 0 else BARS[3])
        else:
            out.append(BARS[min(len(BARS) - 1, int((v - lo) / (hi - lo) * (len(BARS) - 1) + 0.5))])
    return "".join(out)


def _ms(v: Any) -> str:
    if v is None:
        return "—"
    ms = v * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 1000 else f"{ms:,.0f} ms"


def _num(v: Any, fmt: str = "{:,.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def _pct(v: Any) -> str:
    return "—" if v is None else f"{v * 100:.1f} %"


def _bar(frac: float | None, width: int = 10) -> str:
    if frac is None:
        return ""
    n = max(0, min(width, round(frac * width)))
    return "█" * n + "·" * (width - n)


def slots_renderable(state: WatchState) -> RenderableType:
    """llama.cpp's slots from /slots: one row per slot, the queue estimate; or why there are none."""
    tr = state.slots
    assert tr is not None
    q = tr.queue(state.summary.get("waiting"))
    if tr.slots is None:
        return Text(f"slots: {tr.note or 'unavailable'}", style="yellow")
    t = Table(title=f"Slots ({q['busy']} busy / {q['total']}) · {q['estimate']}", title_justify="left", expand=False)
    for c in ("slot", "state", "prompt tok", "decoded", "left", "context fill", "", "cache reuse", "task"):
        t.add_column(c, justify="left" if c in ("state", "", "slot") else "right")
    style = {"idle": "dim", "prefill": "yellow", "decode": "green"}
    for sl in tr.slots:
        f = sl.context_fill
        ctx = "—" if sl.context_tokens is None else f"{sl.context_tokens:,}/{sl.n_ctx:,} {f * 100:.0f} %" if f is not None else f"{sl.context_tokens:,}"
        kept = sl.state == "idle" and sl.context_tokens  # an idle slot keeps its last task's context cached
        t.add_row(str(sl.id), Text(sl.state + (" (context kept)" if kept else ""), style=style.get(sl.state, "")),
                  _num(sl.prompt_tokens, "{:,}"), _num(sl.decoded, "{:,}"), _num(sl.remaining if sl.busy else None, "{:,}"),
                  ctx, _bar(f), _pct(sl.cache_reuse), _num(sl.task, "{}"))
    rec = list(tr.recent)[-5:]
    if not rec:
        return t
    line = Text("new tasks' prompt-cache reuse: ", style="dim")
    line.append(", ".join(f"#{r['task']} (slot {r['slot']}) {_pct(r['cache_reuse'])} of {_num(r['prompt_tokens'], '{:,}')} tok"
                          for r in rec), style="dim")
    return Group(t, line)


def render(state: WatchState) -> RenderableType:
    """The whole dashboard: header, latency table, load table, alerts, notes."""
    s = state.summary
    hist = list(state.history)
    col = lambda k: [h.get(k) for h in hist]  # noqa: E731
    tl = state.timeline
    head = Text()
    head.append("phasescope watch", style="bold")
    head.append(f"  {state.engine_title} at {state.url}")
    head.append(
        f"\nwindow {state.window_s:g} s (covers {tl.span_s:.1f} s, {len(tl)} scrapes) · refresh every "
        f"{state.interval_s:g} s · refresh #{state.refreshes}",
        style="dim",
    )
    if state.last_error:
        head.append(f"\nlast scrape failed: {state.last_error}", style="bold red")

    lat = Table(title="Latency over the window", title_justify="left", expand=False)
    for c in ("", "p50", "p90", "p99", "mean", "trend (p99)"):
        lat.add_column(c, justify="right" if c not in ("", "trend (p99)") else "left")
    lat.add_row("TTFT", _ms(s.get("ttft_p50_s")), _ms(s.get("ttft_p90_s")), _ms(s.get("ttft_p99_s")),
                _ms(s.get("ttft_mean_s")), sparkline(col("ttft_p99_s")))
    lat.add_row("ITL", _ms(s.get("itl_p50_s")), _ms(s.get("itl_p90_s")), _ms(s.get("itl_p99_s")),
                _ms(s.get("itl_mean_s")), sparkline(col("itl_p99_s")))
    if s.get("tpot_p50_s") is not None:
        lat.add_row("TPOT", _ms(s.get("tpot_p50_s")), "", _ms(s.get("tpot_p99_s")), "",
                    sparkline(col("tpot_p99_s")))

    load = Table(title="Load and throughput", title_justify="left", expand=False)
    load.add_column("")
    load.add_column("now", justify="right")
    load.add_column("trend")
    rows = [
        ("running", _num(s.get("running"), "{:g}"), "running"),
        ("waiting", _num(s.get("waiting"), "{:g}"), "waiting"),
        ("KV cache usage", _pct(s.get("kv_usage")), "kv_usage"),
        ("prefix-cache hit rate", _pct(s.get("prefix_cache_hit_rate")), "prefix_cache_hit_rate"),
        ("prompt tok/s", _num(s.get("prompt_tok_s")), "prompt_tok_s"),
        ("generation tok/s", _num(s.get("generation_tok_s")), "generation_tok_s"),
        ("prefill speed tok/s", _num(s.get("prefill_speed_tok_s")), "prefill_speed_tok_s"),
        ("requests/s", _num(s.get("requests_per_s"), "{:,.2f}"), "requests_per_s"),
        ("preemptions (window)", _num(s.get("preemptions"), "{:g}"), "preemptions"),
    ]
    if s.get("spec_acceptance_rate") is not None or s.get("spec_tokens_per_step") is not None:
        rows += [("speculation: accepted / drafted", _pct(s.get("spec_acceptance_rate")), "spec_acceptance_rate"),
                 ("tokens per verified step", _num(s.get("spec_tokens_per_step"), "{:.2f}"), "spec_tokens_per_step")]
    for label, val, key in rows:
        load.add_row(label, val, sparkline(col(key)))

    parts: list[RenderableType] = [head, lat, load]
    if state.slots is not None:
        parts.append(slots_renderable(state))
    if state.groups:
        g = Table(title=f"Per {state.by or 'label value'}", title_justify="left")
        for c in ("group", "running", "waiting", "KV", "TTFT p99", "ITL p99", "gen tok/s"):
            g.add_column(c, justify="right" if c != "group" else "left")
        for name, gs in state.groups.items():
            g.add_row(name, _num(gs.get("running"), "{:g}"), _num(gs.get("waiting"), "{:g}"), _pct(gs.get("kv_usage")),
                      _ms(gs.get("ttft_p99_s")), _ms(gs.get("itl_p99_s")), _num(gs.get("generation_tok_s")))
        parts.append(g)
    if state.alerts:
        text = Text()
        for i, a in enumerate(state.alerts):
            text.append(("\n" if i else "") + ("CRIT " if a.level == "crit" else "WARN ") + a.code + ": ",
                        style="bold red" if a.level == "crit" else "bold yellow")
            text.append(a.message)
        parts.append(Panel(text, title="alerts", border_style="red"))
    else:
        parts.append(Text("no alerts", style="green"))
    notes = tl.notes()
    if notes:
        parts.append(Text("\n".join("note: " + n for n in notes), style="dim"))
    return Group(*parts)
