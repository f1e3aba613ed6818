"""The ``--gpu-metrics`` / ``--no-nvml`` flags and the console view of the ``gpu`` section, shared
by bench, probe, explain and watch."""

from __future__ import annotations

from typing import Any

GPU_METRICS_HELP = ("dcgm-exporter /metrics URL (repeatable, one per node): GPU DRAM/tensor activity, power and "
                    "energy per phase. Local GPUs are read through NVML when nvidia-ml-py is installed.")
NO_NVML_HELP = "Do not read local GPUs through NVML (nvidia-ml-py)."


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def gpu_table(gpu: dict[str, Any]) -> Any:
    """Per-phase activity, power and energy per token, as a rich table."""
    from rich.table import Table

    devs = gpu.get("devices") or []
    names = sorted({d.get("model_name") or "?" for d in devs})
    t = Table(title=f"GPU telemetry — {len(devs)} GPU{'s' if len(devs) != 1 else ''} ({', '.join(names)})"
                    f"{', catalog ' + gpu['device_id'] if gpu.get('device_id') else ''}", title_justify="left")
    for c in ("phase", "win", "s", "DRAM", "tensor", "util", "W", "J/out tok", "J/prompt tok"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for ph in ("prefill", "decode", "mixed", "idle"):
        p = (gpu.get("phases") or {}).get(ph) or {}
        if not p.get("windows"):
            continue
        t.add_row(ph, str(p["windows"]), _f(p.get("seconds"), ".1f"), _f(p.get("dram_active"), ".2f"),
                  _f(p.get("tensor_active"), ".2f"), _f(p.get("gpu_util"), ".2f"), _f(p.get("power_w"), ".0f"),
                  _f(p.get("j_per_output_token"), ".3g"), _f(p.get("j_per_prompt_token"), ".3g"))
    r = gpu.get("run") or {}
    t.add_row("[bold]run[/bold]", str(r.get("windows", 0)), _f(r.get("seconds"), ".1f"), "", "", "",
              _f(r.get("mean_power_w"), ".0f"), _f(r.get("j_per_output_token"), ".3g"),
              _f(r.get("j_per_prompt_token"), ".3g"))
    return t


def print_gpu(gpu: dict[str, Any] | None, console: Any = None, err_console: Any = None) -> None:
    """Print the GPU block (nothing at all when the run had no GPU source)."""
    if not gpu:
        return
    from phasescope.cli._common import console as _c
    from phasescope.cli._common import err_console as _e

    console = console or _c
    err_console = err_console or _e
    if not gpu.get("available"):
        reasons = "; ".join(f"{s.get('name')}: {s.get('reason')}" for s in gpu.get("sources") or [] if not s.get("ok"))
        console.print(f"GPU telemetry: not available ({reasons or 'no samples'})", highlight=False, soft_wrap=True)
        return
    console.print(gpu_table(gpu))
    for line in gpu.get("evidence") or []:
        console.print(f"  GPU: {line}", highlight=False, soft_wrap=True)
    from phasescope.measure.warnings import render_lines

    for line in render_lines(gpu.get("warnings") or []):
        err_console.print(f"[yellow]Warning:[/yellow] {line}", highlight=False, soft_wrap=True)


def latest_rows(samples: list[Any]) -> dict[str, Any]:
    """``watch``'s GPU block: the newest sample of each GPU as JSON rows."""
    rows = []
    for s in sorted(samples, key=lambda s: (s.node, s.gpu)):
        rows.append({"node": s.node, "gpu": s.gpu, "model_name": s.model_name, "source": s.source,
                     "dram_active": s.dram_active, "tensor_active": s.tensor_active, "sm_active": s.sm_active,
                     "gpu_util": s.gpu_util, "power_w": s.power_w, "fb_used_mib": s.fb_used_mib})
    return {"gpus": rows}


def watch_table(samples: list[Any], note: str | None = None) -> Any:
    """The GPU rows ``watch`` shows beside the server rows."""
    from rich.table import Table

    from urllib.parse import urlsplit

    rows = latest_rows(samples)["gpus"]
    sm = any(r["sm_active"] is not None for r in rows)
    t = Table(title="GPU", title_justify="left")
    for c in ("node", "gpu", "model", "DRAM", "tensor", *(("SM",) if sm else ()), "util", "W", "FB GiB"):
        t.add_column(c, justify="left" if c in ("node", "model") else "right", no_wrap=c in ("node", "model"))
    for r in rows:
        node = urlsplit(r["node"]).netloc or r["node"]
        model = (r["model_name"] or "?").replace("NVIDIA ", "")
        t.add_row(node, r["gpu"], model, _f(r["dram_active"], ".2f"), _f(r["tensor_active"], ".2f"),
                  *((_f(r["sm_active"], ".2f"),) if sm else ()), _f(r["gpu_util"], ".2f"),
                  _f(r["power_w"], ".0f"), _f(None if r["fb_used_mib"] is None else r["fb_used_mib"] / 1024, ".1f"))
    if note:
        t.caption = note
    return t
