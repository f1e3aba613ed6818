"""explain's findings from the GPU's own counters (rule ``gpu``).

The rules, their thresholds (:data:`BUSY`, :data:`IDLE_MEM`, :data:`LOW_EFF`, :data:`COMPUTE`), sentences
and warnings are the telemetry's own reading, documented and defined once in
:mod:`phasescope.metrics.gpu_evidence` and re-exported here; this module turns the same rules into
:class:`~phasescope.diagnose.findings.Finding`\\ s for ``explain`` (:func:`gpu_findings`), every number in a
finding an :class:`Evidence` naming its source.
"""

from __future__ import annotations

from typing import Any

from phasescope.diagnose.findings import Advice, Evidence, Finding
from phasescope.metrics.gpu_evidence import (BUSY, COMPUTE, IDLE_MEM, LOW_EFF, _rules, gpu_sentences,
                                             gpu_warnings)

__all__ = ["BUSY", "COMPUTE", "IDLE_MEM", "LOW_EFF", "explain_gpu_finish", "gpu_findings", "gpu_sentences",
           "gpu_warnings"]


def _src(section: dict[str, Any], phase: str) -> str:
    kinds = sorted({s.get("kind") for s in section.get("sources") or [] if s.get("ok")})
    names = {"dcgm": "dcgm-exporter", "nvml": "NVML"}
    n = (section.get("phases") or {}).get(phase, {}).get("windows", 0)
    return f"{' + '.join(names.get(k, k) for k in kinds) or 'GPU telemetry'}, {n} {phase} windows"


def gpu_findings(section: dict[str, Any] | None) -> list[Finding]:
    """The rules as explain findings (empty without GPU telemetry)."""
    if not section or not section.get("available"):
        return []
    out = []
    for r in _rules(section):
        phase = "decode" if "decode" in r["id"] else "prefill"
        src = _src(section, phase)
        out.append(Finding(id=r["id"], severity=r["severity"], cause=r["sentence"],
                           evidence=[Evidence(w, v, u, src) for w, v, u in r["evidence"]],
                           advice=[Advice(*a) for a in r["advice"]]))
    return out


def explain_gpu_finish(recorder: Any, records: list[Any], diagnosis: Any, ceilings: Any) -> dict[str, Any] | None:
    """Stop explain's recorder, build the section, add the GPU findings to ``diagnosis``."""
    if recorder is None:
        return None
    from phasescope.metrics.gpu_phases import finish_section, solo_decode_tok_s

    sec = finish_section(recorder, records, device_id=getattr(ceilings, "device", None),
                         decode_ceiling_tok_s=getattr(ceilings, "decode_ceiling_tok_s", None),
                         decode_tok_s=solo_decode_tok_s(records))
    diagnosis.findings.extend(gpu_findings(sec))
    return sec
