"""``report --png DIR``: each plot as a PNG, with kaleido (``pip install 'phasescope[png]'``,
which drives an installed Chrome/Chromium and downloads nothing) or, without kaleido, by
screenshotting the plot with a headless Chromium directly. Also the Chromium finder and flags the
browser test uses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from phasescope.errors import InputError
from phasescope.jsonutil import to_jsonable
from phasescope.report.figure import Plot

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
    "font-src data:; connect-src 'none'"
)


def script_json(obj: Any) -> str:
    """JSON safe inside <script>: no ``</script>``, ``<!--`` or line separators can break out."""
    s = json.dumps(to_jsonable(obj), ensure_ascii=False, separators=(",", ":"))
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def find_chromium() -> str | None:
    for name in (os.environ.get("PHASESCOPE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


def write_pngs(plots: list[Plot], png_dir: Path, *, width: int = 1100, height: int = 520) -> tuple[list[str], str | None]:
    """Each plot as ``<png_dir>/<name>.png``. Returns (files, why-not or None)."""
    if not plots:
        return [], "no plots to write"
    try:
        png_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {png_dir}: {exc.strerror or exc}") from None
    paths = [png_dir / f"{p.name}.png" for p in plots]
    # a figure taller than ``height`` (one TTFT row per prompt size, a timeline per run) keeps its own height
    heights = [max(height, int(p.figure.layout.height or 0)) for p in plots]
    kaleido_error = None
    try:
        import kaleido  # noqa: F401
        import plotly.io as pio

        for p, path, h in zip(plots, paths, heights):
            pio.write_image(p.figure, path, width=width, height=h, scale=2)
        return [str(p) for p in paths], None
    except ImportError:
        kaleido_error = "kaleido is not installed (pip install 'phasescope[png]')"
    except Exception as exc:  # kaleido could not start a browser: try chromium directly
        kaleido_error = f"kaleido failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    chrome = find_chromium()
    if chrome is None:
        return [], f"{kaleido_error}; and no Chromium/Chrome was found for screenshots (apt-get install chromium)"
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    done: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="phasescope-png-") as tmp:
        for p, path, h in zip(plots, paths, heights):
            fig = p.figure.to_plotly_json()
            layout = dict(fig.get("layout", {}), width=width, height=h)
            page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                    f'content="{CSP}"><style>body{{margin:0;background:#fff}}</style><script>{js}</script></head><body>'
                    f'<div id="p"></div><script>Plotly.newPlot("p",{script_json(fig.get("data", []))},'
                    f'{script_json(layout)},{{staticPlot:true}});</script></body></html>')
            page_path = Path(tmp) / f"{p.name}.html"
            from phasescope.redact import clean  # the write boundary: no secret, encodable

            page_path.write_text(clean(page), encoding="utf-8")
            cmd = [chrome, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", f"--screenshot={path}",
                   f"--window-size={width},{h}", "--force-device-scale-factor=2", "--virtual-time-budget=3000",
                   page_path.as_uri()]
            try:
                subprocess.run(cmd, capture_output=True, timeout=60, check=False)
            except subprocess.TimeoutExpired:
                return [str(x) for x in done], "chromium timed out taking a screenshot"
            if path.exists():
                done.append(path)
    if len(done) < len(paths):
        return [str(x) for x in done], f"chromium wrote {len(done)} of {len(paths)} images ({kaleido_error})"
    return [str(x) for x in done], None

