"""What limited a simulated run: one of five constraints, a sentence, and the numbers behind it.

Every ``plan`` result carries ``limited_by`` (one of :data:`LIMITS`) and ``limited_by_reason``. The
simulator records, per step, the prefill tokens it carried and why the head of the queue could not be
admitted (``max_num_seqs`` slots full, ``kv_pool`` full, token ``budget`` spent, a ``preempted`` step); the
rules below read those records, the pooled ITL sample and the busy time, in this order:

1. ``kv_pool`` — requests waited for KV in ≥ 5 % of steps, or any request was preempted;
2. ``max_num_seqs`` — every sequence slot was busy while requests waited in ≥ 5 % of steps, and a decode
   step of twice the slots would still give ≥ 1.25× the tokens per second (else the device is the limit:
   ``bandwidth``, or ``prefill_pauses`` when most of the busy time carried prefill, and the sentence says
   that more slots would not help);
3. ``prefill_pauses`` — the ITL tail (p99, and the longest pause) comes from steps that carried prefill
   chunks: p99 ≥ 1.5 × the median decode-only step and most of the tail weight is in prefill steps; or
   the server was saturated and spent most of its busy time in prefill steps;
4. ``arrival_rate`` — an open-loop load (``--rate``) the server kept up with (queue p99 ≤ max(50 ms,
   10 % of TTFT p99)): throughput follows the offered load;
5. ``bandwidth`` — the server was busy ≥ 90 % of the time, mostly in decode steps (their time is set by
   the bytes they read: weights + KV at the memory bandwidth);
6. ``arrival_rate`` — none of the above: the server had idle time, so throughput follows the offered load.

With ``focus`` (the SLO checks a capacity probe failed) the rules are asked about that metric: a failed
ITL/TPOT is explained by preemptions, prefill steps in the tail, or decode steps; a failed TTFT by what
blocked admission (KV, slots) or by the time prompts spent queueing behind prefill and decode work.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from phasescope.planning.costmodel import CostModel
from phasescope.planning.sim import SchedulerConfig, SimResult
from phasescope.planning.workload import Workload

LIMITS = ("kv_pool", "bandwidth", "prefill_pauses", "max_num_seqs", "arrival_rate")
BLOCK_SHARE = 0.05
BUSY_SATURATED = 0.90
TAIL_RATIO = 1.5
#: full slots are the limit only if twice the batch would give at least this much more throughput
SLOT_GAIN = 1.25


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f} ms" if x >= 100 else f"{x:,.1f} ms"


def kv_allows(cost: CostModel, sched: SchedulerConfig, w: Workload) -> int:
    """Requests the KV pool holds at once at the workload's mean lengths (vLLM: each reserves prompt +
    output; llama.cpp: one per slot if a slot's share of the context holds it)."""
    need = max(int(w.input_len) + int(w.output_len), 1)
    if sched.policy == "llamacpp":
        per_slot = cost.kv_pool_tokens // max(sched.max_num_seqs, 1)
        return sched.max_num_seqs if need <= per_slot else 0
    return int(cost.kv_pool_tokens // need)


def analyse(res: SimResult, summary: dict[str, Any], cost: CostModel, sched: SchedulerConfig, w: Workload,
            focus: Iterable[str] = ()) -> dict[str, Any]:
    """``{"limited_by", "limited_by_reason", "limits": evidence}`` for one simulated run (module docstring)."""
    focus = set(focus)
    steps = sum(len(wk.step_end) for wk in res.workers)
    blocks: dict[str, int] = {"kv_pool": 0, "max_num_seqs": 0, "budget": 0, "preempted": 0}
    dur_all, wt_all, pre_all = [], [], []
    busy_pre = busy_dec = 0.0
    for wk in res.workers:
        for b in wk.step_block:
            if b is not None:
                blocks[b] = blocks.get(b, 0) + 1
        d = np.asarray(wk.step_dur, dtype=float)
        p = np.asarray(wk.step_prefill, dtype=np.int64)
        # a decode worker sharing its device with a prefill worker pauses for the other's steps: count
        # those gaps as prefill steps
        p = np.where(np.asarray(wk.step_shared, dtype=bool), np.maximum(p, 1), p)
        dur_all.append(d)
        wt_all.append(np.asarray(wk.itl_weight, dtype=np.int64))
        pre_all.append(p)
        if d.size:
            busy_pre += float(d[p > 0].sum())
            busy_dec += float(d[p == 0].sum())
    shared_any = any(any(wk.step_shared) for wk in res.workers)
    dur = np.concatenate(dur_all) if dur_all else np.zeros(0)
    wts = np.concatenate(wt_all) if wt_all else np.zeros(0, dtype=np.int64)
    pre = np.concatenate(pre_all) if pre_all else np.zeros(0, dtype=np.int64)
    share = {k: (v / steps if steps else 0.0) for k, v in blocks.items()}
    preempt = int(summary.get("preemptions") or 0)
    busy = summary.get("busy_fraction") or 0.0
    p99 = summary.get("p99_itl_ms")
    max_itl = summary.get("max_itl_ms")
    dec_only = (wts > 0) & (pre == 0)
    dec_med = float(np.median(dur[dec_only]) * 1e3) if dec_only.any() else None
    pre_steps = (wts > 0) & (pre > 0)
    pre_max = float(dur[pre_steps].max() * 1e3) if pre_steps.any() else None
    tail_from_prefill = 0.0
    if p99 is not None and wts.sum() > 0:
        tail = (dur * 1e3 >= p99 * (1 - 1e-9)) & (wts > 0)
        tw = wts[tail].sum()
        tail_from_prefill = float(wts[tail & (pre > 0)].sum() / tw) if tw else 0.0
    kv_allow = kv_allows(cost, sched, w)
    mean_batch = float((wts * 1.0).sum() / max(int((wts > 0).sum()), 1)) if wts.size else 0.0
    ev: dict[str, Any] = {
        "steps": steps,
        "blocked_share": share,
        "preemptions": preempt,
        "busy_fraction": busy,
        "busy_prefill_share": busy_pre / (busy_pre + busy_dec) if busy_pre + busy_dec > 0 else None,
        "decode_only_step_median_ms": dec_med,
        "longest_prefill_step_ms": pre_max,
        "itl_tail_from_prefill_share": tail_from_prefill,
        "mean_decode_batch": mean_batch,
        "kv_pool_tokens": cost.kv_pool_tokens,
        "kv_allows_requests": kv_allow,
        "max_num_seqs": sched.max_num_seqs,
    }
    per = " per replica" if len(res.workers) > 1 else ""
    also = f"; KV would allow {kv_allow:,} at once{per}, --max-num-seqs {sched.max_num_seqs}"
    prefill_tail = (p99 is not None and dec_med is not None and p99 >= TAIL_RATIO * dec_med
                    and tail_from_prefill >= 0.5)

    def kv_reason() -> str:
        bits = []
        if share["kv_pool"] > 0:
            bits.append(f"requests waited for KV in {share['kv_pool'] * 100:.0f} % of steps")
        if preempt:
            bits.append(f"{preempt} preemption(s) recomputed requests")
        return (f"the KV pool ({cost.kv_pool_tokens:,} tokens) is full: " + " and ".join(bits or ["admission waits for KV"])
                + f"; at these lengths it holds {kv_allow:,} requests at once{per}")

    # more slots help only if a bigger batch still buys throughput: on a device whose decode step already
    # grows with the batch (a CPU's compute, a saturated GPU), a step of twice the batch costs ~twice as long
    ctx_mean = w.input_len + w.output_len / 2.0
    b_slots = max(int(sched.max_num_seqs), 1)
    step_b, step_2b = cost.decode_step_s(b_slots, ctx_mean), cost.decode_step_s(2 * b_slots, ctx_mean)
    slot_gain = (2 * b_slots / step_2b) / (b_slots / step_b) if step_b > 0 and step_2b > 0 else 2.0
    ev["throughput_gain_at_twice_the_slots"] = slot_gain
    slots_bind = slot_gain >= SLOT_GAIN

    def slots_full_on_device() -> tuple[str, str]:
        head = (f"all {sched.max_num_seqs} sequence slots were busy while requests waited in "
                f"{share['max_num_seqs'] * 100:.0f} % of steps, but more sequence slots would not raise throughput: "
                f"a decode step of {2 * b_slots} sequences would take {_ms(step_2b * 1e3)} against {_ms(step_b * 1e3)} "
                f"for {b_slots} (×{slot_gain:.2f} the tokens per second); ")
        if (ev["busy_prefill_share"] or 0) > 0.5:
            return "prefill_pauses", head + (f"the server was busy {busy * 100:.0f} % of the time, "
                                             f"{(ev['busy_prefill_share'] or 0) * 100:.0f} % of it in steps carrying prefill")
        return "bandwidth", head + bw_reason()

    def seqs_reason() -> str:
        return (f"all {sched.max_num_seqs} sequence slots (--max-num-seqs) were busy while requests waited in "
                f"{share['max_num_seqs'] * 100:.0f} % of steps; KV would allow {kv_allow:,} at once{per}")

    def prefill_reason() -> str:
        where = ("the prefill worker's steps on the same device" if shared_any else
                 f"steps in which prefill chunks (budget {sched.max_num_batched_tokens:,} tokens) entered the batch")
        return (f"p99 ITL {_ms(p99)} (longest pause {_ms(max_itl)}) is set by {where}, up to {_ms(pre_max)}; "
                f"decode-only steps take {_ms(dec_med)}" + also)

    def bw_reason() -> str:
        # what a decode step of the mean batch spends its time on (cost model parts, workload's mean context)
        b = max(int(round(mean_batch)), 1)
        ctx = w.input_len + w.output_len / 2.0
        mem = (cost.weight_read_bytes(b) + cost.kv_read_bytes(b, b * ctx)) / cost.eff_bandwidth_bytes_s
        math_s = (b * (cost.flops_per_token + cost.lm_head_flops) + cost.attn_flops_per_pair * b * ctx) / cost.eff_decode_flops
        gbs = cost.eff_bandwidth_bytes_s / 1e9
        if cost.overlap == "sum":
            parts = (f"{_ms(mem * 1e3)} reading weights + KV at {gbs:,.1f} GB/s effective and {_ms(math_s * 1e3)} of "
                     f"math, one after the other")
        else:
            parts = ("set by the bytes they read (weights + KV at " f"{gbs:,.0f} GB/s effective)" if mem >= math_s
                     else f"set by their FLOPs ({_ms(math_s * 1e3)} of math vs {_ms(mem * 1e3)} of memory traffic)")
        return (f"decode steps of ~{mean_batch:.0f} sequence(s) take {_ms(dec_med)} each, {parts}; the server was busy "
                f"{busy * 100:.0f} % of the time" + also)

    q99 = summary.get("p99_queue_ms")
    t99 = summary.get("p99_ttft_ms")
    kept_up = q99 is None or t99 is None or q99 <= max(50.0, 0.1 * t99)
    ev["kept_up"] = kept_up

    def rate_reason() -> str:
        load = (f"{w.rate:g} req/s" if w.rate else (f"{w.concurrency} user(s)" if w.concurrency else "the requests sent"))
        if busy < BUSY_SATURATED:
            how = f"the server was idle {max(1 - busy, 0) * 100:.0f} % of the time and nothing waited for KV or slots"
        else:
            how = (f"requests were admitted without queueing (queue p99 {_ms(q99)}) while decode steps of "
                   f"~{mean_batch:.0f} sequence(s) took {_ms(dec_med)}")
        return f"the offered load ({load}) sets the throughput: {how}" + also

    def pick() -> tuple[str, str]:
        if focus & {"itl", "tpot", "e2el"}:
            if preempt:
                return "kv_pool", kv_reason()
            if prefill_tail or (focus & {"tpot", "e2el"} and (ev["busy_prefill_share"] or 0) > 0.5):
                return "prefill_pauses", prefill_reason()
            return "bandwidth", bw_reason()
        if "ttft" in focus:
            if share["kv_pool"] >= BLOCK_SHARE or preempt:
                return "kv_pool", kv_reason()
            if share["max_num_seqs"] >= BLOCK_SHARE:
                return ("max_num_seqs", seqs_reason()) if slots_bind else slots_full_on_device()
            if (ev["busy_prefill_share"] or 0) > 0.5:
                return "prefill_pauses", (f"prompts queue behind other prompts' prefill: {(ev['busy_prefill_share'] or 0) * 100:.0f} % "
                                          f"of the busy time is steps carrying prefill (TTFT p99 {_ms(summary.get('p99_ttft_ms'))})" + also)
            return "bandwidth", bw_reason()
        if share["kv_pool"] >= BLOCK_SHARE or preempt:
            return "kv_pool", kv_reason()
        if share["max_num_seqs"] >= BLOCK_SHARE:
            return ("max_num_seqs", seqs_reason()) if slots_bind else slots_full_on_device()
        if prefill_tail:
            return "prefill_pauses", prefill_reason()
        if w.rate and kept_up:
            return "arrival_rate", rate_reason()
        if busy >= BUSY_SATURATED:
            if (ev["busy_prefill_share"] or 0) > 0.5:
                return "prefill_pauses", (f"the server was busy {busy * 100:.0f} % of the time, "
                                          f"{(ev['busy_prefill_share'] or 0) * 100:.0f} % of it in steps carrying prefill chunks" + also)
            return "bandwidth", bw_reason()
        return "arrival_rate", rate_reason()

    lim, why = pick()
    return {"limited_by": lim, "limited_by_reason": why, "limits": ev}
