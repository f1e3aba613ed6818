"""The report's "TTFT by turn" section for conversation runs (issue 17): the stored summary's ``turns``
rows (``bench --dataset conversation``, :func:`phasescope.load.conversation_stats.turn_rows`) as a table —
nothing re-derived here. Every string is escaped."""

from __future__ import annotations

from typing import Any

from phasescope.report.figure import Run, esc
from phasescope.report.sections import _f


def _tok(v: Any) -> str:
    x = _f(v)
    return "—" if x is None else f"{x:,.0f}"


def turns_html(runs: list[Run]) -> str:
    """"TTFT by turn" for conversation runs: the stored summary's ``turns`` rows (``bench --dataset
    conversation``) — prompt and cached tokens, median and p99 TTFT per turn index; empty otherwise."""
    parts = []
    for info, _ in runs:
        s = info.summary if isinstance(info.summary, dict) else {}
        rows = [r for r in (s.get("turns") or []) if isinstance(r, dict) and r.get("turn") is not None]
        if not rows:
            continue

        def ms(v: Any) -> str:
            x = _f(v)
            return "—" if x is None else f"{x:,.1f} ms"

        body = "".join(
            f"<tr><td>{esc(r.get('turn'))}</td><td>{esc(r.get('n', '—'))}</td><td>{esc(_tok(r.get('prompt_tokens_mean')))}</td>"
            f"<td>{esc(_tok(r.get('cached_tokens_mean')) if r.get('cached_tokens_mean') is not None else '— (not reported)')}</td>"
            f"<td>{esc(ms(r.get('median_ttft_ms')))}</td><td>{esc(ms(r.get('p99_ttft_ms')))}</td></tr>"
            for r in rows)
        first, last = _f(rows[0].get("median_ttft_ms")), _f(rows[-1].get("median_ttft_ms"))
        note = ""
        if first and last is not None and len(rows) > 1:
            note = (f"<div class=meta>median TTFT of turn {esc(rows[-1]['turn'])} is {last / first:.2f}× turn "
                    f"{esc(rows[0]['turn'])}'s, with prompts of {esc(_tok(rows[-1].get('prompt_tokens_mean')))} vs "
                    f"{esc(_tok(rows[0].get('prompt_tokens_mean')))} tokens</div>")
        parts.append(
            f"<h3>TTFT by turn · {esc(info.id)}</h3><table class=turns><thead><tr><th>turn</th><th>n</th>"
            f"<th>prompt tokens (mean)</th><th>cached tokens (mean)</th><th>TTFT p50</th><th>TTFT p99</th></tr></thead>"
            f"<tbody>{body}</tbody></table>{note}")
    return "".join(parts)
