"""The report's roofline view: attained vs physical ceiling per phase (decode tok/s and prefill tok/s,
one bar pair per prompt size), labelled with the stored efficiency and the binding roof — the
``ceilings.sizes`` rows probe stores, read by :func:`find_ceilings` and :func:`roofline_rows`.
"""

from __future__ import annotations

from typing import Any

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.measure.aggregate import median
from phasescope.report.figure import Plot, Run, colour, error_bars, esc, is_num, label, layout, ok_records, sample_ci
from phasescope.store import RunInfo


def find_ceilings(summary: Any) -> list[dict[str, float | None]]:
    """Ceiling rows ``{"prompt_tokens", "decode_tok_s", "prefill_tok_s"}`` found anywhere in a
    summary: nodes with ``decode_ceiling_tok_s``, ``prefill_ceiling_tok_s`` or ``prefill_floor_s``
    (then prefill tok/s = prompt_tokens / prefill_floor_s). ``prompt_tokens`` is None for a
    ceiling that does not depend on the prompt size."""
    rows: dict[Any, dict[str, float | None]] = {}

    def pos(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            n = pos(o.get("prompt_tokens"))
            dec = pos(o.get("decode_ceiling_tok_s"))
            pre = pos(o.get("prefill_ceiling_tok_s"))
            floor = pos(o.get("prefill_floor_s"))
            if pre is None and floor is not None and n is not None:
                pre = n / floor
            if dec is not None or pre is not None:
                row = rows.setdefault(n, {"prompt_tokens": n, "decode_tok_s": None, "prefill_tok_s": None})
                row["decode_tok_s"] = row["decode_tok_s"] or dec
                row["prefill_tok_s"] = row["prefill_tok_s"] or pre
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(summary)
    return sorted(rows.values(), key=lambda r: r["prompt_tokens"] or 0)


def _size_of(r: RequestRecord) -> Any:
    return r.tags.get("prompt_tokens_target") or r.tags.get("prompt_tokens") or r.prompt_tokens_requested or r.prompt_tokens


def _prefill_rate(rs: list[RequestRecord]) -> float | None:
    srv = [derive.server_prefill_tok_s(r) for r in rs]
    if any(v is not None for v in srv):
        return median(srv)
    return median([derive.prefill_tok_s(r) for r in rs])


def stored_sizes(summary: Any) -> dict[float, dict[str, Any]]:
    """The probe summary's per-size rows (``sizes``), by prompt tokens."""
    out: dict[float, dict[str, Any]] = {}
    if isinstance(summary, dict):
        for s in summary.get("sizes") or []:
            if isinstance(s, dict):
                n = s.get("prompt_tokens") or s.get("prompt_tokens_target")
                if is_num(n):
                    out[float(n)] = s
    return out


def _stored_ceiling_rows(summary: Any) -> dict[float | None, dict[str, Any]]:
    ce = summary.get("ceilings") if isinstance(summary, dict) else None
    rows = ce.get("sizes") if isinstance(ce, dict) else None
    out: dict[float | None, dict[str, Any]] = {}
    for r in rows or []:
        if isinstance(r, dict):
            n = r.get("prompt_tokens")
            out[float(n) if is_num(n) else None] = r
    return out


def roofline_rows(info: RunInfo, recs: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per (phase, prompt size) with ``phase``, ``prompt_tokens``, ``attained_tok_s``,
    ``ceiling_tok_s``, ``efficiency`` and ``binding`` — stored values first: the probe summary's
    ``sizes`` (decode_tok_s; server prefill_tok_s, else client) and ``ceilings.sizes``
    (decode_ceiling_tok_s, decode_efficiency, decode_binding, prefill_floor_s → prompt ÷ floor,
    prefill_efficiency); a size without a stored rate takes the median of its single-stream
    records (derive)."""
    ceil = find_ceilings(info.summary)
    if not ceil:
        return []
    stored = stored_sizes(info.summary)
    crow = _stored_ceiling_rows(info.summary)
    by: dict[float, list[RequestRecord]] = {}
    for r in ok_records(recs):
        if r.tags.get("concurrency") in (None, 1):
            n = _size_of(r)
            if is_num(n):
                by.setdefault(float(n), []).append(r)
    sizes = sorted(set(by) | set(stored)) or [None]  # type: ignore[list-item]
    out = []
    for phase in ("decode", "prefill"):
        key = f"{phase}_tok_s"
        for n in sizes:
            c = next((r for r in ceil if r["prompt_tokens"] == n), None) or next(
                (r for r in ceil if r["prompt_tokens"] is None), None)
            if c is None or c[key] is None:
                continue
            s = stored.get(n) if n is not None else None
            srv = (s or {}).get("server") or {}
            recs_n = by.get(n, []) if n is not None else []
            if phase == "decode":
                att = (s or {}).get("decode_tok_s")
                if att is None and recs_n:
                    att = median([derive.decode_tok_s(r) for r in recs_n])
                ci = sample_ci((s or {}).get("decode_tok_s_ci"), [derive.decode_tok_s(r) for r in recs_n])
            else:
                from_server = srv.get("prefill_tok_s") is not None
                att = srv.get("prefill_tok_s") or (s or {}).get("prefill_tok_s")
                if att is None and recs_n:
                    att = _prefill_rate(recs_n)
                rates = [(derive.server_prefill_tok_s(r) if from_server or (s is None and any(
                    derive.server_prefill_tok_s(x) is not None for x in recs_n)) else derive.prefill_tok_s(r))
                         for r in recs_n]
                ci = sample_ci(srv.get("prefill_tok_s_ci") if from_server else (s or {}).get("prefill_tok_s_ci"),
                               rates)
            cr = crow.get(n) or crow.get(None) or {}
            out.append({"phase": phase, "prompt_tokens": n, "attained_tok_s": att, "attained_ci": ci,
                        "ceiling_tok_s": c[key],
                        "efficiency": cr.get(f"{phase}_efficiency"),
                        "binding": cr.get("decode_binding") if phase == "decode" else "compute"})
    return out


def _pale(hex_colour: str, alpha: float = 0.22) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _pct_text(x: float) -> str:
    """As the phase card writes a share: one decimal below 10 %."""
    return f"{x * 100:.1f}%" if x < 0.1 else f"{x * 100:.0f}%"


def plot_ceilings(runs: list[Run]) -> Plot | str:
    """The roofline view, per phase: attained tok/s next to the physical ceiling (a pale bar
    behind a solid one), one row per prompt size, labelled with efficiency and binding roof."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    per_run = [(k, info, roofline_rows(info, recs)) for k, (info, recs) in enumerate(runs)]
    per_run = [x for x in per_run if x[2]]
    if not per_run:
        from phasescope.theory.inputs import CEILING_FLAGS

        return f"no ceilings in the runs' summaries (probe adds them when it knows the model shape and the device: {CEILING_FLAGS})"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("decode tok/s, one stream (memory-bandwidth roof)", "prefill tok/s (compute roof)"))
    several = len(per_run) > 1
    n_rows = 0
    for k, info, rows in per_run:
        c = colour(k)
        for col, phase in ((1, "decode"), (2, "prefill")):
            rs = [r for r in rows if r["phase"] == phase]
            if not rs:
                continue
            n_rows = max(n_rows, len(rs) * len(per_run))
            ys = [esc((f"{info.id} · " if several else "") + (f"{r['prompt_tokens']:g}-token prompt" if r["prompt_tokens"] else "any prompt"))
                  for r in rs]
            fig.add_trace(go.Bar(x=[r["ceiling_tok_s"] for r in rs], y=ys, orientation="h", name=f"{label(info)} · ceiling",
                                 legendgroup=info.id, showlegend=col == 1, marker={"color": _pale(c),
                                                                                  "line": {"color": c, "width": 1.5}},
                                 meta={"metric": "ceiling"}, text=[f"{esc(r['binding'])} roof" if r["binding"] else "" for r in rs],
                                 textposition="inside", insidetextanchor="end",
                                 hovertemplate="%{y}<br>ceiling %{x:,.0f} tok/s (%{text})<extra></extra>"), row=1, col=col)
            fig.add_trace(go.Bar(x=[r["attained_tok_s"] for r in rs], y=ys, orientation="h", name=f"{label(info)} · attained",
                                 error_x=error_bars([r["attained_tok_s"] for r in rs], [r["attained_ci"] for r in rs]),
                                 legendgroup=info.id, showlegend=col == 1, marker={"color": c}, meta={"metric": "attained"},
                                 text=[f"{_pct_text(r['efficiency'])} of ceiling" if is_num(r["efficiency"]) else "" for r in rs],
                                 textposition="outside", cliponaxis=False, textfont={"color": "#222"},
                                 hovertemplate="%{y}<br>attained %{x:,.1f} tok/s<br>%{text}<extra></extra>"), row=1, col=col)
    layout(fig, "Attained vs physical ceiling per phase (roofline)", "tok/s", "", barmode="overlay", bargap=0.35)
    fig.update_layout(height=max(380, 240 + 55 * n_rows), margin={"l": 130, "r": 30, "t": 70, "b": 130},
                      legend={"orientation": "h", "y": -0.32, "yanchor": "top"})
    # linear axes: a bar's length is its value, so an attained bar at 18 % of its ceiling is drawn 18 % as
    # long (on a log axis it read ~45 %); a ceiling far above the attained rate leaves a short bar, and the
    # label says the share
    fig.update_xaxes(title_text="decode tok/s", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="prefill tok/s", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(autorange="reversed")
    return Plot("ceilings", "attained vs ceiling (roofline)", fig,
                "pale bar: the physical ceiling of that phase (its binding roof named inside); solid bar: attained, "
                "labelled with the stored efficiency, its whisker the 95 % interval of the attained rate (stored, "
                "else from the repeats); both axes linear, so a bar's length is its share of the ceiling. decode: "
                "single-stream rate; prefill: server-side rate where reported, else prompt ÷ TTFT")
