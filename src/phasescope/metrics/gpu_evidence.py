"""What the GPU's own counters say about each phase: the rules, their sentences and the telemetry's warnings.

Input is the ``gpu`` section of :func:`phasescope.metrics.gpu_phases.gpu_section`. The rules read
the per-phase DRAM-active and tensor-active ratios (dcgm-exporter ``DCGM_FI_PROF_DRAM_ACTIVE`` /
``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, or NVML GPM) against what the roofline predicts: decode
reads every weight per step, so DRAM should be busy and the tensor pipes idle; prefill is one
large matrix product, so the tensor pipes should be busy.

* decode DRAM active ≥ :data:`BUSY` and above tensor → bandwidth-bound, as the ceiling predicts
  (but below :data:`LOW_EFF` of the ceiling → more bytes per token than the weights);
* decode below :data:`IDLE_MEM` DRAM active while measured decode is below :data:`LOW_EFF` of
  its ceiling → the engine (launches, scheduling, small batches), not the memory, is the limit;
* decode tensor ≥ :data:`BUSY` above DRAM → the batch is large enough to be compute-bound;
* prefill tensor ≥ :data:`COMPUTE` → compute-bound as predicted; below it → tensor cores idle.

The section carries :func:`gpu_sentences` and :func:`gpu_warnings`; explain's findings from the same
rules are :func:`phasescope.diagnose.gpu_evidence.gpu_findings` (diagnose reads this module, not the
other way round).
"""

from __future__ import annotations

from typing import Any

from phasescope.measure.warnings import MeasurementWarning, warn

BUSY = 0.6  # DRAM (or tensor) this active is the binding resource
IDLE_MEM = 0.5  # decode with DRAM below this leaves bandwidth unused
LOW_EFF = 0.6  # decode below this share of its ceiling is slow for a reason
COMPUTE = 0.4  # prefill tensor activity that counts as compute-bound


def _f2(v: float) -> str:
    return f"{v:.2f}"


