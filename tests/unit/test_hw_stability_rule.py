"""hw's stability rule judges the passes the saved figure stands on (issue 29 item 5).

The saved figure is the best pass (STREAM's convention: other work only ever slows a pass), so whether
`local` may be saved is decided by whether the *fastest majority* of the passes agree with it, not by the
range of all passes: max − min over n passes grows with n (one straggler in any of them is enough), so a
rule on it refuses more the more passes are taken, and a quiet machine with one slowed pass never saved.
The all-pass spread is still reported, as `spread_all`. Synthetic pass lists and a simulated machine
(seeded): no timing assertion."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")
from phasescope.theory import hw as H


def _bw(runs: list[float]) -> H.BandwidthResult:
    med, lo, hi, spread = H._summary(runs)
    return H.BandwidthResult("c-threads", 2, 1 << 30, runs, hi, med, lo, hi, spread)


def _result(runs: list[float]) -> H.HwResult:
    return H.HwResult(cpu="Test CPU", cores=2, memory_gb=16.0, bandwidth=_bw(runs), bandwidth_other=[],
                      matmul=None, derived=H.derived_peaks(2, 2.6, {"avx2", "fma"}))


QUIET = {"available": True, "cores": 2, "worst_1s_other_cpu_share": 0.02,
         "during": {"cores": 2, "other_cpu_share": 0.02, "top_other": []}}


def _stable(runs: list[float]) -> bool:
    return H.profile_of(_result(list(runs)), QUIET).stable


# the last session's quiet 2-vCPU VM: median interval 34.7–36.2 GB/s, yet 10 passes spread 17 % (33.7–39.6)
QUIET_VM = [35.1, 39.6, 35.6, 34.9, 36.2, 33.7, 35.4, 34.7, 36.0, 35.3]
# a quiet machine, nine passes within 4 % and one pass that something slowed
STRAGGLER = [27.3, 26.9, 27.1, 26.5, 27.0, 26.8, 26.2, 27.2, 26.7, 19.4]
# the issue's: best 42.7, median 19.3, min 5.1 GB/s — the bandwidth wandered through the whole run
WANDER = [42.7, 19.3, 5.1, 30.2, 19.3, 12.4, 25.5, 19.3, 8.8, 15.0]
# a burner 1 s on, 1 s off: half the passes slowed by half
BURSTY = [36.1, 18.2, 35.8, 17.9, 36.0, 18.5, 35.9, 18.0, 36.2, 18.1]


def test_a_quiet_list_with_one_slow_straggler_saves_and_reports_both_spreads() -> None:
    p = H.profile_of(_result(STRAGGLER), QUIET)
    assert p.stable and p.unstable_because is None
    assert p.spread == pytest.approx((27.3 - 26.8) / statistics.median(sorted(STRAGGLER)[-6:]))  # fastest 6
    assert p.spread_all == pytest.approx((27.3 - 19.4) / statistics.median(STRAGGLER))  # 29 %, as before
    assert p.spread_of == 6 and p.passes == 10 and p.bandwidth_gb_s == 27.3
    assert _stable(QUIET_VM)  # the quiet VM's 17 % all-pass spread: its fastest 6 agree within 12 %


def test_bursty_and_wandering_passes_refuse() -> None:
    for runs in (WANDER, BURSTY):
        p = H.profile_of(_result(runs), QUIET)
        assert not p.stable and "disagree" in p.unstable_because, runs
        assert "fastest 6 of 10" in p.unstable_because and "all 10" in p.unstable_because
    assert H.profile_of(_result(WANDER), QUIET).spread_all == pytest.approx((42.7 - 5.1) / 19.3)


def test_hw_json_keeps_spread_for_the_rule_and_adds_spread_all(capsys, monkeypatch, _home: Path) -> None:
    monkeypatch.setattr(H, "measure_sampled", lambda **kw: (_result(STRAGGLER), QUIET))
    code, out, _ = run(["hw", "--json"], capsys, monkeypatch)
    doc = json.loads(out)
    assert code == 0 and doc["saved"] is True and "reason" not in doc
    assert doc["spread"] <= H.STABLE_SPREAD < doc["spread_all"] and doc["spread_of"] == 6
    assert doc["spread_all"] == pytest.approx(0.294, abs=0.001)
    note = H.local_profile_note({"id": "local"})
    assert "best of 10 passes" in note and "fastest 6" in note and "all 10: 29 %" in note, note


def test_a_round_whose_fastest_passes_agree_ends_the_search(monkeypatch) -> None:
    seq = iter([_bw(STRAGGLER), _bw(WANDER)])
    monkeypatch.setattr(H, "bandwidth_numpy", lambda size, threads, repeats: next(seq))
    r = H.measure(size_mb=1, repeats=10, matmul_n=16, use_c=False, rounds=3)
    assert len(r.rounds) == 1 and r.rounds[0]["kept"] and r.rounds[0]["spread"] <= H.STABLE_SPREAD
    assert r.rounds[0]["spread_all"] > H.STABLE_SPREAD


def _machine(rng: np.random.Generator, n: int, jitter: float, straggle: float) -> list[float]:
    """n passes of a machine whose peak is 36 GB/s: every pass slowed by a half-normal jitter, and with
    probability ``straggle`` slowed again by 20–80 % (other work only ever slows a pass)."""
    x = 36.0 / (1 + np.abs(rng.normal(0, jitter, n)))
    slowed = rng.random(n) < straggle
    return list(np.where(slowed, x / (1 + rng.uniform(0.2, 0.8, n)), x))


NS = (5, 10, 20, 40)


def _save_rate(jitter: float, straggle: float, n: int, draws: int = 150) -> float:
    rng = np.random.default_rng(int(jitter * 1000) * 7919 + int(straggle * 100) * 31 + n)
    return sum(_stable(_machine(rng, n, jitter, straggle)) for _ in range(draws)) / draws


@pytest.mark.parametrize("jitter", [0.02, 0.05, 0.08])
@pytest.mark.parametrize("straggle", [0.0, 0.05, 0.1, 0.2])
def test_more_passes_never_make_the_rule_stricter(jitter: float, straggle: float) -> None:
    rates = [_save_rate(jitter, straggle, n) for n in NS]
    # simulated (seeded): the share of measurements saved does not fall as the passes grow (±0.05 of noise) …
    assert all(later >= earlier - 0.05 for earlier, later in zip(rates, rates[1:])), rates
    # … and a machine this quiet (a fifth of its passes slowed at most) saves from 10 passes on
    assert min(rates[1:]) >= 0.9, rates


@pytest.mark.parametrize("straggle", [0.7, 0.9])
def test_a_machine_that_slows_most_passes_refuses(straggle: float) -> None:
    # most passes slowed, each by its own amount: the rule converges on "disagree" (by 40 passes always)
    rates = [_save_rate(0.02, straggle, n) for n in NS[1:]]
    assert max(rates) <= 0.1 and rates[-1] == 0.0, rates
    rng = np.random.default_rng(1)
    wander = [[float(v) for v in 36 * np.exp(rng.normal(0, 0.4, n))] for n in NS[1:] for _ in range(20)]
    assert not any(_stable(w) for w in wander)  # the wandering bandwidth


_agreeing = st.tuples(st.floats(5, 100), st.lists(st.floats(0, 0.12), min_size=3, max_size=30)).map(
    lambda t: [t[0] * (1 - j) for j in t[1]])


@settings(max_examples=150, deadline=None)
@given(_agreeing, st.data())
def test_stragglers_fewer_than_the_agreeing_passes_never_refuse(runs: list[float], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(runs) - 1))
    slow = data.draw(st.lists(st.floats(0.05, 0.99), min_size=k, max_size=k))
    assert _stable(runs) and _stable(runs + [min(runs) * f for f in slow])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(1, 100), min_size=2, max_size=20), st.integers(2, 5))
def test_the_same_passes_taken_more_often_never_judge_stricter(runs: list[float], m: int) -> None:
    one = H.profile_of(_result(runs), QUIET)
    more = H.profile_of(_result(runs * m), QUIET)
    assert more.spread <= one.spread + 1e-9 and (more.stable or not one.stable)


def test_a_profile_saved_under_the_all_pass_rule_reads_as_it_was(_home: Path) -> None:
    # local_device.json written before spread_of existed: its spread was of every pass, and says so
    old = H.profile_of(_result(QUIET_VM), QUIET, now=1_764_000_000).to_dict()
    for k in ("spread_all", "spread_of"):
        old.pop(k)
    old["spread"] = 0.12
    p = H.Profile.from_dict(old)
    assert p.spread == p.spread_all == 0.12 and p.spread_of == 10
    s = H.profile_sentence(p, now=1_764_000_000)
    assert "best of 10 passes, spread 12 %" in s and "fastest" not in s, s
