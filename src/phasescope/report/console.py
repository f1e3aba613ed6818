"""Terminal (rich) and ``--json`` renderings of stored runs and comparisons; no numbers are computed here."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.console import Group as RichGroup
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from phasescope.store import RunInfo

if TYPE_CHECKING:
    from phasescope.report.compare import Comparison


def fmt_value(v: float | int | None, unit: str) -> str:
    """Seconds as ms/µs/s, rates with 3 significant digits."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if unit == "s":
        a = abs(v)
        if a >= 1:
            return f"{v:.3g} s" if a < 100 else f"{v:.0f} s"
        if a >= 1e-3:
            return f"{v * 1e3:.3g} ms"
        return f"{v * 1e6:.3g} µs"
    if unit == "tok/s":
        return f"{v:,.1f} tok/s" if abs(v) < 1000 else f"{v:,.0f} tok/s"
    if isinstance(v, float):
        return f"{v:.4g}{(' ' + unit) if unit else ''}"
    return f"{v}{(' ' + unit) if unit else ''}"


def fmt_ci(lo: float | None, hi: float | None, unit: str, ref: float | None = None) -> str:
    """``+8.57 … +22.6 ms``: both ends on one scale, the unit once — the scale of ``ref`` (the values the
    interval sits beside, so a table's A, B and interval read in the same unit), else of the larger end."""
    if lo is None or hi is None:
        return "—"
    big = abs(ref) if ref else max(abs(lo), abs(hi))
    scale, u = 1.0, unit
    if unit == "s":
        scale, u = (1.0, "s") if big >= 1 else (1e3, "ms") if big >= 1e-3 else (1e6, "µs")
    return f"{_sig(lo * scale)} … {_sig(hi * scale)} {u}"


def _sig(x: float) -> str:
    a = abs(x)
    if a >= 1000:
        return f"{x:+,.0f}"
    return f"{x:+.3g}"


