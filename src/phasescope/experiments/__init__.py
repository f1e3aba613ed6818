"""Experiments that expose each prefill/decode effect on a live server, one module each.

Each module has ``NAME``, a typed result dataclass and a pure ``analyze(records, ...)`` that turns
its tagged :class:`~phasescope.measure.records.RequestRecord` s into that result, an async
``run(ctx, budget_s, ...)`` that sends the requests, and ``SPEC`` (:mod:`.spec`: its budget share,
its run in the suite, its view and its diagnosis rule). :mod:`.registry` holds the specs;
:mod:`phasescope.experiments.suite` runs them in turn.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "NAMES":
        # experiment names, in the order ``phasescope explain`` runs them: the registry's, read when asked
        # (so an experiment registered at run time is one of them)
        from phasescope.experiments import registry

        return registry.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
