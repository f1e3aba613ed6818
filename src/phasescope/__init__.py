"""phasescope — measure LLM inference prefill and decode apart, next to their physical ceilings.

The Python API (docs/api.md): :func:`probe`, :func:`bench`, :func:`explain`, :func:`plan`,
:func:`ceiling` each run one command and return what its ``--json`` prints; :func:`open_store` opens
the run history; :class:`RequestRecord` is one request's raw timestamps; errors derive from
:class:`PhasescopeError` (bad input: :class:`InputError`; an unusable server: :class:`TargetError`).
"""

from phasescope._version import __version__
from phasescope.api import bench, ceiling, explain, open_store, plan, probe
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
    "ConnectError",
    "EngineError",
    "InputError",
    "OutputError",
    "PhasescopeError",
    "RequestRecord",
    "TargetError",
    "__version__",
    "bench",
    "ceiling",
    "explain",
    "open_store",
    "plan",
    "probe",
]
