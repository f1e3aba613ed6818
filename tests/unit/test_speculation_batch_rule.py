"""diagnose's "batch too large for speculation" (rule ``speculation``, finding ``speculation-batch-too-large``):
explain's batching levels carry the requests' draft counts; the verdict per level is the predicted speed with
speculation ÷ without (theory.speculation on the ceilings' roofs × the measured tokens per step), claimed only
where its whole interval lies below 1; an interval across 1 is "cannot tell"; a memory-bound verify says nothing.

The roofs here: 1 GB of weights at 100 GB/s (a 10 ms step on bandwidth), 2 GFLOP per token at 1 TFLOP/s (2 ms
per token on compute): a verify pass of B·5 tokens (4 drafted + 1) turns compute-bound past B = 1."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasescope.apis._records import llamacpp_timings
from phasescope.diagnose import Ceilings, diagnose
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000
N = 65  # tokens per request: 64 decoded after the first


def _rec(c: int, i: int, accepted: int, k: int = 4, itl_ms: float = 10.0) -> RequestRecord:
    steps = N - 1 - accepted
    t = {"prompt_n": 64, "prompt_ms": 40.0, "predicted_n": N, "predicted_ms": 500.0,
         "draft_n": k * steps, "draft_n_accepted": accepted}
    r = RequestRecord(id=f"c{c}-{i}", api="openai", target="t", model="m", t_start_ns=0,
                      events=[Event(t_ns=int((50 + j * itl_ms) * MS), n_tokens=None) for j in range(N)], ok=True,
                      output_tokens=N, tags={"experiment": "batching", "phase": "measure", "concurrency": c, "worker": i})
    r.server = llamacpp_timings(t)
    return r


def _ceil(peak: float | None = 1e12, **kw: float) -> Ceilings:
    return Ceilings(decode_ceiling_tok_s=100.0, source="theory: test model on test device", bandwidth_gb_s=100.0,
                    weight_bytes=1e9, device="test", peak_flops=peak, flops_per_token=2e9, **kw)


def _run(levels: dict[int, list[int]], ceil: Ceilings | None, engine: str | None = "llamacpp"):
    recs = [_rec(c, i, a) for c, acc in levels.items() for i, a in enumerate(acc)]
    return diagnose({}, engine=engine, ceilings=ceil, records=recs)


# 38 of 64 decoded tokens accepted: 26 verified steps, 2.46 tokens per step, 104 drafted (37 % kept: not "low")
STEADY = [38, 38, 37, 38, 39, 38]


def test_compute_bound_verify_at_high_concurrency_is_a_finding_with_the_engines_flags() -> None:
    d = _run({1: STEADY[:3], 2: STEADY, 4: STEADY + STEADY[:2]}, _ceil())
    f = d.get("speculation-batch-too-large")
    assert f is not None and f.severity == "problem", (d.ids(), [u.reason for u in d.undecided])
    assert "speculation-low-acceptance" not in d.ids()
    # the first level whose whole interval is below 1: concurrency 2 predicts 2.46 × 10 ms / 20 ms = 1.23×
    # (pays), concurrency 4: 2.46 × 10 / 40 = 0.62×
    assert "At 4 concurrent streams" in f.cause
    gains = {e.what: e.value for e in f.evidence if e.what.startswith("speed with speculation")}
    g4 = next(v for w, v in gains.items() if "concurrency 4" in w)
    assert g4 == pytest.approx(64 / 26 * 10 / 40, rel=1e-6)
    assert next(v for w, v in gains.items() if "concurrency 2" in w) > 1
    # measured and predicted are told apart
    assert any(e.source.startswith("measured") and "tokens per verified step" in e.what for e in f.evidence)
    assert all(e.source.startswith("predicted") for e in f.evidence if e.what.startswith("speed with"))
    be = next(e.value for e in f.evidence if e.what.startswith("break-even batch"))
    assert be == 3  # 2.46 × 10 / 30 < 1
    changes = " ".join(a.change for a in f.advice)
    assert "--spec-type none" in changes and "--spec-draft-n-max" in changes and "--draft-max" not in changes
    assert "speculation-batch" not in d.undecided_ids()
    every = " ".join(a.change for a in _run({4: STEADY}, _ceil(), engine=None).get("speculation-batch-too-large").advice)
    assert "num_speculative_tokens_per_batch_size" in every and "--speculative-num-draft-tokens" in every


def test_tokens_per_step_spread_across_break_even_is_cannot_tell_with_the_spread() -> None:
    # at concurrency 2 the gain is tokens-per-step / 2: samples from 1.5 to 3.4 tokens per step span 1
    d = _run({1: STEADY[:3], 2: [21, 45, 26, 40, 32, 36, 24, 44]}, _ceil())
    assert "speculation-batch-too-large" not in d.ids()
    reason = next(u.reason for u in d.undecided if u.id == "speculation-batch")
    assert "concurrency 2" in reason and "–" in reason and "cannot tell" in reason


def test_a_memory_bound_verify_says_nothing() -> None:
    d = _run({1: STEADY[:3], 2: STEADY, 4: STEADY}, _ceil(peak=1e15))  # ridge far beyond 4 × 5 tokens
    assert "speculation-batch-too-large" not in d.ids()
    assert "speculation-batch" not in d.undecided_ids()


def test_without_the_compute_roof_it_cannot_tell_and_says_what_is_missing() -> None:
    d = _run({1: STEADY[:3], 4: STEADY}, _ceil(peak=None))
    assert "speculation-batch-too-large" not in d.ids()
    assert "--device" in next(u.reason for u in d.undecided if u.id == "speculation-batch")
    d = _run({1: STEADY[:3], 4: STEADY}, None)
    assert "speculation-batch" in d.undecided_ids()


def test_no_batching_levels_with_draft_counts_says_nothing() -> None:
    d = diagnose({}, engine="llamacpp", ceilings=_ceil(), records=[])
    assert "speculation-batch" not in d.undecided_ids() and "speculation-batch-too-large" not in d.ids()


def test_a_draft_models_cost_moves_the_verdict() -> None:
    # concurrency 2 pays without a draft model (1.23×); a draft of a quarter of the target's bytes read 4× per
    # step adds 4 × 2.5 ms: 2.46 × 10 / (20 + 10) = 0.82× (one stream still pays: 2.46 × 10 / (10 + 10) = 1.23×)
    d = _run({2: STEADY}, _ceil())
    assert "speculation-batch-too-large" not in d.ids()
    d = _run({2: STEADY}, _ceil(draft_weight_bytes=0.25e9, draft_flops_per_token=0.5e9, draft_source="test draft"))
    f = d.get("speculation-batch-too-large")
    assert f is not None, d.ids()
    assert next(e.value for e in f.evidence if e.what.startswith("draft model bytes")) == pytest.approx(4 * 0.25)
    assert "draft model's 4.0 passes add 10.0 ms" in f.cause


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acc=st.lists(st.integers(0, 60), min_size=3, max_size=8), c=st.sampled_from([1, 2, 4, 8, 16]),
       peak=st.sampled_from([1e11, 1e12, 1e13, 1e15]), k=st.integers(1, 8))
def test_never_claims_against_the_physics(acc: list[int], c: int, peak: float, k: int) -> None:
    """Without a draft model a memory-bound verify pass always pays (it costs what a plain step costs and
    emits ≥ 1 token), so a claim needs a compute-bound verify; and a claim's whole interval is below 1."""
    recs = [_rec(c, i, min(a, k * (N - 1 - a)), k=k) for i, a in enumerate(acc)]
    d = diagnose({}, engine="llamacpp", ceilings=_ceil(peak=peak), records=recs)
    step = d.get("speculation-step-too-costly")
    if step is not None:  # loses even at one stream: with no draft only a compute-bound verify can do that
        assert "compute-bound" in step.cause and "speculation-batch-too-large" not in d.ids()
    f = d.get("speculation-batch-too-large")
    if f is None:
        return
    gains = [e for e in f.evidence if e.what.startswith("speed with speculation")]
    assert gains and all("compute-bound" in e.what for e in gains if e.value < 1)
    hi = float(gains[0].what.split("–")[1].split("×")[0])
    assert hi < 1


