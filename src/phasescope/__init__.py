"""phasescope — measure LLM inference prefill and decode apart, next to their physical ceilings.

The Python API (docs/api.md): :func:`probe`, :func:`bench`, :func:`explain`, :func:`plan`, :func:`tune`,
:func:`ceiling` each run one command, with the command's flags as keywords, and return its typed result
(:class:`ProbeResult`, :class:`BenchSummary`, :class:`ExplainReport`, :class:`PlanResult`,
:class:`TuneResult`, :class:`CeilingReport`; each a :class:`Result` whose ``to_json()`` is what the
command's ``--json`` prints); :func:`open_store` opens the run history; :class:`RequestRecord` is one
request's raw timestamps; errors derive from :class:`PhasescopeError` (bad input: :class:`InputError`;
an unusable server: :class:`TargetError`). Everything public is named here (``__all__``); the modules
whose names start with ``_`` are the implementation.

``probe`` and ``plan`` are also the names of subpackages, and Python's import system sets a
subpackage as an attribute of its parent when it loads it — which would turn ``phasescope.probe``
from the function into a module the first time anything imports ``phasescope.probe.runner``. So
this package's module type keeps the two names callable: when a subpackage lands on them, it
becomes a module that calls the API function of its name (``phasescope.probe(...)`` is
:func:`phasescope.api.probe` either way, and ``import phasescope.probe.runner as r`` still works).
"""

import inspect as _inspect
import sys as _sys
import types as _types
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


#: API functions whose names are also subpackages (see the module docstring)
_SHADOWED = ("plan", "probe")


class _ApiModule(_types.ModuleType):
    """A subpackage that, called, runs the API function of its name."""

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        from phasescope import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(_types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        if name in _SHADOWED and isinstance(value, _types.ModuleType) and not isinstance(value, _ApiModule):
            from phasescope import api

            value.__class__ = _ApiModule
            value.__signature__ = _inspect.signature(getattr(api, name))  # type: ignore[attr-defined]
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
for _name in _SHADOWED:  # a subpackage already loaded while this module ran
    if isinstance(_sys.modules.get(f"{__name__}.{_name}"), _types.ModuleType):
        setattr(_sys.modules[__name__], _name, _sys.modules[f"{__name__}.{_name}"])
