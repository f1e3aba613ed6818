"""Experiments that expose each prefill/decode effect on a live server, one module each.

Each module has ``NAME``, a typed result dataclass and a pure ``analyze(records, ...)`` that turns
its tagged :class:`~phasescope.measure.records.RequestRecord` s into that result; the async
``run`` functions that send the requests live in :mod:`phasescope.experiments.run`.
"""

from __future__ import annotations

#: experiment names, in the order ``phasescope explain`` runs them
NAMES = ("prompt-scaling", "prefix-cache", "context-fill", "batching", "prefill-interference", "queue", "conversation")
