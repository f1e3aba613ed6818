"""A twin for every bench run: what ``plan`` predicts for the same workload from this server's own calibration.

Issue 36 item 4. After a bench run, the newest stored probe of the same target and model (else its newest
stored bench run; or ``--twin-from RUN_ID``) calibrates a cost model (:func:`phasescope.planning.calibrate.calibrate`),
the plan simulator runs the run's workload on it, and each measured percentile is set beside the predicted one:

* **The cost model** is empirical (:func:`empirical_base`): one "byte" per step read at the fitted rate (a
  decode step's time), one "FLOP" per prompt token at the fitted prefill rate, roofline ``max`` — so it needs no
  catalog entry for the model or the device and works on any server a probe measured (fakes included).
* **The scheduler** is plan's: policy ``llamacpp`` (mixed steps as two passes, a 2,048-token budget) when the
  calibration's records carry llama.cpp's timings, else ``vllm``; the slot count is the calibration run's
  ``server_build.total_slots`` (what the server had when it was probed), else this run's, else 256.
* **The band** comes from the calibration's own uncertainty and the simulator's: the 95 % interval of the
  median of measured ÷ modelled (TTFT and TPOT of the calibration's lone requests, order statistics or log-t,
  :func:`phasescope.measure.interval.median_interval`) sets the simulations at the low and high ends
  (``CostModel.rescaled``), and the simulator's own tolerance (:data:`SIM_REL`, the goal
  ``benchmarks/plan_validation.py`` holds it to on the real engine: 10 % at the median, 20 % at p99) widens
  them. Host noise (the rule ``compare`` follows, :mod:`phasescope.report.comparability`): when other work's share
  of the cores (``host.during.other_cpu_share``) differs between the bench run and the calibration by more than
  :data:`HOST_NOISE`, the band's top widens by 1 ÷ (1 − that difference), the most the extra work could slow the
  server's share of the cores (beyond :data:`HOST_MAX_DELTA` every metric reads "cannot tell"); and on a
  busy host (a ``host_busy`` or ``client_saturated`` warning in the bench run or the calibration) every metric's
  band top widens (``compare``'s ``BUSY_SIDE`` holds only TTFT and the p99s, since it compares two runs of one
  workload; the twin compares a bench at concurrency N with a probe of one stream, and 96–97 % busy hosts read an
  unchanged fake's E2E p50 and TPOT p50 above their bands: the N streams' client waited for a core more than the
  one stream's had) by 1 ÷ (1 − other work's share of the cores during the bench run) — above
  :data:`BUSY_MAX_SHARE`, or with the share unknown, they read "cannot tell". A server that queues at half
  its slots still reads ``above`` on a 60 % busy host (its TTFT several times the prediction); 15 % of noise
  does not.
* **The verdict** per metric: the measured interval (order statistics for the median, a bootstrap for p99)
  against the band — ``above`` / ``below`` only when the two do not overlap, ``within`` when the measured
  interval lies inside a band at most :data:`WITHIN_MAX_SPAN` times as high at its top as at its bottom (a
  wider band matches anything), and ``cannot tell`` when it reaches past the band's edge, the band is wider
  than that, either has no spread or the host rule applies. ``above`` on a latency is a shortfall and
  becomes a ``twin_shortfall`` warning with the sentence (``at concurrency 16 this server's TTFT p50 is 2.3×
  what its own probe predicts …``).

No calibration, no twin: one line says so (``twin.available`` false, ``why``), and nothing is predicted.
Load shapes the simulator does not replay from a bench summary (ramps, traces, conversations, several
targets) say so too.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from phasescope.errors import PhasescopeError
from phasescope.measure import derive
from phasescope.measure.interval import Interval, bootstrap_interval, median_interval
from phasescope.measure.records import RequestRecord
from phasescope.planning.calibrate import Calibration, _isolated, calibrate
from phasescope.planning.costmodel import CostModel
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload

#: the simulator's own tolerance by percentile (benchmarks/plan_validation.py's goal on the real engine)
SIM_REL = {50.0: 0.10, 99.0: 0.20}
#: (metric, percentile) the twin predicts
METRICS: tuple[tuple[str, float], ...] = (("ttft", 50.0), ("ttft", 99.0), ("tpot", 50.0), ("e2el", 50.0))
#: warnings that make a run measure the host as well as the server (the kinds report.comparability calls busy)
BUSY_KINDS = ("host_busy", "client_saturated")
#: other work's share of the cores may differ this much between two runs before it counts (report.comparability)
HOST_NOISE = 0.10
#: beyond this difference the host changed too much between calibration and run: every metric "cannot tell"
HOST_MAX_DELTA = 0.5
#: a band whose top is more than this many times its bottom matches anything: "cannot tell", not "within"
#: (quiet runs draw bands 1.2-1.5x wide; the engine beside a busy clean-clone run drew 6x)
WITHIN_MAX_SPAN = 3.0
#: on a busy host, every metric reads "cannot tell" beyond this share of the cores taken by other work
BUSY_MAX_SHARE = 0.8
#: the slot count when neither the calibration nor the bench run says one (vLLM's --max-num-seqs)
DEFAULT_SLOTS = 256
WITHIN, ABOVE, BELOW, CANNOT_TELL = "within", "above", "below", "cannot tell"
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}


def empirical_base() -> CostModel:
    """A cost model with unit constants for :func:`calibrate` to fit (module docstring): W = 1 "byte" read
    per step, 1 "FLOP" per token, no KV, attention or LM-head terms, roofline ``max``."""
    return CostModel(name="empirical", weight_bytes=1.0, kv_bytes_per_token=0.0, flops_per_token=1.0,
                     attn_flops_per_pair=0.0, lm_head_flops=0.0, bandwidth_bytes_s=1.0, peak_flops=1.0,
                     bw_eff=100.0, flops_eff=1e4, step_overhead_s=0.001, kv_pool_tokens=10_000_000, overlap="max",
                     source={"from": "empirical"})


def _ratio_interval(xs: Sequence[float]) -> Interval | None:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return median_interval(xs) if len(xs) >= 2 else None


def fit(records: Sequence[RequestRecord]) -> tuple[Calibration, Interval | None, Interval | None]:
    """The calibration of the records and the 95 % intervals of measured ÷ modelled TTFT and TPOT over its
    lone requests (the calibration's own uncertainty)."""
    recs = [r for r in records if r.ok]
    cal = calibrate(recs, empirical_base())
    c = cal.cost
    alone = [r for r, i in zip(recs, _isolated(recs)) if i] or recs
    pre, dec = [], []
    for r in alone:
        t, n = derive.ttft_s(r), r.prompt_tokens
        if t is not None and n:
            pre.append(t / (cal.api_overhead_s + c.prefill_time_s(int(n) - (r.cached_prompt_tokens or 0))))
        tp = derive.tpot_s(r)
        if tp is not None:
            dec.append(tp / c.decode_step_s(1, float(n or 0)))
    return cal, _ratio_interval(pre), _ratio_interval(dec)


def policy_of(records: Sequence[RequestRecord]) -> str:
    """``llamacpp`` when the calibration's records carry llama.cpp's own timings (``prompt_n`` and
    ``predicted_n``: one KV stream per slot, mixed steps as two passes), else ``vllm`` — plan's own rule
    for ``--calibrate-from`` (:func:`phasescope.planning.api.build_spec`)."""
    return "llamacpp" if any((r.server or {}).get("prompt_n") is not None and (r.server or {}).get("predicted_n")
                             is not None and r.api != "sim" for r in records) else "vllm"


def _workload(summary: dict[str, Any], records: Sequence[RequestRecord]) -> tuple[Workload | None, str]:
    """The bench run's workload for the simulator, and its words; (None, why) when it cannot be replayed."""
    ok = [r for r in records if r.ok]
    if not ok:
        return None, "no successful request to compare"
    if summary.get("conversation") or summary.get("trace") or summary.get("load_shape") not in ("poisson", "constant", None):
        return None, f"the twin does not replay a {summary.get('load_shape') or 'session'} load yet"
    if len({r.target for r in ok}) > 1:
        return None, "the twin models one server, not several targets"
    n_in = max(1, round(float(np.mean([r.prompt_tokens or 0 for r in ok]))))
    n_out = max(1, round(float(np.mean([r.output_tokens or 1 for r in ok]))))
    rate = summary.get("request_rate")
    rate_f = math.inf if rate in (None, "inf") else float(rate)
    cap = summary.get("max_concurrency")
    n = len(ok)
    if math.isinf(rate_f):
        c = int(cap) if cap else n
        return (Workload(concurrency=c, num_requests=n, input_len=n_in, output_len=n_out),
                f"at concurrency {c}")
    arrival = "constant" if summary.get("load_shape") == "constant" else (
        "poisson" if float(summary.get("burstiness") or 1.0) == 1.0 else "gamma")
    return (Workload(rate=rate_f, concurrency=int(cap) if cap else None, num_requests=n, arrival=arrival,
                     burstiness=float(summary.get("burstiness") or 1.0), input_len=n_in, output_len=n_out),
            f"at {rate_f:g} req/s")


def _sim_samples(cost: CostModel, w: Workload, sched: SchedulerConfig) -> dict[str, np.ndarray]:
    res = simulate(cost, w, sched)
    ok = res.ok
    ttft = res.ttft_s[ok]
    e2e = res.e2e_s[ok]
    out = res.output_tokens[ok]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2e}


