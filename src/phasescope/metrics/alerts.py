"""Alerts in words from a history of window summaries (newest last).

Rules (thresholds are constants below; each alert says what it means and what to change):

* **capacity** — requests waiting (in ≥ 2 consecutive samples) while KV usage ≥ 95 %: the KV pool is
  full, so the scheduler cannot admit more sequences (the article's "waiting grows with KV near 1").
* **queue** — requests waiting while KV usage is below 95 % or unknown: the concurrency cap (vLLM
  ``--max-num-seqs``, llama.cpp ``--parallel`` slots, TGI ``--max-batch-size``) is the limit.
* **prefill** — TTFT p99 rose ≥ 50 % over the history while ITL p50 moved < 20 %: the time is spent
  before the first token (queueing or long prompts), decode is fine.
* **interference** — ITL p99 ≥ 3 × ITL p50 (and ≥ 20 ms): some decode steps stall, typically behind
  prefill chunks of new requests sharing the batch.
* **preemption** — preemptions in the window: the KV cache overflowed and running requests were
  evicted and will be recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

KV_FULL = 0.95
TTFT_RISE = 1.5
ITL_FLAT = 0.2
ITL_SPIKE_RATIO = 3.0
ITL_SPIKE_MIN_S = 0.020


@dataclass(frozen=True)
class Alert:
    code: str  # capacity | queue | prefill | interference | preemption
    level: str  # "warn" | "crit"
    message: str


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def evaluate(history: Sequence[dict[str, Any]], engine: str | None = None) -> list[Alert]:
    """Alerts for the newest summary in ``history`` (a list of :meth:`phasescope.metrics.timeline.Timeline.summary` dicts)."""
    if not history:
        return []
    cur = history[-1]
    out: list[Alert] = []
    waiting = _num(cur.get("waiting")) or 0.0
    prev_waiting = _num(history[-2].get("waiting")) if len(history) >= 2 else waiting
    kv = _num(cur.get("kv_usage"))
    if waiting > 0 and (prev_waiting or 0) > 0:
        if kv is not None and kv >= KV_FULL:
            out.append(
                Alert(
                    "capacity",
                    "crit",
                    f"queue forming ({waiting:g} waiting) with KV cache {kv:.0%} full: capacity-bound. "
                    "Give the KV pool more memory (vLLM --gpu-memory-utilization, --kv-cache-dtype fp8, "
                    "shorter --max-model-len), or add replicas; more load will only lengthen the queue.",
                )
            )
        else:
            knob = {
                "llamacpp": "--parallel (slots)",
                "tgi": "--max-batch-size / --max-batch-total-tokens",
                "sglang": "--max-running-requests",
            }.get(engine or "", "--max-num-seqs")
            kv_txt = f"KV {kv:.0%}" if kv is not None else "KV usage not exported"
            out.append(
                Alert(
                    "queue",
                    "warn",
                    f"queue forming ({waiting:g} waiting, {kv_txt}): the concurrency limit is reached before "
                    f"the KV pool; raise {knob} if latency allows.",
                )
            )
    # TTFT p99 rising while ITL flat (compare with the oldest summary that has both)
    t_now, i_now = _num(cur.get("ttft_p99_s")), _num(cur.get("itl_p50_s"))
    if t_now is not None and i_now is not None:
        for old in history[:-1]:
            t_old, i_old = _num(old.get("ttft_p99_s")), _num(old.get("itl_p50_s"))
            if t_old is None or i_old is None or t_old <= 0 or i_old <= 0:
                continue
            if t_now >= TTFT_RISE * t_old and abs(i_now - i_old) / i_old < ITL_FLAT:
                out.append(
                    Alert(
                        "prefill",
                        "warn",
                        f"TTFT p99 rose {t_old * 1e3:.0f} → {t_now * 1e3:.0f} ms while ITL stayed flat: the time goes "
                        "to queueing/prefill, not decode. Check waiting requests and prompt lengths; enable prefix "
                        "caching, chunked prefill, or add prefill capacity.",
                    )
                )
            break
    p50, p99 = _num(cur.get("itl_p50_s")), _num(cur.get("itl_p99_s"))
    if p50 and p99 is not None and p99 >= ITL_SPIKE_RATIO * p50 and p99 >= ITL_SPIKE_MIN_S:
        out.append(
            Alert(
                "interference",
                "warn",
                f"ITL p99 {p99 * 1e3:.0f} ms is {p99 / p50:.1f}× p50: decode steps stall behind prefills of new "
                "requests (prefill interference). Lower the per-step token budget (vLLM --max-num-batched-tokens, "
                "chunked prefill) or separate prefill from decode.",
            )
        )
    pre = _num(cur.get("preemptions"))
    if pre and pre > 0:
        out.append(
            Alert(
                "preemption",
                "crit",
                f"{pre:g} preemptions in the window: the KV cache overflowed and running requests were evicted "
                "(their work is recomputed). Lower --max-num-seqs or give the KV pool more memory.",
            )
        )
    return out
