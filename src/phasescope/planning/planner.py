"""What-if questions on top of the simulator: one run, a parameter sweep, a capacity search, and
disaggregated versus colocated serving on the same GPUs.

Each function takes a :class:`PlanSpec` (cost model + workload + scheduler + deployment + SLO) and
returns plain dicts (JSON-ready), so the CLI only prints them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from phasescope.errors import InputError
from collections import Counter

from phasescope.planning.costmodel import CostModel
from phasescope.planning.limits import analyse
from phasescope.planning.metrics import compact, summarize_sim, timeseries
from phasescope.planning.sim import Deployment, SchedulerConfig, SimResult, Simulator
from phasescope.planning.workload import Workload

#: sweepable parameters → where they live
SWEEP_PARAMS: dict[str, tuple[str, type]] = {
    "max_num_batched_tokens": ("sched", int),
    "max_num_seqs": ("sched", int),
    "rate": ("workload", float),
    "concurrency": ("workload", int),
    "input_len": ("workload", int),
    "output_len": ("workload", int),
    "prefix_len": ("workload", int),
    "prefix_share": ("workload", float),
    "num_requests": ("workload", int),
    "gpu_memory_utilization": ("cost", float),
    "gpus": ("deploy", int),
}
_ALIASES = {"chunk": "max_num_batched_tokens", "budget": "max_num_batched_tokens", "batch_tokens": "max_num_batched_tokens",
            "users": "concurrency", "seqs": "max_num_seqs"}


@dataclass
class PlanSpec:
    """Everything one simulation needs. ``gpus`` = devices in all; a replica uses ``cost.tp`` of them."""

    cost: CostModel
    workload: Workload
    sched: SchedulerConfig = field(default_factory=SchedulerConfig)
    gpus: int = 1
    disaggregate: tuple[int, int] | None = None
    slo: dict[str, float] = field(default_factory=dict)
    slo_percentile: float = 99.0
    #: rebuilds the cost model for another --gpu-memory-utilization (theory-built models only)
    rebuild_cost: Callable[[float], CostModel] | None = field(default=None, repr=False)

    def deployment(self) -> Deployment:
        tp = max(self.cost.tp, 1)
        if self.disaggregate:
            p, d = self.disaggregate
            if p < 1 or d < 1:
                raise InputError("--disaggregate P:D needs P ≥ 1 and D ≥ 1")
            shared = (p + d) * tp > self.gpus and self.gpus == tp and (p, d) == (1, 1)
            if not shared and (p + d) * tp > self.gpus:
                raise InputError(
                    f"--disaggregate {p}:{d} needs {(p + d) * tp} GPUs ({tp} per replica) but --gpus is {self.gpus}",
                    hint="1:1 on a single replica's GPUs shares the device between the two workers",
                )
            return Deployment(prefill_replicas=p, decode_replicas=d, shared_device=shared)
        reps = self.gpus // tp
        if reps < 1:
            raise InputError(f"the model needs {tp} GPUs per replica (tensor parallel) but --gpus is {self.gpus}")
        return Deployment(replicas=reps)

    def config(self) -> dict[str, Any]:
        # the trace rows and the conversation loop are inputs, not settings (session_facts says what they were)
        w = {f.name: getattr(self.workload, f.name) for f in dataclasses.fields(self.workload)
             if f.name not in ("trace", "sessions")}
        d = self.deployment()
        return {
            "workload": w,
            "scheduler": dataclasses.asdict(self.sched),
            "gpus": self.gpus,
            "tp": self.cost.tp,
            "deployment": {
                "replicas": d.replicas if not d.disaggregated else None,
                "prefill_replicas": d.prefill_replicas or None,
                "decode_replicas": d.decode_replicas or None,
                "shared_device": d.shared_device,
            },
            "slo": self.slo,
            "slo_percentile": self.slo_percentile,
        }


def cost_facts(cost: CostModel, w: Workload, sched: SchedulerConfig) -> dict[str, Any]:
    """Closed-form numbers of the cost model for this workload (what one request alone would see)."""
    chunk = sched.max_num_batched_tokens if sched.chunked_prefill else None
    pre = cost.prefill_time_s(w.input_len, chunk, breaks=sched.tail_breaks(cost))  # llama.cpp: + checkpoint tail
    step1 = cost.decode_step_s(1, w.input_len + w.output_len / 2)
    return {
        "name": cost.name,
        "prefill_alone_ms": pre * 1e3,
        "decode_step_alone_ms": step1 * 1e3,
        "decode_tok_s_alone": 1.0 / step1 if step1 > 0 else None,
        "kv_pool_tokens": cost.kv_pool_tokens,
        "kv_transfer_ms_per_prompt": cost.kv_transfer_s(w.input_len) * 1e3,
        "params": {k: v for k, v in cost.to_dict().items() if k != "source"},
        "source": cost.source,
    }


def hit_shares(res: SimResult, w: Workload) -> dict[str, Any]:
    """``prefix_hit_share``: prompt tokens the simulated prefix cache served over all prompt tokens
    sent (failed requests count with no hit); ``implied_hit_share``: what a cache keeping everything
    would serve (:mod:`phasescope.planning.sessions`)."""
    seqs = res.sim.seqs
    total = sum(s.prompt for s in seqs)
    cached = sum(s.cached for s in seqs if not s.failed)
    return {"prefix_hit_share": cached / total if total else 0.0, "implied_hit_share": w.implied_hit_share}


def run_once(spec: PlanSpec, *, points: int = 120) -> tuple[SimResult, dict[str, Any]]:
    """Simulate the spec; returns the raw result and ``{"summary", "timeseries", "wall_s"}``."""
    t = time.perf_counter()
    sim = Simulator(spec.cost, spec.workload, spec.sched, spec.deployment())
    res = sim.run()
    wall = time.perf_counter() - t
    reasons = Counter(s.failed for s in res.sim.seqs if s.failed)
    if res.n and not res.ok.any():
        why, _ = reasons.most_common(1)[0]
        raise InputError(f"no request could be served: {why}",
                         hint="raise --max-num-batched-tokens, allow chunked prefill, or enlarge the KV pool (--gpus/--tp, --kv-pool-tokens)")
    summ = summarize_sim(res, spec.slo, spec.slo_percentile)
    summ["failed_reason"] = (f"{reasons.most_common(1)[0][1]} request(s): {reasons.most_common(1)[0][0]}"
                             if reasons else None)
    focus = [k for k, c in ((summ.get("slo") or {}).get("checks") or {}).items() if not c["met"]]
    summ.update(analyse(res, summ, spec.cost, spec.sched, spec.workload, focus=focus))
    if spec.workload.implied_hit_share is not None:  # session workloads: simulated vs implied prefix hits
        summ.update(hit_shares(res, spec.workload))
    xfer = res.xfer_s[np.isfinite(res.xfer_s)]
    if xfer.size:
        summ["mean_kv_transfer_ms"] = float(xfer.mean() * 1e3)
        summ["p99_kv_transfer_ms"] = float(np.percentile(xfer, 99) * 1e3)
    return res, {"summary": summ, "timeseries": timeseries(res, points), "wall_s": wall}


def _apply(spec: PlanSpec, param: str, value: float) -> PlanSpec:
    where, typ = SWEEP_PARAMS[param]
    v = typ(value)
    if where == "sched":
        return replace(spec, sched=replace(spec.sched, **{param: v}))
    if where == "workload":
        return replace(spec, workload=replace(spec.workload, **{param: v}))
    if where == "deploy":
        return replace(spec, gpus=int(v))
    if spec.rebuild_cost is None:
        raise InputError(f"--sweep {param} needs a model/device built from the catalogs")
    return replace(spec, cost=spec.rebuild_cost(float(v)))


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``"max_num_batched_tokens=512,2048,8192"`` → (name, values). Dashes or underscores."""
    if "=" not in text:
        raise InputError("--sweep wants PARAM=v1,v2,..., e.g. max_num_batched_tokens=512,2048,8192")
    name, vals = text.split("=", 1)
    name = name.strip().lstrip("-").replace("-", "_").lower()
    name = _ALIASES.get(name, name)
    if name not in SWEEP_PARAMS:
        raise InputError(f"cannot sweep {name!r} (one of: {', '.join(SWEEP_PARAMS)})")
    out: list[float] = []
    for v in vals.split(","):
        v = v.strip()
        if not v:
            continue
        try:
            out.append(float(v))
        except ValueError:
            raise InputError(f"bad --sweep value {v!r}: numbers only") from None
    if not out:
        raise InputError("--sweep needs at least one value")
    return name, out


