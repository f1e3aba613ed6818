"""The tune's console table: one row per setting, each metric with its ratio to the baseline."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasescope.measure.interval import Interval
from phasescope.tuning.table import METRIC_KEYS, OPTIONAL_KEYS

__all__ = ["render"]


def _num(v: Any, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "s":
        v *= 1000
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _ratio(r: float) -> str:
    """×0.26, ×31.2, ×276: five characters at most, so the table fits 80 columns."""
    return f"×{r:.2f}" if r < 10 else (f"×{r:.1f}" if r < 100 else f"×{r:.0f}")


_SHORT = {"ttft_p50_s": "TTFT\np50\nms", "ttft_p99_s": "TTFT\np99\nms", "prefill_tok_s": "pre-\nfill\ntok/s",
          "decode_tok_s": "de-\ncode\ntok/s", "itl_p50_s": "ITL\np50\nms", "itl_p99_s": "ITL\np99\nms",
          "itl_max_s": "max\npause\nms", "throughput_tok_s": "thru-\nput\ntok/s",
          "ttft_long_p50_s": "TTFT\nlong\nms"}


def render(result: dict[str, Any]) -> Group:
    t = Table(title=f"tune {result['tune_id']} · {result['workload']} · {result['mode']} "
                    f"(× = setting / baseline #1)", title_justify="left", pad_edge=False, padding=(0, 1),
              box=box.SIMPLE_HEAD)
    t.add_column("setting", overflow="fold")
    # a mixed workload's own column (TTFT of the long prompts) only when a row has it
    keys = [k for k in METRIC_KEYS if k[0] not in OPTIONAL_KEYS
            or any((r.get("metrics") or {}).get(k[0]) is not None for r in result["settings"])]
    for key, _, _unit, _ in keys:
        t.add_column(_SHORT[key], justify="right", min_width=5)
    has_roof = False  # the roof goes on a line of its own below (80 columns)
    wide = flagged = False
    notes: list[Text] = []
    roofs: list[str] = []
    for r in result["settings"]:
        label = r["label"] + (" *" if r.get("resumed") else "")
        if r["status"] != "ok":
            t.add_row(f"{r['index'] + 1} {label}", Text("FAIL", style="red"), *[""] * (len(keys) - 1 + has_roof))
            notes.append(Text(f"#{r['index'] + 1} failed: {r.get('reason')}", style="red"))
            if r.get("log_tail"):
                notes.append(Text(f"  log {r.get('log_path')}:", style="dim"))
                notes += [Text("    " + ln, style="dim") for ln in r["log_tail"][-3:]]
            continue
        cells = []
        ivs = r.get("intervals") or {}
        for key, _, unit, _ in keys:
            v = r["metrics"].get(key)
            ratio = (r.get("vs_baseline") or {}).get(key)
            cell = _num(v, unit) + (f"\n{_ratio(ratio)}" if ratio is not None and r["index"] != 0 else "")
            iv = Interval.from_json(ivs[key]) if isinstance(ivs.get(key), dict) else None
            if v is not None and iv is not None and iv.known and not iv.tight():
                cell += f"\n±{min(99, round(100 * iv.rel_halfwidth))}%"  # the 95 % interval is wider than ±10 %
                wide = True
            if key in (r.get("unstable") or []):
                cell += " !"
                flagged = True
            cells.append(cell)
        c = r.get("ceiling") or {}
        if c.get("decode_tok_s"):
            eff = c.get("decode_efficiency")
            roofs.append(f"#{r['index'] + 1} {c['decode_tok_s']:.0f} tok/s"
                         + (f" ({100 * eff:.0f} % reached)" if eff is not None else ""))
        t.add_row(f"{r['index'] + 1} {label}", *cells)
    if roofs:
        notes.append(Text("decode bandwidth roof (batch 1): " + "; ".join(roofs)))
    if wide:
        notes.append(Text("±N%: the 95 % interval of a figure wider than ±10 % (its repeats spread); the finding "
                          "claims a change only where the intervals do not overlap", style="dim"))
    if flagged:
        notes.append(Text("!: the setting's run flagged the figure unstable (its repeats still disagreed); no "
                          "finding rests on it", style="dim"))
    if len(keys) > len(METRIC_KEYS) - len(OPTIONAL_KEYS):
        notes.append(Text("TTFT long: TTFT p50 of the long prompts (≥ half the longest prompt)", style="dim"))
    runs = ", ".join(f"#{r['index'] + 1} {r['run_id']}" for r in result["settings"] if r.get("run_id"))
    lines = [Text(s) for s in result.get("finding") or []]
    if any(r.get("resumed") for r in result["settings"]):
        notes.insert(0, Text("* measured earlier, reused from the store (resumed tune)", style="dim"))
    rec = result.get("recommended")
    if rec:
        lines.append(Text(f"recommended for the SLO: #{rec['index'] + 1} {rec['label']} — {rec['reason']}"
                          if rec.get("index") is not None else f"recommended for the SLO: none — {rec['reason']}"))
    if runs:
        lines.append(Text(f"stored runs: {runs} (tune run {result.get('run_id')})", style="dim"))
    return Group(t, *notes, *lines)
