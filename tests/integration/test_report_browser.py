"""The HTML report in a real headless Chromium: every plot rendered, no JavaScript error, no
network request (the page's CSP reports any attempt), a screenshot saved; PNG export.

Skips only where Chromium is not installed (``make test`` installs Debian's ``chromium`` where
apt-get works).
"""

from __future__ import annotations

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
    assert len(res.plots) == len(PLOTS)
    dom = dom_of(tmp_path, out)
    assert body_attr(dom, "data-ps-done") == "1", "the page's init script did not finish"
    errors = re.search(r'<pre id="ps-errors">(.*?)</pre>', dom, re.S)
    assert body_attr(dom, "data-ps-errors") == "0", errors.group(1) if errors else dom[-2000:]
    assert body_attr(dom, "data-plots-rendered") == str(len(PLOTS))
    for name in res.plots:  # each plot div holds plotly's rendered SVG
        div = re.search(rf'<div class="ps-plot[^"]*" id="plot-{name}".*?class="main-svg"', dom, re.S)
        assert div, f"plot {name} not rendered"
    assert dom.count('class="main-svg"') >= len(PLOTS)
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
