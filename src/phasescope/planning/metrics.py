"""Bench-style metrics of a simulated run, and RequestRecords so stored runs look like measured ones.

Summary keys and definitions match ``vllm bench serve`` (``calculate_metrics``):

* ``duration`` — first request sent → last request finished (s).
* ``request_throughput`` = completed / duration; ``output_throughput`` = Σ output tokens / duration;
  ``total_token_throughput`` = (Σ input + Σ output) / duration.
* ``ttft`` = send → first output token; ``tpot`` = (e2e − ttft) / (out − 1) per request with out > 1;
  ``itl`` = every gap between consecutive output tokens, pooled over requests; ``e2el`` = send → last
  token. Each as ``mean_*_ms``, ``median_*_ms``, ``std_*_ms``, ``p50/p90/p95/p99_*_ms``.
* ``max_itl_ms`` — the longest inter-token gap of any request (the stall a user feels; p99 hides it).
* ``request_goodput`` = requests meeting every per-request SLO among ``ttft``, ``tpot``, ``e2el``
  (vLLM ``--goodput``) ÷ duration. An ``itl`` SLO has no per-request meaning in vLLM; it is checked
  on the pooled percentile in ``slo`` (as the question "p99 ITL under 100 ms" means).

Pooled ITL is exact without materialising it: in a step every continuing decode gets its token at
the step's end, so the sample is each step's duration repeated by its number of continuing decodes
(weighted percentiles with numpy's default linear interpolation, identical to ``np.percentile`` on
the expanded list), plus the explicit gaps of preempted / handed-off requests.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from phasescope.load.summary import parse_ms_pairs
from phasescope.measure.records import Event, RequestRecord
from phasescope.planning.sim import SimResult

PERCENTILES = (50, 90, 95, 99)
SLO_KEYS = ("ttft", "tpot", "itl", "e2el")


def parse_slo(text: str | None) -> dict[str, float]:
    """``"ttft:500,itl:50"`` → ``{"ttft": 500.0, "itl": 50.0}`` (milliseconds; ``e2e`` means ``e2el``)."""
    return parse_ms_pairs(text, allowed=SLO_KEYS, usage="--slo takes NAME:MS, e.g. ttft:500,itl:50 (NAME: "
                          + ", ".join(SLO_KEYS) + ")", aliases={"e2e": "e2el"})


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """``np.percentile(np.repeat(values, weights), q)`` (linear) without building the repeat."""
    m = weights > 0
    v, w = values[m], weights[m].astype(np.int64)
    if v.size == 0:
        return None
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    n = int(cum[-1])
    h = (n - 1) * q / 100.0
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    # index i of the expanded array lives in the first bucket with cum > i
    vlo = v[int(np.searchsorted(cum, lo, side="right"))]
    vhi = v[int(np.searchsorted(cum, hi, side="right"))]
    return float(vlo + (h - lo) * (vhi - vlo))


def _stats_ms(values: np.ndarray, weights: np.ndarray | None, name: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    if weights is None:
        a = values[np.isfinite(values)]
        w = np.ones(a.size, dtype=np.int64)
    else:
        keep = np.isfinite(values) & (weights > 0)
        a, w = values[keep], weights[keep].astype(np.int64)
    n = int(w.sum())
    if n == 0:
        for k in ("mean", "median", "std"):
            out[f"{k}_{name}_ms"] = None
        for q in PERCENTILES:
            out[f"p{q}_{name}_ms"] = None
        return out
    mean = float(np.sum(a * w) / n)
    var = float(np.sum(w * (a - mean) ** 2) / n)
    out[f"mean_{name}_ms"] = mean * 1e3
    out[f"median_{name}_ms"] = (weighted_percentile(a, w, 50) or 0.0) * 1e3
    out[f"std_{name}_ms"] = math.sqrt(max(var, 0.0)) * 1e3
    for q in PERCENTILES:
        out[f"p{q}_{name}_ms"] = (weighted_percentile(a, w, q) or 0.0) * 1e3
    return out


def itl_sample(res: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(values s, weights) of the pooled ITL distribution."""
    vals = [np.asarray(w.step_dur, dtype=float) for w in res.workers]
    wts = [np.asarray(w.itl_weight, dtype=np.int64) for w in res.workers]
    if res.extra_itl:
        vals.append(np.asarray(res.extra_itl, dtype=float))
        wts.append(np.ones(len(res.extra_itl), dtype=np.int64))
    if not vals:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(vals), np.concatenate(wts)


