"""What each command returns: one typed result per command, whose ``to_json()`` is its ``--json`` document.

A command builds its result and hands it to the output seam (:mod:`phasescope.cli._output`), which
renders it in the chosen format (the console, JSON, a format registered at run time); the Python API
(:mod:`phasescope.api`) returns the same objects. Each result is a dataclass whose fields are the
headline figures, typed, read from the document once; the document itself (``to_json()``) is the
``--json`` contract, key for key, and a result is also a read-only mapping over it, so code written
when the API returned plain dicts (``result["sizes"]``, ``result.get("gpu")``, ``result == doc``)
keeps working.

:class:`phasescope.experiments.suite.ExplainReport` (explain's result) is built field by field by the
suite and derives from :class:`Result` too; it is exported as ``phasescope.ExplainReport``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

__all__ = ["BenchSummary", "BenchSweep", "CeilingReport", "ExperimentResult", "PlanResult", "ProbeResult",
           "Report", "Result", "TuneResult"]

R = TypeVar("R", bound="DocResult")


class Result(Mapping[str, Any]):
    """A command's outcome. ``to_json()`` is the command's ``--json`` document; the mapping methods read it."""

    #: the command that makes it (``probe``, ``bench``, …): which console view draws it
    command: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Result):
            return type(self) is type(other) and self.to_json() == other.to_json()
        if isinstance(other, Mapping):
            return self.to_json() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dict it stands for


@dataclass(eq=False, repr=False)
class DocResult(Result):
    """A result read from a finished document: the headline fields are taken from it once (:meth:`from_json`)."""

    doc: dict[str, Any] = field(repr=False)

    #: (field, key in the document) for the headline fields; the key is the field's name unless given
    _KEYS: ClassVar[dict[str, str]] = {}

    def to_json(self) -> dict[str, Any]:
        return self.doc

    def __repr__(self) -> str:
        from dataclasses import fields

        def short(v: Any) -> str:
            if isinstance(v, (list, tuple)):
                return f"[{len(v)} items]"
            if isinstance(v, dict):
                return str(v.get("name") or v.get("id") or "{…}") if len(repr(v)) > 60 else repr(v)
            return repr(v)

        shown = [f"{f.name}={short(getattr(self, f.name))}" for f in fields(self) if f.name not in ("doc", "report", "objects", "make")]
        return f"{type(self).__name__}({', '.join(shown)})"

    @classmethod
    def from_json(cls: type[R], doc: dict[str, Any]) -> R:
        from dataclasses import fields

        names = [f.name for f in fields(cls) if f.name != "doc" and f.init]
        return cls(doc=doc, **{n: doc.get(cls._KEYS.get(n, n)) for n in names})


@dataclass(eq=False, repr=False)
class ProbeResult(DocResult):
    """``phasescope probe``: TTFT, prefill and decode per prompt size (``sizes``), the verdict, the ceilings."""

    command: ClassVar[str] = "probe"
    target: str | None = None
    engine: str | None = None
    model: str | None = None
    sizes: list[dict[str, Any]] = field(default_factory=list, repr=False)
    verdict: dict[str, Any] | None = field(default=None, repr=False)  # the phase claims and their words
    warnings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    run_id: str | None = None
    records_path: str | None = None


@dataclass(eq=False, repr=False)
class BenchSummary(DocResult):
    """``phasescope bench``: the load run's summary (vLLM bench-serve keys, server /metrics, warnings)."""

    command: ClassVar[str] = "bench"
    target: str | None = None
    model_id: str | None = None
    status: str | None = None
    partial: bool | None = None
    completed: int | None = None
    failed: int | None = None
    duration: float | None = None
    request_throughput: float | None = None
    output_throughput: float | None = None
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    median_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    run_id: str | None = None
    records_path: str | None = None


@dataclass(eq=False, repr=False)
class BenchSweep(DocResult):
    """``phasescope bench --sweep``: one row per load level, the knee and the saturation rate."""

    command: ClassVar[str] = "bench-sweep"
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)
    knee: dict[str, Any] | None = None
    saturation_rate: float | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list, repr=False)


@dataclass(eq=False, repr=False)
class ExperimentResult(DocResult):
    """``phasescope experiment NAME``: one experiment's result with the findings of the diagnosis."""

    command: ClassVar[str] = "experiment"
    name: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    run_id: str | None = None
    report: Any = field(default=None, repr=False)  # the whole ExplainReport the console view draws

    @classmethod
    def of(cls, report: Any, name: str) -> ExperimentResult:
        """The ``experiment NAME --json`` document: that experiment's entry of ``report`` and the run's facts."""
        doc = report.to_json()
        one = dict(doc["experiments"].get(name, {}))
        one.update({"findings": doc["findings"], "undecided": doc["undecided"], "run_id": doc["run_id"],
                    "host": doc.get("host"), "warnings": doc.get("warnings", []),
                    "target": doc["target"], "engine": doc["engine"], "model": doc["model"]})
        if "gpu" in doc:
            one["gpu"] = doc["gpu"]
        return cls(doc=one, name=name, findings=doc["findings"], run_id=doc["run_id"], report=report)


@dataclass(eq=False, repr=False)
class PlanResult(DocResult):
    """``phasescope plan``: the simulated run (``summary``), or a sweep, a capacity search, a disaggregation."""

    command: ClassVar[str] = "plan"
    mode: str | None = None
    summary: dict[str, Any] = field(default_factory=dict, repr=False)
    warnings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    run_id: str | None = None


@dataclass(eq=False, repr=False)
class TuneResult(DocResult):
    """``phasescope tune``: every setting measured, the Pareto set and the recommendation."""

    command: ClassVar[str] = "tune"
    tune_id: str | None = None
    workload: str | None = None
    settings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    recommended: Any = None
    n_ok: int = 0
    n_failed: int = 0
    run_id: str | None = None


@dataclass(eq=False, repr=False)
class CeilingReport(DocResult):
    """``phasescope ceiling``: the model and one row per device (roofs, which binds, the prefill floor)."""

    command: ClassVar[str] = "ceiling"
    model: dict[str, Any] = field(default_factory=dict, repr=False)
    devices: list[dict[str, Any]] = field(default_factory=list, repr=False)


@dataclass(eq=False, repr=False)
class Report(DocResult):
    """Any other command's document (``kv``, ``hw``, ``devices``, ``models``, ``runs``, ``show``): its
    ``command`` is an instance field, the rest is the document."""

    command: str = ""  # type: ignore[misc]  # an instance field here, a class constant elsewhere
    #: what the console view draws from beyond the document (the store's run objects, a measurement)
    objects: dict[str, Any] = field(default_factory=dict)

    #: makes the document on first use, when only a machine format needs it (a console view may not)
    make: Callable[[], dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        if self.make is not None:
            self.doc, self.make = self.make(), None
        return self.doc

    @classmethod
    def of(cls, command: str, doc: dict[str, Any], **objects: Any) -> Report:
        return cls(doc=doc, command=command, objects=objects)

    @classmethod
    def lazy(cls, command: str, make: Callable[[], dict[str, Any]], **objects: Any) -> Report:
        return cls(doc={}, command=command, objects=objects, make=make)
