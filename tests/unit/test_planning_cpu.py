"""planning.cpu: `plan` from `hw` alone against the embedded engine's measured rates, and its physical bounds.

The measurements are the synthetic grid's (tests/data/synthetic_grid/cells.json: benchmarks/synthetic_grid.py on
a quiet 2-vCPU Xeon; each file's spec from its GGUF header). The cells marked ``fit`` are the ones the CPU terms
were fitted on; ``held-out`` cells are shapes (and prompt lengths) the fit never saw. Before planning.cpu, `plan`
predicted 1.2–3.4× these rates (decode within ±20 % in none of the 18 fit cells)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasescope.planning.build import cost_from_theory
from phasescope.planning.cpu import type_mix
from phasescope.theory.devices import Device, custom_device
from phasescope.theory.models import ModelSpec, load_model_spec

GRID = json.loads((Path(__file__).resolve().parents[1] / "data" / "synthetic_grid" / "cells.json").read_text())
DEVICE = Device(**GRID["device"])
RERUN_DEVICE = Device(**GRID["rerun_device"])  # the profile taken right after the rerun, with its median passes


def spec_of(key: str) -> ModelSpec:
    d: dict[str, Any] = dict(GRID["specs"][key])
    d["notes"] = tuple(d.get("notes") or ())
    d["matmul_types"] = tuple(tuple(t) for t in d["matmul_types"])
    return ModelSpec(**d)


def errors(role: str) -> list[tuple[str, float, float]]:
    """(cell, prefill error, decode error) as (plan − measured) / measured, for the cells of one role."""
    out = []
    for c in GRID["cells"]:
        if c["role"] != role:
            continue
        cost = cost_from_theory(spec_of(f"{c['shape']} {c['quant']}"), RERUN_DEVICE if role == "rerun" else DEVICE)
        p = int(c["prompt_tokens"])
        pre = p / cost.prefill_time_s(p) / c["prefill_tok_s"] - 1
        dec = 1 / cost.decode_step_s(1, p + 16) / c["decode_tok_s"] - 1  # mid-reply context, 32 tokens
        out.append((f"{c['shape']} {c['quant']} {p}", pre, dec))
    return out


@pytest.mark.parametrize("role", ["fit", "held-out"])
def test_plan_from_hw_alone_meets_the_grid(role: str) -> None:
    errs = errors(role)
    assert len(errs) >= (18 if role == "fit" else 10)
    pre_ok = [e for e in errs if abs(e[1]) <= 0.30]
    dec_ok = [e for e in errs if abs(e[2]) <= 0.20]
    # issue 36: within ±30 % (prefill) and ±20 % (decode) in most cells; here in all but one of ten held out
    assert len(pre_ok) == len(errs), [e for e in errs if e not in pre_ok]
    assert len(dec_ok) >= len(errs) - (1 if role == "held-out" else 0), [e for e in errs if e not in dec_ok]
    # and no cell is off by more than a third either way
    assert all(abs(e[1]) < 0.34 and abs(e[2]) < 0.34 for e in errs), errs


def test_a_day_later_plan_follows_the_machine_through_its_profiles_medians() -> None:
    """The same 28 cells, rerun 1–3 hours after they were first measured, ran 9–87 % faster; the `hw` profile's best bandwidth pass moved 5 %,
    its medians 18–20 %. Rescaled by the medians (planning.cpu.machine_factors), `plan` meets prefill in all 28 and
    decode in all but three (the held-out misses named in docs/commands/engine.md); without the rescale, on
    the old profile, decode would meet 18 of 28."""
    errs = errors("rerun")
    assert len(errs) == 28
    assert all(abs(e[1]) <= 0.30 for e in errs), errs
    assert sum(abs(e[2]) <= 0.20 for e in errs) >= 25, errs
    assert all(abs(e[2]) < 0.40 for e in errs), errs


def test_the_file_type_mix_decides_the_prefill_rate() -> None:
    """llama-3.2-1b Q4_K_M (all K-quants) prefills ~1.5× its Q8_0; qwen2.5-0.5b Q4_K_M (hidden 896: most
    matrices fall back to Q5_0) no faster than its Q8_0 — in the measurements and in the model."""
    def rate(key: str, p: int = 512) -> tuple[float, float]:
        meas = next(c["prefill_tok_s"] for c in GRID["cells"]
                    if f"{c['shape']} {c['quant']}" == key and c["prompt_tokens"] == p)
        return meas, p / cost_from_theory(spec_of(key), DEVICE).prefill_time_s(p)
    (m_k, p_k), (m_8, p_8) = rate("llama-3.2-1b Q4_K_M"), rate("llama-3.2-1b Q8_0")
    assert m_k / m_8 > 1.3 and p_k / p_8 > 1.3
    (m_k, p_k), (m_8, p_8) = rate("qwen2.5-0.5b Q4_K_M"), rate("qwen2.5-0.5b Q8_0")
    assert m_k / m_8 < 1.1 and p_k / p_8 < 1.1


def test_catalog_quant_names_predict_the_files_type_mix() -> None:
    """Without a file, a K-quant's fallback (width not a multiple of 256) is predicted from the shape."""
    for key in ("qwen2.5-0.5b Q4_K_M", "smollm2-135m Q4_K_M", "llama-3.2-1b Q4_K_M", "qwen2.5-1.5b Q4_K_M"):
        spec = spec_of(key)
        f_body, _, how = type_mix(spec)
        assert how == "the file's tensor types"
        c_body, _, how = type_mix(load_model_spec(key.split()[0]), "q4_k_m")
        assert "nominal" in how

        def q5(mix: dict[str, float]) -> float:
            return sum(n for t, n in mix.items() if t == "Q5_0") / sum(mix.values())
        assert q5(c_body) == pytest.approx(q5(f_body), abs=0.05), (key, c_body, f_body)