def tpot_s(res: SimResult) -> np.ndarray:
    out = res.output_tokens.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (res.e2e_s - res.ttft_s) / (out - 1)
    t[(out < 2) | ~res.ok] = np.nan
    return t


def timeseries(res: SimResult, points: int = 120) -> dict[str, list[float]]:
    """Queue length, running sequences and KV usage sampled at ``points`` even times (sum over
    replicas; KV usage is used ÷ capacity over the pool(s), vLLM's ``kv_cache_usage_perc``)."""
    ok = np.isfinite(res.t_last)
    if not ok.any():
        return {"t_s": [], "waiting": [], "running": [], "kv_usage": []}
    t0 = float(np.nanmin(res.t_send))
    t1 = float(np.nanmax(res.t_last[ok]))
    ts = np.linspace(t0, t1, max(points, 2))
    waiting = np.zeros(ts.size)
    running = np.zeros(ts.size)
    kv = np.zeros(ts.size)
    cap = 0.0
    for w in res.workers:
        cap += max(w.kv_cap, 0)
        if not w.step_end:
            continue
        se = np.asarray(w.step_end)
        idx = np.searchsorted(se, ts, side="right") - 1
        valid = idx >= 0
        wi = np.asarray(w.ts_waiting)
        ru = np.asarray(w.ts_running)
        kvw = np.asarray(w.ts_kv, dtype=float)
        waiting[valid] += wi[idx[valid]]
        running[valid] += ru[idx[valid]]
        kv[valid] += kvw[idx[valid]]
    usage = kv / cap if cap > 0 else np.full(ts.size, np.nan)
    return {
        "t_s": [round(float(x - t0), 6) for x in ts],
        "waiting": [float(x) for x in waiting],
        "running": [float(x) for x in running],
        "kv_usage": [float(x) for x in usage],
    }


def peak_in_flight(t_send: np.ndarray, t_end: np.ndarray) -> int:
    """Most requests in flight at once: each from its send to its last token (or failure). A request
    that ends at the instant another is sent does not overlap it (a user's next turn sent as the reply
    completes, with no think time)."""
    m = np.isfinite(t_send) & np.isfinite(t_end)
    if not m.any():
        return 0
    k = int(m.sum())
    ev = np.concatenate([np.stack([t_end[m], np.zeros(k)], 1), np.stack([t_send[m], np.ones(k)], 1)])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # by time, ends (0) before sends (1) at one instant
    level = np.cumsum(np.where(ev[:, 1] > 0, 1, -1))
    return int(level.max())


def session_in_flight(res: SimResult) -> dict[str, Any]:
    """Conversations: the most turns of any one session in flight at once (1 in a closed loop)."""
    r = res.sim.reqs
    if r.session is None or not res.n:
        return {}
    sess = r.session[: res.n]
    worst = 0
    for u in np.unique(sess[sess >= 0]):
        m = sess == u
        worst = max(worst, peak_in_flight(res.t_send[m], res.t_last[m]))
    return {"max_turns_in_flight_per_session": worst}


