"""`explain` over the held-out scenario matrix (issue 30): servers, noise, speeds, magnitudes and
combinations its rules were not tuned on (:mod:`phasescope.testing.heldout_matrix`), graded by the
same judge as the project's own matrix. Every cell must be right or "cannot tell" with a reason; never
wrong.

`make test` runs :data:`~phasescope.testing.heldout_matrix.SUBSET` (two cells, ~45 s). The whole matrix
runs with ``PHASESCOPE_HELDOUT_MATRIX=1`` (or one half of it with ``=1/2`` / ``=2/2``, to run in two
processes) and writes one JSON line per cell to ``$PHASESCOPE_MATRIX_OUT`` when set, which
``benchmarks/explain_matrix.py`` turns into the table in docs/commands/explain.md."""

from __future__ import annotations

import os

import pytest

from phasescope.testing.explain_matrix import run_graded
from phasescope.testing.heldout_matrix import CELLS, SUBSET, Cell, grade

_SEL = os.environ.get("PHASESCOPE_HELDOUT_MATRIX", "")
if _SEL == "1":
    RUN = CELLS
elif _SEL in ("1/2", "2/2"):
    RUN = CELLS[int(_SEL[0]) - 1::2]
else:
    RUN = [c for c in CELLS if c.name in SUBSET]


def run_cell(cell: Cell) -> tuple[str, list[str], dict]:
    b = cell.behaviour
    return run_graded(b, cell.budget_s, lambda doc: grade(cell, doc),
                      {"matrix": "heldout", "cell": cell.name, "flavour": b.flavour, "step_s": b.decode_step_s,
                       "effects": list(cell.must), "may": list(cell.may)}, _interference)


def _interference(doc: dict) -> dict:
    pi = (doc.get("experiments") or {}).get("prefill-interference")
    keys = ("spike_x", "spike_x_ci", "stall_s", "itl_baseline_s", "itl_quiet_max_s", "tokens_during_prefill",
            "chunked_prefill_likely", "client_stall_max_s")
    return {"interference": {k: pi.get(k) for k in keys} if pi else None}


@pytest.mark.slow
@pytest.mark.parametrize("cell", RUN, ids=lambda c: c.name)
def test_explain_on_held_out_scenarios_is_right_or_cannot_tell(cell):
    g, why, row = run_cell(cell)
    assert g in ("right", "cannot tell"), (g, why, row["findings"])
    if g == "cannot tell":
        assert all(r for r in row["undecided"].values())  # every "cannot tell" says why
