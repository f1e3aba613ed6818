"""context-fill's "flat" verdict (decode does not depend on the context: no finding, no "cannot tell")
needs the two end points' intervals to rule a slowdown out, as the "slows" verdict needs them to part.
The held-out matrix's slow llama-server (70 ms a token, noise of 21 ms a step on average, decode +1/300
of a step per context token: ~20 % slower from 33 to 110 tokens) read 10.1 → 9.9 tok/s from one
request of 16 tokens per point, intervals ±14 %, and was called flat: a slowdown missed in silence."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from explain_synth import rec  # noqa: E402

from phasescope.experiments import context_fill  # noqa: E402

CF = context_fill.NAME
#: 15 token gaps around 0.1 s, one request per point: a tight middle (a small MAD, so a small "spread")
#: but ends far enough apart that the interval of the median spans about ±10 %
NOISY = [0.1, 0.085, 0.13, 0.088, 0.099, 0.15, 0.09, 0.101, 0.095, 0.115, 0.086, 0.103, 0.097, 0.11, 0.105]


def _points(first: list[float], last: list[float]) -> list:
    return [rec(CF, "measure", ttft=0.1, gaps=first, prompt=25, n_out=len(first) + 1, context_target=25),
            rec(CF, "measure", ttft=0.1, gaps=last, prompt=102, n_out=len(last) + 1, context_target=102)]


def test_flat_point_values_with_wide_intervals_are_cannot_tell():
    r = context_fill.analyze(_points(NOISY, [g * 1.02 for g in NOISY]))
    assert abs(r.slowdown_pct) <= context_fill.FLAT_PCT  # the point values look flat
    assert r.slows is None, "intervals this wide cannot rule out a 10 % slowdown"
    assert "cannot tell" in r.reason and "%" in r.reason, r.reason


def test_flat_with_tight_intervals_is_still_flat():
    steady = [0.1, 0.1005, 0.0995] * 5
    assert context_fill.analyze(_points(steady, [g * 1.02 for g in steady])).slows is False
