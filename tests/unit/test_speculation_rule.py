"""diagnose's speculation rule: low acceptance → a finding with the engine's flags; healthy acceptance → none;
too few requests or intervals that straddle the threshold → "cannot tell" (never a guess)."""

from __future__ import annotations

from phasescope.apis._records import llamacpp_timings
from phasescope.diagnose import diagnose
from phasescope.diagnose.thresholds import SPEC_ACCEPT_LOW, SPEC_MIN_REQUESTS
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000


def _rec(draft_n: int, accepted: int, predicted_n: int = 64, i: int = 0) -> RequestRecord:
    t = {"prompt_n": 200, "prompt_ms": 400.0, "predicted_n": predicted_n, "predicted_ms": 500.0,
         "draft_n": draft_n, "draft_n_accepted": accepted}
    r = RequestRecord(id=f"r{i}", api="openai", target="t", model="m", t_start_ns=0,
                      events=[Event(t_ns=(100 + k) * MS, n_tokens=None) for k in range(predicted_n)], ok=True,
                      output_tokens=predicted_n)
    r.server = llamacpp_timings(t)
    return r


def _run(pairs: list[tuple[int, int]], engine: str | None = "llamacpp"):
    return diagnose({}, engine=engine, records=[_rec(d, a, i=i) for i, (d, a) in enumerate(pairs)])


def test_thresholds_are_stated() -> None:
    assert 0 < SPEC_ACCEPT_LOW < 1 and SPEC_MIN_REQUESTS >= 2


def test_low_acceptance_is_a_finding_with_the_engines_flags() -> None:
    d = _run([(60, 6), (60, 5), (60, 7), (60, 4), (60, 6), (60, 5)])  # ~10 % of drafted tokens kept
    f = d.get("speculation-low-acceptance")
    assert f is not None and f.severity == "problem"
    assert any("acceptance" in e.what for e in f.evidence)
    changes = " ".join(a.change for a in f.advice)
    assert "--spec-type" in changes and "--spec-draft-n-max" in changes
    assert "speculation" not in d.undecided_ids()
    # whether it pays at the server's own concurrency is measured, not claimed: tune with speculation off and on
    assert "tune" in changes and "spec=none,ngram" in changes
    # every engine's flags when the engine is unknown
    g = _run([(60, 6), (60, 5), (60, 7), (60, 4), (60, 6), (60, 5)], engine=None).get("speculation-low-acceptance")
    assert g is not None
    every = " ".join(a.change for a in g.advice)
    assert "--speculative-config" in every and "--speculative-num-draft-tokens" in every


def test_healthy_acceptance_gives_no_finding_and_no_cannot_tell() -> None:
    d = _run([(60, 48), (60, 50), (60, 45), (60, 47), (60, 49), (60, 46)])  # ~80 % kept
    assert "speculation-low-acceptance" not in d.ids()
    assert "speculation" not in d.undecided_ids()


def test_too_few_requests_is_cannot_tell() -> None:
    d = _run([(60, 6)] * (SPEC_MIN_REQUESTS - 1))
    assert "speculation-low-acceptance" not in d.ids()
    assert "speculation" in d.undecided_ids()
    assert "request" in next(u.reason for u in d.undecided if u.id == "speculation")


def test_acceptance_straddling_the_threshold_is_cannot_tell() -> None:
    d = _run([(60, 3), (60, 50), (60, 5), (60, 45), (60, 10), (60, 40)])  # 5 % .. 83 %: the interval spans it
    assert "speculation-low-acceptance" not in d.ids()
    assert "speculation" in d.undecided_ids()


def test_no_speculation_says_nothing() -> None:
    d = diagnose({}, engine="llamacpp", records=[])
    assert "speculation" not in d.undecided_ids() and "speculation-low-acceptance" not in d.ids()
