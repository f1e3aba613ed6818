"""What ``plan`` predicted for the same sweep: the simulator calibrated from the baseline's run.

After the settings ran, the baseline setting's stored run calibrates the cost model (``plan
--calibrate-from RUN``: :func:`phasescope.planning.api.build_spec`), and each setting whose parameters
map to plan knobs (:data:`PLAN_KNOBS`) is simulated with the same workload:

* ``ub`` → ``max_num_batched_tokens`` (the prefill chunk), ``parallel`` → ``max_num_seqs``,
  ``quant`` → the model's quant type. With ``--serve`` the template's names are matched by the
  same table plus a few spellings (``mnbt``, ``max-num-batched-tokens``, ``max_num_seqs``, ...).
* ``quant``: the fit is made at the baseline's quant type (the bundled file's Q4_K_M on the embedded
  engine when ``quant`` is not varied at the baseline), then the calibrated weight bytes are scaled by
  the ratio of the two settings' bytes per decode step — from the served files when both probes set
  their bandwidth roof beside them (roof ∝ 1 / bytes), else the theory ratio of the two types' weight
  bytes (small models keep many tensors above the nominal type, so the file is the better measure).
  Everything else the fit found is kept; ``prediction_note`` says which source was used.
* the workload: probe — single requests (concurrency 1) of each prompt size with the probe's output
  length, one simulation per size, each metric the median over sizes (exact for one size); bench —
  its rate (inf: all at once), concurrency, request count and lengths; explain — no prediction
  (its experiments are not one workload).

A setting that varies a parameter with no plan knob (``threads``, ``fa``, ...) gets no prediction
(``prediction_reason`` says which), since the simulator would print the baseline's numbers for it.
Rows gain ``predicted`` (``ttft_p50_s``, ``itl_p50_s``, ``decode_tok_s``, ``throughput_tok_s``),
``predicted_vs_baseline`` (each over the baseline's predicted value) and ``prediction_reason``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from phasescope.errors import PhasescopeError
from phasescope.measure.aggregate import median

__all__ = ["PLAN_KNOBS", "PREDICTED_KEYS", "plan_knobs", "predict_rows", "prediction_sentence"]

#: tune parameter (or --serve template field) → plan knob
PLAN_KNOBS: dict[str, str] = {
    "ub": "max_num_batched_tokens", "mnbt": "max_num_batched_tokens",
    "max_num_batched_tokens": "max_num_batched_tokens", "max-num-batched-tokens": "max_num_batched_tokens",
    "chunked_prefill_size": "max_num_batched_tokens", "chunked-prefill-size": "max_num_batched_tokens",
    "parallel": "max_num_seqs", "max_num_seqs": "max_num_seqs", "max-num-seqs": "max_num_seqs",
    "num_parallel": "max_num_seqs", "ollama_num_parallel": "max_num_seqs",
    "quant": "quant", "quantization": "quant",
}

#: the predicted metrics, in the order the finding speaks of them: (key, word)
PREDICTED_KEYS: tuple[tuple[str, str], ...] = (
    ("decode_tok_s", "decode"), ("ttft_p50_s", "TTFT"), ("itl_p50_s", "ITL p50"), ("throughput_tok_s", "throughput"),
)

EMBEDDED_QUANT = "q4_k_m"  # the bundled model file's own type (engine/model.py BUNDLED_MODEL_FILE)


def plan_knobs(params: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """(plan option overrides, parameter names with no plan knob) of one setting."""
    over: dict[str, Any] = {}
    unmapped: list[str] = []
    for name, v in params.items():
        knob = PLAN_KNOBS.get(name.lower())
        if knob is None:
            unmapped.append(name)
        elif knob == "quant":  # TYPE-pure: the theory bits are TYPE's (the files' bytes say the rest)
            over["quant"] = str(v).lower().removesuffix("-pure")
        else:
            try:
                over[knob] = int(str(v).replace("_", ""))
            except ValueError:
                unmapped.append(name)
    return over, unmapped


def _workloads(workload: str, a: dict[str, Any]) -> list[dict[str, Any]]:
    """plan workload options, one dict per simulation (probe: one per prompt size)."""
    if workload == "probe":
        reps = 3 if a["repeat"] == "auto" else int(a["repeat"])
        return [{"concurrency": 1, "rate": None, "num_requests": max(reps, 3), "input_len": int(n),
                 "output_len": int(a["max_tokens"])} for n in a["prompt_tokens"]]
    if workload == "bench":
        if a.get("dataset", "random") != "random" or a.get("prefix_len"):
            return []  # a dataset's lengths, shared prefixes: not the random workload plan simulates here
        rate = float(a["request_rate"])
        dur = a.get("duration_s")
        return [{"rate": None if math.isinf(rate) else rate, "concurrency": a.get("max_concurrency"),
                 "num_requests": int(a["num_prompts"]), "duration_s": dur,
                 "input_len": int(a["input_len"]), "output_len": int(a["output_len"]),
                 "burstiness": float(a.get("burstiness", 1.0)), "range_ratio": float(a.get("range_ratio", 0.0)),
                 "seed": int(a.get("seed", 0))}]
    return []


def _metrics(summ: dict[str, Any]) -> dict[str, float | None]:
    def ms(k: str) -> float | None:
        v = summ.get(k)
        return None if v is None else float(v) / 1e3

    tpot = summ.get("median_tpot_ms")
    return {"ttft_p50_s": ms("median_ttft_ms"), "itl_p50_s": ms("median_itl_ms"),
            "decode_tok_s": 1e3 / tpot if tpot else None, "throughput_tok_s": summ.get("output_throughput")}


def _simulate(calibrate_from: str, over: dict[str, Any], base_quant: str | None, loads: list[dict[str, Any]],
              policy: str | None, weight_factor: float | None = None,
              base_over: dict[str, Any] | None = None) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The setting ``over`` simulated with the cost model fitted at the baseline's knobs ``base_over``
    (the server that produced the records: fitting them under another setting's chunk would re-read the
    same measurements as a different machine), and ``over``'s scheduler."""
    from phasescope.planning.api import POLICY_DEFAULTS, PlanOptions, build_spec
    from phasescope.planning.build import cost_from_theory, resolve_model
    from phasescope.planning.planner import run_once

    quant = over.get("quant")
    if policy is None:  # plan's own choice from the records (llamacpp when they carry its timings)
        policy = build_spec(PlanOptions(calibrate_from=calibrate_from, quant=base_quant, save=False, **loads[0]))[2]["policy"]

    def sched_knobs(o: dict[str, Any]) -> dict[str, Any]:
        k = {n: v for n, v in o.items() if n != "quant"}
        if "max_num_batched_tokens" in k and "max_num_seqs" not in k:
            # a chunk smaller than the policy's sequence cap: as many sequences as tokens (vLLM requires it)
            k["max_num_seqs"] = min(POLICY_DEFAULTS[policy][1], k["max_num_batched_tokens"])
        return k

    knobs, fit_knobs = sched_knobs(over), sched_knobs(base_over if base_over is not None else over)
    per: list[dict[str, float | None]] = []
    facts: dict[str, Any] = {}
    for w in loads:
        o = PlanOptions(calibrate_from=calibrate_from, quant=base_quant, policy=policy, save=False, **knobs, **w)
        spec, _cal, facts = build_spec(o)
        if fit_knobs != knobs:
            fitted = build_spec(replace(o, **{**{k: None for k in knobs}, **fit_knobs}))[0]
            spec = replace(spec, cost=fitted.cost)
        if quant is not None and (quant != base_quant or weight_factor is not None):  # (Q4_0 vs Q4_0-pure: the files differ)
            if weight_factor is None:
                m = resolve_model(facts["model"])
                wb_new = cost_from_theory(m, facts["device"], quant=quant).weight_bytes
                wb_base = cost_from_theory(m, facts["device"], quant=base_quant).weight_bytes
                weight_factor = wb_new / wb_base
            spec = replace(spec, cost=replace(spec.cost, weight_bytes=spec.cost.weight_bytes * weight_factor))
        _res, out = run_once(spec, points=2)
        per.append(_metrics(out["summary"]))
    return {k: median([p[k] for p in per]) for k, _ in PREDICTED_KEYS}, facts


