"""``tune``'s comparison with ``plan``: which parameters map to plan knobs, and the sentence."""

from __future__ import annotations

from hypothesis import given, settings as hsettings, strategies as st

from phasescope.tuning.predict import PREDICTED_KEYS, plan_knobs, predict_rows, prediction_sentence


def test_knob_mapping_embedded_and_template_names():
    assert plan_knobs({"ub": "32"}) == ({"max_num_batched_tokens": 32}, [])
    assert plan_knobs({"parallel": "4"}) == ({"max_num_seqs": 4}, [])
    assert plan_knobs({"quant": "Q8_0"}) == ({"quant": "q8_0"}, [])
    assert plan_knobs({"mnbt": "2048", "OLLAMA_NUM_PARALLEL": "2"}) == (
        {"max_num_batched_tokens": 2048, "max_num_seqs": 2}, [])
    over, unmapped = plan_knobs({"threads": "2", "fa": "on", "ub": "64"})
    assert over == {"max_num_batched_tokens": 64}
    assert unmapped == ["threads", "fa"]
    assert plan_knobs({"ub": "lots"}) == ({}, ["ub"])  # a value plan cannot take is no knob


def _row(i, params, status="ok", pv=None, mv=None, reason=None):
    return {"index": i, "label": ",".join(f"{k}={v}" for k, v in params.items()), "params": params,
            "status": status, "predicted_vs_baseline": pv, "vs_baseline": mv, "prediction_reason": reason}


def test_ratio_sentence_puts_predicted_beside_measured():
    pv = {"decode_tok_s": 0.87, "ttft_p50_s": 1.2, "itl_p50_s": 1.15, "throughput_tok_s": None}
    mv = {"decode_tok_s": 1.04, "ttft_p50_s": 1.1, "itl_p50_s": None, "throughput_tok_s": 0.9}
    s = prediction_sentence(_row(1, {"quant": "Q8_0"}, pv=pv, mv=mv))
    assert s == ("quant=Q8_0: plan predicted decode 0.87×, measured 1.04×; TTFT 1.20×, measured 1.10×; "
                 "ITL p50 1.15×, measured not measured; throughput —, measured 0.90×")
    assert prediction_sentence(_row(0, {"quant": "Q4_K_M"}, pv=pv, mv=mv)) is None  # the baseline
    assert prediction_sentence(_row(2, {"ub": "32"}, status="failed")) is None
    assert prediction_sentence(_row(3, {"threads": "1"}, reason="no prediction: plan has no knob for threads")) == \
        "threads=1: no prediction: plan has no knob for threads"


@given(st.lists(st.floats(0.01, 100), min_size=4, max_size=4), st.lists(st.floats(0.01, 100), min_size=4, max_size=4))
@hsettings(max_examples=100, deadline=None)
def test_the_sentence_prints_the_rows_own_ratios(p, m):
    keys = [k for k, _ in PREDICTED_KEYS]
    s = prediction_sentence(_row(1, {"ub": "32"}, pv=dict(zip(keys, p)), mv=dict(zip(keys, m))))
    for (_key, word), a, b in zip(PREDICTED_KEYS, p, m):
        assert f"{word} {a:.2f}×, measured {b:.2f}×" in s


def test_no_baseline_or_no_model_of_the_workload_predicts_nothing():
    rows = [_row(0, {"ub": "512"}, status="failed"), _row(1, {"ub": "32"})]
    info = predict_rows(rows, "probe", {"prompt_tokens": [64], "max_tokens": 8, "repeat": 2}, embedded=True)
    assert info["reason"].startswith("the baseline setting did not run")
    assert all(r["predicted"] is None for r in rows)
    rows = [dict(_row(0, {"ub": "512"}), run_id="r1"), _row(1, {"ub": "32"})]
    info = predict_rows(rows, "explain", {"budget_s": 60, "only": None}, embedded=True)
    assert "explain" in info["reason"] and all(r["predicted"] is None for r in rows)


