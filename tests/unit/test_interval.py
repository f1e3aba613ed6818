"""The interval type: coverage at about the nominal rate over simulated noisy samples, and no
"higher"/"lower" from overlapping intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from phasescope.measure import interval as iv


def test_t_table_matches_known_quantiles():
    assert iv.t975(1) == pytest.approx(12.706)
    assert iv.t975(2) == pytest.approx(4.303)
    # beyond the table the expansion stays on the known values (t(40)=2.021, t(120)=1.980)
    assert iv.t975(40) == pytest.approx(2.021, abs=2e-3)
    assert iv.t975(120) == pytest.approx(1.980, abs=2e-3)


def test_order_stat_ranks_exact_coverage():
    assert iv.order_stat_ranks(5) is None          # (min, max) of 5 covers 93.75 % < 95 %
    lo, hi, cov = iv.order_stat_ranks(6)
    assert (lo, hi) == (0, 5) and cov == pytest.approx(1 - 2 / 64)
    lo, hi, cov = iv.order_stat_ranks(20)
    assert cov >= 0.95 and lo > 0 and hi == 19 - lo


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8, 12, 30])
def test_median_interval_covers_true_median_at_nominal_rate(n):
    """Log-normal timing noise (multiplicative): the true median is exp(mu)."""
    rng = np.random.default_rng(n)
    trials, hits = 2000, 0
    true_median = math.exp(1.0)
    for _ in range(trials):
        s = rng.lognormal(1.0, 0.4, size=n)
        r = iv.median_interval(s)
        hits += r.low <= true_median <= r.high
    rate = hits / trials
    assert rate >= 0.92, rate          # nominal 95 % (order statistics: >= 95 % exactly)
    assert rate <= 0.995 or n >= 6, rate  # log-t is not wildly conservative


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_mean_interval_covers_true_mean(n):
    rng = np.random.default_rng(100 + n)
    hits = 0
    for _ in range(2000):
        r = iv.mean_interval(rng.normal(10.0, 2.0, size=n))
        hits += r.low <= 10.0 <= r.high
    assert 0.93 <= hits / 2000 <= 0.97


def test_the_demo_case_is_not_tight_and_prints_its_spread():
    r = iv.median_interval([3.414, 0.248, 0.953])
    assert r.value == pytest.approx(0.953)
    assert not r.tight()
    assert r.spread == pytest.approx((3.414 - 0.248) / 0.953)
    text = r.scale(1000).fmt(lambda v: f"{v:,.0f} ms")
    assert text == "953 ms (248 ms–3,414 ms, 3 runs)"


def test_tight_repeats_print_plain():
    r = iv.median_interval([1.00, 1.01, 1.02, 0.99])
    assert r.tight() and r.fmt(lambda v: f"{v:.2f} s") == "1.00 s"


def test_single_and_empty():
    assert iv.median_interval([]) is None
    one = iv.median_interval([2.0])
    assert one.n == 1 and not one.known and not one.tight()
    assert iv.compare(one, iv.median_interval([5.0, 5.1, 5.2])) == iv.CANNOT_TELL


def test_json_round_trip_and_ci():
    r = iv.median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    back = iv.Interval.from_json(r.to_json())
    assert back == r
    assert iv.to_ci(r) == [r.low, r.high]


finite_pos = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(a=st.lists(finite_pos, min_size=1, max_size=12), b=st.lists(finite_pos, min_size=1, max_size=12))
def test_compare_never_claims_a_difference_when_intervals_overlap(a, b):
    ia, ib = iv.median_interval(a), iv.median_interval(b)
    verdict = iv.compare(ia, ib)
    if ia.overlaps(ib) or not ia.known or not ib.known:
        assert verdict == iv.CANNOT_TELL
    else:
        assert verdict == (iv.HIGHER if ib.value > ia.value else iv.LOWER)
    # the value is always inside its own interval
    assert ia.low <= ia.value <= ia.high


@settings(max_examples=200, deadline=None)
@given(a=st.lists(finite_pos, min_size=2, max_size=10), b=st.lists(finite_pos, min_size=2, max_size=10))
def test_ratio_interval_contains_the_ratio(a, b):
    r = iv.ratio(iv.median_interval(a), iv.median_interval(b))
    assert r.low <= r.value * (1 + 1e-12) and r.value <= r.high * (1 + 1e-12)


def test_min_effect_gate():
    a = iv.mean_interval([10.0, 10.01, 10.02])
    b = iv.mean_interval([10.2, 10.21, 10.22])
    assert iv.compare(a, b) == iv.HIGHER
    assert iv.compare(a, b, min_rel=0.05) == iv.CANNOT_TELL