def predict_rows(rows: list[dict[str, Any]], workload: str, workload_args: dict[str, Any], *,
                 embedded: bool, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fill each row's ``predicted``/``predicted_vs_baseline``/``prediction_reason`` (module docstring);
    returns the tune's ``prediction`` facts (``calibrated_from``, ``model``, ``device``, ``policy``, ``reason``)."""

    def none_for_all(reason: str) -> dict[str, Any]:
        for r in rows:
            r.update(predicted=None, predicted_vs_baseline=None, prediction_reason=reason, prediction_note=None)
        return {"calibrated_from": None, "model": None, "device": None, "policy": None, "reason": reason}

    if not rows or rows[0].get("status") != "ok" or not rows[0].get("run_id"):
        return none_for_all("the baseline setting did not run: nothing to calibrate from")
    loads = _workloads(workload, workload_args)
    if not loads:
        return none_for_all("plan has no model of this workload" + (" (explain: a mix of experiments)" if workload == "explain"
                                                                     else " (a dataset or shared prefixes)"))
    base = rows[0]
    base_over, _ = plan_knobs(base["params"])
    base_quant = base_over.get("quant") or (EMBEDDED_QUANT if embedded else None)
    policy = "llamacpp" if embedded else None
    facts: dict[str, Any] = {}
    try:
        base_pred, facts = _simulate(base["run_id"], base_over, base_quant, loads, policy)
    except PhasescopeError as exc:
        return none_for_all(f"plan could not simulate the baseline setting from its run {base['run_id']}: {exc}")
    for r in rows:
        r.update(predicted=None, predicted_vs_baseline=None, prediction_reason=None, prediction_note=None)
        if r.get("status") != "ok":
            r["prediction_reason"] = "the setting failed"
            continue
        over, unmapped = plan_knobs(r["params"])
        varied = [n for n in unmapped if r["params"].get(n) != base["params"].get(n)]
        if varied:
            r["prediction_reason"] = f"no prediction: plan has no knob for {', '.join(varied)}"
            continue
        if r is base:
            pred = base_pred
        else:
            # the served files' bytes when both probes read them (their roofs: roof ∝ 1 / bytes per step)
            # (the files' tensor tables when read: exact bytes per step, whichever roof binds)
            bc, rc = (base.get("ceiling") or {}).get("decode_tok_s"), (r.get("ceiling") or {}).get("decode_tok_s")
            factor = bc / rc if "quant" in over and bc and rc else None
            if "quant" in over and r.get("bytes_ratio"):
                factor = r["bytes_ratio"]
            r["prediction_note"] = (None if "quant" not in over else
                                    "weight bytes from the served files (the probes' roofs)" if factor else
                                    "weight bytes from the quant types' theory bits")
            try:
                pred, _ = _simulate(base["run_id"], over, base_quant, loads, policy, factor, base_over)
            except PhasescopeError as exc:
                r["prediction_reason"] = f"no prediction: {exc}"
                continue
        r["predicted"] = pred
        r["predicted_vs_baseline"] = {k: (pred[k] / base_pred[k] if pred.get(k) is not None and base_pred.get(k) else None)
                                      for k, _ in PREDICTED_KEYS}
    if say:
        say(f"plan: simulated each setting, calibrated from the baseline run {base['run_id']}")
    return {"calibrated_from": base["run_id"], "model": facts.get("model"), "device": facts.get("device"),
            "policy": facts.get("policy"), "reason": None}


def prediction_sentence(row: dict[str, Any]) -> str | None:
    """``ub=32: plan predicted decode 0.87×, measured 1.04×; TTFT …`` — None for the baseline row
    or a failed one; the reason when there is no prediction."""
    if row.get("index") == 0 or row.get("status") != "ok":
        return None
    if not row.get("predicted_vs_baseline"):
        return f"{row['label']}: {row.get('prediction_reason') or 'no prediction'}"
    meas = row.get("vs_baseline") or {}
    meas_ci = row.get("vs_baseline_ci") or {}
    parts = []
    for key, word in PREDICTED_KEYS:
        p, m = row["predicted_vs_baseline"].get(key), meas.get(key)
        if p is None and m is None:
            continue
        ps = "—" if p is None else f"{p:.2f}×"
        ms = "not measured" if m is None else f"{m:.2f}×"
        ci = meas_ci.get(key)
        if m is not None and ci and None not in ci and (ci[1] - ci[0]) > 0.2 * m:  # a wide ratio: its interval
            ms += f" ({ci[0]:.2f}–{ci[1]:.2f}×)"
        parts.append(f"{word} {ps}, measured {ms}")
    return f"{row['label']}: plan predicted " + "; ".join(parts) if parts else None
