"""``phasescope report``: one self-contained HTML file — the phase story first, then the evidence.

Layout, top to bottom: the phase card (:func:`~phasescope.report.sections.card_html`: TTFT and
decode, their ceilings and efficiency, the binding roof, the findings — per run, from the stored
summaries), the runs and their parameters as a table, with two or more runs the comparison view
(:func:`~phasescope.report.sections.comparison_html`: run A, the first, against each other run —
compare's verdicts with their reasons, and what differs: parameters, host contention, server
settings), the findings in full, for conversation runs the TTFT by turn (:mod:`phasescope.report.turns`, from the stored
``turns`` rows), then the plots (:mod:`phasescope.report.plots`, each drawn only
where its data has spread; the rest listed with the reason).

The page opens offline: plotly.js is inlined once (``plotly.offline.get_plotlyjs``), there is no
CDN and no other URL, and a Content-Security-Policy (``default-src 'none'``) stops the page from
loading anything even by accident. Several runs are overlaid, one colour each, with a legend.
Every string that came from a server or a user (model names, errors, parameters, findings) is
HTML-escaped, in the page and inside plot labels. ``--png DIR``: :mod:`phasescope.report.png`.
The numbers of each run's measurement points are embedded as JSON (``<script id="ps-data">``,
:mod:`phasescope.report.data`): the stored probe summary's, else those ``show``
prints (:mod:`phasescope.measure.aggregate`).
"""

from __future__ import annotations

import contextlib

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from phasescope._version import __version__
from phasescope.errors import InputError
from phasescope.report.ceiling_plots import find_ceilings  # noqa: F401  (re-exported)
from phasescope.report.figure import PALETTE, Plot, Run, esc, has_spread  # noqa: F401  (re-exported)
from phasescope.report.plots import (  # noqa: F401  (the report's public names, re-exported)
    PLOTS,
    build_plots,
    endpoint_groups,
    endpoint_rows,
    plot_per_endpoint,
)
from phasescope.report.png import CHROMIUM_FLAGS, CSP, find_chromium, script_json, write_pngs  # noqa: F401
from phasescope.report.sections import (
    card_html,
    comparison_html,
    endpoints_html,
    findings_html,
    params_html,
    runs_table_html,
)
from phasescope.report.turns import turns_html
from phasescope.report.data import report_data
from phasescope.report.timeline_plots import find_timeline  # noqa: F401  (re-exported)


@dataclass
class ReportResult:
    path: Path
    size_bytes: int
    plots: list[str]
    skipped: dict[str, str]
    png_files: list[str] = field(default_factory=list)
    png_error: str | None = None
    compared: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "size_bytes": self.size_bytes, "plots": self.plots, "skipped": self.skipped,
                "png_files": self.png_files, "png_error": self.png_error, "compared": self.compared}


def _runs_section(runs: list[Run]) -> str:
    """The runs table, and the parameters table for one run (several: in the comparison view)."""
    return runs_table_html(runs) + params_html(runs)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1240px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid #ddd} h3{font-size:15px;margin:16px 0 6px}
