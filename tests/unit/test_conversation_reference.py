"""conversation's expected growth comes from its reference requests: one stalled reference must not make a
server without a prefix cache read as "timing says cached" (CI-like failure at stop 42: a loaded host stalled
the long reference, the expected slope grew, and the flat turns of a microsecond re-prefill looked cached)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_synth import rec  # noqa: E402

from phasescope.experiments import conversation  # noqa: E402


def turns(ttft_of: callable, cached: int | None = 0) -> list:  # type: ignore[valid-type]
    out = []
    for s in range(2):
        for k in range(4):
            p = 200 + 300 * k
            out.append(rec(conversation.NAME, "turn", ttft=ttft_of(p) + 0.0005 * s, prompt=p, session=s, turn=k + 1,
                           cached=cached))
    return out


def refs(ttfts: dict[int, list[float]]) -> list:  # type: ignore[valid-type]
    return [rec(conversation.NAME, "ref", ttft=t, prompt=n, length=n) for n, ts in ttfts.items() for t in ts]


def test_one_stalled_reference_of_two_does_not_set_the_expected_growth() -> None:
    flat = lambda p: 0.020 + 1e-7 * p  # noqa: E731 — re-prefilling costs microseconds: growth inside the noise
    # each reference sent twice; the second long one stalled 60 ms behind other work
    r = conversation.analyze(turns(flat) + refs({200: [0.020, 0.021], 1100: [0.021, 0.081]}))
    assert r.history_cached is None and "noise" in r.reason, r.reason
    # a real prefill cost is still measured: 1 ms per token, the turns re-prefill the history
    slow = lambda p: 0.020 + 1e-3 * p  # noqa: E731
    r = conversation.analyze(turns(slow) + refs({200: [0.22, 0.23], 1100: [1.12, 1.19]}))
    assert r.history_cached is False, r.reason
    assert r.expected_slope_s_per_token is not None and abs(r.expected_slope_s_per_token - 1e-3) < 1e-4