def wide(console: Console) -> Console:
    """Tables are wide: when stdout is not a terminal (pipes, files, docs), print 160 columns
    instead of rich's default 80 rather than squeezing cells into ellipses."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=max(console.width, 160), highlight=False)


def fmt_change(c: float | None) -> str:
    return "—" if c is None else f"{c * 100:+.1f} %"


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 60:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min"


def runs_json(runs: list[RunInfo], baselines: dict[str, str]) -> list[dict[str, Any]]:
    """``runs --json`` rows: the run without its summary, plus the baseline names pointing at it."""
    by_run: dict[str, list[str]] = {}
    for name, rid in baselines.items():
        by_run.setdefault(rid, []).append(name)
    out = []
    for r in runs:
        d = r.to_dict()
        d.pop("summary")
        d["baselines"] = by_run.get(r.id, [])
        out.append(d)
    return out


def runs_table(runs: list[RunInfo], baselines: dict[str, str] | None = None) -> Table:
    by_run: dict[str, list[str]] = {}
    for name, rid in (baselines or {}).items():
        by_run.setdefault(rid, []).append(name)
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for col in ("id", "kind", "status", "started (UTC)", "duration", "requests", "warm-up", "model", "target", "engine",
                "baseline"):
        t.add_column(col, no_wrap=col not in ("target", "model"))
    for r in runs:
        eng = " ".join(x for x in (r.engine, r.engine_version) if x)
        st = {"complete": "complete", "partial": "[yellow]partial[/]", "running": "[cyan]running[/]"}.get(r.status, escape(r.status))
        t.add_row(
            r.id, escape(r.kind), st, r.started_iso.replace("T", " ").rstrip("Z"), _dur(r.duration_s), _requests_cell(r),
            "?" if r.n_warmup is None else ("—" if _holds_no_requests(r) else str(r.n_warmup)),
            escape(r.model or "—"), escape(r.target or "—"), escape(eng or "—"), escape(", ".join(by_run.get(r.id, []))),
        )
    return t


def _holds_no_requests(r: RunInfo) -> bool:
    """A tune (its settings are runs of their own) or a plan sweep/capacity search (many simulations,
    no records): a count of 0 requests would read as an empty run."""
    sm = r.summary or {}
    return r.n_records == 0 and (r.kind == "tune" or (r.kind == "plan" and any(k in sm for k in ("sweep", "capacity",
                                                                                                "disaggregation"))))


def _requests_cell(r: RunInfo) -> str:
    if not _holds_no_requests(r):
        return str(r.n_measured)
    sm = r.summary or {}
    if r.kind == "tune":
        return f"{len(sm.get('settings') or [])} settings"
    if isinstance(sm.get("sweep"), dict):
        return f"{len(sm['sweep'].get('rows') or [])} points (sim)"
    return "— (sim)"


def _flat(d: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and depth < 2:
                out.extend(_flat(v, key + ".", depth + 1))
            else:
                out.append((key, _short(v)))
    return out


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        if len(v) <= 6 and all(not isinstance(x, (dict, list)) for x in v):
            return ", ".join(_short(x) for x in v)
        return f"[{len(v)} items]"
    if isinstance(v, dict):
        return f"{{{len(v)} keys}}"
    s = "null" if v is None else str(v)
    return s if len(s) <= 100 else s[:97] + "..."


def show_renderable(info: RunInfo, metrics: list[dict[str, Any]], baselines: list[str]) -> RichGroup:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    eng = " ".join(x for x in (info.engine, info.engine_version) if x)
    status = info.status + (f" ({info.error})" if info.error else "")
    for k, v in (
        ("run", info.id), ("kind", info.kind), ("status", status), ("started", info.started_iso),
        ("duration", _dur(info.duration_s)), ("target", info.target), ("api", info.api), ("engine", eng or None),
        ("model", info.model), ("device", info.device), ("phasescope", info.phasescope_version),
        ("requests", f"{info.n_measured} measured + {info.n_warmup} warm-up" if info.n_warmup is not None
         else f"{info.n_records} (warm-ups not counted apart: stored by an older phasescope)"),
        ("records", str(info.records_path) if info.records_path else None),
        ("baseline", ", ".join(baselines) or None),
    ):
        if v:
            head.add_row(k, Text(str(v)))
    parts: list[Any] = [head]
    if info.warnings:  # the run's own measurement warnings, before any number they qualify
        from phasescope.measure.warnings import render_lines

        parts += [Text(""), Text(f"warnings ({len(info.warnings)}):", style="bold yellow")]
        parts += [Text(f"  • {ln}", style="yellow") for ln in render_lines(info.warnings)]
    if info.params:
        p = Table(title="parameters", title_justify="left", show_edge=False, header_style="bold", show_header=False)
        p.add_column(style="dim")
        p.add_column()
        for k, v in _flat(info.params):
            p.add_row(Text(k), Text(v))
        parts += [Text(""), p]
    if metrics:
        m = Table(title="measured (from raw records)", title_justify="left", show_edge=False, header_style="bold")
        for col in ("group", "metric", "value", "n"):
            m.add_column(col, justify="right" if col in ("value", "n") else "left", no_wrap=True)
        for r in metrics:
            m.add_row(Text(r["group"] or "all"), r["label"], fmt_value(r["value"], r["unit"]), str(r["n"]))
        parts += [Text(""), m]
    if info.summary:
        s = Table(title="summary", title_justify="left", show_edge=False, show_header=False)
        s.add_column(style="dim")
        s.add_column()
        rows = _flat(info.summary)
        for k, v in rows[:60]:
            s.add_row(Text(k), Text(v))
        if len(rows) > 60:
            s.add_row("…", f"{len(rows) - 60} more (--json)")
        parts += [Text(""), s]
    return RichGroup(*parts)


_VERDICT_STYLE = {"better": "green", "worse": "red", "within noise": "dim", "too few samples": "yellow",
                  "not comparable": "bold yellow"}


def interval_words(cmp: "Comparison") -> str:
    """The footnote under a comparison table: which interval, and the verdict rule."""
    if cmp.run_level.get("method") == "summary":
        return f"{cmp.run_level.get('why')}; the values are the files' own (imported from another tool)"
    how = ("95 % Welch interval of the difference of the trial means (run-level)"
           if cmp.run_level.get("method") == "trials"
           else f"{cmp.confidence:.0%} bootstrap CI of B − A over requests")
    if cmp.run_level.get("method") == "trials" and cmp.confidence != 0.95:
        how = how.replace("95 %", f"{cmp.confidence:.0%}")
    eff = (f"|change| ≥ {cmp.min_change:.0%}" if cmp.min_change is not None
           else "|change| ≥ the metric's minimum effect (5 %; 10 % for p99)")
    return f"{how}; better/worse when it excludes 0 and {eff}"


def compare_renderable(c: Comparison) -> RichGroup:
    head = Text.assemble(
        ("A ", "bold"), c.a.id, f"  {c.a.kind} · {c.a.model or '?'} · {c.a.started_iso}\n",
        ("B ", "bold"), c.b.id, f"  {c.b.kind} · {c.b.model or '?'} · {c.b.started_iso}",
    )
    parts: list[Any] = [head]
    if c.param_changes:
        pc = Text("parameters changed: ", style="bold")
        pc.append(", ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in c.param_changes.items()))
        parts.append(pc)
    nc = [w for w in c.warnings if w.kind == "runs_not_comparable"]
    if c.not_comparable:
        parts.append(Text(f"not comparable: {', '.join(sorted(c.not_comparable))} — the runs differ in more than the "
                          "change under test (first lines below)", style="bold yellow"))
    for w in nc + [w for w in c.warnings if w.kind != "runs_not_comparable"]:
        parts.append(Text(f"warning: {w.line()}", style="yellow"))
    if c.run_level.get("method") == "trials":
        parts.append(Text(f"run-level intervals: {c.run_level.get('a')} trials (A) and {c.run_level.get('b')} "
                          "trials (B); A and B are the means across trials", style="bold"))
    t = Table(show_edge=False, header_style="bold", caption=f"verdict: {interval_words(c)}", caption_justify="left")
    for col in ("group", "metric", "A", "B", "change", f"{c.confidence:.0%} CI of B − A", "verdict"):
        t.add_column(col, justify="left" if col in ("group", "metric", "verdict") else "right", no_wrap=True)
    last = None
    for m in c.metrics:
        ci = fmt_ci(m.ci_low, m.ci_high, m.unit, ref=max(abs(m.a or 0.0), abs(m.b or 0.0)) or None)
        g = m.group or "all"
        t.add_row(
            Text(g if g != last else ""),
            m.label + (" ↑" if m.higher_is_better else " ↓"),
            fmt_value(m.a, m.unit), fmt_value(m.b, m.unit), fmt_change(m.change), ci,
            Text(m.verdict + (" (unstable)" if m.unstable else ""), style=_VERDICT_STYLE.get(m.verdict, "")),
        )
        last = g
    if not c.metrics:
        parts.append(Text("no metric could be derived from both runs' records", style="yellow"))
    else:
        parts += [Text(""), t]
    return RichGroup(*parts)
