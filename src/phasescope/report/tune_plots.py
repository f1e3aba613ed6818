"""A stored tune in ``report``: its table and one plot per metric across the settings.

A tune run (kind ``tune``) stores the ``tune --json`` document as its summary
(:mod:`phasescope.tuning.run`): per setting ``metrics``, ``vs_baseline`` (measured ÷ the baseline's)
and, where plan could simulate it, ``predicted_vs_baseline``. :func:`tune_html` renders the table
(each metric's value and measured ratio, plan's predicted ratio beside it, the finding);
:func:`tune_plots` draws, per metric of :data:`PLOTTED`, the measured ratio and plan's predicted
ratio for each setting (1 = the baseline). Nothing here recomputes a plotted value: every value is
the stored one, so the report says what ``tune`` printed.

The spread beside each value is the one tune's finding speaks of ("cannot tell, within the repeat
spread"): the range (min–max) of the per-request samples its noise rule compares
(:func:`phasescope.tuning.table.row_metrics` over the setting run's records, read from the store the
tune run is in, :func:`setting_records`), drawn as error bars ÷ the baseline's value, with the
baseline's own range as a grey band around 1 — where a setting's bar reaches into the band, the
finding says "cannot tell". The value axis always spans at least 0.9–1.1, so a 1 % change does not
fill the plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phasescope.report.figure import MIN_SPREAD, Plot, Run, colour, esc, layout
from phasescope.store import RunInfo

__all__ = ["PLOTTED", "setting_records", "setting_samples", "tune_header", "tune_html", "tune_plots",
           "tune_summaries"]

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
    return [(info.id, s) for info, s in _tune_docs(runs)]


def _tune_docs(runs: list[Run]) -> list[tuple[RunInfo, dict[str, Any]]]:
    out = []
    for info, _ in runs:
        s = info.summary if isinstance(info.summary, dict) else {}
        if info.kind == "tune" and isinstance(s.get("settings"), list) and s["settings"]:
            out.append((info, s))
    return out


def _store_of(info: RunInfo) -> Any:
    """The run store ``info`` was read from (its records live in ``<store dir>/records/``), or None."""
    from phasescope.store import open_store

    rp = info.records_path
    if rp is None:
        return None
    d = Path(rp).parent.parent
    if not (d / "runs.db").exists():
        return None
    try:
        return open_store(d)
    except Exception:  # noqa: BLE001 - an unreadable store: the plot goes without the spread
        return None


def setting_records(info: RunInfo, rows: list[dict[str, Any]]) -> dict[int, list[Any]]:
    """Each ok setting's records (by ``index``) from the store the tune run ``info`` is in, read by
    the setting's ``run_id``; settings whose run is not there are left out."""
    st = _store_of(info)
    out: dict[int, list[Any]] = {}
    if st is None:
        return out
    for r in rows:
        rid = r.get("run_id")
        if not rid or r.get("status") != "ok":
            continue
        try:
            recs = st.load_records(str(rid))
        except Exception:  # noqa: BLE001 - a setting run deleted since: no spread for it
            continue
        if recs:
            out[int(r.get("index", 0))] = recs
    return out


def setting_samples(info: RunInfo, rows: list[dict[str, Any]]) -> dict[int, dict[str, list[float]]]:
    """Per ok setting (by ``index``), per metric, the samples tune's noise rule compares: the row's
    stored ``samples`` where tune kept them, else :func:`phasescope.tuning.table.row_metrics` over the
    setting run's records (:func:`setting_records`)."""
    from phasescope.tuning.table import row_metrics

    out: dict[int, dict[str, list[float]]] = {}
    missing = [r for r in rows if not isinstance(r.get("samples"), dict) or not r.get("samples")]
    recs = setting_records(info, missing) if missing else {}
    for r in rows:
        i = int(r.get("index", 0))
        if isinstance(r.get("samples"), dict) and r["samples"]:
            out[i] = r["samples"]
        elif i in recs:
            out[i] = row_metrics(recs[i])[1]
    return out


