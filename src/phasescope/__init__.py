"""phasescope — measure LLM inference prefill and decode apart, next to their physical ceilings.

The Python API (docs/api.md): :func:`probe`, :func:`bench`, :func:`explain`, :func:`plan`, :func:`tune`,
:func:`ceiling` each run one command, with the command's flags as keywords, and return its typed result
(:class:`ProbeResult`, :class:`BenchSummary`, :class:`ExplainReport`, :class:`PlanResult`,
:class:`TuneResult`, :class:`CeilingReport`; each a :class:`Result` whose ``to_json()`` is what the
command's ``--json`` prints); :func:`open_store` opens the run history; :class:`RequestRecord` is one
request's raw timestamps; errors derive from :class:`PhasescopeError` (bad input: :class:`InputError`;
an unusable server: :class:`TargetError`). Everything public is named here (``__all__``); the modules
whose names start with ``_`` are the implementation.

The implementation packages are named for what they do (``probing``, ``planning``, ``load``, …), never
for an API function, so ``phasescope.probe`` and ``phasescope.plan`` are the functions whatever was
imported before (a subpackage named ``probe`` would replace the function once loaded).
"""

from typing import Any as _Any

from phasescope._results import (
    BenchSummary,
    BenchSweep,
    CeilingReport,
    ExperimentResult,
    PlanResult,
    ProbeResult,
    Report,
    Result,
    TuneResult,
)
from phasescope._version import __version__
from phasescope.api import bench, ceiling, explain, open_store, plan, probe, tune
from phasescope.errors import (
    AuthError,
    ConnectError,
    EngineError,
    InputError,
    OutputError,
    PhasescopeError,
    TargetError,
)
from phasescope.measure.records import RequestRecord

__all__ = [
    "AuthError",
    "BenchSummary",
    "BenchSweep",
    "CeilingReport",
    "ConnectError",
    "EngineError",
    "ExperimentResult",
    "ExplainReport",
    "InputError",
    "OutputError",
    "PhasescopeError",
    "PlanResult",
    "ProbeResult",
    "Report",
    "RequestRecord",
    "Result",
    "TargetError",
    "TuneResult",
    "__version__",
    "bench",
    "ceiling",
    "explain",
    "open_store",
    "plan",
    "probe",
    "tune",
]


def __getattr__(name: str) -> _Any:
    """``ExplainReport`` is built by the explain suite, which loads on first use (``import phasescope`` stays cheap)."""
    if name == "ExplainReport":
        from phasescope.experiments.suite import ExplainReport

        return ExplainReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
