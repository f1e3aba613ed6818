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
  BW_eff = (W + KV_tok·s) / (step − overhead) (median). When prompts sent together and prefilled in one
  batch are in the records too (the validation probe's batches of 2, 3, 4), a prompt's attention gets its
  own rate: y = c0 + (F_tok·Σn + F_head·prompts)/F_eff + F_attn·Σ pairs/A_eff over lone prompts (many
  pairs per token) and batches (the tokens of B prompts, the pairs of short ones) →
  ``CostModel.attn_flops_eff`` (llama.cpp's CPU attention runs far below its GEMM rate).
* Prefill points are one median per prompt length (the repeats of a probe), so one disturbed request
  does not tilt the line; ``tail_breaks`` subtracts the steps after a prompt's first chunk (llama.cpp's
  checkpoint break) before fitting.

Requests that decoded together in a clean batch (nobody else prefilling for > 10 % of their decode
window; batch size = 1 + the overlap of other decode windows ÷ their own) add points
``step = T0 + B·(KV_tok·s/BW + x_d(s)/F_dec)``: with them the decode math gets its own efficiency
``F_dec`` (a few decode rows run matrix-vector kernels far below a prompt's GEMM rate; on the 2-core
llama.cpp engine 3× below). Without them F_dec = F_eff.

Batch-dependent decode: llama.cpp's decode step on a few CPU cores is not a smooth function of the
batch (engine.md §6: llama-batched-bench 46/57/103/130 tok/s at B = 1/2/4/8; 2 streams often no faster
than 1), so one F_dec cannot fit B = 2 and B = 4 at once. Clean batches are grouped by their (rounded)
size B; with ≥ 2 points in a group, ``scale(B)`` = median(measured step ÷ modelled step) becomes the cost
model's ``decode_batch_scale`` ([[1, 1.0], [B, scale(B)], ...]) when any scale is off by more than 5 %. Each
ratio is clamped so the batched step stays between one sequence's step and 1.25 × B of them in a row
(engine.md §6 saw 2 streams at up to 1.05 × two steps): beyond that the measurement was disturbed (other
processes), not batching.

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
from phasescope.measure.aggregate import successful
from phasescope.measure.records import RequestRecord, read_records
from phasescope.planning.costmodel import CostModel, chunk_pairs


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
        from phasescope.store import open_store

        store = open_store()
        info = store.get(ref)
        recs = store.load_records(info.id)
    ok = successful(recs)
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


def _group_prefill_points(recs: Sequence[RequestRecord], alone_ids: set[int]) -> list[tuple[list[float], float]]:
    """Prompts sent together and prefilled in one batch (a probe's batch of B): (their prompt lengths, the
    median server prefill time). Such a batch has the tokens of B prompts but the attention pairs of B short
    ones, which is what separates attention's cost from the GEMMs' (module docstring)."""
    cand = sorted((r for r in recs if id(r) not in alone_ids and (r.server or {}).get("prefill_s")
                   and (r.server or {}).get("prompt_n") and derive.first_token_ns(r) is not None),
                  key=lambda r: r.t_start_ns)
    groups: list[list[RequestRecord]] = []
    for r in cand:
        if groups and r.t_start_ns - groups[-1][0].t_start_ns < 50_000_000:
            groups[-1].append(r)
        else:
            groups.append([r])
    out = []
    for g in groups:
        if len(g) < 2:
            continue
        firsts = [derive.first_token_ns(r) or 0 for r in g]
        if max(firsts) - min(firsts) > 20_000_000:  # not one batch: someone waited
            continue
        out.append(([float(r.server["prompt_n"]) for r in g], float(np.median([r.server["prefill_s"] for r in g]))))
    return out


def _median_by_length(pre: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """One point per prompt length: the median of its repeats. A least-squares line through single
    points follows any one disturbed request (on a 2-core VM one prefill in a few reads 20-60 % slow);
    the median of three ignores one."""
    groups: dict[float, list[float]] = {}
    for n, y in pre:
        groups.setdefault(n, []).append(y)
    return [(n, float(np.median(ys))) for n, ys in sorted(groups.items())]


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


def _windows(r: RequestRecord) -> tuple[int, int | None, int | None, int]:
    """(start, first token, last token, done) in ns."""
    ft, lt = derive.first_token_ns(r), derive.last_token_ns(r)
    done = r.t_done_ns if r.t_done_ns is not None else (lt or r.t_start_ns)
    return r.t_start_ns, ft, lt, done


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def batch_context(recs: Sequence[RequestRecord], limit: int = 500) -> list[tuple[float, float]]:
    """Per record: (mean number of sequences decoding alongside it, itself included; share of its
    decode window during which another request was prefilling). Interval overlaps, O(n²) over the
    first ``limit`` records (same clock assumed)."""
    w = [_windows(r) for r in recs[:limit]]
    out: list[tuple[float, float]] = []
    for i, (_s0, f0, l0, _) in enumerate(w):
        if f0 is None or l0 is None or l0 <= f0:
            out.append((1.0, 0.0))
            continue
        span = l0 - f0
        dec = pre = 0
        for j, (s1, f1, l1, d1) in enumerate(w):
            if j == i:
                continue
            if f1 is not None:
                pre += _overlap(f0, l0, s1, f1)
                if l1 is not None:
                    dec += _overlap(f0, l0, f1, l1)
            else:
                pre += _overlap(f0, l0, s1, d1)
        out.append((1.0 + dec / span, pre / span))
    out.extend((1.0, 1.0) for _ in recs[limit:])
    return out


#: a batched decode step of B rows is at most this many times B single steps (module docstring)
SERIAL_MARGIN = 1.25


def batch_scale_points(cost: CostModel, batched: Sequence[tuple[float, float, float]], *, min_points: int = 2,
                       tol: float = 0.05) -> list[list[float]] | None:
    """``[[1, 1.0], [B, median(measured ÷ modelled step)], ...]`` from clean batched decode points
    (context, batch, step s), or None when no batch size is off by more than ``tol`` (module docstring)."""
    groups: dict[int, list[float]] = {}
    for s_, b, y in batched:
        B = int(round(b))
        if B < 2 or abs(b - B) > 0.25:  # a partial overlap is not a clean batch of B
            continue
        smooth = cost.with_(decode_batch_scale=None)
        model = smooth.step_time_s(B, B * s_)
        one = smooth.step_time_s(1, s_)
        if model > 0:
            # a batched step is no faster than one sequence's step and, but for noise, no slower than B of
            # them in a row (engine.md §6 measured up to 1.05·B at B = 2; 25 % margin) — a step beyond that
            # was disturbed (a busy machine), not batching
            groups.setdefault(B, []).append(min(max(y / model, one / model), SERIAL_MARGIN * B * one / model))
    pts = [[float(B), float(np.median(r))] for B, r in sorted(groups.items()) if len(r) >= min_points]
    if not pts or all(abs(v - 1.0) <= tol for _, v in pts):
        return None
    return [[1.0, 1.0]] + pts


def calibrate(records: Sequence[RequestRecord], base: CostModel, *, tail_breaks: tuple[int, ...] = ()) -> Calibration:
    """Fit ``base``'s efficiencies and overhead to the records (see module docstring).

    ``tail_breaks``: the server prefilled each prompt in several steps, cut this many tokens before its
    end (llama.cpp's checkpoint breaks on SWA models, ``SchedulerConfig.tail_breaks``), so a measured
    prefill is its first chunk plus the steps of the later ones. A first fit without the breaks times
    those later steps (a few tokens and the first token's logits: about one decode step each); the second
    fits the first chunk to what is left."""
    if not tail_breaks:
        return _calibrate(records, base, None)
    first = _calibrate(records, base, None)

    def adjust(n: float, y: float) -> tuple[float, float]:
        ns, y2 = adjust_group([n], y)
        return ns[0], y2

    def adjust_group(ns: list[float], y: float) -> tuple[list[float], float]:
        """Prompts prefilled together (one sequence or a batch sent at once): their first chunks, and the
        measured time less the later steps (each later chunk of every prompt together, as the server runs it)."""
        from phasescope.planning.costmodel import prefill_chunks

        chs = [prefill_chunks(int(n), None, 0, tail_breaks) for n in ns]
        if all(len(ch) < 2 for ch in chs):
            return list(ns), y
        rest = 0.0
        for k in range(1, max(len(ch) for ch in chs)):
            part = [ch[k] for ch in chs if len(ch) > k]
            rest += first.cost.step_time_s(0, 0.0, prefill_tokens=sum(c for _, c in part),
                                           prefill_pairs=sum(chunk_pairs(p, c) for p, c in part),
                                           prefill_kv_tokens=sum(p + c for p, c in part), n_prefill_chunks=len(part),
                                           n_sampled=len(part))
        return [float(ch[0][1]) for ch in chs], max(y - rest, 1e-6)

    adjust.group = adjust_group  # type: ignore[attr-defined]

    cal = _calibrate(records, base, adjust)
    cal.fitted["tail_breaks"] = list(tail_breaks)
    return cal


def _calibrate(records: Sequence[RequestRecord], base: CostModel, adjust: Any) -> Calibration:
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
    if adjust is not None:
        pre = [adjust(n, y) for n, y in pre]
    n_pre = len(pre)  # requests; the fit takes one median point per prompt length
    pre = _median_by_length(pre)
    # decode points: (context, batch, step) from requests decoding alone or in a clean batch
    # (no other request prefilling during more than 10 % of their decode window)
    dec3: list[tuple[float, float, float]] = []
    alone_ids = {id(r) for r in alone}
    for r, (b, contam) in zip(recs, batch_context(recs)):
        if contam > 0.10 or (b < 1.05 and id(r) not in alone_ids):
            continue
        p = _decode_point(r)
        if p is not None:
            dec3.append((p[0], b, p[1]))
    dec = [(s_, y) for s_, b, y in dec3 if b < 1.05]
    batched = [(s_, b, y) for s_, b, y in dec3 if b >= 1.5]
    # the CPU model's terms fitted on the synthetic grid (planning.cpu) give way to this server's own fit
    c = base.with_(decode_attn_flops_eff=None, dequant_s_per_step=0.0, prefill_overhead_s=0.0)
    F_tok, F_att, F_head = c.flops_per_token, c.attn_flops_per_pair, c.lm_head_flops

    def x_p(n: float) -> float:
        return n * F_tok + F_att * chunk_pairs(0, int(n)) + F_head

    def x_d(s: float) -> float:
        return F_tok + F_head + F_att * s

    bw_eff_abs = c.eff_bandwidth_bytes_s
    f_eff_abs = c.eff_flops
    f_dec_abs: float | None = None
    f_attn_abs: float | None = None  # prefill attention apart from the GEMMs (overlap "max" fit only)
    ov = c.step_overhead_s
    fitted: dict[str, Any] = {"overlap": c.overlap, "n_batched_decode_points": len(batched)}
    if c.overlap == "sum":
        split = bool(batched) and bool(pre)
        rows, ys = [], []
        for n, y in pre:
            rows.append([1.0, x_p(n), 0.0] if split else [1.0, x_p(n)])
            ys.append(y - c.kv_read_bytes(1, n) / bw_eff_abs)
        for s_, b, y in (dec3 if split else [(s_, 1.0, y) for s_, y in dec]):
            rows.append([1.0, 0.0, b * x_d(s_)] if split else [1.0, x_d(s_)])
            ys.append(y - c.kv_read_bytes(1, s_) * b / bw_eff_abs)
        if rows:
            # relative errors: a decode step (ms) must weigh as much as a prefill (s)
            wts = 1.0 / np.maximum(np.abs(np.asarray(ys)), 1e-9)
            A = np.asarray(rows) * wts[:, None]
            Y = np.asarray(ys) * wts
            if split:
                coef, *_ = np.linalg.lstsq(A, Y, rcond=None)
                t0, inv_f, inv_fd = (float(x) for x in coef)
                if t0 < 0 or inv_f <= 0 or inv_fd <= 0:
                    split = False
                else:
                    f_dec_abs = 1.0 / inv_fd
            if not split and pre and dec:
                A2 = A[:, :2] if A.shape[1] == 2 else None
                if A2 is None:  # rebuild the two-column system
                    rows2 = [[1.0, x_p(n)] for n, _ in pre] + [[1.0, x_d(s_)] for s_, _ in dec]
                    ys2 = [y - c.kv_read_bytes(1, n) / bw_eff_abs for n, y in pre] + \
                          [y - c.kv_read_bytes(1, s_) / bw_eff_abs for s_, y in dec]
                    w2 = 1.0 / np.maximum(np.abs(np.asarray(ys2)), 1e-9)
                    A2, Y = np.asarray(rows2) * w2[:, None], np.asarray(ys2) * w2
                coef, *_ = np.linalg.lstsq(A2, Y, rcond=None)
                t0, inv_f = float(coef[0]), float(coef[1])
                if inv_f <= 0 or t0 < 0:  # degenerate: take decode for T0, prefill for F
                    t0 = max(float(np.median([y for _, y in dec])) - x_d(dec[0][0]) / f_eff_abs, 0.0)
                    inv_f = max(float(np.median([(y - t0) / x_p(n) for n, y in pre])), 1e-18)
            elif not split and pre:
                t0 = ov + c.weight_bytes / bw_eff_abs
                inv_f = max(float(np.median([(y - t0) / x_p(n) for n, y in pre])), 1e-18)
            elif not split:
                inv_f = 1.0 / f_eff_abs
                t0 = max(float(np.median([y - x_d(s_) * inv_f - c.kv_read_bytes(1, s_) / bw_eff_abs for s_, y in dec])), 0.0)
            f_eff_abs = 1.0 / inv_f
            ov = min(ov, t0 / 2.0)
            mem = t0 - ov
            bw_eff_abs = c.weight_bytes / mem if mem > 0 else bw_eff_abs
            fitted.update({"t0_s": t0, "flops_s": f_eff_abs, "bandwidth_bytes_s": bw_eff_abs, "step_overhead_s": ov,
                           "decode_flops_s": f_dec_abs})
    else:
        grp = _group_prefill_points(recs, alone_ids)
        if adjust is not None:
            grp = [adjust.group(ns, y) for ns, y in grp]
        if len(pre) >= 2 and len({n for n, _ in pre}) >= 2:
            xs = np.array([x_p(n) for n, _ in pre])
            ys_ = np.array([y for _, y in pre])
            slope, icpt = np.polyfit(xs, ys_, 1)
            if slope > 0:
                f_eff_abs = 1.0 / float(slope)
                if icpt > 0:
                    ov = float(icpt)
            if grp:
                # GEMMs and attention apart: y = c0 + (F_tok·n + F_head·prompts)/F + F_attn·pairs/A over lone
                # prompts (many pairs) and batches sent together (tokens of B prompts, pairs of short ones)
                pts = [([n], y) for n, y in pre] + grp
                A = np.array([[1.0, F_tok * sum(ns) + F_head * len(ns), F_att * sum(chunk_pairs(0, int(n)) for n in ns)]
                              for ns, _ in pts])
                Y = np.array([y for _, y in pts])
                w_ = 1.0 / Y
                coef, *_ = np.linalg.lstsq(A * w_[:, None], Y * w_, rcond=None)
                c0, inv_f, inv_a = (float(x) for x in coef)
                if c0 >= 0 and inv_f > 0 and inv_a > 0 and 1.0 / inv_a <= c.peak_flops:
                    f_eff_abs, f_attn_abs, ov = 1.0 / inv_f, 1.0 / inv_a, c0
                    fitted["n_batched_prefill_points"] = len(grp)
        if dec:
            # The prefill fit's intercept is a per-request cost (sampling set-up, the first step, HTTP), not
            # a per-step one: charged to every decode step it would exceed the measured step itself and the
            # decode bandwidth would come out infinite (seen: 28.6 ms "overhead" vs 15.8 ms steps). A step's
            # fixed part can be at most half of the fastest measured step, the rest is memory or math.
            ov = min(ov, 0.5 * float(min(y for _, y in dec)))
        elif pre:
            f_eff_abs = float(np.median([x_p(n) / max(y - ov, 1e-9) for n, y in pre]))
        if dec:
            bws = [(c.weight_bytes + c.kv_read_bytes(1, s_)) / max(y - ov, 1e-9) for s_, y in dec]
            bw_eff_abs = float(np.median(bws))
        fitted.update({"flops_s": f_eff_abs, "bandwidth_bytes_s": bw_eff_abs, "step_overhead_s": ov,
                       "attn_flops_s": f_attn_abs})
    new = c.with_(
        bw_eff=bw_eff_abs / c.bandwidth_bytes_s,
        flops_eff=f_eff_abs / c.peak_flops,
        decode_flops_eff=None if f_dec_abs is None else f_dec_abs / c.peak_flops,
        attn_flops_eff=None if f_attn_abs is None else f_attn_abs / c.peak_flops,
        step_overhead_s=ov,
        name=c.name + " (calibrated)",
        source={**c.source, "calibrated": True},
    )
    scale_pts = batch_scale_points(new, batched)
    if scale_pts:
        new = new.with_(decode_batch_scale=scale_pts)
    fitted["decode_batch_scale"] = scale_pts
    fitted["bw_eff"] = new.bw_eff
    fitted["flops_eff"] = new.flops_eff
    fitted["decode_flops_eff"] = new.decode_flops_eff
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
    if batched:
        be = [new.step_time_s(int(round(b)), round(b) * s_) / y - 1 for s_, b, y in batched]
        res["batched_decode_rel_err_median"] = float(np.median(np.abs(be)))
        smooth = new.with_(decode_batch_scale=None)
        be0 = [smooth.step_time_s(int(round(b)), round(b) * s_) / y - 1 for s_, b, y in batched]
        res["batched_decode_rel_err_median_smooth"] = float(np.median(np.abs(be0)))
    return Calibration(new, api, n_pre, len(dec), fitted, res)


#: warnings of a measured run that make a calibration from it suspect
_CALIBRATION_KINDS = ("host_busy", "prefix_cache_hits", "client_saturated", "token_count_mismatch", "cold_start")


def calibration_warnings(ref: str | None, records: Sequence[RequestRecord] | None = None) -> list[dict[str, Any]]:
    """``plan --calibrate-from REF``: the calibration run's own warnings that bias its fit (host
    contention, prefix-cache hits, a saturated client...), and cache hits found in its records (above
    bench's own margin, :data:`phasescope.load.hygiene.HIT_MARGIN`). Here, not in ``load/``: it reads
    the run store, which the runners never open."""
    from phasescope.load.hygiene import HIT_MARGIN
    from phasescope.measure.aggregate import cached_share
    from phasescope.measure.warnings import MeasurementWarning, coerce, to_json

    if not ref:
        return []
    out: list[MeasurementWarning] = []
    try:
        if not Path(ref).expanduser().is_file():
            from phasescope.store import open_store

            info = open_store().get(ref)
            for w in info.warnings:
                cw = coerce(w)
                if cw.kind in _CALIBRATION_KINDS:
                    out.append(MeasurementWarning(cw.kind, f"calibration run {info.id}: {cw.message}", cw.evidence,
                                                  "calibrate from a run without this warning"))
    except Exception:  # noqa: BLE001 - a run we cannot read has no warnings to pass on
        pass
    rate = cached_share(records or []) or 0.0
    if rate > HIT_MARGIN and not any(w.kind == "prefix_cache_hits" for w in out):
        out.append(MeasurementWarning(
            "prefix_cache_hits",
            f"{rate * 100:.0f} % of the calibration requests' prompt tokens came from the prefix cache: the "
            "fitted prefill cost is too low.", {"hit_rate": rate},
            "calibrate from a bench run with unique prompts (the default; not --reuse-prompts)"))
    return to_json(out)
