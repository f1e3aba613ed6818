"""The report's HTML sections other than the plots: the phase card on top, the runs and
parameters tables, the findings, the per-endpoint table and the comparison view.

Every number shown comes from a stored summary (probe ``sizes`` / ``ceilings.sizes``, bench's
``median_ttft_ms``…, explain's ``findings``), from :func:`phasescope.report.compare.compare_runs`
(verdicts), from the run's own fields, or — for a run with no probe-shaped summary —
from :mod:`phasescope.measure.aggregate` over its records, the numbers ``show`` prints
(:mod:`phasescope.report.data`, embedded in the page as JSON). Nothing is re-derived here. Every string is escaped.

One job: the page's text around the plots — every section is a table or list of stored values, written
with the same formatters (:func:`fmt_ms`, :func:`field_text`…), so a number reads the same in the card,
the tables and the comparison view.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from phasescope.jsonutil import to_jsonable
from phasescope.report.figure import Run, colour, esc
from phasescope.report.plots import endpoint_rows
from phasescope.theory.inputs import CEILING_FLAGS


# --- formatting -------------------------------------------------------------------------------------
def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def fmt_ms(s: Any) -> str:
    """Seconds as ms below 1 s, else s; "—" when unknown."""
    x = _f(s)
    if x is None:
        return "—"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def fmt_rate(v: Any) -> str:
    x = _f(v)
    return "—" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def fmt_pct(v: Any) -> str:
    x = _f(v)
    if x is None:
        return "—"
    return f"{x * 100:.1f}%" if x < 0.1 else f"{x * 100:.0f}%"


def value_text(v: Any) -> str:
    """A parameter value as a person reads it: JSON scalars (true, null), lists joined."""
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)) and all(not isinstance(x, (dict, list)) for x in v):
        return ", ".join(value_text(x) for x in v)
    return json.dumps(to_jsonable(v), ensure_ascii=False)


def _proc_text(p: dict[str, Any]) -> str:
    """One process of a host sample (``{"pid", "comm", "cpu_share"}``) as ``python (pid 21177) 6.8 %``."""
    name = str(p.get("comm") or p.get("name") or "?") + (f" (pid {p['pid']})" if p.get("pid") is not None else "")
    share = _f(p.get("cpu_share") if "cpu_share" in p else p.get("share"))
    return name + (f" {share * 100:.1f} %" if share is not None else "")


def field_text(key: str, v: Any) -> str:
    """A stored field as a person reads it in the side-by-side tables: a share (``*_share``, 0–1) as
    a percentage, a list of processes (``top_other``) as ``python (pid 21177) 6.8 %, …``, other
    lists of objects as ``k: v`` pairs, an empty list as "none"; else :func:`value_text`."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and key.rsplit(".", 1)[-1].endswith("_share"):
        return f"{v * 100:.1f} %"
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        if all(isinstance(x, dict) for x in v):
            if all(("comm" in x or "name" in x) for x in v):
                return ", ".join(_proc_text(x) for x in v)
            return "; ".join(", ".join(f"{k}: {field_text(str(k), x2)}" for k, x2 in x.items()) for x in v)
        if all(isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) for x in v):
            return "; ".join(f"{x[0]}: {field_text(x[0], x[1])}" for x in v)  # [[name, values], …]
    if isinstance(v, dict):
        return ", ".join(f"{k}: {field_text(k, x)}" for k, x in v.items()) or "none"
    return value_text(v)


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (``workload.prompts.unique``); other values as they are."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                out.update(flatten(v, key + "."))
            else:
                out[key] = v
    return out


# --- the phase card ---------------------------------------------------------------------------------
def _walk_dicts(o: Any) -> Iterable[dict[str, Any]]:
    if isinstance(o, dict):
        yield o
        for v in o.values():
            yield from _walk_dicts(v)
    elif isinstance(o, list):
        for v in o:
            yield from _walk_dicts(v)


