"""The report's GPU timeline: DRAM-active, tensor-active and SM-active ratios and power over the
run, with the windows the records call prefill or decode shaded — drawn from the ``gpu`` section
of a stored summary (bench / probe / explain with ``--gpu-metrics`` or NVML). Runs without GPU
telemetry add nothing to the page (the plot is not listed as skipped either)."""

from __future__ import annotations

from typing import Any

from phasescope.report.figure import PALETTE, Plot, esc, label, layout

#: ratio series (top panel, in %) and their dash per run
RATIO_SERIES = ("dram_active", "tensor_active", "sm_active", "gpu_util")
PHASE_COLOURS = {"prefill": "rgba(255,127,14,0.16)", "decode": "rgba(31,119,180,0.14)"}


def gpu_timeline_of(summary: Any) -> list[dict[str, Any]] | None:
    """The GPU timeline rows of a stored summary, or ``None``."""
    if not isinstance(summary, dict):
        return None
    gpu = summary.get("gpu")
    if not isinstance(gpu, dict):
        return None
    tl = gpu.get("timeline")
    if isinstance(tl, list) and tl and all(isinstance(r, dict) and "t_s" in r for r in tl):
        return tl
    return None


def phase_spans(rows: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """Contiguous windows of one phase (prefill / decode only) as (start s, end s, phase)."""
    out: list[tuple[float, float, str]] = []
    for r in rows:
        ph = r.get("phase")
        if ph not in PHASE_COLOURS:
            continue
        t1 = float(r["t_s"])
        t0 = t1 - float(r.get("dt_s") or 0.0)
        if out and out[-1][2] == ph and abs(out[-1][1] - t0) < 1e-9 + 1e-6 * abs(t0):
            out[-1] = (out[-1][0], t1, ph)
        else:
            out.append((t0, t1, ph))
    return out


def gpu_timeline_plots(runs: list[Any]) -> list[Any]:
    """``[Plot]`` with the GPU timeline, or ``[]`` when no run has GPU telemetry."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots


    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.08)
    dashes = ("solid", "dot", "dash", "dashdot")
    shaded = False
    for k, (info, _) in enumerate(runs):
        rows = gpu_timeline_of(info.summary)
        if rows is None:
            continue
        c = PALETTE[k % len(PALETTE)]
        t = [r["t_s"] for r in rows]
        for j, name in enumerate(RATIO_SERIES):
            vals = [None if r.get(name) is None else r[name] * 100 for r in rows]
            if not any(v is not None for v in vals):
                continue
            fig.add_trace(go.Scatter(x=t, y=vals, mode="lines", line={"color": c, "dash": dashes[j % len(dashes)],
                                                                        "shape": "vh"},
                                     name=f"{label(info)} {esc(name)}"), row=1, col=1)
        pw = [r.get("power_w") for r in rows]
        if any(v is not None for v in pw):
            fig.add_trace(go.Scatter(x=t, y=pw, mode="lines", line={"color": c, "shape": "vh"},
                                     name=f"{label(info)} power W"), row=2, col=1)
        if not shaded:  # the first run's phases as background bands
            for a, b, ph in phase_spans(rows):
                fig.add_vrect(x0=a, x1=b, fillcolor=PHASE_COLOURS[ph], line_width=0, layer="below", row="all", col=1)
            shaded = True
    if not fig.data:
        return []
    layout(fig, "GPU activity during the run (each value covers the window that ends at its time; shaded: orange prefill, blue decode windows)", "", "activity (%)")
    fig.update_layout(height=520)
    fig.update_xaxes(title_text="time since start (s)", row=2, col=1)
    fig.update_yaxes(range=[0, 105], row=1, col=1)
    fig.update_yaxes(title_text="power (W, all GPUs)", rangemode="tozero", row=2, col=1)
    return [Plot("gpu_timeline", "GPU timeline", fig,
                 note="DRAM active × the GPU's peak bandwidth is the bandwidth decode achieves; tensor active is "
                      "the share of cycles the tensor pipes work.")]