def summarize_sim(res: SimResult, slo: dict[str, float] | None = None, slo_percentile: float = 99.0) -> dict[str, Any]:
    """The vllm-bench-serve summary of a simulated run, plus queue/KV/preemption facts and SLO check."""
    slo = slo or {}
    ok = res.ok
    completed = int(ok.sum())
    t0 = float(np.nanmin(res.t_send)) if res.n else 0.0
    t_end = float(np.nanmax(res.t_last[ok])) if completed else t0
    duration = max(t_end - t0, 0.0)
    tot_in = int(res.input_tokens[ok].sum())
    tot_out = int(res.output_tokens[ok].sum())
    tp = tpot_s(res)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": int(res.n - completed),
        "total_input_tokens": tot_in,
        "total_output_tokens": tot_out,
        "request_throughput": completed / duration if duration > 0 else None,
        "output_throughput": tot_out / duration if duration > 0 else None,
        "total_token_throughput": (tot_in + tot_out) / duration if duration > 0 else None,
    }
    good = None
    per_req = {k: v for k, v in slo.items() if k in ("ttft", "tpot", "e2el")}
    if per_req:
        m = ok.copy()
        if "ttft" in per_req:
            m &= res.ttft_s * 1e3 <= per_req["ttft"]
        if "tpot" in per_req:
            m &= np.nan_to_num(tp, nan=0.0) * 1e3 <= per_req["tpot"]
        if "e2el" in per_req:
            m &= res.e2e_s * 1e3 <= per_req["e2el"]
        good = int(m.sum())
    out["request_goodput"] = (good / duration if duration > 0 else None) if good is not None else None
    out.update(_stats_ms(res.ttft_s[ok], None, "ttft"))
    out.update(_stats_ms(tp[ok], None, "tpot"))
    iv, iw = itl_sample(res)
    out.update(_stats_ms(iv, iw, "itl"))
    # the longest pause a user saw (p99 hides it): the largest inter-token gap of any request
    live = iw > 0
    out["max_itl_ms"] = float(iv[live].max() * 1e3) if live.any() else None
    out.update(_stats_ms(res.e2e_s[ok], None, "e2el"))
    # beyond vLLM: what the server went through
    steps = sum(len(w.step_end) for w in res.workers)
    busy = sum(w.busy_s for w in res.workers)
    queue_s = res.t_admit - res.t_visible
    wait = np.concatenate([np.asarray(w.ts_waiting, dtype=float) for w in res.workers]) if steps else np.zeros(0)
    kvu = []
    for w in res.workers:
        if w.kv_cap > 0 and w.ts_kv:
            kvu.append(np.asarray(w.ts_kv, dtype=float) / w.kv_cap)
    kvu_a = np.concatenate(kvu) if kvu else np.zeros(0)
    prefix_req = res.sim.reqs.prefix_tokens[: res.n] > 0 if res.n else np.zeros(0, dtype=bool)
    out.update(
        {
            "steps": steps,
            "busy_fraction": busy / (duration * len(res.workers)) if duration > 0 and res.workers else None,
            "mean_queue_ms": float(np.nanmean(queue_s[ok]) * 1e3) if completed else None,
            "p99_queue_ms": float(np.nanpercentile(queue_s[ok], 99) * 1e3) if completed else None,
            "max_waiting": int(wait.max()) if wait.size else 0,
            "mean_waiting": float(wait.mean()) if wait.size else 0.0,
            "max_kv_usage": float(kvu_a.max()) if kvu_a.size else None,
            "mean_kv_usage": float(kvu_a.mean()) if kvu_a.size else None,
            "preemptions": int(res.preemptions.sum()),
            "prefix_hit_requests": int((res.cached_tokens > 0).sum()),
            "prefix_requests": int(prefix_req.sum()),
            "cached_prompt_tokens": int(res.cached_tokens[ok].sum()),
            "peak_in_flight": peak_in_flight(res.t_send, res.t_last),
        }
    )
    out.update(session_in_flight(res))
    if slo:
        checks: dict[str, Any] = {}
        met = True
        pname = f"p{int(slo_percentile)}" if float(slo_percentile).is_integer() else f"p{slo_percentile}"
        for k, limit in slo.items():
            if k == "itl":
                val = weighted_percentile(iv, iw, slo_percentile)
            elif k == "tpot":
                a = tp[ok]
                a = a[np.isfinite(a)]
                val = float(np.percentile(a, slo_percentile)) if a.size else None
            else:
                a = (res.ttft_s if k == "ttft" else res.e2e_s)[ok]
                val = float(np.percentile(a, slo_percentile)) if a.size else None
            v_ms = None if val is None else val * 1e3
            this = v_ms is not None and v_ms <= limit and completed == res.n
            met &= this
            checks[k] = {"limit_ms": limit, f"{pname}_ms": v_ms, "met": this}
        out["slo"] = {"percentile": slo_percentile, "checks": checks, "met": met, "good_requests": good}
    return out


