"""``bench --ray [ADDRESS]``: one arrival schedule, partitioned over Ray actors, records merged exactly.

Modules: :mod:`.actor` (:class:`LoadActor`, the runner inside a Ray worker process), :mod:`.clock`
(the measured driver↔actor clock offset and how records are placed on the driver's clock),
:mod:`.driver` (:func:`run_ray`: connect, place the actors, start them together, collect records,
account for dead actors, merge). The ``--ray``/``--target`` flags are parsed in
:mod:`phasescope.cli._scale_out`; :class:`~phasescope.errors.RayError` is in :mod:`phasescope.errors`.

Why Ray: past one machine a load generator needs a distributed runtime; Ray is what LLMPerf uses,
runs on a laptop as well as a cluster, and schedules actors by declared resources. Ray is an
optional extra (``pip install 'phasescope[ray]'``) imported only here, lazily.

Design (the driver is the process running ``phasescope bench``):

1. The driver computes the schedule once (:func:`phasescope.load.schedule.build_schedule`) and the
   workload, then splits the schedule with :meth:`phasescope.load.schedule.Schedule.partition` (request ``i`` → actor
   ``i mod N``, offsets unchanged, so the union of all sends *is* the schedule) and a
   ``--max-concurrency`` cap with :func:`phasescope.load.workers.split_concurrency`.
2. ``N`` actors (:class:`LoadActor`, ``num_cpus=--ray-actor-cpus`` each, ``SPREAD`` over nodes) each
   run the ordinary async runner (:func:`phasescope.load.runner.run_load`) on their own event loop
   in their own thread, with their own aiohttp session — exactly the single-process code path.
3. Each actor hands every record, the moment its request completes, to its sink — a
   :class:`~phasescope.measure.records.QueueSink` — and the driver keeps one ``poll()`` call in
   flight per actor (a batch of records, at most ``POLL_S`` old), writes each record to the run's
   sink (:func:`phasescope.lifecycle.run_output`: the ``--out`` JSONL and/or the run store) as it
   arrives, and feeds the live progress bar. A write failure (a full disk) stops the run there.
4. Merge: the measured records of all actors, sorted by (aligned) start time. Nothing is
   recomputed per actor: the summary is :func:`phasescope.load.summary.summarize` of the merged
   records, as for one process.

Clocks (stated, because timing is the product):

* Every duration (TTFT, ITL, E2EL, queue, send lag) is a difference of two readings of **one
  actor's** ``perf_counter_ns`` — never across processes or machines. Records keep those raw
  readings unchanged.
* Cross-actor alignment (start together, one timeline, the run's duration and peaks) uses a
  **measured offset** per actor: the driver pings the actor ``k`` times; with driver readings
  ``a`` (send) and ``c`` (reply) around the actor's reading ``b``,
  ``offset = b − (a + c)/2`` (actor clock − driver clock) from the ping with the smallest round
  trip, and the uncertainty is ``(c − a)/2`` of that ping (the actor read its clock somewhere in
  ``[a, c]``). Measured before the run and again after it (``drift_ns``).
* Start: after every actor finished its warm-ups the driver picks ``t0`` on its own clock
  (``now + START_LEAD_S``) and sends each actor ``t0 + offset``; so all actors share one t0 to
  within the offset uncertainty.
* ``wall_start_ns`` of a Ray record is placed on the **driver's** wall clock through the offset
  (``driver_wall_t0 + (t_start − offset − driver_mono_t0)``); the actor's own wall reading is
  kept in ``tags["actor_wall_start_ns"]``. Summaries across actors use ``wall_start_ns``
  (:func:`phasescope.load.summary.summarize`), so no NTP agreement between machines is assumed.

Honesty at scale: each actor reports its own :class:`~phasescope.load.health.RunnerHealth`
(event-loop lag, CPU of its process, send lag = achieved vs scheduled send time); the driver turns
each into warnings naming the actor, and while the run goes it watches every actor's rolling send
lag and says so the moment one falls behind. An actor that dies (node lost, OOM, ``ray.kill``) is
reported: each request it owned that never completed gets a record with ``ok=False`` and
``error_kind="worker_lost"`` (``tags["lost"]`` = ``"in_flight"`` or ``"unsent"``), and the run is
marked partial — never silently dropped. (For an endless closed loop only the requests in flight
at its last report are known.)
"""


from __future__ import annotations

from phasescope.errors import RayError
from phasescope.load.ray.actor import POLL_S, LoadActor
from phasescope.load.ray.clock import PING_SAMPLES, START_LEAD_S, ClockOffset, align, measure_offset
from phasescope.load.ray.driver import (
    INSTALL_HINT,
    LOOPBACK_ENV,
    LOST,
    ActorState,
    RayRunResult,
    add_ray_summary,
    import_ray,
    lost_records,
    merge,
    run_ray,
)

__all__ = ["INSTALL_HINT", "LOOPBACK_ENV", "LOST", "PING_SAMPLES", "POLL_S", "START_LEAD_S", "ActorState",
           "ClockOffset", "LoadActor", "RayError", "RayRunResult", "add_ray_summary", "align", "import_ray",
           "lost_records", "measure_offset", "merge", "run_ray"]
