"""Warnings are data: one :class:`MeasurementWarning` type for every command.

Modelled on hyperfine's ``Warnings`` enum (``src/output/warnings.rs``): each warning says what
happened (``message``), the numbers behind it (``evidence``), and which flag or change fixes it
(``fix``). Probe, bench, explain, experiment, watch, plan and compare attach a list of them to their
results; ``--json`` carries ``"warnings": [w.to_dict(), ...]``, the console prints them in one block
(:func:`render_lines`), the run store keeps them with the run, and the HTML report shows them.

Legacy string warnings (older stored runs, or code not yet converted) are accepted everywhere a list
of warnings is read: :func:`coerce` turns a string into a warning of kind ``note``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: every kind a warning can have, with what it means. New kinds are added here, never invented inline.
KINDS: dict[str, str] = {
    "host_busy": "other work on this machine took CPU time while the run measured",
    "high_variance": "repeated measurements of one point spread more than the effect being measured",
    "unstable": "a figure's repeats still disagree after the most repeats allowed: its interval is wider than ±10 %",
    "prefix_cache_hits": "the server answered from its prefix cache on a workload that should have none",
    "client_saturated": "the client itself added latency (event-loop lag, send lag)",
    "token_count_mismatch": "the server counted a different number of tokens than was asked for",
    "cold_start": "the first request paid a one-off cost (model load, graph capture)",
    "too_few_samples": "too few measurements for the statistic to mean much",
    "above_ceiling": "a measured rate is above its physical ceiling: an input (device, model bytes, quant) is wrong",
    "runs_not_comparable": "two runs differ in more than the parameter under test",
    "partial_run": "the run stopped early; its numbers cover only part of the planned load",
    "no_success": "no request succeeded",
    "request_errors": "some requests failed",
    "overrun": "the server sent more output than was asked for",
    "gpu_telemetry": "GPU telemetry was missing, too coarse or stale to set against the phases",
    "rate_not_reached": "the load generator sent requests slower than the requested rate",
    "no_server_counts": "the server reported no token counts; the client counted or estimated them",
    "version_mismatch": "the machines of one run ran different phasescope versions",
    "note": "an observation that fits no other kind",
}


@dataclass(frozen=True)
class MeasurementWarning:
    """One warning: ``kind`` (a key of :data:`KINDS`), what happened, the evidence, and the fix."""

    kind: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown warning kind {self.kind!r}; add it to measure.warnings.KINDS")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message,
                "evidence": {k: _plain(v) for k, v in self.evidence.items()}, "fix": self.fix}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MeasurementWarning":
        kind = str(d.get("kind") or "note")
        return cls(kind if kind in KINDS else "note", str(d.get("message") or ""),
                   dict(d.get("evidence") or {}), d.get("fix"))

    def line(self) -> str:
        """One console line: ``[kind] message — fix: …``."""
        text = f"[{self.kind}] {self.message}"
        return f"{text} — fix: {self.fix}" if self.fix else text

    def __str__(self) -> str:  # so old code that joins warnings as strings keeps reading well
        return self.line()


def _plain(v: Any) -> Any:
    """JSON-safe evidence: non-finite floats become ``None`` (JSON has no NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def coerce(w: "MeasurementWarning | Mapping[str, Any] | str") -> MeasurementWarning:
    """Any stored or legacy form (a dict from JSON, a plain string) as a :class:`MeasurementWarning`."""
    if isinstance(w, MeasurementWarning):
        return w
    if isinstance(w, Mapping):
        return MeasurementWarning.from_dict(w)
    return MeasurementWarning("note", str(w))


def to_json(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> list[dict[str, Any]]:
    """The ``"warnings"`` array of every ``--json`` object, de-duplicated in order."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for w in ws or []:
        cw = coerce(w)
        key = (cw.kind, cw.message)
        if key not in seen:
            seen.add(key)
            out.append(cw.to_dict())
    return out


def render_lines(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> list[str]:
    """The console block: one line per warning, in order, duplicates dropped."""
    return [coerce(d).line() for d in to_json(ws)]


def kinds(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> set[str]:
    return {coerce(w).kind for w in ws or []}
