"""The experiments ``explain`` runs: every :class:`~phasescope.experiments.spec.ExperimentSpec`, by name.

The suite's order and budget shares, the names ``--only`` and ``experiment NAME`` take, the table the
console draws for each result and the rules the diagnosis hears are all read here, so a new experiment
is one module declaring ``SPEC`` and its name in :data:`MODULES`; :func:`register` adds one at run time
(a plugin, a test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from phasescope.experiments import (
    batching,
    context_fill,
    conversation,
    prefill_interference,
    prefix_cache,
    prompt_scaling,
    queue,
)
from phasescope.experiments.spec import ExperimentSpec

if TYPE_CHECKING:
    from phasescope.diagnose.findings import Rule
    from phasescope.experiments.view import View

#: the experiment modules, in the order ``phasescope explain`` runs them (a new experiment: its name here)
MODULES = (prompt_scaling, prefix_cache, context_fill, batching, prefill_interference, queue, conversation)

_SPECS: dict[str, ExperimentSpec] = {}


def register(spec: ExperimentSpec) -> ExperimentSpec:
    """Add ``spec`` after those already here (it runs last); a name already taken is a ``ValueError``."""
    if spec.name in _SPECS:
        raise ValueError(f"experiment {spec.name!r} is already registered")
    _SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove the spec named ``name`` (a test's throw-away experiment); unknown names are ignored."""
    _SPECS.pop(name, None)


def specs() -> tuple[ExperimentSpec, ...]:
    return tuple(_SPECS.values())


def names() -> tuple[str, ...]:
    """Every experiment, in the order explain runs them."""
    return tuple(_SPECS)


def find(name: str) -> ExperimentSpec | None:
    return _SPECS.get(name)


def shares() -> dict[str, float]:
    """Each experiment's share of the budget."""
    return {s.name: s.share for s in _SPECS.values()}


def rules() -> tuple[Rule, ...]:
    """The rules the experiments' results are decided by (diagnose runs them with its own)."""
    return tuple(s.rule for s in _SPECS.values() if s.rule is not None)


def view_of(name: str) -> Callable[[dict[str, Any]], View] | None:
    """The view that draws ``name``'s result (None: no table, or no such experiment)."""
    spec = _SPECS.get(name)
    return spec.view if spec is not None else None


for _module in MODULES:
    register(_module.SPEC)