def _measured(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    ok = [r for r in records if r.ok]
    return {"ttft": [x for x in (derive.ttft_s(r) for r in ok) if x is not None],
            "tpot": [x for x in (derive.tpot_s(r) for r in ok) if x is not None],
            "e2el": [x for x in (derive.e2e_s(r) for r in ok) if x is not None]}


def _measured_interval(xs: Sequence[float], p: float) -> Interval | None:
    if not xs:
        return None
    if p == 50.0:
        return median_interval(xs)
    return bootstrap_interval(xs, lambda a: float(np.percentile(a, p)))


def _busy(warnings: Any) -> bool:
    return any(isinstance(w, dict) and w.get("kind") in BUSY_KINDS for w in (warnings or []))


def _other_share(summary: dict[str, Any] | None) -> float | None:
    h = (summary or {}).get("host")
    d = h.get("during") if isinstance(h, dict) else None
    v = d.get("other_cpu_share") if isinstance(d, dict) else None
    return min(max(float(v), 0.0), 1.0) if isinstance(v, (int, float)) else None


def host_delta(summary: dict[str, Any], calib_summary: dict[str, Any] | None) -> float:
    """How much more of the cores other work took during the bench run than during the calibration (0 when
    unknown, or within :data:`HOST_NOISE`)."""
    a, b = _other_share(summary), _other_share(calib_summary)
    if a is None or b is None or a - b <= HOST_NOISE:
        return 0.0
    return a - b


def _slots(*summaries: dict[str, Any] | None) -> tuple[int, str]:
    for s, who in zip(summaries, ("the calibration run", "this server")):
        b = (s or {}).get("server_build") or {}
        if isinstance(b, dict) and b.get("total_slots"):
            return int(b["total_slots"]), f"{who}'s /props total_slots"
    return DEFAULT_SLOTS, "no slot count known: vLLM's default --max-num-seqs"


def twin_block(summary: dict[str, Any], records: Sequence[RequestRecord], calib_records: Sequence[RequestRecord], *,
               calib_id: str | None, calib_kind: str | None = None, calib_summary: dict[str, Any] | None = None,
               calib_warnings: Any = None) -> tuple[dict[str, Any], list[Any]]:
    """The ``twin`` block of a bench summary and its ``twin_shortfall`` warnings (module docstring)."""
    from phasescope.measure.warnings import warn

    w, where = _workload(summary, records)
    if w is None:
        return {"available": False, "why": where, "calibration_run_id": calib_id}, []
    try:
        cal, rp, rd = fit(calib_records)
    except PhasescopeError as exc:
        return {"available": False, "why": f"calibration {calib_id} does not fit: {exc}", "calibration_run_id": calib_id}, []
    slots, slots_src = _slots(calib_summary, summary)
    cost = cal.cost
    policy = policy_of(calib_records)
    if policy == "llamacpp":  # one KV stream per slot: a mixed step runs as two passes (as plan.api.build_spec)
        cost = cost.with_(split_mixed_steps=True)
    budget = 2048 if policy == "llamacpp" else max(8192, slots)
    sched = SchedulerConfig(max_num_seqs=slots, max_num_batched_tokens=budget, policy=policy,
                            api_overhead_s=cal.api_overhead_s)
    mid = (rp.value if rp else 1.0, rd.value if rd else 1.0)
    lo = (rp.low if rp else mid[0], rd.low if rd else mid[1])
    hi = (rp.high if rp else mid[0], rd.high if rd else mid[1])
    sims = [_sim_samples(cost.rescaled(prefill=a, decode=b), w, sched) for a, b in (mid, lo, hi)]
    meas = _measured(records)
    busy = _busy(summary.get("warnings")) or _busy(calib_warnings)
    delta = host_delta(summary, calib_summary)
    share = _other_share(summary)
    who = "probe" if calib_kind == "probe" else f"{calib_kind or 'calibration'} run"
    rows: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for metric, p in METRICS:
        preds = [float(np.percentile(s[metric], p)) if len(s[metric]) else math.nan for s in sims]
        m_iv = _measured_interval(meas[metric], p)
        key = f"{metric}_p{p:g}"
        if any(math.isnan(x) for x in preds) or m_iv is None:
            continue
        rel = SIM_REL.get(p, SIM_REL[99.0])
        top = max(preds) * (1 + rel) / (1 - min(delta, HOST_MAX_DELTA))
        if busy and share is not None and share <= BUSY_MAX_SHARE:  # the client and the server wait for a core
            top /= 1 - share
        band = Interval(preds[0], min(preds) * (1 - rel), top, len(calib_records), "twin")
        inside = band.low <= m_iv.low and m_iv.high <= band.high
        if delta > HOST_MAX_DELTA:
            verdict, why = CANNOT_TELL, (f"other work took {delta * 100:.0f} % more of the cores than during the "
                                         "calibration: the host, not the server, changed")
        elif busy and (share is None or share > BUSY_MAX_SHARE):
            verdict, why = CANNOT_TELL, ("a busy host (host_busy / client_saturated"
                                         + ("" if share is None else f", other work {share * 100:.0f} % of the cores")
                                         + "): at this concurrency the client's timing measures the host")
        elif not m_iv.known:
            verdict, why = CANNOT_TELL, "one sample: no spread"
        elif inside and band.high > WITHIN_MAX_SPAN * band.low:
            verdict, why = CANNOT_TELL, (f"the band is too wide to tell a match from a shortfall ({band.low * 1e3:.1f}–"
                                         f"{band.high * 1e3:.1f} ms, {band.high / band.low:.1f}× top to bottom: a noisy "
                                         "calibration or a busy host)")
        elif inside:
            verdict, why = WITHIN, None
        elif m_iv.overlaps(band):  # it reaches past the band: neither a match nor a shortfall is shown
            verdict, why = CANNOT_TELL, "the measured interval reaches past the band's edge"
        else:
            verdict, why = (ABOVE if m_iv.low > band.high else BELOW), None
        row = {"metric": key, "predicted_ms": band.value * 1e3, "band_ms": [band.low * 1e3, band.high * 1e3],
               "measured_ms": m_iv.value * 1e3, "measured_ci_ms": [m_iv.low * 1e3, m_iv.high * 1e3],
               "verdict": verdict}
        if why:
            row["why"] = why
        rows.append(row)
        if verdict == ABOVE:
            x = m_iv.value / band.value if band.value > 0 else math.inf
            pending.append((
                {"where": where, "metric": _WORDS[metric], "p": p, "x": x, "who": who, "calib_id": calib_id,
                 "predicted_ms": band.value * 1e3, "low_ms": band.low * 1e3, "high_ms": band.high * 1e3,
                 "m_low_ms": m_iv.low * 1e3, "m_high_ms": m_iv.high * 1e3, "slots": slots},
                {"metric": key, "ratio": x, "calibration_run_id": calib_id, "slots_assumed": slots}))
    verdicts = {r["metric"]: r["verdict"] for r in rows}
    # a slow decode is the engine; a slow start with a normal decode is queueing
    says = "decode" if verdicts.get("tpot_p50") == ABOVE else "queue"
    warns = [warn("twin_shortfall", says, ev, **values) for values, ev in pending]
    block = {
        "available": True, "calibration_run_id": calib_id, "calibration_kind": calib_kind, "where": where,
        "policy": policy, "slots_assumed": slots, "slots_source": slots_src, "api_overhead_ms": cal.api_overhead_s * 1e3,
        "calibration_ratio_ci": {"prefill": None if rp is None else rp.to_json(), "decode": None if rd is None else rd.to_json()},
        "host_busy": busy, "host_other_share": share, "host_share_delta": delta, "metrics": rows,
        # a shortfall is flagged; a latency below its band (faster than this server's own calibration says)
        # is shown in ``metrics`` but is no finding: the simulator's bias (it batches prompts sent together)
        # put a quiet host's unchanged fake 'below' on TTFT p99
        "flagged": [r["metric"] for r in rows if r["verdict"] == ABOVE],
    }
    return block, warns


def find_calibration(store: Any, *, target: str | None, model: str | None, exclude: str | None) -> Any:
    """The newest stored probe of ``target`` + ``model`` (else the newest bench run of them), not ``exclude``."""
    for kind in ("probe", "bench"):
        for info in store.list_runs(kind=kind, target=target or None, model=model or None, limit=20):
            if info.id != exclude and info.status == "complete":
                return info
    return None


def bench_twin(twin_from: str | None = None, *, say: Callable[[str], None] | None = None
               ) -> Callable[[dict[str, Any], Sequence[RequestRecord]], None]:
    """The hook ``bench`` calls with its summary and records (``BenchConfig.twin``): adds ``summary["twin"]``
    and any ``twin_shortfall`` warnings. Never raises: a twin that cannot be made says why in the block."""

    def hook(summary: dict[str, Any], records: Sequence[RequestRecord]) -> None:
        from phasescope.measure.warnings import to_json

        try:
            from phasescope.store import open_store

            store = open_store()
            if twin_from:
                info = store.get(twin_from)
            else:
                info = find_calibration(store, target=summary.get("target"), model=summary.get("model_id"),
                                        exclude=summary.get("run_id"))
            if info is None:
                summary["twin"] = {"available": False, "calibration_run_id": None,
                                   "why": "no stored probe or bench run of this target and model to calibrate from "
                                          "(run `phasescope probe` first, or give --twin-from RUN_ID)"}
                return
            recs = [r for r in store.load_records(info.id) if not (r.tags or {}).get("warmup")]
            block, warns = twin_block(summary, records, recs, calib_id=info.id, calib_kind=info.kind,
                                      calib_summary=info.summary if isinstance(info.summary, dict) else None,
                                      calib_warnings=info.warnings)
        except PhasescopeError as exc:
            summary["twin"] = {"available": False, "calibration_run_id": twin_from, "why": str(exc)}
            return
        except Exception as exc:  # noqa: BLE001 - the twin is a side view: it never costs the run its summary
            summary["twin"] = {"available": False, "calibration_run_id": twin_from,
                               "why": f"the twin failed: {type(exc).__name__}: {exc}"}
            return
        summary["twin"] = block
        if warns:
            summary["warnings"] = to_json(list(summary.get("warnings") or []) + warns)

    return hook


def console_lines(twin: dict[str, Any] | None) -> list[str]:
    """bench's console lines for its ``twin`` block (none when the run has no block)."""
    if not isinstance(twin, dict):
        return []
    if not twin.get("available"):
        return [f"Twin: none — {twin.get('why')}"]
    head = (f"Twin ({twin.get('calibration_kind') or 'calibration'} {twin.get('calibration_run_id')}, "
            f"{twin.get('slots_assumed')} slots assumed): predicted band vs measured 95 % interval")
    out = [head]
    for r in twin.get("metrics") or []:
        b, m = r["band_ms"], r["measured_ci_ms"]
        out.append(f"  {r['metric']:<10} predicted {r['predicted_ms']:9.1f} ms [{b[0]:.1f}–{b[1]:.1f}]   measured "
                   f"{r['measured_ms']:9.1f} ms [{m[0]:.1f}–{m[1]:.1f}]   {r['verdict']}")
    return out