def probe_sizes(summary: Any) -> tuple[list[dict[str, Any]], dict[Any, dict[str, Any]]]:
    """The first probe-shaped node (``sizes`` rows with ``ttft_s``) and its ``ceilings.sizes`` by size."""
    for node in _walk_dicts(summary):
        sizes = node.get("sizes")
        if isinstance(sizes, list) and sizes and all(isinstance(s, dict) for s in sizes) and any(
                "ttft_s" in s or "decode_tok_s" in s for s in sizes):
            ce = node.get("ceilings") if isinstance(node.get("ceilings"), dict) else {}
            crow = {r.get("prompt_tokens"): r for r in ce.get("sizes") or [] if isinstance(r, dict)}
            return sizes, crow
    return [], {}


def findings_of(summary: Any) -> list[Any]:
    s = summary if isinstance(summary, dict) else {}
    fs = s.get("findings")
    if fs is None and isinstance(s.get("diagnosis"), dict):
        fs = s["diagnosis"].get("findings")
    return fs if isinstance(fs, list) else []


def _warnings_of(summary: Any) -> list[Any]:
    s = summary if isinstance(summary, dict) else {}
    ws = s.get("warnings")
    return ws if isinstance(ws, list) else []


def _card_table(head: list[str], rows: list[tuple[str, list[str]]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = []
    for label, vals in rows:
        if not vals:
            body.append(f'<tr class=phase><td colspan="{len(head)}">{esc(label)}</td></tr>')
        else:
            body.append(f"<tr><td>{esc(label)}</td>" + "".join(f"<td>{esc(v)}</td>" for v in vals) + "</tr>")
    return f"<table class=cardtab><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _spread(row: dict[str, Any], key: str, fmt: Any) -> str:
    """A probe figure as the card prints it: plain where its stored interval is tight (or absent), else with
    the range of its repeats — ``953.0 ms (248.0 ms–3.41 s, 3 runs)``."""
    from phasescope.measure.interval import Interval

    d = (row.get("intervals") or {}).get(key)
    iv = Interval.from_json(d) if isinstance(d, dict) and "value" in d and row.get(key) is not None else None
    return fmt(row.get(key)) if iv is None or not iv.known or iv.tight() else iv.fmt(fmt)


def _probe_card(sizes: list[dict[str, Any]], crow: dict[Any, dict[str, Any]]) -> str:
    head = [""] + [f"{s.get('prompt_tokens') or s.get('prompt_tokens_target')}-token prompt" for s in sizes]
    cr = [crow.get(s.get("prompt_tokens") or s.get("prompt_tokens_target")) or {} for s in sizes]
    srv = [s.get("server") or {} for s in sizes]
    rows: list[tuple[str, list[str]]] = [
        ("PREFILL", []),
        ("TTFT", [_spread(s, "ttft_s", fmt_ms) for s in sizes]),
        ("prefill tok/s", [_spread(s, "prefill_tok_s", fmt_rate) for s in sizes]),
    ]
    if any(x.get("prefill_tok_s") is not None for x in srv):
        rows.append(("prefill tok/s (server)", [_spread(x, "prefill_tok_s", fmt_rate) for x in srv]))
    if any(c.get("prefill_floor_s") is not None for c in cr):
        rows += [("prefill floor (ceiling)", [fmt_ms(c.get("prefill_floor_s")) for c in cr]),
                 ("prefill efficiency", [fmt_pct(c.get("prefill_efficiency")) for c in cr])]
    rows += [
        ("DECODE", []),
        ("decode tok/s (one stream)", [_spread(s, "decode_tok_s", fmt_rate) for s in sizes]),
        ("ITL p50 / p99", [f"{fmt_ms(s.get('itl_p50_s'))} / {fmt_ms(s.get('itl_p99_s'))}" for s in sizes]),
    ]
    rows += _spec_rows([s.get("spec_decode") for s in sizes])
    if any(c.get("decode_ceiling_tok_s") is not None for c in cr):
        rows += [("decode ceiling tok/s", [fmt_rate(c.get("decode_ceiling_tok_s")) for c in cr]),
                 ("decode efficiency", [fmt_pct(c.get("decode_efficiency")) for c in cr]),
                 ("binding roof", [esc(c.get("decode_binding") or "—") for c in cr])]
    else:
        rows.append(("ceilings", [f"— (unknown model shape or device: probe {CEILING_FLAGS})"] + [""] * (len(sizes) - 1)))
    return _card_table(head, rows)


def _spec_rows(sds: list[Any]) -> list[tuple[str, list[str]]]:
    """Speculative decoding (issue 33), the rows probe's console card prints, only where a column has
    ``spec_decode``: accepted / drafted (the rate) and the tokens each verified step emitted."""
    from phasescope.probing.card import _spec

    sds = [sd if isinstance(sd, dict) else None for sd in sds]
    if not any(sds):
        return []
    return [("speculation: accepted / drafted", [esc(_spec(sd)) for sd in sds]),
            ("tokens per verified step", [f"{t:.2f}" if sd and (t := _f(sd.get("tokens_per_step"))) is not None
                                          else "—" for sd in sds])]


def _bench_card(s: dict[str, Any]) -> str:
    from phasescope.load.bench_ceilings import card_cell as bench_card_cell

    def ms(k: str) -> str:
        v = _f(s.get(k))
        return "—" if v is None else f"{v:.1f} ms"

    rows: list[tuple[str, list[str]]] = [
        ("PREFILL", []),
        ("TTFT p50 / p99", [f"{ms('median_ttft_ms')} / {ms('p99_ttft_ms')}"]),
        ("DECODE", []),
        ("ITL p50 / p99", [f"{ms('median_itl_ms')} / {ms('p99_itl_ms')}"]),
        ("TPOT p50", [ms("median_tpot_ms")]),
        *_spec_rows([s.get("spec_decode")]),
        ("LOAD", []),
        ("output tok/s (all requests)", [fmt_rate(s.get("output_throughput"))]),
        ("requests/s", [f"{_f(s.get('request_throughput')):.2f}" if _f(s.get("request_throughput")) is not None else "—"]),
        ("completed / failed", [f"{s.get('completed', '—')} / {s.get('failed', '—')}"]),
        ("ceilings", [esc(bench_card_cell(s))]),  # load.bench_ceilings (issue 30)
    ]
    return _card_table(["", "this run"], rows)


def _explain_card(exps: dict[str, Any]) -> str:
    """explain: its prompt-scaling points (TTFT, prefill and decode per prompt size) and its
    context-fill points (decode per context, next to the bandwidth prediction): rows of the very views
    the console prints (:func:`phasescope.experiments.view.card_tables`), cell for cell."""
    from phasescope.experiments.view import card_tables

    return "".join(_card_table(head, rows) for head, rows in card_tables(exps))


def _tune_card(s: dict[str, Any]) -> str:
    """A tune run's card: its finding (one sentence per setting against the baseline, as tune
    printed it) and where the table and plots are."""
    lines = "".join(f"<li>{esc(x)}</li>" for x in s.get("finding") or [])
    rec = s.get("recommended")
    rec_text = ""
    if isinstance(rec, dict) and (rec.get("label") or rec.get("reason")):
        rec_text = ("<p>recommended: " + (f"<b>{esc(rec['label'])}</b>" if rec.get("label") else "none")
                    + (f" — {esc(rec['reason'])}" if rec.get("reason") else "") + "</p>")
    return (f"<h4>Finding</h4><ul class=cardfind>{lines}</ul>" if lines else "") + rec_text + (
        "<p class=muted>each setting's numbers: the Tune table below; each metric across the settings, with the "
        "repeat spread: the tune plots</p>")


def _finding_line(f: Any) -> str:
    if not isinstance(f, dict):
        return f"<li>{esc(f)}</li>"
    sev = esc(f.get("severity", "info"))
    return f'<li class="sev-{sev}"><span class=sev>{sev}</span> {esc(f.get("cause") or f.get("id"))}</li>'


def card_html(runs: list[Run]) -> str:
    """One card per run (at most four): the phase story first — TTFT and decode, their ceilings,
    efficiency and binding roof — and the findings, before any plot."""
    from phasescope.report.tune_plots import tune_header

    cards = []
    for k, (info, _) in enumerate(runs[:4]):
        s = info.summary if isinstance(info.summary, dict) else {}
        tune = info.kind == "tune" and isinstance(s.get("settings"), list) and bool(s["settings"])
        sizes, crow = ([], {}) if tune else probe_sizes(s)
        if sizes:
            table = _probe_card(sizes, crow)
        elif any(k2 in s for k2 in ("median_ttft_ms", "output_throughput", "median_itl_ms")):
            table = _bench_card(s)
        elif isinstance(s.get("experiments"), dict) and _explain_card(s["experiments"]):
            table = _explain_card(s["experiments"])
        elif tune:
            table = _tune_card(s)
        else:
            table = "<p class=muted>no phase numbers in this run's stored summary</p>"
        fs = findings_of(s)
        if fs:
            more = f"<li class=muted>… and {len(fs) - 4} more below</li>" if len(fs) > 4 else ""
            finds = f"<h4>Findings</h4><ul class=cardfind>{''.join(_finding_line(f) for f in fs[:4])}{more}</ul>"
        elif info.kind == "explain":
            finds = "<h4>Findings</h4><p class=muted>none: nothing the rules could pin on a cause</p>"
        elif tune:
            finds = ""  # the tune card is its finding
        else:
            finds = "<p class=muted>no diagnosis in this run (<code>phasescope explain</code> names causes)</p>"
        from phasescope.measure.warnings import to_json

        ws = to_json(_warnings_of(s))  # typed (kind, message, evidence, fix); old runs' strings as kind "note"
        warn = ""
        if ws:
            items = "".join(f'<li class="warning kind-{esc(w["kind"])}"><span class=sev>{esc(w["kind"])}</span> '
                            f'{esc(w["message"])}' + (f' <i>fix: {esc(w["fix"])}</i>' if w.get("fix") else "") + "</li>"
                            for w in ws)
            warn = f"<h4>Measurement warnings</h4><ul class=cardwarn>{items}</ul>"
        eng = " ".join(x for x in (info.engine, info.engine_version) if x) or "?"
        what = (tune_header(info, s) if tune else f"{info.model or '?'} · {eng}") + (
            f" · {info.device}" if info.device else "")
        cards.append(
            f'<div class=onecard style="border-top:4px solid {colour(k)}"><div class=cardhead><b>{esc(info.id)}</b> · '
            f"{esc(info.kind)} · {esc(what)}</div>{table}{finds}{warn}</div>")
    return f'<section class="card">{"".join(cards)}</section>'


# --- runs, parameters, findings, endpoints ------------------------------------------------------------
def runs_table_html(runs: list[Run]) -> str:
    from phasescope.measure.aggregate import measured

    rows = []
    for k, (i, recs) in enumerate(runs):
        meas = measured(recs)  # the warm-ups are counted apart, as in the phase card and `phasescope runs`
        ok = sum(1 for r in meas if r.ok)
        eng = " ".join(x for x in (i.engine, i.engine_version) if x)
        status = i.status + (f" ({i.error})" if i.error else "")
        dur = f"{i.duration_s:.1f} s" if i.duration_s is not None else "—"
        rows.append(
            f'<tr><td><span class=swatch style="background:{colour(k)}"></span>{esc(i.id)}</td>'
            f"<td>{esc(i.kind)}</td><td>{esc(status)}</td><td>{esc(i.started_iso)}</td><td>{esc(dur)}</td>"
            f"<td>{esc(i.model)}</td><td>{esc(i.target)}</td><td>{esc(eng)}</td><td>{esc(i.device)}</td>"
            f"<td>{ok}/{len(meas)}</td><td>{len(recs) - len(meas)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "kind", "status", "started (UTC)", "duration", "model", "target",
                                             "engine", "device", "ok/requests", "warm-up"))
    return f"<table class=runs><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _side_by_side(rows: list[tuple[str, list[Any]]], heads: list[str], *, only_diff: bool = False) -> str:
    body = []
    for key, vals in rows:
        texts = ["—" if v is None else field_text(key, v) for v in vals]
        diff = len(set(texts)) > 1
        if only_diff and not diff:
            continue
        cls = " class=diff" if diff and len(vals) > 1 else ""
        body.append(f"<tr{cls}><td>{esc(key)}</td>" + "".join(f"<td>{esc(t)}</td>" for t in texts) + "</tr>")
    if not body:
        return ""
    th = "".join(f"<th>{esc(h)}</th>" for h in heads)
    return f'<table class="params"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


#: key / value pairs per row of the one-run parameters table
PARAM_PAIRS_PER_ROW = 3


def params_html(runs: list[Run]) -> str:
    """One run's parameters as a key / value table, :data:`PARAM_PAIRS_PER_ROW` pairs a row
    (unset ones, null, listed by name below it); several runs: the comparison view's table."""
    if len(runs) != 1:
        return ""
    flat = flatten(runs[0][0].params)
    shown = [(k, v) for k, v in flat.items() if v is not None]
    unset = [k for k, v in flat.items() if v is None]
    if not flat:
        return ""
    rows = []
    for j in range(0, len(shown), PARAM_PAIRS_PER_ROW):
        cells = "".join(f"<td>{esc(k)}</td><td>{esc(field_text(k, v))}</td>"
                        for k, v in shown[j:j + PARAM_PAIRS_PER_ROW])
        rows.append(f"<tr>{cells}</tr>")
    th = "<th>parameter</th><th>value</th>" * min(PARAM_PAIRS_PER_ROW, max(1, len(shown)))
    more = f"<p class=note>not set: {esc(', '.join(unset))}</p>" if unset else ""
    return (f'<h3>Parameters</h3><table class="params pairs"><thead><tr>{th}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{more}")


def _ev_text(e: Any) -> str:
    if isinstance(e, dict) and isinstance(e.get("text"), str):
        return e["text"]  # the finding's own text (Evidence.text()): the words the console printed
    if isinstance(e, dict):
        v, u = e.get("value"), e.get("unit") or ""
        if isinstance(v, float):
            v = f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
        return f"{e.get('what', '')}: {v}{(' ' + u) if u else ''}" + (f" ({e['source']})" if e.get("source") else "")
    return str(e)


def _adv_text(a: Any) -> str:
    if isinstance(a, dict):
        return f"[{a.get('engine', 'any')}] {a.get('change', '')}" + (f" — {a['why']}" if a.get("why") else "")
    return str(a)


def findings_html(runs: list[Run]) -> str:
    parts = []
    for info, _ in runs:
        fs = findings_of(info.summary)
        und = (info.summary if isinstance(info.summary, dict) else {}).get("undecided")
        if not fs and not und:
            continue
        items = []
        for f in fs:
            if not isinstance(f, dict):
                items.append(f"<li>{esc(f)}</li>")
                continue
            sev = esc(f.get("severity", "info"))
            ev = "".join(f"<li>{esc(_ev_text(e))}</li>" for e in f.get("evidence") or [])
            adv = "".join(f"<li>{esc(_adv_text(a))}</li>" for a in f.get("advice") or [])
            items.append(
                f'<li class="finding sev-{sev}"><span class="sev">{sev}</span> <b>{esc(f.get("cause") or f.get("id"))}</b>'
                + (f"<ul class=evidence>{ev}</ul>" if ev else "") + (f"<div class=advice>change:<ul>{adv}</ul></div>" if adv else "")
                + "</li>")
        for u in und if isinstance(und, list) else []:  # what the console prints as "cannot tell", with its reason
            if isinstance(u, dict):
                items.append(f'<li class="finding undecided"><span class="sev">cannot tell</span> '
                             f'<b>{esc(u.get("id", ""))}</b>: {esc(u.get("reason", ""))}</li>')
        parts.append(f"<h3>Findings · {esc(info.id)}</h3><ul class=findings>{''.join(items)}</ul>")
    return "".join(parts)


def endpoints_html(runs: list[Run]) -> str:
    """The per-endpoint table (only runs with more than one endpoint; empty string otherwise)."""
    rows = endpoint_rows(runs)
    if not rows:
        return ""

    def f(v: Any, nd: int = 2) -> str:
        return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else (
            f"{v:.{nd}f}" if isinstance(v, float) else esc(v))

    body = []
    for r in rows:
        sm = r["server_metrics"] if isinstance(r["server_metrics"], dict) else None
        if sm is None:
            srv = "-"
        elif sm.get("available"):
            ss = sm.get("summary") or {}
            srv = (f"{sm.get('engine')}: max running {f(ss.get('max_running'), 0)}, KV peak "
                   f"{f(ss.get('kv_usage_peak'), 3)}, gen tokens {f(ss.get('generation_tokens'), 0)}")
        else:
            srv = f"none ({sm.get('reason') or 'unavailable'})"
        body.append(
            f"<tr><td>{esc(r['run'])}</td><td>{esc(r['endpoint'])}</td><td>{r['requests']}</td>"
            f"<td>{100 * r['share']:.0f}%</td><td>{f(r['completed'], 0)}</td><td>{f(r['failed'], 0)}</td>"
            f"<td>{f(r['request_throughput'])}</td><td>{f(r['output_throughput'], 1)}</td>"
            f"<td>{f(r['median_ttft_ms'])}</td><td>{f(r['p99_ttft_ms'])}</td>"
            f"<td>{f(r['median_itl_ms'])}</td><td>{f(r['p99_itl_ms'])}</td><td>{esc(srv)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "endpoint", "requests", "share", "ok", "failed", "req/s",
                                             "out tok/s", "p50 TTFT ms", "p99 TTFT ms", "p50 ITL ms", "p99 ITL ms",
                                             "server /metrics"))
    return (f"<h3>Per endpoint</h3><table class=\"runs endpoints\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


# --- the comparison view ------------------------------------------------------------------------------
#: Comparison.to_dict() keys rendered in their own way; any other key is shown generically
_KNOWN = {"a", "b", "confidence", "min_change", "min_effect", "run_level", "param_changes", "warnings", "metrics",
          "baseline", "gate"}
#: summary keys that describe the host or the server's settings (whichever a run stored)
HOST_KEYS = ("host", "host_contention")
SERVER_KEYS = ("server_settings", "server_props", "props")


def _metric_value(v: Any, unit: str) -> str:
    x = _f(v)
    if x is None:
        return "—"
    if unit == "s":
        return f"{x * 1e3:.2f} ms" if x < 10 else f"{x:.2f} s"
    return f"{x:,.1f} {esc(unit)}"


def _verdict_table(metrics: list[dict[str, Any]]) -> str:
    body = []
    for m in metrics:
        ch = _f(m.get("change"))
        lo, hi, unit = _f(m.get("ci_low")), _f(m.get("ci_high")), m.get("unit") or ""
        ci = "—" if lo is None or hi is None else f"[{_metric_value(lo, unit)}, {_metric_value(hi, unit)}]"
        v = str(m.get("verdict") or "")
        why = m.get("reason") or m.get("reasons") or m.get("why")
        why_text = value_text(why) if why else ""
        body.append(
            f"<tr class=\"v-{esc(v.replace(' ', '-'))}\"><td>{esc(m.get('label') or m.get('metric'))}</td>"
            f"<td>{esc(m.get('group') or 'all')}</td><td>{_metric_value(m.get('a'), unit)}</td><td>{_metric_value(m.get('b'), unit)}</td>"
            f"<td>{'—' if ch is None else f'{ch * 100:+.1f}%'}</td><td>{ci}</td>"
            f"<td>{m.get('n_a', '')} / {m.get('n_b', '')}</td><td class=verdict>{esc(v)}"
            + (f"<div class=why>{esc(why_text)}</div>" if why_text else "") + "</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("metric", "point", "A", "B", "change", "CI of B − A", "n A / B", "verdict"))
    return f"<table class=verdicts><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _first_dict(summary: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    s = summary if isinstance(summary, dict) else {}
    for k in keys:
        if isinstance(s.get(k), dict):
            return s[k]
    return {}


def environment_rows(runs: list[Run], extra: dict[str, list[Any]] | None = None) -> list[tuple[str, list[Any]]]:
    """Side-by-side rows: the run's engine/model/device/target, every parameter, the host
    contention (``host.*``) and server settings (``server.*``) each run stored, plus ``extra``."""
    infos = [i for i, _ in runs]
    rows: list[tuple[str, list[Any]]] = [
        (k, [getattr(i, k) for i in infos]) for k in ("kind", "engine", "engine_version", "model", "device", "api", "target")
    ]
    flat = [flatten(i.params) for i in infos]
    for k in dict.fromkeys(k for f in flat for k in f):
        rows.append((k, [f.get(k) for f in flat]))
    for prefix, keys in (("host.", HOST_KEYS), ("server.", SERVER_KEYS)):
        fl = [flatten(_first_dict(i.summary, keys), prefix) for i in infos]
        for k in dict.fromkeys(k for f in fl for k in f):
            rows.append((k, [f.get(k) for f in fl]))
    for k, vals in (extra or {}).items():
        rows.append((k, vals))
    return rows


def comparison_html(runs: list[Run], comparisons: list[dict[str, Any]]) -> str:
    """Run A (the first) against each other run: the verdicts with their reasons (compare's
    warnings, "not comparable" and any other fields compare adds), and what differs between the
    runs — parameters, host contention, server settings."""
    if len(runs) < 2:
        return ""
    ids = [i.id for i, _ in runs]
    parts = ['<section class="comparison"><h2>Comparison</h2>']
    extra: dict[str, list[Any]] = {}
    for c in comparisons:
        a, b = (c.get("a") or {}).get("id"), (c.get("b") or {}).get("id")
        parts.append(f"<h3>{esc(b)} (B) against {esc(a)} (A)</h3>")
        verdicts = [m.get("verdict") for m in c.get("metrics") or []]
        if verdicts:
            counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
            parts.append("<p class=verdictline>" + " · ".join(f"<span class=\"v-{esc(str(v).replace(' ', '-'))}\">"
                                                              f"{n} {esc(v)}</span>" for v, n in counts.items()) + "</p>")
        reasons = [w for w in c.get("warnings") or []]
        for key, val in c.items():
            if key in _KNOWN:
                continue
            if isinstance(val, bool) or val is None or isinstance(val, (int, float, str)):
                reasons.append(f"{key.replace('_', ' ')}: {value_text(val)}")
            elif isinstance(val, list):
                reasons += [f"{key.replace('_', ' ')}: {value_text(x) if not isinstance(x, str) else x}" for x in val]
            elif isinstance(val, dict):
                for k2, v2 in flatten(val, key + ".").items():
                    extra.setdefault(k2, [None] * len(runs))
                    pos = ids.index(b) if b in ids else len(runs) - 1
                    extra[k2][pos] = v2
        if reasons:
            items = "".join(f"<li>{esc(w.get('message') if isinstance(w, dict) else w)}</li>" for w in reasons)
            parts.append(f"<div class=reasons><b>Read the verdicts with care:</b><ul>{items}</ul></div>")
        parts.append(_verdict_table(c.get("metrics") or []))
        conf = _f(c.get("confidence"))
        mc = _f(c.get("min_change"))
        if conf is not None:
            how = ("Welch interval of the difference of the trial means (run-level)"
                   if (c.get("run_level") or {}).get("method") == "trials" else "bootstrap interval of B − A")
            least = f"{mc:.0%}" if mc is not None else "the metric's minimum effect (5 %; 10 % for p99)"
            parts.append(f"<p class=note>better / worse: the {conf:.0%} {how} excludes 0 and the "
                         f"change is at least {least} of A; otherwise within noise.</p>")
    rows = environment_rows(runs, extra)
    differ = _side_by_side(rows, ["", *ids], only_diff=True)
    n_same = sum(1 for k, vals in rows if len({field_text(k, v) if v is not None else "—" for v in vals}) <= 1)
    parts.append("<h3>What differs between the runs</h3><p class=note>Run fields, parameters, host contention "
                 "(<code>host.*</code>) and server settings (<code>server.*</code>) where the runs stored them.</p>"
                 + (differ or "<p>nothing: the runs agree in every stored field and parameter</p>")
                 + (f"<details><summary>all {len(rows)} fields ({n_same} the same)</summary>"
                    f"{_side_by_side(rows, ['', *ids])}</details>" if n_same else ""))
    parts.append("</section>")
    return "".join(parts)
