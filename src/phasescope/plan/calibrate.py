"""Fit the cost model to measured requests, so a simulation of *your* server starts from *your* numbers.

Input: RequestRecords of one server (probe / explain / bench runs, or a records.jsonl). Only requests
that ran alone (their [start, done] interval overlaps no other record's) are used for the fit, so
queueing and batching do not leak into the per-step constants:

* prefill points: (computed prompt tokens n, prefill seconds) — server timings (llama.cpp ``prompt_ms``,
  Ollama ``prompt_eval_duration``) when present, else client TTFT minus the API overhead;
* decode points: (context s, seconds per step) — server ``decode_s / (predicted_n − 1)`` when present,
  else TPOT;
* API overhead: median(client TTFT − server prefill), clipped at 0 (HTTP, JSON, tokenization).

Fit, with x_p(n) = n·F_tok + F_attn·n(n+1)/2 + F_head (prefill FLOPs) and x_d(s) = F_tok + F_head + F_attn·s:

* ``overlap = "sum"`` (CPUs): joint least squares (relative errors, so milliseconds of decode weigh as
  much as seconds of prefill) of ``prefill(n) = T0 + x_p(n)/F_eff`` and
  ``step(s) = T0 + KV_tok·s/BW_eff + x_d(s)/F_eff`` for (T0, 1/F_eff); then T0 = overhead + W/BW_eff
  with the overhead prior kept (at most half of T0).
* ``overlap = "max"`` (GPUs): prefill points give a line y = overhead + x_p/F_eff; decode points give
  BW_eff = (W + KV_tok·s) / (step − overhead) (median).

Efficiencies are reported against the device's catalog peaks (η = fitted ÷ peak), so the same profile
can be re-scaled for another device of the same kind. Missing phases keep the prior values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from phasescope.errors import InputError
from phasescope.measure import derive
from phasescope.measure.records import RequestRecord, read_records
from phasescope.plan.costmodel import CostModel, chunk_pairs


@dataclass
class Calibration:
    """The fitted model and how it was obtained."""

    cost: CostModel
    api_overhead_s: float
    n_prefill_points: int
    n_decode_points: int
    fitted: dict[str, Any] = field(default_factory=dict)
    residuals: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "api_overhead_s": self.api_overhead_s,
            "n_prefill_points": self.n_prefill_points,
            "n_decode_points": self.n_decode_points,
            "fitted": self.fitted,
            "residuals": self.residuals,
        }


def load_calibration_records(ref: str) -> list[RequestRecord]:
    """Records from a ``records.jsonl`` path or a run id (``latest``, a prefix) in the run store."""
    p = Path(ref).expanduser()
    if p.is_file():
        recs = read_records(p)
    else:
        if ref.endswith((".jsonl", ".json")) or "/" in ref:
            raise InputError(f"file not found: {ref}")
        try:
            from phasescope.report.store import open_store
        except ImportError:  # pragma: no cover - the store ships with phasescope
            raise InputError(f"{ref!r} is not a file and the run store is unavailable") from None
        store = open_store()
        info = store.get(ref)
        recs = store.load_records(info.id)
    ok = [r for r in recs if r.ok and not (r.tags or {}).get("warmup")]
    if not ok:
        raise InputError(f"no successful requests to calibrate from in {ref}")
    return ok


def _isolated(recs: Sequence[RequestRecord]) -> list[bool]:
    """True for records whose [start, done] overlaps no other record (same clock assumed)."""
    iv = []
    for r in recs:
        end = r.t_done_ns if r.t_done_ns is not None else (derive.last_token_ns(r) or r.t_start_ns)
        iv.append((r.t_start_ns, end))
    order = sorted(range(len(iv)), key=lambda i: iv[i][0])
    out = [True] * len(iv)
    max_end = -math.inf
    max_i = -1
    for i in order:
        s, e = iv[i]
        if s < max_end:
            out[i] = False
            out[max_i] = False
        if e > max_end:
            max_end, max_i = e, i
    return out


def _prefill_point(r: RequestRecord, api_overhead_s: float) -> tuple[float, float] | None:
    s = r.server or {}
    if s.get("prefill_s") and s.get("prompt_n"):
        return float(s["prompt_n"]), float(s["prefill_s"])
    t = derive.ttft_s(r)
    n = r.prompt_tokens
    if t is None or not n:
        return None
    return float(n - (r.cached_prompt_tokens or 0)), max(t - api_overhead_s, 1e-6)


def _decode_point(r: RequestRecord) -> tuple[float, float] | None:
    s = r.server or {}
    n_out = s.get("predicted_n") or r.output_tokens
    ctx = float((r.prompt_tokens or s.get("prompt_n") or 0) + (n_out or 0) / 2.0)
    if s.get("decode_s") and s.get("predicted_n") and int(s["predicted_n"]) > 1:
        return ctx, float(s["decode_s"]) / (int(s["predicted_n"]) - 1)
    t = derive.tpot_s(r)
    if t is None:
        return None
    return ctx, t


def calibrate(records: Sequence[RequestRecord], base: CostModel) -> Calibration:
    """Fit ``base``'s efficiencies and overhead to the records (see module docstring)."""
    recs = [r for r in records if r.ok]
    if not recs:
        raise InputError("no successful requests to calibrate from")
    iso = _isolated(recs)
    alone = [r for r, i in zip(recs, iso) if i]
    if not alone:  # a pure load run: use the fastest quarter as the least-disturbed requests
        ttfts = sorted((derive.ttft_s(r) or math.inf, k) for k, r in enumerate(recs))
        alone = [recs[k] for _, k in ttfts[: max(1, len(ttfts) // 4)]]
    gaps = []
    for r in alone:
        s = r.server or {}
        t = derive.ttft_s(r)
        if t is not None and s.get("prefill_s"):
            gaps.append(t - float(s["prefill_s"]))
    api = max(float(np.median(gaps)), 0.0) if gaps else 0.0
    pre = [p for p in (_prefill_point(r, api) for r in alone) if p is not None]
    dec = [p for p in (_decode_point(r) for r in alone) if p is not None]
    c = base
    F_tok, F_att, F_head = c.flops_per_token, c.attn_flops_per_pair, c.lm_head_flops

    def x_p(n: float) -> float:
        return n * F_tok + F_att * chunk_pairs(0, int(n)) + F_head

    def x_d(s: float) -> float:
        return F_tok + F_head + F_att * s

    bw_eff_abs = c.eff_bandwidth_bytes_s
    f_eff_abs = c.eff_flops
    ov = c.step_overhead_s
    fitted: dict[str, Any] = {"overlap": c.overlap}
    if c.overlap == "sum":
        rows, ys = [], []
        for n, y in pre:
            rows.append([1.0, x_p(n)])
            ys.append(y - c.kv_read_bytes(1, n) / bw_eff_abs)
        for s_, y in dec:
            rows.append([1.0, x_d(s_)])
            ys.append(y - c.kv_read_bytes(1, s_) / bw_eff_abs)
        if rows:
            # relative errors: a decode step (ms) must weigh as much as a prefill (s)
            wts = 1.0 / np.maximum(np.abs(np.asarray(ys)), 1e-9)
            A = np.asarray(rows) * wts[:, None]
            Y = np.asarray(ys) * wts
            if pre and dec:
                coef, *_ = np.linalg.lstsq(A, Y, rcond=None)
                t0, inv_f = float(coef[0]), float(coef[1])
                if inv_f <= 0 or t0 < 0:  # degenerate: take decode for T0, prefill for F
                    t0 = max(float(np.median([y for _, y in dec])) - x_d(dec[0][0]) / f_eff_abs, 0.0)
                    inv_f = max(float(np.median([(y - t0) / x_p(n) for n, y in pre])), 1e-18)
            elif pre:
                t0 = ov + c.weight_bytes / bw_eff_abs
                inv_f = max(float(np.median([(y - t0) / x_p(n) for n, y in pre])), 1e-18)
            else:
                inv_f = 1.0 / f_eff_abs
                t0 = max(float(np.median([y - x_d(s_) * inv_f - c.kv_read_bytes(1, s_) / bw_eff_abs for s_, y in dec])), 0.0)
            f_eff_abs = 1.0 / inv_f
            ov = min(ov, t0 / 2.0)
            mem = t0 - ov
            bw_eff_abs = c.weight_bytes / mem if mem > 0 else bw_eff_abs
            fitted.update({"t0_s": t0, "flops_s": f_eff_abs, "bandwidth_bytes_s": bw_eff_abs, "step_overhead_s": ov})
    else:
        if len(pre) >= 2 and len({n for n, _ in pre}) >= 2:
            xs = np.array([x_p(n) for n, _ in pre])
            ys_ = np.array([y for _, y in pre])
            slope, icpt = np.polyfit(xs, ys_, 1)
            if slope > 0:
                f_eff_abs = 1.0 / float(slope)
                if icpt > 0:
                    ov = float(icpt)
        elif pre:
            f_eff_abs = float(np.median([x_p(n) / max(y - ov, 1e-9) for n, y in pre]))
        if dec:
            bws = [(c.weight_bytes + c.kv_read_bytes(1, s_)) / max(y - ov, 1e-9) for s_, y in dec]
            bw_eff_abs = float(np.median(bws))
        fitted.update({"flops_s": f_eff_abs, "bandwidth_bytes_s": bw_eff_abs, "step_overhead_s": ov})
    new = c.with_(
        bw_eff=bw_eff_abs / c.bandwidth_bytes_s,
        flops_eff=f_eff_abs / c.peak_flops,
        step_overhead_s=ov,
        name=c.name + " (calibrated)",
        source={**c.source, "calibrated": True},
    )
    fitted["bw_eff"] = new.bw_eff
    fitted["flops_eff"] = new.flops_eff
    # residuals of the fitted model on its own points
    res: dict[str, Any] = {}
    if pre:
        pe = [new.prefill_time_s(int(n)) / y - 1 for n, y in pre]
        res["prefill_rel_err_median"] = float(np.median(np.abs(pe)))
        res["prefill_tok_s_measured_median"] = float(np.median([n / y for n, y in pre]))
    if dec:
        de = [new.decode_step_s(1, s_) / y - 1 for s_, y in dec]
        res["decode_rel_err_median"] = float(np.median(np.abs(de)))
        res["decode_step_ms_measured_median"] = float(np.median([y for _, y in dec]) * 1e3)
    return Calibration(new, api, len(pre), len(dec), fitted, res)