def _range(vals: Any) -> tuple[float, float] | None:
    v = [float(x) for x in vals or [] if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return (min(v), max(v)) if len(v) >= 2 else None


def tune_header(info: RunInfo, s: dict[str, Any]) -> str:
    """The tune card's header: workload, settings (and mode), what varied, the model and engine the
    settings ran (from the stored setting runs' summaries), the server (embedded or ``--serve``)."""
    rows = [r for r in s.get("settings") or [] if isinstance(r, dict)]
    summ = [r.get("summary") for r in rows if isinstance(r.get("summary"), dict)]

    def first(key: str) -> str | None:
        return next((str(x[key]) for x in summ if x.get(key)), None)

    model = info.model or first("model")
    eng = " ".join(x for x in (info.engine or first("engine"), info.engine_version or first("engine_version")) if x)
    varied = list(dict.fromkeys(k for r in rows for k in (r.get("params") or {})))
    parts = [f"{s.get('workload') or '?'} workload", f"{len(rows)} settings ({s.get('mode') or 'grid'})"]
    if varied:
        parts.append("varying " + ", ".join(varied))
    parts += [x for x in (model, eng) if x]
    parts.append("embedded engine" if not s.get("serve") else f"--serve {s['serve']}")
    return " · ".join(parts)


def _x(r: dict[str, Any]) -> str:
    return esc(f"#{int(r.get('index', 0)) + 1} {r.get('label') or r.get('params')}")


def tune_plots(runs: list[Run]) -> list[Plot]:
    """One plot per metric per tune run; [] without a tune run (never listed as skipped)."""
    import plotly.graph_objects as go

    plots = []
    tunes = _tune_docs(runs)
    for n, (info, s) in enumerate(tunes):
        rid = info.id
        ok = [r for r in s["settings"] if isinstance(r, dict) and r.get("status") == "ok"]
        samples = setting_samples(info, ok)
        base = next((r for r in ok if int(r.get("index", 0)) == 0), None)
        for key, title, higher in _columns(s):
            xs = [_x(r) for r in ok]
            meas = [(r.get("vs_baseline") or {}).get(key) for r in ok]
            pred = [(r.get("predicted_vs_baseline") or {}).get(key) for r in ok]
            if not any(v is not None for v in meas + pred):
                continue
            bv = (base.get("metrics") or {}).get(key) if base else None
            # each setting's repeat range ÷ the baseline's value, around its stored ratio
            spread = [(_range((samples.get(int(r.get("index", 0))) or {}).get(key)) if bv else None) for r in ok]
            plus = [None if sp is None or m is None else max(0.0, sp[1] / bv - m) for sp, m in zip(spread, meas)]
            minus = [None if sp is None or m is None else max(0.0, m - sp[0] / bv) for sp, m in zip(spread, meas)]
            fig = go.Figure()
            drawn_spread = any(v is not None for v in plus)
            base_band = spread[ok.index(base)] if base in ok and bv else None
            if base_band is not None:
                fig.add_hrect(y0=base_band[0] / bv, y1=base_band[1] / bv, fillcolor="rgba(120,120,120,0.16)",
                              line_width=0, layer="below")
                fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="the baseline's repeat range",
                                         marker={"symbol": "square", "size": 14, "color": "rgba(120,120,120,0.3)"},
                                         hoverinfo="skip"))
            meas_trace: dict[str, Any] = {
                "x": xs, "y": meas, "mode": "markers", "name": "measured ÷ baseline",
                "marker": {"color": colour(0), "size": 10}, "line": {"color": colour(0)},
                "hovertemplate": "%{x}<br>measured %{y:.3f}× the baseline<extra></extra>"}
            if drawn_spread:
                meas_trace["error_y"] = {"type": "data", "symmetric": False, "array": [v or 0.0 for v in plus],
                                         "arrayminus": [v or 0.0 for v in minus], "color": colour(0), "width": 6,
                                         "thickness": 1.5}
            fig.add_trace(go.Scatter(**meas_trace))
            if any(v is not None for v in pred):
                fig.add_trace(go.Scatter(x=xs, y=pred, mode="markers", name="plan predicted ÷ baseline",
                                         marker={"color": colour(1), "symbol": "diamond-open", "size": 11},
                                         line={"color": colour(1), "dash": "dash"},
                                         hovertemplate="%{x}<br>plan predicted %{y:.3f}×<extra></extra>"))
            fig.add_hline(y=1.0, line={"color": "#999", "width": 1})
            ends = [1.0 - MIN_SPREAD, 1.0 + MIN_SPREAD]
            ends += [m + p for m, p in zip(meas, plus) if m is not None and p is not None]
            ends += [m - p for m, p in zip(meas, minus) if m is not None and p is not None]
            ends += [v for v in meas + pred if v is not None]
            if base_band is not None:
                ends += [base_band[0] / bv, base_band[1] / bv]  # type: ignore[operator]
            lo, hi = min(ends), max(ends)
            pad = 0.06 * (hi - lo)
            better = "higher is better" if higher else "lower is better"
            layout(fig, f"tune {esc(s.get('tune_id') or rid)}: {title} across settings", "setting",
                   f"{title} ÷ baseline ({better})")
            fig.update_yaxes(range=[max(0.0, lo - pad), hi + pad])
            # the settings are categories: the band's legend-only trace (x None) made plotly guess a numeric
            # axis, and the settings' points vanished from it
            fig.update_xaxes(type="category", categoryorder="array", categoryarray=xs)
            name = f"tune_{key}" + (f"_{n + 1}" if len(tunes) > 1 else "")
            notes = []
            if drawn_spread:
                notes.append("bars: the range (min–max) of each setting's repeats ÷ the baseline's value — the "
                             "spread tune's noise rule compares; grey band: the baseline's own range. A setting "
                             "whose bar reaches into the band is one the finding calls \"cannot tell\"")
            elif samples:
                notes.append(f"no spread drawn: fewer than 2 samples of {title} per setting (no range to compare; "
                             "tune's finding cannot tell a change from noise on it either)")
            else:
                notes.append("no spread drawn: the setting runs' records are not in this store (tune's finding "
                             "compares each setting's repeat range)")
            missing = [x for x, p in zip(xs, pred) if p is None]
            if missing and any(p is not None for p in pred):
                notes.append("plan predicted nothing for " + ", ".join(missing))
            plots.append(Plot(name, f"tune: {title}", fig, "; ".join(notes)))
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
