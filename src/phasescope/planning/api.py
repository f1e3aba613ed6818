"""``phasescope plan`` as a library call: user-level options in, a JSON-ready result out.

:func:`run_plan` resolves the cost model (catalog model × device, or calibrated from measured
records), builds the workload and scheduler, runs the requested mode (single run, sweep, capacity,
disaggregation comparison), and saves the run in the store (kind ``plan``) with simulated
RequestRecords, so ``runs``/``show``/``compare``/``report`` treat it like a measured run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from phasescope.errors import InputError, PhasescopeError
from phasescope.planning.build import cost_from_theory, resolve_device, resolve_model
from phasescope.planning.calibrate import calibrate, calibration_warnings, load_calibration_records
from phasescope.planning.costmodel import CostModel
from phasescope.planning.metrics import parse_slo, to_records
from phasescope.planning.planner import (
    PlanSpec,
    capacity,
    compare_disaggregation,
    cost_facts,
    parse_sweep,
    run_once,
    sweep,
)
from phasescope.planning.sim import SchedulerConfig, SimResult
from phasescope.planning.workload import Workload

#: scheduler defaults per policy: vLLM V1 (8192-token budget, 256 sequences) and llama-server
#: (n_batch 2048, the embedded engine's 4 slots and 16,384-token context)
POLICY_DEFAULTS = {"vllm": (8192, 256, None), "llamacpp": (2048, 4, 16384)}
DEFAULT_NUM_REQUESTS = 500


@dataclass
class PlanOptions:
    model: str | None = None
    device: str | None = None
    quant: str | None = None
    kv_dtype: str = "fp16"
    gpus: int | None = None  # None: one replica (its --tp devices)
    tp: int | None = None
    rate: float | None = None
    concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0
    prefix_share: float = 0.0
    seed: int = 0
    policy: str | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_pool_tokens: int | None = None
    chunked_prefill: bool = True
    preempt: bool = False
    prefix_caching: bool = True
    bw_eff: float | None = None
    flops_eff: float | None = None
    step_overhead_ms: float | None = None
    api_overhead_ms: float | None = None
    interconnect_gb_s: float | None = None
    calibrate_from: str | None = None
    slo: str | None = None
    slo_percentile: float = 99.0
    disaggregate: str | None = None
    sweep: str | None = None
    capacity: bool = False
    save: bool = True
    records_limit: int = 2000
    #: session workloads (plan.sessions): conversation | mooncake; None: the single-shot workload above
    dataset: str | None = None
    dataset_path: str | None = None
    block_size: int = 512
    users: int = 4
    turns: int = 4
    system_prompt_len: int = 0
    turn_input_len: int = 64
    think_time_s: float = 0.0
    session_rate: float | None = None


def _parse_pd(text: str) -> tuple[int, int]:
    try:
        p, d = text.split(":")
        return int(p), int(d)
    except ValueError:
        raise InputError(f"bad --disaggregate {text!r}: use P:D, e.g. 1:3 (prefill replicas : decode replicas)") from None


def build_spec(o: PlanOptions) -> tuple[PlanSpec, dict[str, Any] | None, dict[str, Any]]:
    """(spec, calibration dict or None, facts about where the numbers came from)."""
    if o.gpus is not None and o.gpus < 1:
        raise InputError("--gpus must be ≥ 1")
    if o.tp is not None and o.tp < 1:
        raise InputError("--tp must be ≥ 1")
    cal_info: dict[str, Any] | None = None
    recs = None
    policy = o.policy
    model = o.model
    if o.calibrate_from:
        recs = load_calibration_records(o.calibrate_from)
        if model is None:
            model = next((r.model for r in recs if r.model), None)
        if policy is None and any((r.server or {}).get("prompt_n") is not None and (r.server or {}).get("predicted_n") is not None
                                  and r.api != "sim" for r in recs):
            policy = "llamacpp"
    policy = policy or "vllm"
    if policy not in POLICY_DEFAULTS:
        raise InputError(f"unknown --policy {policy!r} (vllm or llamacpp)")
    if model is None:
        raise InputError("give --model (a catalog id such as llama-3.1-8b, a config.json or a .gguf)")
    device = o.device
    if device is None:
        if o.calibrate_from:
            from phasescope.theory.devices import load_local_device

            device = "local" if load_local_device() is not None else "cpu-ddr5-5600-2ch"
        else:
            raise InputError("give --device (a catalog id such as l40s or h100, or 'local' after `phasescope hw`)")
    d_budget, d_seqs, d_pool = POLICY_DEFAULTS[policy]
    pool = o.kv_pool_tokens if o.kv_pool_tokens is not None else d_pool
    spec_model = resolve_model(model)

    def build(util: float, tp: int | None = o.tp) -> CostModel:
        c = cost_from_theory(
            spec_model, device, quant=o.quant, kv_dtype=o.kv_dtype, tp=tp, gpu_memory_utilization=util,
            bw_eff=o.bw_eff, flops_eff=o.flops_eff,
            step_overhead_s=None if o.step_overhead_ms is None else o.step_overhead_ms / 1e3,
            kv_pool_tokens=pool, interconnect_gb_s=o.interconnect_gb_s,
        )
        return c

    cost = build(o.gpu_memory_utilization)
    api_overhead = 0.0
    if recs is not None:
        # llama.cpp on an SWA model measured each prompt_ms over its checkpoint-split steps (SchedulerConfig)
        breaks = SchedulerConfig(policy=policy, max_num_batched_tokens=o.max_num_batched_tokens or d_budget,
                                 max_num_seqs=o.max_num_seqs or d_seqs).tail_breaks(cost)
        cal = calibrate(recs, cost, tail_breaks=breaks)
        cost = cal.cost
        api_overhead = cal.api_overhead_s
        cal_info = {"from": o.calibrate_from, **cal.to_dict()}
    if policy == "llamacpp":
        # llama-server with --parallel N keeps one KV stream per slot: a step mixing decodes and a prompt
        # chunk runs as two passes (CostModel.split_mixed_steps)
        cost = cost.with_(split_mixed_steps=True)
    if o.api_overhead_ms is not None:
        api_overhead = o.api_overhead_ms / 1e3
    if o.num_requests is None and o.duration_s is None:
        num = DEFAULT_NUM_REQUESTS
    else:
        num = o.num_requests
    w = Workload(
        rate=o.rate, concurrency=o.concurrency, num_requests=num, duration_s=o.duration_s,
        arrival=o.arrival, burstiness=o.burstiness, input_len=o.input_len, output_len=o.output_len,
        range_ratio=o.range_ratio, prefix_len=o.prefix_len, prefix_share=o.prefix_share, seed=o.seed,
    )
    session = None
    if o.dataset is not None:
        session = _session_workload(o, cost, pool_caching=o.prefix_caching)
        # input/output_len: the sessions' means, for cost_model's "one request alone" numbers
        w = Workload(trace=session.rows if session.loop is None else None, sessions=session.loop, seed=o.seed,
                     input_len=max(1, round(sum(r[1] for r in session.rows) / len(session.rows))),
                     output_len=max(1, round(sum(r[2] for r in session.rows) / len(session.rows))),
                     implied_hit_share=session.implied_hit_share, session_facts=session.facts)
    w.validate()
    sched = SchedulerConfig(
        max_num_batched_tokens=o.max_num_batched_tokens or d_budget,
        max_num_seqs=o.max_num_seqs or d_seqs,
        chunked_prefill=o.chunked_prefill,
        preempt=o.preempt,
        prefix_caching=o.prefix_caching,
        policy=policy,
        api_overhead_s=api_overhead,
    )
    sched.validate()
    cal_cost = cost

    def rebuild(util: float) -> CostModel:
        fresh = build(util, tp=cal_cost.tp)  # same replica shape; only the pool changes
        return replace(cal_cost, kv_pool_tokens=fresh.kv_pool_tokens)

    if not o.chunked_prefill:
        # the first prompt is computed whole (no prefix is resident yet), so the full length must fit
        longest = int(w.input_len * (1 + w.range_ratio)) if w.trace is None else 0
        if longest > sched.max_num_batched_tokens:
            raise InputError(
                f"--no-chunked-prefill: a {longest:,}-token prompt does not fit --max-num-batched-tokens "
                f"{sched.max_num_batched_tokens:,} in one step, so it can never be admitted",
                hint="raise --max-num-batched-tokens to at least the prompt length, or drop --no-chunked-prefill")
    spec = PlanSpec(
        cost=cost, workload=w, sched=sched, gpus=o.gpus if o.gpus is not None else max(cost.tp, 1),
        disaggregate=_parse_pd(o.disaggregate) if o.disaggregate else None,
        slo=parse_slo(o.slo), slo_percentile=o.slo_percentile, rebuild_cost=rebuild,
    )
    spec.deployment()  # validate the GPU arithmetic early
    if o.dataset is not None:
        # the session LRU models one replica's pool, computed once up front: modes that route a
        # session over several pools, resize the pool or regenerate the workload would be wrong
        if spec.deployment().replicas > 1 or o.disaggregate:
            raise InputError("--dataset models one replica's prefix cache: drop --disaggregate, or keep --gpus to one replica (--tp)")
        if o.capacity:
            raise InputError("--capacity does not take --dataset yet: vary --users or --session-rate by hand")
        if o.sweep:
            from phasescope.planning.planner import parse_sweep as _ps

            name, _ = _ps(o.sweep)
            if name not in ("max_num_batched_tokens", "max_num_seqs"):
                raise InputError(f"--sweep {name} does not apply to --dataset workloads (only max_num_batched_tokens, max_num_seqs)")
    return spec, cal_info, {"model": spec_model.id, "device": device, "policy": policy}


def _session_workload(o: PlanOptions, cost: CostModel, *, pool_caching: bool) -> Any:
    """The conversation or Mooncake workload of ``--dataset`` (:mod:`phasescope.planning.sessions`)."""
    from phasescope.planning import sessions

    if o.dataset not in sessions.DATASETS:
        raise InputError(f"unknown --dataset {o.dataset!r} for plan (use one of {', '.join(sessions.DATASETS)})")
    if any(x is not None for x in (o.rate, o.concurrency, o.num_requests, o.duration_s)):
        raise InputError("--dataset sets the arrivals itself: drop --rate/--concurrency/--num-requests/--duration")
    pool = int(cost.kv_pool_tokens)
    if o.dataset == "mooncake":
        from phasescope.load.traces import read_mooncake

        if not o.dataset_path:
            raise InputError("--dataset mooncake needs --dataset-path FILE (Mooncake JSONL)")
        entries = read_mooncake(o.dataset_path, block_size=int(o.block_size))
        return sessions.mooncake(entries, block_size=int(o.block_size), pool_tokens=pool, caching=pool_caching)

    return sessions.conversation(
        users=o.users, turns=o.turns, system_len=o.system_prompt_len, turn_input_len=o.turn_input_len,
        output_len=o.output_len, think_time_s=o.think_time_s, session_rate=o.session_rate,
        pool_tokens=pool, caching=pool_caching, seed=o.seed)


def _device_kind(device: Any) -> str | None:
    """``gpu`` | ``cpu`` | ``apple`` | ``accelerator`` | ``custom`` | ``local`` (this machine's CPU)."""
    try:
        return resolve_device(device).kind
    except PhasescopeError:
        return None


def run_plan(o: PlanOptions, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``phasescope plan`` (see module docstring); returns the ``--json`` document. ``say``: one
    line about where the run went when the store could not take it."""
    if sum(bool(x) for x in (o.sweep, o.capacity, o.disaggregate)) > 1:
        raise InputError("use one of --sweep, --capacity, --disaggregate at a time")
    spec, cal, facts = build_spec(o)
    doc: dict[str, Any] = {
        "kind": "plan",
        "mode": "single",
        "model": facts["model"],
        "device": facts["device"],
        "device_kind": _device_kind(facts["device"]),
        "config": spec.config(),
        "cost_model": cost_facts(spec.cost, spec.workload, spec.sched),
        "calibration": cal,
    }
    res: SimResult | None = None
    t0 = time.perf_counter()
    if o.sweep:
        name, values = parse_sweep(o.sweep)
        doc["mode"] = "sweep"
        doc["sweep"] = sweep(spec, name, values)
    elif o.capacity:
        doc["mode"] = "capacity"
        doc["capacity"] = capacity(spec)
    elif o.disaggregate:
        doc["mode"] = "disaggregate"
        cmp = compare_disaggregation(spec)
        res = cmp.pop("_result")
        doc["disaggregation"] = cmp
        doc["summary"] = cmp["disaggregated"]["summary"]
    else:
        res, out = run_once(spec)
        doc["summary"] = out["summary"]
        doc["timeseries"] = out["timeseries"]
    sm = doc.get("summary") or {}
    for k in ("peak_in_flight", "max_turns_in_flight_per_session"):  # the contract keys, also at the top
        if k in sm:
            doc[k] = sm[k]
    doc["sim_wall_s"] = time.perf_counter() - t0
    doc["warnings"] = calibration_warnings(o.calibrate_from, load_calibration_records(o.calibrate_from)
                                           if o.calibrate_from else None)
    doc["run_id"] = _save(doc, spec, res, o, say) if o.save else None
    return doc


def _save(doc: dict[str, Any], spec: PlanSpec, res: SimResult | None, o: PlanOptions,
          say: Callable[[str], None] | None = None) -> str | None:
    """Record the plan as a run (kind ``plan``) through :func:`phasescope.lifecycle.run_output`: its
    simulated requests as records, its summary; the store's id (None: the store was unavailable and
    the run went to the fallback folder)."""
    from phasescope.lifecycle import run_output

    params = {"mode": doc["mode"], **doc["config"], "cost_model": doc["cost_model"]["params"],
              "calibrated_from": o.calibrate_from}
    target = f"sim://{doc['device']}/{doc['model']}"
    with run_output("plan", target, params, say=say, model=doc["model"], device=doc["device"], api="sim",
                    engine=f"sim-{spec.sched.policy}") as run:
        if res is not None:
            for rec in to_records(res, model=doc["model"], target=target, wall_base_ns=time.time_ns(),
                                  limit=o.records_limit, tags={"plan_mode": doc["mode"]}):
                run.write(rec)
        summary = dict(doc.get("summary") or {})
        summary["warnings"] = doc.get("warnings") or []
        for k in ("sweep", "capacity"):
            if k in doc:
                summary[k] = doc[k]
        if "disaggregation" in doc:
            dz = doc["disaggregation"]
            summary["disaggregation"] = {k: v for k, v in dz.items() if k not in ("colocated", "disaggregated")}
            summary["colocated"] = dz["colocated"]["summary"]
        run.finish(summary)
        return run.store_id


def options_dict(o: PlanOptions) -> dict[str, Any]:
    return dataclasses.asdict(o)
