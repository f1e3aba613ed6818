"""Experiments that expose each prefill/decode effect on a live server, one module each.

Each module has ``NAME``, a typed result dataclass and a pure ``analyze(records, ...)`` that turns
its tagged :class:`~phasescope.measure.records.RequestRecord` s into that result, and an async
``run(ctx, budget_s, ...)`` that sends the requests; :mod:`phasescope.experiments.suite` runs them in turn.
"""

from __future__ import annotations

#: experiment names, in the order ``phasescope explain`` runs them
NAMES = ("prompt-scaling", "prefix-cache", "context-fill", "batching", "prefill-interference", "queue", "conversation")