def _rules(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rule that fires: id, severity, sentence, evidence [(what, value, unit)], advice [(engine,
    change, why)] (the fields of :class:`phasescope.diagnose.findings.Advice`)."""
    ph = section.get("phases") or {}
    bw = section.get("bandwidth") or {}
    out: list[dict[str, Any]] = []
    dec, pre = ph.get("decode") or {}, ph.get("prefill") or {}
    d_dram, d_ten = dec.get("dram_active"), dec.get("tensor_active")
    eff = bw.get("decode_efficiency")
    if dec.get("windows") and d_dram is not None:
        ev = [("decode DRAM active", d_dram, "")]
        if d_ten is not None:
            ev.append(("decode tensor active", d_ten, ""))
        if bw.get("decode_achieved_gb_s") is not None:
            ev.append(("decode achieved bandwidth", bw["decode_achieved_gb_s"], "GB/s"))
        ten = f", tensor {_f2(d_ten)}" if d_ten is not None else ""
        if eff is not None and eff < LOW_EFF and d_dram < IDLE_MEM:
            out.append({"id": "gpu-decode-engine-limited", "severity": "problem",
                        "sentence": f"decode at {eff * 100:.0f} % of the bandwidth ceiling with DRAM active "
                                    f"{_f2(d_dram)}: the engine, not the memory, is the limit",
                        "evidence": ev + [("decode efficiency vs ceiling", eff * 100, "%")],
                        "advice": [("any", "raise the batch (more concurrent requests / slots), enable CUDA "
                                          "graphs, use a faster attention kernel",
                                          "the memory bus is idle between steps; fuller steps use the bandwidth "
                                          "already paid for")]})
        elif eff is not None and eff < LOW_EFF and d_dram >= BUSY:
            out.append({"id": "gpu-decode-extra-bytes", "severity": "problem",
                        "sentence": f"decode at {eff * 100:.0f} % of the bandwidth ceiling while DRAM is active "
                                    f"{_f2(d_dram)}: the memory is busy but moves more bytes per token than the "
                                    "model's weights (KV-cache reads, unfused kernels, or a wrong model spec/quantization)",
                        "evidence": ev + [("decode efficiency vs ceiling", eff * 100, "%")],
                        "advice": [("any", "check --model-spec and the quantization the server really loaded; "
                                          "use fused/paged attention kernels",
                                          "bytes read per token above the weights' size lower the rate at the "
                                          "same bandwidth")]})
        elif d_ten is not None and d_ten >= BUSY and d_ten > d_dram:
            out.append({"id": "gpu-decode-compute-bound", "severity": "info",
                        "sentence": f"decode: tensor active {_f2(d_ten)} above DRAM active {_f2(d_dram)} — the batch "
                                    "is large enough that decode is compute-bound",
                        "evidence": ev, "advice": []})
        elif d_dram >= BUSY:
            at = f" at {eff * 100:.0f} % of the ceiling" if eff is not None else ""
            out.append({"id": "gpu-decode-bandwidth-bound", "severity": "limit",
                        "sentence": f"decode: DRAM active {_f2(d_dram)}{ten}{at} — bandwidth-bound as the ceiling predicts",
                        "evidence": ev,
                        "advice": [("any", "fewer bytes per token: a smaller quantization, or more requests "
                                          "per weight read (batching)",
                                          "only fewer bytes or more tokens per byte move a bandwidth roof")]})
        elif d_dram < IDLE_MEM:
            out.append({"id": "gpu-decode-memory-idle", "severity": "info",
                        "sentence": f"decode: DRAM active {_f2(d_dram)}{ten} — the memory is not saturated: the "
                                    "engine leaves bandwidth unused",
                        "evidence": ev, "advice": []})
    p_ten, p_dram = pre.get("tensor_active"), pre.get("dram_active")
    if pre.get("windows") and p_ten is not None:
        ev = [("prefill tensor active", p_ten, "")]
        dram = ""
        if p_dram is not None:
            ev.append(("prefill DRAM active", p_dram, ""))
            dram = f", DRAM {_f2(p_dram)}"
        if p_ten >= COMPUTE:
            out.append({"id": "gpu-prefill-compute-bound", "severity": "info",
                        "sentence": f"prefill: tensor active {_f2(p_ten)}{dram} — compute-bound as the roofline predicts",
                        "evidence": ev, "advice": []})
        else:
            out.append({"id": "gpu-prefill-tensor-idle", "severity": "info",
                        "sentence": f"prefill: tensor active only {_f2(p_ten)}{dram} — prompts this short do not fill "
                                    "the tensor cores (or attention and launches dominate)",
                        "evidence": ev, "advice": []})
    return out


def gpu_sentences(section: dict[str, Any]) -> list[str]:
    """The evidence lines bench / probe / watch print and the ``gpu.evidence`` JSON list."""
    out = [r["sentence"] for r in _rules(section)]
    ph = section.get("phases") or {}
    bw = section.get("bandwidth") or {}
    n = len(section.get("devices") or []) or 1
    each, gpus = ("each GPU's DRAM", f" ({n} GPUs)") if n > 1 else ("", "")
    if bw.get("decode_achieved_gb_s") is not None and bw.get("peak_gb_s"):
        out.append(f"decode: {each or 'DRAM'} moves ≈ {bw['decode_achieved_gb_s']:.0f} GB/s (DRAM active "
                   f"{_f2(bw['decode_dram_active'])} × {bw['peak_gb_s']:g} GB/s peak of {bw.get('device_id')})")
    dec, pre = ph.get("decode") or {}, ph.get("prefill") or {}
    parts = []
    if dec.get("j_per_output_token") is not None and dec.get("power_w") is not None:
        parts.append(f"decode {dec['j_per_output_token']:.3g} J per output token at {dec['power_w']:.0f} W{gpus}")
    if pre.get("j_per_prompt_token") is not None and pre.get("power_w") is not None:
        parts.append(f"prefill {pre['j_per_prompt_token']:.3g} J per prompt token at {pre['power_w']:.0f} W{gpus}")
    if parts:
        out.append("energy: " + "; ".join(parts))
    return out


def gpu_warnings(section: dict[str, Any]) -> list[MeasurementWarning]:
    """Why the GPU view may mislead: a source that gave nothing, windows too coarse for the
    phases, values that never changed (dcgm-exporter's 30 s default collect interval), no
    profiling counters, or a GPU the catalog does not know."""
    ws: list[MeasurementWarning] = []
    for s in section.get("sources") or []:
        if not s.get("ok"):
            ws.append(warn("gpu_telemetry", "source", {"source": s.get("name")}, name=s.get("name"), kind=s.get("kind"),
                           reason=s.get("reason")))
    rows = [r for r in section.get("timeline") or [] if r.get("in_run")]
    ph = section.get("phases") or {}
    if rows and not (ph.get("prefill", {}).get("windows") or ph.get("decode", {}).get("windows")):
        ws.append(warn("gpu_telemetry", "coarse", {"windows": len(rows), "interval_s": section.get("interval_s")},
                       majority=section.get("majority", 0.6), interval_s=section.get("interval_s")))
    stale = _longest_unchanged(rows)
    if stale >= 3:
        ws.append(warn("gpu_telemetry", "stale", {"unchanged_samples": stale}, stale=stale))
    if rows and all(r.get("dram_active") is None for r in rows):
        ws.append(warn("gpu_telemetry", "no_dram"))
    for d in section.get("devices") or []:
        if d.get("device_id") is None and d.get("model_name"):
            ws.append(warn("gpu_telemetry", "unknown_gpu", {"model_name": d["model_name"]}, model_name=d["model_name"]))
            break
    return ws


def _longest_unchanged(rows: list[dict[str, Any]]) -> int:
    """Longest run of consecutive windows with identical counters while their phase shares differed."""
    keys = ("dram_active", "tensor_active", "gpu_util", "power_w")
    best = run = 1
    for a, b in zip(rows, rows[1:]):
        same = all(a.get(k) == b.get(k) for k in keys) and any(a.get(k) is not None for k in keys)
        moved = abs((a.get("idle_frac") or 0) - (b.get("idle_frac") or 0)) > 0.2 or a.get("phase") != b.get("phase")
        run = run + 1 if same and (moved or run > 1) else 1
        best = max(best, run)
    return best if best > 1 else 0