h4{font-size:13px;margin:10px 0 4px} .meta{color:#666;font-size:13px;margin-bottom:16px} .muted{color:#777;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:8px 0 16px} td,th{border-bottom:1px solid #e3e3e3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#fafafa} table.params td{word-break:break-word;max-width:520px} table.pairs td:nth-child(odd){color:#555} table.pairs td:nth-child(even){padding-right:22px} tr.diff td{background:#fff4d6}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
section.card{display:flex;flex-wrap:wrap;gap:14px;margin:8px 0 8px}
.onecard{flex:1 1 360px;border:1px solid #ddd;border-radius:6px;padding:10px 14px;background:#fcfcfc}
.cardhead{font-size:13px;margin-bottom:6px} table.cardtab{margin:4px 0 6px} table.cardtab td:not(:first-child),table.cardtab th:not(:first-child){text-align:right}
tr.phase td{font-weight:600;color:#555;background:#f3f3f3;font-size:12px;letter-spacing:.04em}
ul.cardfind,ul.cardwarn{padding-left:18px;margin:4px 0;font-size:13px} ul.cardwarn{color:#8a5a00}
.ps-plot{border:1px solid #eee;margin:12px 0;min-height:300px} .note{color:#666;font-size:12px;margin:-6px 0 12px}
ul.findings{padding-left:18px} .finding{margin-bottom:8px} .sev{font-size:11px;text-transform:uppercase;padding:1px 6px;border-radius:3px;background:#eee}
.sev-problem .sev{background:#fdd} .sev-limit .sev{background:#ffe8c2} ul.evidence{font-size:13px;color:#444}
.reasons{background:#fff8e6;border:1px solid #f0d9a0;border-radius:4px;padding:6px 12px;font-size:13px;margin:6px 0}
.v-better{color:#17702a;font-weight:600} .v-worse{color:#b00020;font-weight:600} .v-within-noise{color:#555}
tr.v-better td.verdict{color:#17702a;font-weight:600} tr.v-worse td.verdict{color:#b00020;font-weight:600}
td.verdict .why{font-weight:400;color:#666;font-size:12px} tr.v-not-comparable td.verdict{color:#8a5a00;font-weight:600}
.skipped{color:#666;font-size:13px} #ps-errors{color:#b00;white-space:pre-wrap}
"""


def render_html(runs: list[Run], plots: list[Plot], skipped: dict[str, str], *, title: str | None = None,
                comparisons: list[dict[str, Any]] | None = None) -> str:
    from plotly.offline import get_plotlyjs

    from phasescope.report.tune_plots import tune_html

    titles = dict((n, t) for n, t, _ in PLOTS)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = title or ("phasescope report · " + ", ".join(i.id for i, _ in runs))
    divs = []
    specs = []
    for p in plots:
        divs.append(f'<div class="ps-plot" id="plot-{p.name}" data-plot="{p.name}"></div>'
                    + (f'<p class=note>{esc(p.note)}</p>' if p.note else ""))
        fig = p.figure.to_plotly_json()
        specs.append({"id": f"plot-{p.name}", "data": fig.get("data", []), "layout": fig.get("layout", {})})
    skipped_html = "".join(f"<li><b>{esc(titles.get(k, k))}</b>: {esc(v)}</li>" for k, v in skipped.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{_CSS}</style>
<script>
window.__psErrors = [];
window.__psError = function (m) {{  // every JS error or blocked load is shown on the page, as it happens
  window.__psErrors.push(m);
  var p = document.getElementById("ps-errors");
  if (p) p.textContent = window.__psErrors.join("\\n");
  if (document.body) document.body.setAttribute("data-ps-errors", String(window.__psErrors.length));
}};
window.addEventListener("error", function (e) {{ window.__psError("error: " + (e.message || e.type)); }});
window.addEventListener("unhandledrejection", function (e) {{ window.__psError("rejection: " + e.reason); }});
document.addEventListener("securitypolicyviolation", function (e) {{ window.__psError("csp: " + e.violatedDirective + " " + e.blockedURI); }});
</script>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{esc(title)}</h1>
<div class=meta>generated {now} by phasescope {esc(__version__)} · opens offline · {len(plots)} plots</div>
{card_html(runs)}
{tune_html(runs)}
<h2>Evidence</h2>
{_runs_section(runs)}
{comparison_html(runs, comparisons or [])}
{findings_html(runs)}
{turns_html(runs)}
{endpoints_html(runs)}
{''.join(divs)}
{f'<div class=skipped>Not plotted (no data in these runs):<ul>{skipped_html}</ul></div>' if skipped_html else ''}
<pre id="ps-errors"></pre>
<script id="ps-specs" type="application/json">{script_json(specs)}</script>
<script id="ps-data" type="application/json">{script_json(report_data(runs))}</script>
<script>
(function () {{
  var specs = JSON.parse(document.getElementById("ps-specs").textContent);
  var config = {{displaylogo: false, responsive: true, showLink: false, showSendToCloud: false}};
  var jobs = specs.map(function (s) {{
    try {{ return Plotly.newPlot(s.id, s.data, s.layout, config); }}
    catch (e) {{ window.__psError("plot " + s.id + ": " + e); return null; }}
  }});
  Promise.all(jobs).then(function () {{
    var n = 0;
    document.querySelectorAll(".ps-plot").forEach(function (d) {{ if (d.querySelector(".main-svg")) n += 1; }});
    document.body.setAttribute("data-plots-rendered", String(n));
  }}, function (e) {{ window.__psError("render: " + e); }}).then(function () {{
    document.getElementById("ps-errors").textContent = window.__psErrors.join("\\n");
    document.body.setAttribute("data-ps-errors", String(window.__psErrors.length));
    document.body.setAttribute("data-ps-done", "1");
  }});
}})();
</script>
</body></html>
"""



def compare_all(runs: list[Run]) -> list[dict[str, Any]]:
    """Run A (the first) against each other run: :func:`phasescope.report.compare.compare_runs`,
    as its ``to_dict()`` (whatever fields compare puts there are rendered)."""
    from phasescope.report.compare import compare_runs

    a, recs_a = runs[0]
    return [compare_runs(a, recs_a, b, recs_b).to_dict() for b, recs_b in runs[1:]]


def write_report(runs: list[Run], out: str | os.PathLike[str], *, png_dir: str | os.PathLike[str] | None = None,
                 title: str | None = None, comparisons: list[dict[str, Any]] | None = None) -> ReportResult:
    """Write the HTML report (and PNGs when ``png_dir`` is given). With two or more runs the page
    has the comparison view: ``comparisons`` (``Comparison.to_dict()`` of B against A), or the
    first run against each other run when not given."""
    if not runs:
        raise InputError("report needs at least one run")
    if comparisons is None and len(runs) > 1:
        comparisons = compare_all(runs)
    plots, skipped = build_plots(runs)
    page = render_html(runs, plots, skipped, title=title, comparisons=comparisons)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        from phasescope.redact import clean  # the write boundary: no secret, encodable

        tmp.write_text(clean(page), encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:  # a full disk, a size limit, permission: the run failed to write (exit 3), not bad input
        from phasescope.errors import OutputError
        from phasescope.safeio import os_cause

        import errno

        with contextlib.suppress(OSError, UnboundLocalError):
            tmp.unlink()
        if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENOENT, errno.ENAMETOOLONG):
            raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None  # the path given is wrong
        raise OutputError(f"cannot write the report {out}: {os_cause(exc)}") from None
    res = ReportResult(out, out.stat().st_size, [p.name for p in plots], skipped,
                       compared=[f"{(c.get('b') or {}).get('id')} vs {(c.get('a') or {}).get('id')}" for c in comparisons or []])
    if png_dir is not None:
        res.png_files, res.png_error = write_pngs(plots, Path(png_dir))
    return res
