"""Console output for ``explain`` / ``experiment``: findings first, then one table per experiment.

Output only: every number shown was computed by the experiments and the diagnosis, and every table
is a :class:`~phasescope.experiments.view.View` — the same cells the report's phase card shows — drawn
by the experiment's spec's ``view`` (:mod:`phasescope.experiments.registry`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from phasescope.experiments import registry, view

_STYLE = {"problem": "bold red", "limit": "bold yellow", "info": "cyan"}


_f = view.fmt


def render_findings(doc: dict[str, Any], console: Console, engine: str | None = None) -> None:
    findings = doc.get("findings", [])
    if not findings:
        console.print("[bold]No findings[/bold]: nothing in the data called for a change.")
    for f in findings:
        body = [Text(f["cause"])]
        body.append(Text("evidence:", style="bold"))
        body.extend(Text(f"  • {e['text']}") for e in f["evidence"])
        if f["advice"]:
            body.append(Text("what to change:", style="bold"))
            for a in f["advice"]:
                who = "" if a["engine"] == "any" else f"[{a['engine']}] "
                body.append(Text(f"  → {who}{a['change']} — {a['why']}"))
        console.print(Panel(Group(*body), title=f"[{_STYLE.get(f['severity'], '')}]{f['severity']}: {f['id']}",
                            title_align="left", expand=True))
    for u in doc.get("undecided", []):
        reason = str(u["reason"])
        for tail in (": cannot tell", ", cannot tell"):  # the line already starts with it
            reason = reason[: -len(tail)] if reason.endswith(tail) else reason
        console.print(f"[yellow]cannot tell[/yellow] {u['id']}: {reason}")


def render_experiments(exps: dict[str, Any], console: Console) -> None:
    for name, e in exps.items():
        draw = registry.view_of(name)
        if draw is not None and isinstance(e, dict):
            console.print(table(draw(e)))
        info = (e.get("info") if isinstance(e, dict) else None) or {}
        if info.get("skipped"):
            console.print(f"[dim]{name}: skipped — {info['skipped']}[/dim]")


def table(v: view.View) -> Table:
    """A view as a rich table (numbers right-aligned; a pairs view's labels left)."""
    t = Table(title=v.title, title_justify="left")
    for i, c in enumerate(v.columns):
        t.add_column(c, justify="left" if (v.kind == "pairs" and i == 0) else "right")
    for r in v.rows:
        t.add_row(*r)
    t.caption = v.caption
    return t


def _cf(e: dict[str, Any]) -> Table:
    return table(view.context_fill(e))
