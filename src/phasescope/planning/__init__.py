"""What-if planning: a discrete-event simulator of prefill/decode scheduling (``phasescope plan``).

:mod:`.costmodel` times one engine step from bytes and FLOPs; :mod:`.workload` draws arrivals and
lengths; :mod:`.sim` runs the continuous-batching scheduler (one replica's steps: :mod:`.replica`); :mod:`.metrics` turns the outcome
into ``vllm bench serve`` numbers and RequestRecords; :mod:`.calibrate` fits the cost model to
measured runs; :mod:`.build` ties them to the model and device catalogs; :mod:`.planner` sweeps and searches capacity;
:mod:`.api` is what ``phasescope plan`` calls.
"""

from __future__ import annotations

from phasescope.planning.costmodel import CostModel
from phasescope.planning.sim import Deployment, SchedulerConfig, SimResult, Simulator, simulate
from phasescope.planning.workload import Workload, build_requests

__all__ = [
    "CostModel",
    "Deployment",
    "SchedulerConfig",
    "SimResult",
    "Simulator",
    "Workload",
    "build_requests",
    "simulate",
]