def test_a_baseline_run_plan_cannot_calibrate_from_is_a_reason_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    rows = [dict(_row(0, {"ub": "512"}), run_id="no-such-run"), _row(1, {"ub": "32"})]
    info = predict_rows(rows, "probe", {"prompt_tokens": [64], "max_tokens": 8, "repeat": 2}, embedded=True)
    assert info["reason"].startswith("plan could not simulate the baseline setting from its run no-such-run")
    assert rows[1]["predicted"] is None


def test_bench_workload_flags_reach_plans_workload():
    from phasescope.tuning.predict import _workloads

    a = {"num_prompts": 12, "request_rate": "inf", "max_concurrency": 4, "input_len": 128, "output_len": 32,
         "range_ratio": 0.5, "burstiness": 2.0, "seed": 7, "duration_s": 30.0}
    (w,) = _workloads("bench", a)
    assert w == {"rate": None, "concurrency": 4, "num_requests": 12, "duration_s": 30.0, "input_len": 128,
                 "output_len": 32, "burstiness": 2.0, "range_ratio": 0.5, "seed": 7}
    assert _workloads("bench", {**a, "dataset": "sharegpt"}) == [] and _workloads("bench", {**a, "prefix_len": 64}) == []
    probe = _workloads("probe", {"prompt_tokens": [64, 512], "max_tokens": 16, "repeat": 2})
    assert [(p["input_len"], p["output_len"], p["concurrency"]) for p in probe] == [(64, 16, 1), (512, 16, 1)]


def test_prediction_lines_one_reason_once_and_nothing_after_a_failed_baseline():
    from phasescope.tuning.run import _prediction_lines

    ok = [_row(0, {"ub": "512"}), dict(_row(1, {"ub": "32"}), reason="x")]
    assert _prediction_lines(ok, {"reason": "unknown model 'm'"}, prediction_sentence) == \
        ["no plan prediction: unknown model 'm'"]
    failed = [_row(0, {"ub": "512"}, status="failed"), _row(1, {"ub": "32"})]
    assert _prediction_lines(failed, {"reason": "the baseline setting did not run"}, prediction_sentence) == []
    pv = {k: 1.0 for k, _ in PREDICTED_KEYS}
    rows = [_row(0, {"ub": "512"}, pv=pv, mv=pv), _row(1, {"ub": "32"}, pv=pv, mv=pv)]
    assert _prediction_lines(rows, {"reason": None}, prediction_sentence) == [prediction_sentence(rows[1])]


def test_every_setting_is_priced_with_the_cost_fitted_at_the_baselines_knobs(monkeypatch):
    # the baseline's records came from its own server (ub=32): fitting them again under another
    # setting's chunk re-reads the same measurements as another machine (a 512 chunk then predicted
    # a 1 % slower TTFT than the 32 one). The fit follows the baseline; the scheduler follows the row.
    from dataclasses import dataclass

    import phasescope.planning.api as api
    import phasescope.planning.planner as planner
    import phasescope.tuning.predict as predict

    @dataclass
    class Spec:
        cost: str
        sched: int | None

    monkeypatch.setattr(api, "build_spec", lambda o: (Spec(f"fit@{o.max_num_batched_tokens}", o.max_num_batched_tokens),
                                                      None, {"policy": "llamacpp"}))
    monkeypatch.setattr(planner, "run_once", lambda spec, points=2: (None, {"summary": (spec.cost, spec.sched)}))
    seen = []
    monkeypatch.setattr(predict, "_metrics", lambda s: seen.append(s) or {k: 1.0 for k, _ in PREDICTED_KEYS})
    rows = [dict(_row(0, {"ub": "32"}), run_id="r1"), dict(_row(1, {"ub": "512"}), run_id="r2")]
    predict_rows(rows, "probe", {"prompt_tokens": [96], "max_tokens": 8, "repeat": 2}, embedded=True)
    assert ("fit@32", 32) in seen and ("fit@32", 512) in seen and ("fit@512", 512) not in seen, seen
