"""What a diagnosis says: findings, each with its cause, the evidence behind it and what to change.

A :class:`Finding` is only ever built from numbers that were measured or read from the server;
each number is an :class:`Evidence` that says where it came from (which experiment, which metric,
how many samples). When a rule cannot decide from the data it produces an :class:`Undecided`
with the reason instead of a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: severities, most urgent first. ``problem``: something to change; ``limit``: a physical limit
#: reached (only different hardware/model/quantization helps); ``info``: how the server behaves.
SEVERITIES = ("problem", "limit", "info")


@dataclass
class Evidence:
    """One number behind a finding. ``source`` names the experiment/metric and sample size."""

    what: str
    value: float | int | str | bool | None
    unit: str
    source: str

    def text(self) -> str:
        v = self.value
        if isinstance(v, float):
            if self.unit == "%" or (v.is_integer() and self.unit in ("", "tokens")):  # counts: no "2.00"
                s = f"{v:.0f}"
            elif abs(v) >= 100:
                s = f"{v:.0f}"
            elif abs(v) >= 1:
                s = f"{v:.2f}"
            else:
                s = f"{v:.3g}"
        else:
            s = str(v)
        unit = "" if not self.unit else (self.unit if self.unit in ("%", "×") else f" {self.unit}")
        return f"{self.what}: {s}{unit} ({self.source})"


@dataclass
class Advice:
    """One change, in the engine's own terms. ``engine`` is ``vllm``, ``sglang``, ``tgi``,
    ``llamacpp``, ``ollama`` or ``any`` (applies everywhere)."""

    engine: str
    change: str
    why: str


@dataclass
class Finding:
    id: str
    severity: str
    cause: str
    evidence: list[Evidence]
    advice: list[Advice] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if not self.evidence:  # the contract: no finding without evidence
            raise ValueError(f"finding {self.id!r} has no evidence")


@dataclass
class Undecided:
    """A rule that could not decide from the data, and why (what would let it decide)."""

    id: str
    reason: str


@dataclass
class Diagnosis:
    engine: str | None
    findings: list[Finding] = field(default_factory=list)
    undecided: list[Undecided] = field(default_factory=list)
    #: the server's current settings (``diagnose.settings.ServerSettings``) the advice is set against
    settings: Any = None
    #: what the server says about its capacity (``experiments.context.ServerFacts``), when known
    facts: Any = None
    #: where each experiment's TTFT went by the server's own spans (``explain --otlp-listen``): experiment name →
    #: :func:`phasescope.experiments.spans.experiment_attribution`; None without spans
    spans: dict[str, Any] | None = None

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def get(self, finding_id: str) -> Finding | None:
        for f in self.findings:
            if f.id == finding_id:
                return f
        return None

    def undecided_ids(self) -> list[str]:
        return [u.id for u in self.undecided]

    def to_dict(self) -> dict[str, Any]:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        return {
            "engine": self.engine,
            "findings": [
                {
                    "id": f.id,
                    "severity": f.severity,
                    "cause": f.cause,
                    "evidence": [
                        {"what": e.what, "value": e.value, "unit": e.unit, "source": e.source, "text": e.text()}
                        for e in f.evidence
                    ],
                    "advice": [{"engine": a.engine, "change": a.change, "why": a.why} for a in f.advice],
                }
                for f in findings
            ],
            "undecided": [{"id": u.id, "reason": u.reason} for u in self.undecided],
        }


#: ``check(results, diag, ceilings)``: experiment name → typed result, the diagnosis to add to, the
#: decode ceiling (:class:`phasescope.diagnose.rules.Ceilings` or None)
RuleFn = Callable[[dict[str, Any], Diagnosis, Any], None]


@dataclass(frozen=True)
class Rule:
    """One diagnosis rule: ``check(results, diag, ceilings)`` adds its findings or "cannot tell"s.

    Rules run by ``order``, so findings keep one order whatever registered them; ``id`` is what the
    rule's "cannot tell" is said under when the experiment it decides from did not run
    (:func:`phasescope.experiments.suite.add_skipped`). An experiment's spec names its rule
    (:class:`phasescope.experiments.spec.ExperimentSpec`); :data:`phasescope.diagnose.rules.RULES`
    holds diagnose's own."""

    id: str
    order: int
    check: RuleFn