def _row(value: Any, summ: dict[str, Any]) -> dict[str, Any]:
    row = {"value": value, **compact(summ)}
    row.update(
        {
            "median_ttft_ms": summ.get("median_ttft_ms"),
            "max_itl_ms": summ.get("max_itl_ms"),
            "p99_tpot_ms": summ.get("p99_tpot_ms"),
            "max_kv_usage": summ.get("max_kv_usage"),
            "max_waiting": summ.get("max_waiting"),
            "preemptions": summ.get("preemptions"),
            "failed": summ.get("failed"),
            "request_goodput": summ.get("request_goodput"),
            "slo_met": (summ.get("slo") or {}).get("met"),
            "failed_reason": summ.get("failed_reason"),
            "limited_by": summ.get("limited_by"),
            "limited_by_reason": summ.get("limited_by_reason"),
        }
    )
    return row


def sweep(spec: PlanSpec, param: str, values: Sequence[float]) -> dict[str, Any]:
    """One simulation per value; rows of headline metrics (the trade-off table)."""
    rows = []
    for v in values:
        shown: Any = int(v) if float(v).is_integer() else v
        try:
            s = _apply(spec, param, v)
            _, out = run_once(s, points=2)
        except InputError as exc:  # e.g. the weights no longer fit: a row that says why
            rows.append({"value": shown, "error": str(exc)})
            continue
        rows.append(_row(shown, out["summary"]))
    if all("error" in r for r in rows):
        raise InputError(f"every --sweep value failed: {rows[0]['error']}")
    return {"param": param, "rows": rows}