def test_a_calibrated_model_drops_the_grid_terms() -> None:
    """Calibrating on a server's own requests replaces the grid's CPU terms: a simulated server without them
    (fixed per-step cost, no per-prompt cost, no separate attention rates) is fitted to its own times."""
    from plan_synth import on_one_clock

    from phasescope.planning.calibrate import calibrate
    from phasescope.planning.metrics import to_records
    from phasescope.planning.sim import simulate
    from phasescope.planning.workload import Workload

    truth = cost_from_theory("qwen2.5-0.5b", custom_device(30.0, name="t", dense_bf16_tflops=0.666)).with_(
        overlap="sum", bw_eff=0.35, flops_eff=0.2, step_overhead_s=0.001, kv_pool_tokens=10**6)
    base = cost_from_theory("qwen2.5-0.5b", DEVICE, quant="q8_0")
    assert base.prefill_overhead_s > 0 and base.decode_attn_flops_eff is not None
    recs = on_one_clock([list(to_records(simulate(truth, Workload(num_requests=1, concurrency=1, input_len=n,
                                                                  output_len=40)), model="m"))
                         for n in (200, 200, 800, 800, 2000, 2000)])
    new = calibrate(recs, base).cost
    assert new.prefill_overhead_s == 0 and new.decode_attn_flops_eff is None and new.dequant_s_per_step == 0
    for n in (200, 2000):
        assert new.prefill_time_s(n) == pytest.approx(truth.prefill_time_s(n), rel=0.03)
    assert new.decode_step_s(1, 1000) == pytest.approx(truth.decode_step_s(1, 1000), rel=0.03)


CATALOG_SMALL = ["smollm2-135m", "smollm2-360m", "qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b", "llama-3.2-3b",
                 "qwen3-0.6b", "qwen3-4b", "gemma-3-1b", "phi-3-mini-4k", "llama-3.1-8b", "mistral-7b-v0.3"]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(CATALOG_SMALL), quant=st.sampled_from(["q8_0", "q4_k_m", "q5_0", "q6_k", "f16"]),
       ctx=st.integers(1, 8192), batch=st.integers(1, 16))
def test_the_cpu_model_never_beats_the_roofs(model: str, quant: str, ctx: int, batch: int) -> None:
    """Physics: a decode step reads every weight and the KV once, a prompt does all its FLOPs."""
    cost = cost_from_theory(model, DEVICE, quant=quant)
    step = cost.decode_step_s(batch, ctx)
    assert step >= (cost.weight_bytes + cost.kv_bytes_per_token * batch * ctx) / cost.bandwidth_bytes_s
    assert step >= batch * (cost.flops_per_token + cost.lm_head_flops + cost.attn_flops_per_pair * ctx) / cost.peak_flops
    pre = cost.prefill_time_s(ctx)
    assert pre >= (ctx * cost.flops_per_token + cost.attn_flops_per_pair * ctx * (ctx + 1) / 2) / cost.peak_flops
    # and decode slows as the context grows, never speeds up
    assert cost.decode_step_s(batch, ctx + 512) > step
