"""Issue #15: `explain` over a scenario matrix whose causes are known — every effect of the
behaviour fake alone and in pairs, at 5, 25 and 150 ms per token. Every cell must be right (the
true cause named, nothing false) or "cannot tell" with a reason; never wrong.

`make test` runs a representative subset; the full matrix (66 cells, ~40 min on 2 cores) runs with
``PHASESCOPE_FULL_MATRIX=1`` and writes one JSON line per cell to ``$PHASESCOPE_MATRIX_OUT`` when
set, which ``benchmarks/explain_matrix.py`` turns into the confusion matrix in docs/commands/explain.md."""

from __future__ import annotations

import itertools
import os

import pytest

from phasescope.testing.explain_matrix import EFFECTS, SPEEDS, judge, run_graded, scenario

#: explain's budget per speed: the slow server needs more time for the same number of samples
BUDGET_S = {0.005: 20.0, 0.025: 30.0, 0.150: 75.0}

ALL = [()] + [(e,) for e in EFFECTS] + list(itertools.combinations(EFFECTS, 2))
SUBSET = [((), 0.025), (("stall", "nocache"), 0.005), (("queue", "ctx"), 0.025), (("batch", "net"), 0.025)]
FULL = os.environ.get("PHASESCOPE_FULL_MATRIX") == "1"
CELLS = [(e, s) for s in SPEEDS for e in ALL] if FULL else SUBSET


def cell_id(cell: tuple[tuple[str, ...], float]) -> str:
    effects, step = cell
    return f"{'+'.join(effects) or 'healthy'}@{step * 1e3:g}ms"


def run_cell(effects: tuple[str, ...], step: float) -> tuple[str, list[str], dict]:
    return run_graded(scenario(effects, step), BUDGET_S[step], lambda doc: judge(effects, doc),
                      {"effects": list(effects), "step_s": step})


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_explain_is_right_or_cannot_tell_never_wrong(cell):
    effects, step = cell
    grade, why, row = run_cell(effects, step)
    assert grade in ("right", "cannot tell"), (grade, why, row["findings"])
    if grade == "cannot tell":
        assert all(r for r in row["undecided"].values())  # every "cannot tell" says why


def test_judge_grades_by_the_truth():
    # the grader itself: a false problem is wrong, a silent miss is wrong, an undecided effect is cannot tell
    healthy = {"findings": [{"id": "prefix-cache-working"}, {"id": "batching-scales"}], "undecided": [],
               "experiments": {}}
    assert judge((), healthy)[0] == "right"
    assert judge(("nocache",), healthy)[0] == "wrong"  # says working, and misses the absent cache
    levels = [{"concurrency": c, "output_tok_s": 10.0 * c} for c in (1, 2, 4, 8, 16)]
    tested = {**healthy, "experiments": {"batching": {"levels": levels}}}
    assert judge(("batch",), tested)[0] == "wrong"  # "still pays at 16" where the knee shows by 8
    short = {**healthy, "experiments": {"batching": {"levels": levels[:3]}}}
    assert judge(("batch",), short)[0] == "cannot tell"  # "still pays at 4": true, the knee lies further
    und = {"findings": [], "undecided": [{"id": "prefix-cache", "reason": "noise"}], "experiments": {}}
    assert judge(("nocache",), und) == ("cannot tell", ["nocache: cannot tell (noise)"])
    stall_claim = {"findings": [{"id": "prefill-interference"}], "undecided": [],
                   "experiments": {"prefill-interference": {"chunked_prefill_likely": False}}}
    assert judge(("stall",), stall_claim)[0] == "right" and judge((), stall_claim)[0] == "wrong"