def _closed_loop_requests(spec: PlanSpec, n_users: int) -> int:
    base = spec.workload.num_requests or 0
    return max(base, 10 * n_users, 100)


def capacity(spec: PlanSpec, *, mode: str | None = None, max_users: int = 4096, rel_tol: float = 0.03) -> dict[str, Any]:
    """Most concurrent users (closed loop) or highest Poisson rate whose percentiles meet the SLO.

    Users: double N until the SLO fails, then bisect; each run spreads the users' first requests
    over one request's time alone (steady state, not a synchronized burst). Rate: double from a first guess (one request
    per alone-prefill+decode time), then bisect to ``rel_tol``. Assumes the SLO gets harder with
    load (true of queueing; a simulated point that breaks it is reported)."""
    if not spec.slo:
        raise InputError("--capacity needs --slo, e.g. --slo ttft:2000,itl:100")
    if mode is None:
        mode = "rate" if spec.workload.rate is not None else "users"
    probes: list[dict[str, Any]] = []

    wl = spec.workload
    # one request's time alone: users are spread over it so equal requests do not run in lockstep
    alone_s = spec.cost.prefill_time_s(wl.input_len) + wl.output_len * spec.cost.decode_step_s(1, wl.input_len)

    def ok_users(n: int) -> bool:
        w = replace(spec.workload, concurrency=n, rate=None, duration_s=None, num_requests=_closed_loop_requests(spec, n),
                    ramp_s=alone_s)
        _, out = run_once(replace(spec, workload=w), points=2)
        met = bool(out["summary"]["slo"]["met"])
        probes.append({**_row(n, out["summary"]), "_slo": out["summary"]["slo"]})
        return met

    def ok_rate(r: float) -> bool:
        n = spec.workload.num_requests or max(200, int(r * 120))
        w = replace(spec.workload, rate=r, num_requests=n, duration_s=None)
        _, out = run_once(replace(spec, workload=w), points=2)
        met = bool(out["summary"]["slo"]["met"])
        probes.append({**_row(round(r, 4), out["summary"]), "_slo": out["summary"]["slo"]})
        return met

    def bound(answer: float, failing: float | None, unit: str) -> dict[str, Any]:
        """What bound the answer: the first probe above it that failed, and which SLO check it failed."""
        def fmt(v: float) -> str:
            return f"{int(v):,} {unit}" if unit == "users" else f"{v:.3g} req/s"
        row = None
        if failing is not None:
            row = next((r for r in probes if r["value"] == (int(failing) if unit == "users" else round(failing, 4))), None)
        if row is None:  # nothing failed (search capped): what limited the largest probe
            row = max(probes, key=lambda r: r["value"])
            return {"limited_by": row.get("limited_by"),
                    "limited_by_reason": f"{fmt(answer)} (search capped, SLO still met): {row.get('limited_by_reason')}",
                    "failed_at": None, "failed_checks": []}
        assert failing is not None  # row is the probe at `failing` (None returned above)
        checks = [k for k, c in ((row.get("_slo") or {}).get("checks") or {}).items() if not c["met"]]
        parts = []
        for k in checks:
            c = row["_slo"]["checks"][k]
            v = next((vv for kk, vv in c.items() if kk.endswith("_ms") and kk != "limit_ms"), None)
            parts.append(f"{k} p{spec.slo_percentile:g} {v:,.0f} ms > {c['limit_ms']:,.0f} ms" if v is not None else k)
        head = f"{fmt(answer)}" + (f"; at {fmt(failing)} " + ", ".join(parts) if parts else "")
        return {"limited_by": row.get("limited_by"), "limited_by_reason": f"{head}: {row.get('limited_by_reason')}",
                "failed_at": row["value"], "failed_checks": checks}

    def done(d: dict[str, Any], answer: float, failing: float | None, unit: str) -> dict[str, Any]:
        d.update(bound(answer, failing, unit))
        for r in probes:
            r.pop("_slo", None)
        d["probes"] = probes
        return d

    if mode == "users":
        if not ok_users(1):
            return done({"mode": "users", "max_users": 0}, 0, 1, "users")
        lo, hi = 1, 2
        while hi <= max_users and ok_users(hi):
            lo, hi = hi, hi * 2
        if hi > max_users:
            return done({"mode": "users", "max_users": lo, "capped": True}, lo, None, "users")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok_users(mid):
                lo = mid
            else:
                hi = mid
        return done({"mode": "users", "max_users": lo}, lo, hi, "users")
    if mode != "rate":
        raise InputError("capacity mode is 'users' or 'rate'")
    r = max(0.05, 1.0 / max(alone_s, 1e-6))
    if not ok_rate(r):
        lo_r, hi_r = 0.0, r
        while hi_r > 1e-3 and not ok_rate(hi_r / 2):
            hi_r /= 2
        lo_r = hi_r / 2
        if hi_r <= 1e-3:
            return done({"mode": "rate", "max_rate": 0.0}, 0.0, hi_r, "rate")
    else:
        lo_r, hi_r = r, 2 * r
        while hi_r < 1e5 and ok_rate(hi_r):
            lo_r, hi_r = hi_r, hi_r * 2
    while (hi_r - lo_r) / max(hi_r, 1e-9) > rel_tol:
        mid = (lo_r + hi_r) / 2
        if ok_rate(mid):
            lo_r = mid
        else:
            hi_r = mid
    return done({"mode": "rate", "max_rate": lo_r}, lo_r, hi_r, "rate")


