"""The draft model's cost in the decode ceiling per verified step (issue 33): bytes per verified step = the
target's + k × the draft's (k = drafted tokens per step; the draft reads its own weights once per drafted token),
so the roof is bandwidth ÷ (target + draft bytes) × tokens per step. n-gram speculation has no draft: cost 0."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasescope.cli import run as cli_run
from phasescope.probing.ceilings import (NO_DRAFT_NOTE, above_ceiling, add_per_step_ceilings, drafted_per_step,
                                         speculative_roof_tok_s)
from phasescope.theory import roofline as R
from phasescope.theory.devices import get_device
from phasescope.theory.models import load_model_spec
from phasescope.theory.speculation import draft_bytes_per_step, draft_model_of

pos = st.floats(min_value=1e6, max_value=1e12, allow_nan=False, allow_infinity=False)
tps_s = st.floats(min_value=1.0, max_value=9.0, allow_nan=False)
k_s = st.floats(min_value=0.5, max_value=16.0, allow_nan=False)


@given(bw=st.floats(1e9, 1e13), step=pos, draft=pos, k=k_s, tps=tps_s)
def test_a_draft_never_raises_the_per_step_ceiling(bw: float, step: float, draft: float, k: float, tps: float) -> None:
    plain = bw / step
    without = speculative_roof_tok_s(plain, tps, step_bytes=step)
    with_draft = speculative_roof_tok_s(plain, tps, step_bytes=step, draft_bytes_per_step=draft_bytes_per_step(k, draft))
    assert with_draft <= without * (1 + 1e-12)
    assert with_draft < without  # a draft that reads anything costs something
    # the formula: bandwidth ÷ (target + k × draft bytes) × tokens per step
    assert with_draft == pytest.approx(bw / (step + k * draft) * tps, rel=1e-9)


@given(bw=st.floats(1e9, 1e13), step=pos, draft=pos, k=k_s)
def test_acceptance_zero_with_a_draft_is_below_the_plain_ceiling(bw: float, step: float, draft: float, k: float) -> None:
    plain = bw / step
    roof = speculative_roof_tok_s(plain, 1.0, step_bytes=step, draft_bytes_per_step=draft_bytes_per_step(k, draft))
    assert roof < plain


@given(bw=st.floats(1e9, 1e13), step=pos, k=k_s, tps=tps_s)
def test_ngram_speculation_has_no_draft_cost(bw: float, step: float, k: float, tps: float) -> None:
    plain = bw / step
    assert draft_bytes_per_step(k, None) == 0.0 and draft_bytes_per_step(k, 0.0) == 0.0
    ngram = speculative_roof_tok_s(plain, tps, step_bytes=step, draft_bytes_per_step=draft_bytes_per_step(k, None))
    assert ngram == speculative_roof_tok_s(plain, tps) == pytest.approx(plain * tps)
    assert speculative_roof_tok_s(plain, None, step_bytes=step, draft_bytes_per_step=1e9) == plain  # not speculating


def test_draft_bytes_per_step_is_k_reads_of_the_draft() -> None:
    assert draft_bytes_per_step(4, 1e9) == 4e9
    assert draft_bytes_per_step(4, 1e9, draft_kv_bytes_per_seq=1e6, batch=8) == pytest.approx(4 * (1e9 + 8e6))
    assert draft_bytes_per_step(0, 1e9) == 0.0 and draft_bytes_per_step(None, 1e9) == 0.0


def _sizes(drafted: int | None, accepted: int, steps: int) -> list[dict[str, Any]]:
    sd = {"drafted": drafted, "accepted": accepted, "steps": steps, "tokens_per_step": (accepted + steps) / steps}
    return [{"prompt_tokens": 200, "decode_tok_s": 50.0, "spec_decode": sd}, {"prompt_tokens": 2000, "decode_tok_s": 40.0}]


def test_probe_rows_pay_for_the_named_draft_and_say_when_none_is_named() -> None:
    spec, dev = load_model_spec("llama-3.1-8b"), get_device("h100-sxm")
    draft = load_model_spec("llama-3.2-1b")
    sizes = _sizes(drafted=40, accepted=30, steps=10)  # 4 drafted per step, 4 tokens per step
    plain_row = {"prompt_tokens": 200, "decode_ceiling_tok_s": R.decode_ceiling(spec, dev, context=200).ceiling_tok_s}

    ngram = {"sizes": [dict(plain_row), {"prompt_tokens": 2000, "decode_ceiling_tok_s": 10.0}]}
    add_per_step_ceilings(ngram, sizes, spec, dev)
    row = ngram["sizes"][0]
    assert row["draft_bytes_per_step"] == 0.0 and ngram["draft_note"] == NO_DRAFT_NOTE
    assert row["decode_ceiling_per_step_tok_s"] == pytest.approx(plain_row["decode_ceiling_tok_s"] * 4.0)
    assert "decode_ceiling_per_step_tok_s" not in ngram["sizes"][1]  # that size did not speculate

    drafted = {"sizes": [dict(plain_row)]}
    add_per_step_ceilings(drafted, sizes, spec, dev, draft)
    row = drafted["sizes"][0]
    d = draft_model_of(draft, 200)
    assert row["draft_bytes_per_step"] == pytest.approx(4 * (d.weight_bytes + d.kv_bytes_per_seq))
    step = R.decode_ceiling(spec, dev, context=200).step_bytes
    assert row["decode_ceiling_per_step_tok_s"] == pytest.approx(
        plain_row["decode_ceiling_tok_s"] * step / (step + row["draft_bytes_per_step"]) * 4.0)
    assert row["decode_ceiling_per_step_tok_s"] < ngram["sizes"][0]["decode_ceiling_per_step_tok_s"]
    assert drafted["draft_model_spec"]["id"] == draft.id and "draft_note" not in drafted
    # a draft named but drafted tokens not counted (speculation only inferred): its cost is unknown, not 0
    inferred = {"sizes": [dict(plain_row)]}
    add_per_step_ceilings(inferred, _sizes(drafted=None, accepted=30, steps=10), spec, dev, draft)
    assert inferred["sizes"][0]["draft_bytes_per_step"] is None


def test_above_ceiling_judges_against_the_roof_with_the_drafts_cost() -> None:
    # 4 tokens per step at a 100 tok/s plain roof: 390 tok/s is under the n-gram roof (400) but above the one
    # that pays for a draft reading half the target's bytes 4 times per step (100 × 1 / 3 × 4 = 133)
    kw: dict[str, Any] = dict(bandwidth_roof_tok_s=100.0, device_id="d", device_bandwidth_gb_s=100.0, bytes_per_token=1e9,
                              tokens_per_step=4.0)
    assert above_ceiling(390.0, **kw) == []
    ws = above_ceiling(390.0, **kw, draft_bytes_per_step=draft_bytes_per_step(4, 0.5e9))
    assert ws and ws[0].evidence["bandwidth_ceiling_tok_s"] == pytest.approx(100 / 3 * 4)
    assert ws[0].evidence["draft_bytes_per_step"] == 2e9
    assert drafted_per_step({"drafted": 40, "steps": 10}) == 4.0 and drafted_per_step({"drafted": None, "steps": 3}) is None


@pytest.mark.parametrize("cmd", ["probe", "explain"])
def test_a_bad_draft_model_spec_is_one_line_before_any_request(cmd: str, capsys: Any, tmp_path: Any) -> None:
    code = cli_run([cmd, "http://127.0.0.1:9", "--draft-model-spec", str(tmp_path / "nope.gguf"), "--no-save"])
    err = capsys.readouterr().err
    assert code != 0 and "--draft-model-spec" in err and "nope.gguf" in err and "Traceback" not in err
    assert len([ln for ln in err.strip().splitlines() if ln.strip()]) <= 2


def test_the_probe_card_says_whether_the_per_step_ceiling_counted_a_draft() -> None:
    from rich.console import Console

    from phasescope.probing.card import render

    sd = {"drafted": 40, "accepted": 30, "steps": 10, "tokens_per_step": 4.0, "acceptance_rate": 0.75, "source": "llamacpp_timings"}
    sizes = [{"prompt_tokens": 200, "ttft_s": 0.1, "decode_tok_s": 300.0, "spec_decode": sd}]

    def card(**ce: Any) -> str:
        c = Console(width=140, record=True)
        rows = [{"prompt_tokens": 200, "decode_ceiling_tok_s": 100.0, "decode_ceiling_per_step_tok_s": 320.0}]
        c.print(render({"sizes": sizes, "target": "t", "model": "m", "ceilings": {"sizes": rows, **ce}}))
        return c.export_text()

    assert "per verified step (draft llama-3.2-1b)" in card(draft_model_spec={"id": "llama-3.2-1b"})
    assert "per verified step (no draft counted)" in card(draft_note=NO_DRAFT_NOTE)
