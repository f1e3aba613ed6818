"""The HTML report in a real headless Chromium: every plot rendered, no JavaScript error, no
network request (the page's CSP reports any attempt), a screenshot saved; PNG export.

Skips only where Chromium is not installed (``make test`` installs Debian's ``chromium`` where
apt-get works).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_report_html import full_runs  # noqa: E402

from phasescope.report.html import CHROMIUM_FLAGS, PLOTS, find_chromium, write_pngs, build_plots, write_report  # noqa: E402

CHROME = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROME is None, reason="Chromium is not installed (apt-get install chromium; `make test` does this where it can)"
)


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROME is not None
    cmd = [CHROME, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=8000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def dom_of(tmp: Path, page: Path) -> str:
    res = chromium(tmp, "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def body_attr(dom: str, name: str) -> str | None:
    m = re.search(rf'<body[^>]*\s{name}="([^"]*)"', dom)
    return m.group(1) if m else None


def test_report_renders_every_plot_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    res = write_report(full_runs(), out)
    # every plot of PLOTS has data in these runs; the extras (per endpoint, twin, waterfalls) come on top
    assert {n for n, _, _ in PLOTS} <= set(res.plots) and "waterfall_slowest" in res.plots
    dom = dom_of(tmp_path, out)
    assert body_attr(dom, "data-ps-done") == "1", "the page's init script did not finish"
    errors = re.search(r'<pre id="ps-errors">(.*?)</pre>', dom, re.S)
    assert body_attr(dom, "data-ps-errors") == "0", errors.group(1) if errors else dom[-2000:]
    assert body_attr(dom, "data-plots-rendered") == str(len(res.plots))
    for name in res.plots:  # each plot div holds plotly's rendered SVG
        div = re.search(rf'<div class="ps-plot[^"]*" id="plot-{name}".*?class="main-svg"', dom, re.S)
        assert div, f"plot {name} not rendered"
    assert dom.count('class="main-svg"') >= len(res.plots)
    # escaped server strings stay text in the live DOM
    assert "<script>alert('pwned')</script>" not in dom.split('<script id="ps-specs"')[0].split("</script>")[-1]
    shot = tmp_path / "report.png"
    r = chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,3600", f"--screenshot={shot}", out.as_uri())
    assert r.returncode == 0 and shot.exists()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    keep = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / "report.png")  # for a human to look at


def test_harness_detects_js_errors_and_network(tmp_path: Path) -> None:
    # negative controls: the same page with a thrown error and a remote image must be flagged
    out = tmp_path / "report.html"
    write_report(full_runs()[:1], out)
    page = out.read_text()
    bad = page.replace("<pre id=\"ps-errors\"></pre>",
                       '<pre id="ps-errors"></pre><img src="http://127.0.0.1:9/x.png"><script>throw new Error("boom")</script>')
    broken = tmp_path / "broken.html"
    broken.write_text(bad)
    dom = dom_of(tmp_path, broken)
    n = body_attr(dom, "data-ps-errors")
    assert n is not None and int(n) >= 2, dom[-3000:]
    text = re.search(r'<pre id="ps-errors">(.*?)</pre>', dom, re.S)
    assert text and "boom" in text.group(1) and "csp" in text.group(1)


@pytest.mark.parametrize("engine", ["default", "chromium"])
def test_png_export(tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # "default": kaleido when installed (phasescope[png]), else Chromium; "chromium": kaleido made unimportable
    if engine == "chromium":
        monkeypatch.setitem(sys.modules, "kaleido", None)
    plots, _ = build_plots(full_runs())
    files, why = write_pngs(plots[:2], tmp_path / "png")
    assert why is None, why
    assert [Path(f).name for f in files] == [f"{p.name}.png" for p in plots[:2]]
    for f in files:
        data = Path(f).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# --- issue 19: one-run, two-run and explain reports, checked by eye and by the figure data ------------
from report_axes import degenerate_axes  # noqa: E402
from test_i19_report_plots import one_bench, two_bench  # noqa: E402

from phasescope.store import RunInfo  # noqa: E402
from report_synth import concurrent_run, sequential_run  # noqa: E402

#: injected into a copy of the page: once plotted, each plot div's live data (what plotly drew) →
#: distinct x values per x axis, written to <body data-ps-axes>
AXES_PROBE = """<script>
(function wait() {
  if (document.body.getAttribute("data-ps-done") !== "1") { setTimeout(wait, 50); return; }
  var out = {};
  document.querySelectorAll(".ps-plot").forEach(function (d) {
    var axes = {};
    (d.data || []).forEach(function (t) {
      var ax = t.xaxis || "x"; axes[ax] = axes[ax] || {};
      var xs = t.x || [];
      for (var i = 0; i < xs.length; i++) { if (xs[i] !== null && xs[i] !== undefined) axes[ax][String(xs[i])] = 1; }
    });
    var n = {}; Object.keys(axes).forEach(function (a) { n[a] = Object.keys(axes[a]).length; });
    out[d.getAttribute("data-plot")] = n;
  });
  document.body.setAttribute("data-ps-axes", JSON.stringify(out));
})();
</script>"""


def explain_run() -> tuple:  # type: ignore[type-arg]
    recs = sequential_run(4, seed=7, sizes=(128, 512, 2048), ttft_per_token_s=3e-5)
    for r in recs:
        r.tags["experiment"] = "prompt_scaling"
    conc = concurrent_run((1, 2, 4), 8, seed=8)
    for r in conc:
        r.tags["experiment"] = "batching"
    summary = {"findings": [
        {"id": "prefill_quadratic", "severity": "info", "cause": "prefill cost grows linearly with the prompt (30 µs/token)",
         "evidence": [{"what": "fitted cost per token", "value": 3e-5, "unit": "s", "source": "prompt_scaling n=12"}], "advice": []},
        {"id": "batching_scales", "severity": "problem", "cause": "decode throughput stops growing past 2 concurrent requests",
         "evidence": [{"what": "throughput c=4 / c=2", "value": 1.04, "unit": "x", "source": "batching n=24"}],
         "advice": [{"engine": "llamacpp", "change": "--parallel 8", "why": "more slots batch more streams"}]}],
        "undecided": []}
    info = RunInfo(id="r20261201-1200-eeee", kind="explain", status="complete", started_at=1.8e9, ended_at=1.8e9 + 90,
                   model="gemma-3-270m", engine="llamacpp", params={"budget": "3m", "only": None}, summary=summary)
    return (info, recs + conc)


def render_checked(tmp: Path, runs: list, name: str) -> dict:  # type: ignore[type-arg]
    out = tmp / f"{name}.html"
    res = write_report(runs, out)
    page = out.read_text()
    specs = json.loads(re.search(r'<script id="ps-specs" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert not {s["id"]: degenerate_axes(s) for s in specs if degenerate_axes(s)}, "a plot with a single x value"
    probe = tmp / f"{name}-probe.html"
    probe.write_text(page.replace("</body>", AXES_PROBE + "</body>"))
    dom = dom_of(tmp, probe)
    assert body_attr(dom, "data-ps-done") == "1"
    errors = re.search(r'<pre id="ps-errors">(.*?)</pre>', dom, re.S)
    assert body_attr(dom, "data-ps-errors") == "0", errors.group(1) if errors else ""
    assert body_attr(dom, "data-plots-rendered") == str(len(res.plots))
    axes = json.loads(html.unescape(body_attr(dom, "data-ps-axes") or "{}"))
    assert set(axes) == set(res.plots)
    flat = {f"{p}.{a}": n for p, d in axes.items() for a, n in d.items()}
    assert flat and all(n >= 2 for n in flat.values()), flat  # as drawn: every x axis has two or more values
    shot = tmp / f"{name}.png"
    r = chromium(tmp, "--hide-scrollbars", "--window-size=1280,4000", f"--screenshot={shot}", out.as_uri())
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 50_000
    keep = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / f"report-{name}.png")  # for a human to look at
    return {"result": res, "page": page, "specs": specs}


def test_i19_one_run_two_run_and_explain_reports_in_chromium(tmp_path: Path) -> None:
    one = render_checked(tmp_path, one_bench(), "one-run")
    assert "request_timeline" in one["result"].plots and "ttft_vs_prompt" not in one["result"].plots
    two = render_checked(tmp_path, two_bench(), "two-run")
    assert '<section class="comparison"' in two["page"]
    for s in two["specs"]:  # overlaid: each per-run trace names its run; both runs appear with a legend
        if s["id"] in ("plot-ttft_distribution", "plot-itl_cdf", "plot-server_timeline"):
            groups = {t.get("legendgroup") for t in s["data"]}
            assert {i.id for i, _ in two_bench()} <= groups, s["id"]
            assert s["layout"].get("showlegend") is True
    ex = render_checked(tmp_path, [explain_run()], "explain")
    assert "ttft_vs_prompt" in ex["result"].plots and "throughput_vs_itl" in ex["result"].plots
    assert ex["page"].index('<section class="card"') < ex["page"].index('class="ps-plot"')
    assert "decode throughput stops growing" in ex["page"].split('<section class="card"')[1].split("</section>")[0]
