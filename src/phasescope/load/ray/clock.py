"""Clocks across Ray actors (stated, because timing is the product).

* Every duration (TTFT, ITL, E2EL, queue, send lag) is a difference of two readings of **one
  actor's** ``perf_counter_ns`` — never across processes or machines. Records keep those raw
  readings unchanged.
* Cross-actor alignment uses a **measured offset** per actor (:func:`measure_offset`): the driver
  pings the actor ``k`` times; with driver readings ``a`` (send) and ``c`` (reply) around the
  actor's reading ``b``, ``offset = b − (a + c)/2`` (actor clock − driver clock) from the ping with
  the smallest round trip, ± ``(c − a)/2`` of that ping. Measured before the run and after it
  (``drift_ns``).
* Start: the driver picks ``t0`` on its own clock ``START_LEAD_S`` ahead and sends each actor
  ``t0 + offset``.
* :func:`align` places a record's ``wall_start_ns`` on the **driver's** wall clock through the
  offset; the actor's own wall reading stays in ``tags["actor_wall_start_ns"]``. No NTP agreement
  between machines is assumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from phasescope.measure.clock import now_ns
from phasescope.measure.records import RequestRecord

START_LEAD_S = 0.2  #: t0 is this far ahead of the driver's "go", so every actor hears it in time
PING_SAMPLES = 15


@dataclass
class ClockOffset:
    """Actor clock − driver clock (ns), from the ping with the smallest round trip."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_offset(ray: Any, actor: Any, samples: int = PING_SAMPLES) -> ClockOffset:
    """NTP-style midpoint estimate (module docstring): ``b − (a + c)/2``, ± ``(c − a)/2``."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        a = now_ns()
        b = ray.get(actor.ping.remote())
        c = now_ns()
        if best is None or c - a < best[0]:
            best = (c - a, b - (a + c) // 2)
    assert best is not None
    return ClockOffset(offset_ns=best[1], uncertainty_ns=best[0] // 2, rtt_ns=best[0], samples=samples)


def align(rec: RequestRecord, offset_ns: int, name: str, d_mono0: int, d_wall0: int) -> None:
    """Place the record on the driver's wall clock through the measured offset (module docstring)."""
    rec.tags = dict(rec.tags or {})
    rec.tags["actor_wall_start_ns"] = rec.wall_start_ns
    rec.wall_start_ns = d_wall0 + (rec.t_start_ns - offset_ns - d_mono0)
    if rec.worker is None:
        rec.worker = name