def test_spec_step_on_the_roofs() -> None:
    from phasescope.theory.speculation import break_even_batch, spec_step

    kw = dict(tokens_per_step=2.5, drafted_per_step=4.0, weight_bytes=1e9, flops_per_token=2e9, bandwidth_bytes_s=100e9)
    one = spec_step(batch=1, peak_flops=1e12, **kw)
    assert (one.plain_step_s, one.verify_s, one.draft_s) == pytest.approx((0.010, 0.010, 0.0))  # 5 tokens: at the ridge
    assert one.gain == pytest.approx(2.5)
    assert spec_step(batch=4, peak_flops=1e12, **kw).verify_binding == "compute"
    assert break_even_batch(peak_flops=1e12, **kw) == 3  # 2.5 × 10 ms / 30 ms < 1
    assert break_even_batch(max_batch=256, peak_flops=None, **kw) is None  # no compute roof: bandwidth never binds
    # a draft of a tenth of the target's bytes, 4 passes a step: 4 ms more per step at batch 1
    d = spec_step(batch=1, peak_flops=1e12, draft_weight_bytes=1e8, draft_flops_per_token=2e8, **kw)
    assert d.draft_s == pytest.approx(0.004) and d.draft_bytes_per_step == pytest.approx(4e8)
    assert d.gain == pytest.approx(2.5 * 10 / 14)


def test_a_step_that_loses_even_for_one_stream_is_not_blamed_on_the_batch() -> None:
    # a GPU-class compute roof but a draft reading 0.8 GB four times per step: 2.46 × 10 / (10 + 32) < 1 at any batch
    d = _run({2: STEADY}, _ceil(peak=1e15, draft_weight_bytes=0.8e9, draft_flops_per_token=1e9, draft_source="big draft"))
    assert "speculation-batch-too-large" not in d.ids()
    f = d.get("speculation-step-too-costly")
    assert f is not None and "even for one stream" in f.cause and "draft model" in f.cause
    assert "--parallel" not in " ".join(a.change for a in f.advice)
