"""Speculative decoding: per-request and run-level acceptance from llama.cpp timings or the arrival
pattern, server counters/gauges (vLLM, SGLang, llama.cpp), and the per-verified-step decode ceiling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasescope.apis._records import llamacpp_timings
from phasescope.engine.spec import check_engine_spec, spec_args
from phasescope.errors import EngineError, InputError
from phasescope.measure import derive as D
from phasescope.measure.records import Event, RequestRecord
from phasescope.probing.ceilings import above_ceiling, above_ceiling_warnings, speculative_roof_tok_s

MS = 1_000_000


def _rec(events: list[Event], *, timings: dict | None = None, out: int | None = None) -> RequestRecord:
    r = RequestRecord(id="r", api="openai", target="t", model="m", t_start_ns=0, events=events, ok=True,
                      output_tokens=out)
    if timings is not None:
        r.server = llamacpp_timings(timings)
    return r


def _llamacpp(draft_n: int | None, accepted: int | None, predicted_n: int = 64) -> RequestRecord:
    t = {"prompt_n": 200, "prompt_ms": 400.0, "predicted_n": predicted_n, "predicted_ms": 500.0}
    if draft_n is not None:
        t.update(draft_n=draft_n, draft_n_accepted=accepted)
    return _rec([Event(t_ns=(100 + i) * MS, n_tokens=None) for i in range(predicted_n)], timings=t, out=predicted_n)


def test_llamacpp_timings_give_drafted_accepted_and_tokens_per_step() -> None:
    # 64 tokens: the first from the prompt, 63 decoded; 48 of 60 drafted kept → 15 verified steps
    sd = D.spec_decode(_llamacpp(60, 48))
    assert sd is not None
    assert sd["source"] == "llamacpp_timings"
    assert (sd["drafted"], sd["accepted"], sd["steps"]) == (60, 48, 15)
    assert sd["acceptance_rate"] == pytest.approx(0.8)
    assert sd["mean_accepted_len"] == pytest.approx(48 / 15)
    assert sd["tokens_per_step"] == pytest.approx(63 / 15)


def test_no_speculation_no_spec_decode() -> None:
    assert D.spec_decode(_llamacpp(None, None)) is None  # llama.cpp omits draft_n when it drafted nothing
    one_each = _rec([Event(t_ns=i * MS, n_tokens=1) for i in range(20)], out=20)
    assert D.spec_decode(one_each) is None
    assert D.spec_decode_run([one_each, _llamacpp(None, None)]) is None


def test_run_level_sums_counts_not_ratios() -> None:
    a, b = _llamacpp(60, 48), _llamacpp(10, 0, predicted_n=11)  # 15 steps + 10 steps
    sd = D.spec_decode_run([a, b])
    assert sd is not None
    assert (sd["drafted"], sd["accepted"], sd["steps"]) == (70, 48, 25)
    assert sd["acceptance_rate"] == pytest.approx(48 / 70)
    assert sd["tokens_per_step"] == pytest.approx(73 / 25)


def test_bursts_of_several_tokens_per_event_are_inferred() -> None:
    # first token, then 10 steps of 4, 2, 1, 3, … tokens (accepted 3, 1, 0, 2 + 1 each)
    ks = [4, 2, 1, 3, 4, 2, 1, 3, 4, 2]
    ev = [Event(t_ns=100 * MS, n_tokens=1)] + [Event(t_ns=(100 + 20 * i) * MS, n_tokens=k) for i, k in enumerate(ks, 1)]
    sd = D.spec_decode(_rec(ev, out=1 + sum(ks)))
    assert sd is not None and sd["source"] == "inferred"
    assert sd["drafted"] is None and sd["acceptance_rate"] is None
    assert sd["tokens_per_step"] == pytest.approx(sum(ks) / 10)
    assert sd["mean_accepted_len"] == pytest.approx((sum(ks) - 10) / 10)
    # llama.cpp's own counts outrank an inference in the same run
    assert D.spec_decode_run([_rec(ev, out=27), _llamacpp(60, 48)])["source"] == "llamacpp_timings"  # type: ignore[index]


def test_a_fixed_stream_interval_is_coalescing_not_speculation() -> None:
    # vLLM --stream-interval 3: every event carries 3 tokens (the last one the rest)
    ev = [Event(t_ns=100 * MS, n_tokens=1)] + [Event(t_ns=(100 + 15 * i) * MS, n_tokens=3) for i in range(1, 11)]
    ev.append(Event(t_ns=300 * MS, n_tokens=2))
    assert D.spec_decode(_rec(ev, out=33)) is None


def test_unknown_per_event_counts_are_no_evidence() -> None:
    ev = [Event(t_ns=i * MS, n_tokens=None) for i in range(10)]
    assert D.spec_decode(_rec(ev, out=40)) is None  # 4 tokens per event on average, but spread, not seen


@settings(max_examples=200, deadline=None)
@given(plain=st.floats(1.0, 1e4), a=st.floats(0.0, 16.0))
def test_per_step_roof_is_never_below_the_plain_one_and_a_healthy_speculator_is_not_above(plain: float, a: float) -> None:
    tps = a + 1.0
    roof = speculative_roof_tok_s(plain, tps)
    assert roof >= plain
    assert roof == pytest.approx(plain * tps)
    # a server at (a + 1) × the plain roof decodes exactly what the speculation explains
    assert above_ceiling(plain * tps, bandwidth_roof_tok_s=plain, device_id="d", device_bandwidth_gb_s=100.0,
                         bytes_per_token=1e8, tokens_per_step=tps) == []


def test_speculation_that_does_not_explain_the_speed_is_still_above() -> None:
    ws = above_ceiling(500.0, bandwidth_roof_tok_s=100.0, device_id="d", device_bandwidth_gb_s=100.0,
                       bytes_per_token=1e9, tokens_per_step=2.0)
    assert ws and ws[0].evidence["bandwidth_ceiling_tok_s"] == pytest.approx(200.0)
    assert ws[0].evidence["tokens_per_step"] == 2.0


def test_a_draft_model_costs_its_own_bytes() -> None:
    # target 1 GB per step, draft 0.25 GB per step: 3 tokens per step → 100 × 1/1.25 × 3
    assert speculative_roof_tok_s(100.0, 3.0, step_bytes=1e9, draft_bytes_per_step=2.5e8) == pytest.approx(240.0)
    assert speculative_roof_tok_s(100.0, None) == 100.0
    # every draft rejected (1 token per step): the draft's reads still cost, 2 GB per token → half the plain roof
    assert speculative_roof_tok_s(100.0, 1.0, step_bytes=1e9, draft_bytes_per_step=1e9) == pytest.approx(50.0)
    assert speculative_roof_tok_s(100.0, 1.0, step_bytes=1e9) == 100.0  # n-gram, nothing kept: the plain roof


def test_probe_sizes_use_their_spec_decode() -> None:
    from phasescope.theory import roofline as R
    from phasescope.theory.devices import get_device
    from phasescope.theory.models import get_catalog_model

    spec, dev = get_catalog_model("llama-3.1-8b"), get_device("h100-sxm")

    roof = R.decode_ceiling(spec, dev, context=200, batch=1).bandwidth_tok_s
    size = {"prompt_tokens": 200, "decode_tok_s": roof * 2.5}
    assert above_ceiling_warnings(spec, dev, [size])  # plain: 2.5× the roof is impossible
    size["spec_decode"] = {"tokens_per_step": 3.0}
    assert above_ceiling_warnings(spec, dev, [size]) == []  # 3 tokens per weight read explain it


def test_engine_spec_flags() -> None:
    assert spec_args() == []
    assert spec_args("ngram") == ["--spec-type", "ngram-mod"]
    assert spec_args("NGRAM-Simple") == ["--spec-type", "ngram-simple"]
    assert spec_args("off") == []
    assert spec_args(None, "/m/draft.gguf") == ["--spec-draft-model", "/m/draft.gguf", "--spec-type", "draft-simple"]
    with pytest.raises(EngineError):
        spec_args("eagle")
    with pytest.raises(EngineError):
        spec_args("draft")  # no draft model
    assert check_engine_spec(None, None) is None
    assert check_engine_spec("ngram", None) == "ngram-mod"
    with pytest.raises(InputError, match="embedded engine only"):
        check_engine_spec("ngram", "http://127.0.0.1:8000")
    with pytest.raises(InputError, match="--engine-spec"):
        check_engine_spec("bogus", None)


def test_ceiling_rows_get_the_per_step_roof_only_where_a_size_speculated() -> None:
    from phasescope.probing.ceilings import add_per_step_ceilings

    ceil = {"sizes": [{"prompt_tokens": 200, "decode_ceiling_tok_s": 100.0},
                      {"prompt_tokens": 2000, "decode_ceiling_tok_s": 90.0}]}
    add_per_step_ceilings(ceil, [{"prompt_tokens": 200, "spec_decode": {"tokens_per_step": 2.5}},
                                 {"prompt_tokens": 2000}])
    assert ceil["sizes"][0]["decode_ceiling_per_step_tok_s"] == pytest.approx(250.0)
    assert "decode_ceiling_per_step_tok_s" not in ceil["sizes"][1]


def test_tune_varies_the_embedded_engines_speculation() -> None:
    from phasescope.tuning import launch
    from phasescope.tuning.spec import parse_param

    assert parse_param("spec-type=none,ngram", engine=True) == ("spec", ["none", "ngram"])
    with pytest.raises(InputError, match="spec"):
        parse_param("spec=eagle", engine=True)
    assert launch.engine_kwargs({"spec": "ngram"})["spec"] == "ngram"
    assert launch.engine_kwargs({"spec": "none"})["spec"] is None


def test_explain_judges_a_speculating_server_per_step() -> None:
    from types import SimpleNamespace

    from phasescope.probing.ceilings import explain_above_ceiling

    def ps():  # type: ignore[no-untyped-def]  # 1 / typical token gap of 2 ms = 500 tok/s against a 50 tok/s roof
        return SimpleNamespace(points=[SimpleNamespace(decode_step_s=0.002, prompt_tokens=64, n=3, decode_tok_s=480.0)],
                               info=SimpleNamespace(warnings=[]))

    ceil = SimpleNamespace(decode_ceiling_tok_s=50.0, bandwidth_gb_s=10.0, weight_bytes=0.2e9, device="local")
    plain = [_llamacpp(None, None)]
    assert len(explain_above_ceiling({"prompt-scaling": ps()}, ceil, plain)) == 1
    # 10.5 tokens per verified step (63 decoded in 6 steps): 500 tok/s is within the per-step roof of 525
    spec = [_llamacpp(60, 57)]
    assert explain_above_ceiling({"prompt-scaling": ps()}, ceil, spec) == []