def to_records(
    res: SimResult,
    *,
    model: str | None,
    target: str = "sim://plan",
    wall_base_ns: int = 0,
    limit: int | None = None,
    tags: dict[str, Any] | None = None,
) -> Iterator[RequestRecord]:
    """One :class:`RequestRecord` per simulated request (the first ``limit``), timestamps in ns of
    the simulation clock (t = 0 at the first send): ``t_start_ns`` = send, one ``content`` event of
    one token per output token, ``t_done_ns`` = last token. Counts come from the workload
    (source ``requested``); ``server`` holds the simulated phase split like llama.cpp ``timings``:
    ``prefill_s`` admission → first token, ``decode_s`` first → last token, ``queue_s`` waiting.
    Conversations tag each record with its ``session`` and ``turn`` (1-based, as bench's turns)."""
    n = res.n if limit is None else min(res.n, limit)
    seqs = res.sim.seqs
    sess, turn = res.sim.reqs.session, res.sim.reqs.turn
    for i in range(n):
        s = seqs[i]
        ok = s.failed is None
        ts = res.token_times(i) if ok else []
        t_start = int(round(s.t_send * 1e9))
        conv = {"session": int(sess[i]), "turn": int(turn[i]) + 1} if sess is not None and turn is not None else {}
        rec = RequestRecord(
            id=f"sim-{i:06d}",
            api="sim",
            target=target,
            model=model,
            stream=True,
            prompt_tokens_requested=int(s.prompt),
            max_tokens=int(s.out),
            tags={"sim": True, **(tags or {}), "preemptions": int(s.preemptions), "prefix_hit": bool(s.cached > 0),
                  **conv},
            wall_start_ns=wall_base_ns + t_start,
            t_scheduled_ns=None if math.isnan(res.sim.reqs.arrival_s[i]) else int(round(float(res.sim.reqs.arrival_s[i]) * 1e9)),
            t_start_ns=t_start,
            t_conn_ready_ns=t_start,
            t_headers_ns=t_start,
            events=[Event(int(round(t * 1e9)), "content", 1, 0) for t in ts],
            t_done_ns=int(round((ts[-1] if ts else s.t_last) * 1e9)),
            prompt_tokens=int(s.prompt),
            prompt_tokens_source="requested",
            output_tokens=len(ts) if ok else 0,
            output_tokens_source="requested",
            cached_prompt_tokens=int(s.cached),
            server={
                "prefill_s": (ts[0] - s.t_admit) if ts else None,
                "decode_s": (ts[-1] - ts[0]) if len(ts) > 1 else None,
                "prompt_n": int(s.prompt - s.cached),
                "predicted_n": len(ts),
                "cache_n": int(s.cached),
                "queue_s": (s.t_admit - s.t_visible) if not math.isnan(s.t_admit) else None,
            },
            finish_reason="length" if ok else None,
            stopped_early=False if ok else None,
            ok=ok,
            error_kind=None if ok else "sim_rejected",
            error_message=s.failed,
            worker=f"replica-{s.worker.idx}" if s.worker is not None else None,
        )
        yield rec


def compact(summary: dict[str, Any], keys: Sequence[str] = ()) -> dict[str, Any]:
    """A few headline numbers of a summary (for tables)."""
    ks = keys or (
        "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
        "median_itl_ms", "p99_itl_ms", "max_itl_ms", "median_tpot_ms", "p99_e2el_ms",
    )
    return {k: summary.get(k) for k in ks}
