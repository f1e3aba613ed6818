"""A stored tune in ``report``: its table and one plot per metric across the settings.

A tune run (kind ``tune``) stores the ``tune --json`` document as its summary
(:mod:`phasescope.tune.run`): per setting ``metrics``, ``vs_baseline`` (measured ÷ the baseline's)
and, where plan could simulate it, ``predicted_vs_baseline``. :func:`tune_html` renders the table
(each metric's value and measured ratio, plan's predicted ratio beside it, the finding);
:func:`tune_plots` draws, per metric of :data:`PLOTTED`, the measured ratio and plan's predicted
ratio for each setting (1 = the baseline). Nothing here recomputes a number: every value is the
stored one, so the report says what ``tune`` printed.
"""

from __future__ import annotations

from typing import Any

from phasescope.report.figure import Plot, Run, colour, esc, layout

__all__ = ["PLOTTED", "tune_html", "tune_plots", "tune_summaries"]

#: the metrics plotted across settings: (key, title, higher is better); plan predicts the first four
PLOTTED: tuple[tuple[str, str, bool], ...] = (
    ("decode_tok_s", "decode tok/s", True),
    ("ttft_p50_s", "TTFT p50", False),
    ("itl_p50_s", "ITL p50", False),
    ("throughput_tok_s", "throughput", True),
    ("itl_p99_s", "ITL p99", False),
    ("itl_max_s", "longest pause", False),
    ("ttft_long_p50_s", "TTFT of the long prompts", False),
)
#: plotted and tabled only when a setting measured it (the long prompts of a mixed-length workload)
OPTIONAL = frozenset({"ttft_long_p50_s"})


def _columns(s: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The metrics of :data:`PLOTTED` this tune has: an optional one only when some setting measured it."""
    rows = [r for r in s.get("settings") or [] if isinstance(r, dict)]
    return [c for c in PLOTTED if c[0] not in OPTIONAL
            or any((r.get("metrics") or {}).get(c[0]) is not None for r in rows)]


def tune_summaries(runs: list[Run]) -> list[tuple[str, dict[str, Any]]]:
    """(run id, stored tune document) of each tune run with settings."""
    out = []
    for info, _ in runs:
        s = info.summary if isinstance(info.summary, dict) else {}
        if info.kind == "tune" and isinstance(s.get("settings"), list) and s["settings"]:
            out.append((info.id, s))
    return out


def _x(r: dict[str, Any]) -> str:
    return esc(f"#{int(r.get('index', 0)) + 1} {r.get('label') or r.get('params')}")


def tune_plots(runs: list[Run]) -> list[Plot]:
    """One plot per metric per tune run; [] without a tune run (never listed as skipped)."""
    import plotly.graph_objects as go

    plots = []
    tunes = tune_summaries(runs)
    for n, (rid, s) in enumerate(tunes):
        ok = [r for r in s["settings"] if isinstance(r, dict) and r.get("status") == "ok"]
        for key, title, higher in _columns(s):
            xs = [_x(r) for r in ok]
            meas = [(r.get("vs_baseline") or {}).get(key) for r in ok]
            pred = [(r.get("predicted_vs_baseline") or {}).get(key) for r in ok]
            if not any(v is not None for v in meas + pred):
                continue
            fig = go.Figure()
            fig.add_trace(go.Scatter(x=xs, y=meas, mode="lines+markers", name="measured ÷ baseline",
                                     line={"color": colour(0)}))
            if any(v is not None for v in pred):
                fig.add_trace(go.Scatter(x=xs, y=pred, mode="lines+markers", name="plan predicted ÷ baseline",
                                         line={"color": colour(1), "dash": "dash"}))
            fig.add_hline(y=1.0, line={"color": "#999", "width": 1})
            better = "higher is better" if higher else "lower is better"
            layout(fig, f"tune {esc(s.get('tune_id') or rid)}: {title} across settings", "setting",
                   f"{title} ÷ baseline ({better})")
            name = f"tune_{key}" + (f"_{n + 1}" if len(tunes) > 1 else "")
            missing = [x for x, p in zip(xs, pred) if p is None]
            note = ("plan predicted nothing for " + ", ".join(missing)) if missing and any(p is not None for p in pred) else ""
            plots.append(Plot(name, f"tune: {title}", fig, note))
    return plots


def _num(v: Any, key: str) -> str:
    if v is None:
        return "—"
    if not key.endswith("tok_s"):  # seconds
        return f"{v * 1000:.1f} ms"
    return f"{v:.1f} tok/s"


def _ratio(v: Any) -> str:
    return "" if v is None else f"{v:.2f}×"


def tune_html(runs: list[Run]) -> str:
    """The table of each tune run (empty without one)."""
    parts = []
    for rid, s in tune_summaries(runs):
        cols = _columns(s)
        head = "".join(f"<th>{esc(t)}</th>" for _, t, _ in cols)
        rows = []
        for r in s["settings"]:
            if not isinstance(r, dict):
                continue
            if r.get("status") != "ok":
                rows.append(f"<tr><td>{_x(r)}</td><td colspan={len(cols)}>failed: {esc(r.get('reason'))}</td></tr>")
                continue
            cells = []
            for key, _, _ in cols:
                v = (r.get("metrics") or {}).get(key)
                m = (r.get("vs_baseline") or {}).get(key)
                p = (r.get("predicted_vs_baseline") or {}).get(key)
                extra = "" if r.get("index") == 0 else (f"<br>measured {_ratio(m)}" if m is not None else "") + (
                    f"<br><i>plan {_ratio(p)}</i>" if p is not None else "")
                cells.append(f"<td>{_num(v, key)}{extra}</td>")
            rows.append(f"<tr><td>{_x(r)}</td>{''.join(cells)}</tr>")
        finds = "".join(f"<li>{esc(f)}</li>" for f in s.get("finding") or [])
        pr = s.get("prediction") or {}
        pnote = (f"plan's prediction: the simulator calibrated from the baseline run {esc(pr.get('calibrated_from'))}"
                 if pr.get("calibrated_from") else f"no plan prediction: {esc(pr.get('reason'))}" if pr.get("reason") else "")
        parts.append(f"<h3>tune {esc(s.get('tune_id') or rid)} · {esc(s.get('workload'))} · {esc(s.get('mode'))}</h3>"
                     f"<table class=tune><tr><th>setting</th>{head}</tr>{''.join(rows)}</table>"
                     + (f"<p class=note>{pnote}</p>" if pnote else "") + (f"<ul>{finds}</ul>" if finds else ""))
    return f"<h2>Tune</h2>{''.join(parts)}" if parts else ""