def compare_disaggregation(spec: PlanSpec) -> dict[str, Any]:
    """Disaggregated P:D against the same GPUs serving both phases (colocated, chunked prefill)."""
    if not spec.disaggregate:
        raise InputError("--disaggregate P:D is required for the comparison")
    p, d = spec.disaggregate
    dis_res, dis = run_once(spec)
    dep = spec.deployment()
    tp = max(spec.cost.tp, 1)
    colo_gpus = spec.gpus if dep.shared_device else (p + d) * tp
    colo_spec = replace(spec, disaggregate=None, gpus=colo_gpus)
    _, colo = run_once(colo_spec)
    a, b = colo["summary"], dis["summary"]

    def rel(k: str) -> float | None:
        x, y = a.get(k), b.get(k)
        if x in (None, 0) or y is None:
            return None
        return y / x - 1.0

    keys = ("p99_ttft_ms", "median_ttft_ms", "p99_itl_ms", "max_itl_ms", "median_itl_ms", "output_throughput",
            "request_goodput")
    delta = {k: rel(k) for k in keys}
    better_itl = (delta["p99_itl_ms"] or 0) < -0.05
    better_ttft = (delta["p99_ttft_ms"] or 0) < -0.05
    worse = (delta["p99_ttft_ms"] or 0) > 0.05 or (delta["p99_itl_ms"] or 0) > 0.05 or (delta["output_throughput"] or 0) < -0.05
    if spec.slo and a.get("slo") and b.get("slo"):
        gp_a, gp_b = a.get("request_goodput") or 0.0, b.get("request_goodput") or 0.0
        pays = gp_b > gp_a * 1.05 or (b["slo"]["met"] and not a["slo"]["met"])
    else:
        pays = (better_itl or better_ttft) and not worse
    if dep.shared_device:
        why = ("one device serves both workers in turn, so nothing runs in parallel, and each prompt's KV "
               "now crosses the interconnect instead of staying in place")
    elif pays:
        why = "separate pools keep long prefills out of the decode steps, worth more than the KV transfer"
    else:
        why = "chunked prefill on the same GPUs already isolates decode well enough; the transfer and split pools cost more"
    # the seed's alternative: the same GPUs with a smaller chunked-prefill budget
    alt = None
    cands = [b for b in (2048, 1024, 512) if b < spec.sched.max_num_batched_tokens and b >= spec.sched.max_num_seqs]
    tried = []
    for budget in cands:
        _, o = run_once(replace(colo_spec, sched=replace(spec.sched, max_num_batched_tokens=budget)), points=2)
        tried.append((budget, o["summary"]))
        if spec.slo and o["summary"]["slo"]["met"]:
            break
    if tried:
        if spec.slo:
            met = [t for t in tried if t[1]["slo"]["met"]]
            budget, summ = met[0] if met else tried[-1]
        else:
            budget, summ = min(tried, key=lambda t: t[1].get("p99_itl_ms") or math.inf)
        alt = {"max_num_batched_tokens": budget, **compact(summ), "slo_met": (summ.get("slo") or {}).get("met")}
        alt_enough = bool(alt["slo_met"]) if spec.slo else (
            (alt.get("p99_itl_ms") or math.inf) <= 1.5 * (b.get("p99_itl_ms") or 0.0))
        if pays and alt_enough and not dep.shared_device:
            why += (f"; but --max-num-batched-tokens {budget} on the same GPUs colocated does as well without "
                    "the transfer (chunked prefill isolates decode with one flag)")
    return {
        "prefill_replicas": p,
        "decode_replicas": d,
        "colocated_smaller_budget": alt,
        "shared_device": dep.shared_device,
        "gpus": colo_gpus,
        "colocated": {"summary": a, "timeseries": colo["timeseries"]},
        "disaggregated": {"summary": b, "timeseries": dis["timeseries"]},
        "relative_change": delta,
        "pays": bool(pays),
        "why": why,
        "_result": dis_res,
    }


def nan_to_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
