"""What an experiment is, as data: one :class:`ExperimentSpec`, declared as ``SPEC`` in its module.

``explain`` (:mod:`phasescope.experiments.suite`) runs the registered specs in turn, each within its
``share`` of the budget; the console (:mod:`phasescope.experiments.render`) draws each result with its
``view``; the diagnosis hears each spec's ``rule``; a skipped experiment is a "cannot tell" under its
rule's id. :mod:`phasescope.experiments.registry` holds the specs, so a new experiment is one module
(its ``SPEC``, with its rule and view beside it or in ``diagnose``/``view``) and one name there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

if TYPE_CHECKING:
    from phasescope.diagnose.findings import Rule
    from phasescope.experiments.context import RunContext
    from phasescope.experiments.view import View


@dataclass
class SuiteInputs:
    """What the suite knows when an experiment starts: the results of those that ran before it (by
    name) and the model's bytes from theory (None: unknown)."""

    results: dict[str, Any] = field(default_factory=dict)
    weight_bytes: float | None = None
    kv_bytes_per_token: float | None = None
    model_source: str = "theory"


RunFn = Callable[["RunContext", float, SuiteInputs], Awaitable[Any]]


@dataclass(frozen=True)
class ExperimentSpec:
    """One experiment.

    ``share``: its part of explain's budget (renormalised over the experiments still to run).
    ``run(ctx, budget_s, suite)``: send its requests within ``budget_s`` and return its typed result
    (with ``.info``, an :class:`~phasescope.experiments.common.ExperimentInfo`). ``analyze``: its pure
    records → result function. ``view(result_json)``: the table the console and the report draw
    (None: no table). ``rule``: the diagnosis rule that decides from its result (None: none)."""

    name: str
    share: float
    run: RunFn
    analyze: Callable[..., Any]
    view: Callable[[dict[str, Any]], View] | None = None
    rule: Rule | None = None
