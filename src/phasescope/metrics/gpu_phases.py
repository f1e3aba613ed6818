"""GPU telemetry set against the two phases: which windows were prefill, which were decode, and
what the hardware did in each — the ``gpu`` section of bench / probe / explain JSON.

Windows are the recorder's sampling rounds: window *k* is (T\\ :sub:`k-1`, T\\ :sub:`k`], where T
is when round *k*'s values arrived; a round's values describe the time since the previous one
(NVML GPM metrics exactly; dcgm-exporter's over its collect interval ``-c``, which should be no
longer than phasescope's ``--metrics-interval``). From the request records each window gets the
share of its time when

* some request was **prefilling** (between its send and its first token: queue + prompt
  processing — the compute-bound phase),
* requests were **decoding** and none prefilling (between first and last token — the
  bandwidth-bound phase),
* nothing was in flight (**idle**).

A window is labelled by the state that covers at least :data:`MAJORITY` of it, else ``mixed``.
Per phase: the time-weighted mean of each activity ratio over its windows (mean over GPUs),
power (sum over GPUs), energy (Δ of the cumulative energy counter, or power × time where a source
has none), the output tokens streamed in its windows and the prompt tokens prefilled in them
(each request's prompt spread over its prefill interval), and the joules per token. The achieved
memory bandwidth is DRAM active × the device's peak (catalog, from the GPU's ``modelName``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable

from phasescope.measure.derive import first_token_ns, last_token_ns, output_tokens
from phasescope.metrics.gpu import ACTIVITY, GpuRecording, GpuSample

#: share of a window one state must cover to name the window after it
MAJORITY = 0.6
PHASES = ("prefill", "decode", "mixed", "idle")


@dataclass
class _Segment:
    t0: int
    t1: int
    prefilling: int
    decoding: int


def activity_segments(records: Iterable[Any]) -> list[_Segment]:
    """Piecewise-constant counts of requests prefilling / decoding, from the records' raw clocks."""
    deltas: dict[int, list[int]] = {}

    def add(t: int, dp: int, dd: int) -> None:
        d = deltas.setdefault(t, [0, 0])
        d[0] += dp
        d[1] += dd

    for r in records:
        start = r.t_start_ns
        if not start:
            continue
        first = first_token_ns(r)
        last = last_token_ns(r)
        end_prefill = first if first is not None else (r.t_done_ns or start)
        if end_prefill > start:
            add(start, 1, 0)
            add(end_prefill, -1, 0)
        if first is not None and last is not None and last > first:
            add(first, 0, 1)
            add(last, 0, -1)
    segs: list[_Segment] = []
    p = d = 0
    times = sorted(deltas)
    for a, b in zip(times, times[1:]):
        p += deltas[a][0]
        d += deltas[a][1]
        if b > a:
            segs.append(_Segment(a, b, p, d))
    return segs


def window_fractions(segs: list[_Segment], a: int, b: int, starts: list[int] | None = None) -> tuple[float, float, float]:
    """(prefill, decode-only, idle) shares of the window (a, b]; they sum to 1. ``starts``: the
    segments' start times, when the caller has them (saves rebuilding them per window)."""
    span = b - a
    if span <= 0:
        return 0.0, 0.0, 1.0
    pre = dec = 0
    if starts is None:
        starts = [s.t0 for s in segs]
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(segs) and segs[i].t0 < b:
        s = segs[i]
        ov = min(b, s.t1) - max(a, s.t0)
        if ov > 0:
            if s.prefilling > 0:
                pre += ov
            elif s.decoding > 0:
                dec += ov
        i += 1
    fp, fd = pre / span, dec / span
    return fp, fd, max(0.0, 1.0 - fp - fd)


def label(fp: float, fd: float, fi: float) -> str:
    if fp >= MAJORITY:
        return "prefill"
    if fd >= MAJORITY:
        return "decode"
    if fi >= MAJORITY:
        return "idle"
    return "mixed"


def _tokens_by_window(records: list[Any], edges: list[int]) -> tuple[list[float], list[float]]:
    """Output tokens streamed and prompt tokens prefilled in each window (edges[k-1], edges[k]]."""
    n = len(edges) - 1
    out = [0.0] * n
    prompt = [0.0] * n

    def win(t: int) -> int | None:
        k = bisect.bisect_left(edges, t)  # edges[k-1] < t <= edges[k]
        return k - 1 if 1 <= k <= n else None

    for r in records:
        tok = r.token_events()
        if tok:
            total = output_tokens(r)
            known = all(e.n_tokens is not None for e in tok)
            each = (total or len(tok)) / len(tok)
            for e in tok:
                k = win(e.t_ns)
                if k is not None:
                    out[k] += float(e.n_tokens) if known else each  # type: ignore[arg-type]
        p = r.prompt_tokens if r.prompt_tokens is not None else r.prompt_tokens_requested
        if not p or not r.t_start_ns:
            continue
        a = r.t_start_ns
        b = first_token_ns(r) or r.t_done_ns or a
        if b <= a:
            k = win(a)
            if k is not None:
                prompt[k] += p
            continue
        k0 = max(0, bisect.bisect_right(edges, a) - 1)
        k1 = min(n, bisect.bisect_left(edges, b) + 1)
        for k in range(k0, k1):
            ov = min(b, edges[k + 1]) - max(a, edges[k])
            if ov > 0:
                prompt[k] += p * ov / (b - a)
    return out, prompt


def _rounds(samples: list[GpuSample]) -> list[tuple[int, dict[str, GpuSample]]]:
    """Samples grouped by sampling round: (arrival of the round's last value, device key → sample)."""
    by: dict[int, dict[str, GpuSample]] = {}
    for s in samples:
        devs = by.setdefault(s.seq, {})
        old = devs.get(s.key)  # one board seen by two sources (NVML + a local dcgm-exporter): keep the richer
        if old is None or (s.filled(), s.source == "dcgm") > (old.filled(), old.source == "dcgm"):
            devs[s.key] = s
    out = []
    for seq in sorted(by):
        devs = by[seq]
        out.append((max(s.t_ns for s in devs.values()), devs))
    return out


def _mean(vals: list[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return sum(v) / len(v) if v else None


def devices_of(samples: list[GpuSample], device_id: str | None = None) -> list[dict[str, Any]]:
    """One row per GPU seen: node, index, UUID, model name, and its catalog id and peak bandwidth."""
    from phasescope.theory.devices import device_id_for_model_name, get_device

    seen: dict[str, dict[str, Any]] = {}
    for s in samples:
        if s.key in seen:
            continue
        did = device_id or device_id_for_model_name(s.model_name)
        peak = None
        if did:
            try:
                dev = get_device(did)
                did, peak = dev.id, dev.mem_bandwidth_gb_s
            except Exception:  # noqa: BLE001 - an unknown --device is reported by the ceiling code
                peak = None
        seen[s.key] = {"node": s.node, "gpu": s.gpu, "uuid": s.uuid, "model_name": s.model_name,
                       "hostname": s.hostname, "driver": s.driver, "source": s.source,
                       "device_id": did, "peak_bandwidth_gb_s": peak}
    return list(seen.values())


def gpu_section(rec: GpuRecording, records: list[Any], *, t0_ns: int | None = None, device_id: str | None = None,
                decode_ceiling_tok_s: float | None = None, decode_tok_s: float | None = None) -> dict[str, Any]:
    """The ``gpu`` JSON section (see docs/commands/gpu.md) from a recording and the run's records.

    ``device_id`` overrides the catalog device the telemetry names (``--device``);
    ``decode_ceiling_tok_s`` / ``decode_tok_s`` (probe, explain) set the measured decode rate
    against its ceiling next to DRAM activity."""
    ok_records = [r for r in records if r.t_start_ns]
    if t0_ns is None:
        t0_ns = min((r.t_start_ns for r in ok_records), default=None)
    t_end = max(((last_token_ns(r) or r.t_done_ns or r.t_start_ns) for r in ok_records), default=None)
    devices = devices_of(rec.samples, device_id)
    ids = {d["device_id"] for d in devices}
    dev_id = ids.pop() if len(ids) == 1 else None
    peaks = [d["peak_bandwidth_gb_s"] for d in devices]
    peak = peaks[0] if peaks and all(p == peaks[0] and p for p in peaks) else None

    rounds = _rounds(rec.samples)
    segs = activity_segments(ok_records)
    starts = [s.t0 for s in segs]
    edges = [t for t, _ in rounds]
    out_tok, prompt_tok = _tokens_by_window(ok_records, edges) if len(edges) > 1 else ([], [])
    timeline: list[dict[str, Any]] = []
    base = t0_ns if t0_ns is not None else (edges[0] if edges else 0)
    for k in range(1, len(rounds)):
        (a, prev), (b, cur) = rounds[k - 1], rounds[k]
        dt = (b - a) / 1e9
        fp, fd, fi = window_fractions(segs, a, b, starts)
        row: dict[str, Any] = {"t_s": (b - base) / 1e9, "dt_s": dt, "wall_s": max(s.wall_s for s in cur.values()),
                               "phase": label(fp, fd, fi), "prefill_frac": fp, "decode_frac": fd, "idle_frac": fi,
                               "in_run": bool(t0_ns is not None and t_end is not None and b > t0_ns and a < t_end)}
        for f in ACTIVITY:
            row[f] = _mean([getattr(s, f) for s in cur.values()])
        powers = [s.power_w for s in cur.values() if s.power_w is not None]
        row["power_w"] = sum(powers) if powers else None
        energy = 0.0
        have_energy = False
        for key, s in cur.items():
            p = prev.get(key)
            if p is not None and s.energy_j is not None and p.energy_j is not None and s.energy_j >= p.energy_j:
                energy += s.energy_j - p.energy_j
                have_energy = True
            elif s.power_w is not None:
                energy += s.power_w * dt
                have_energy = True
        row["energy_j"] = energy if have_energy else None
        row["output_tokens"] = out_tok[k - 1]
        row["prompt_tokens"] = prompt_tok[k - 1]
        row["gpus"] = len(cur)
        timeline.append(row)

    run_rows = [r for r in timeline if r["in_run"]]
    phases: dict[str, Any] = {}
    for ph in PHASES:
        rows = [r for r in run_rows if r["phase"] == ph]
        phases[ph] = _phase_stats(rows, peak)
    # a phase's energy per token is per the tokens that phase makes: prefill → prompt, decode → output
    phases["prefill"]["j_per_output_token"] = None
    phases["decode"]["j_per_prompt_token"] = None
    total_out = sum(r["output_tokens"] for r in run_rows)
    total_prompt = sum(r["prompt_tokens"] for r in run_rows)
    e_rows = [r["energy_j"] for r in run_rows if r["energy_j"] is not None]
    energy = sum(e_rows) if e_rows else None
    secs = sum(r["dt_s"] for r in run_rows)
    run = {"windows": len(run_rows), "seconds": secs, "energy_j": energy,
           "mean_power_w": (energy / secs) if energy is not None and secs > 0 else None,
           "output_tokens": total_out, "prompt_tokens": total_prompt,
           "j_per_output_token": _per(energy, total_out), "j_per_prompt_token": _per(energy, total_prompt),
           "j_per_token": _per(energy, total_out + total_prompt)}
    dec = phases["decode"]
    bandwidth = {"peak_gb_s": peak, "device_id": dev_id,
                 "decode_dram_active": dec["dram_active"], "decode_achieved_gb_s": dec["achieved_bandwidth_gb_s"],
                 "prefill_achieved_gb_s": phases["prefill"]["achieved_bandwidth_gb_s"],
                 "decode_ceiling_tok_s": decode_ceiling_tok_s, "decode_tok_s": decode_tok_s,
                 "decode_efficiency": (decode_tok_s / decode_ceiling_tok_s)
                 if decode_tok_s and decode_ceiling_tok_s else None}
    section: dict[str, Any] = {
        "available": bool(rec.samples), "interval_s": rec.interval_s, "sources": rec.sources,
        "devices": devices, "device_id": dev_id, "majority": MAJORITY,
        "phases": phases, "run": run, "bandwidth": bandwidth, "timeline": timeline,
    }
    from phasescope.metrics.gpu_evidence import gpu_sentences, gpu_warnings

    section["evidence"] = gpu_sentences(section)
    section["warnings"] = [w.to_dict() for w in gpu_warnings(section)]
    return section


def _per(energy: float | None, n: float) -> float | None:
    return energy / n if energy is not None and n > 0 else None


def _phase_stats(rows: list[dict[str, Any]], peak: float | None) -> dict[str, Any]:
    secs = sum(r["dt_s"] for r in rows)

    def wmean(f: str) -> float | None:
        pairs = [(r[f], r["dt_s"]) for r in rows if r.get(f) is not None]
        w = sum(dt for _, dt in pairs)
        return sum(v * dt for v, dt in pairs) / w if pairs and w > 0 else None

    st: dict[str, Any] = {"windows": len(rows), "seconds": secs}
    for f in ACTIVITY:
        st[f] = wmean(f)
    st["power_w"] = wmean("power_w")
    es = [r["energy_j"] for r in rows if r["energy_j"] is not None]
    st["energy_j"] = sum(es) if es else None
    st["output_tokens"] = sum(r["output_tokens"] for r in rows)
    st["prompt_tokens"] = sum(r["prompt_tokens"] for r in rows)
    st["j_per_output_token"] = _per(st["energy_j"], st["output_tokens"])
    st["j_per_prompt_token"] = _per(st["energy_j"], st["prompt_tokens"])
    st["achieved_bandwidth_gb_s"] = st["dram_active"] * peak if st["dram_active"] is not None and peak else None
    return st


def finish_section(recorder: Any, records: list[Any], **kw: Any) -> dict[str, Any]:
    """Stop ``recorder`` (a :class:`~phasescope.metrics.gpu.GpuRecorder`) and build the section."""
    return gpu_section(recorder.stop(), records, **kw)


def solo_decode_tok_s(records: list[Any]) -> float | None:
    """Median decode rate of the requests that decoded alone (batch 1) — the rate a batch-1
    ceiling is comparable with; ``None`` when every request overlapped another."""
    from phasescope.measure.derive import decode_tok_s

    spans = []
    for r in records:
        a, b = first_token_ns(r), last_token_ns(r)
        if a is not None and b is not None and b > a:
            spans.append((a, b, r))
    rates = []
    for i, (a, b, r) in enumerate(spans):
        if any(j != i and a2 < b and a < b2 for j, (a2, b2, _) in enumerate(spans)):
            continue
        v = decode_tok_s(r)
        if v:
            rates.append(v)
    if not rates:
        return None
    rates.sort()
    m = len(rates) // 2
    return rates[m] if len(rates) % 2 else (rates[m - 1] + rates[m]) / 2


def telemetry_device(recorder: Any, dev: Any, why: str | None) -> tuple[Any, str | None]:
    """The catalog device of the GPUs a started recorder sees (all the same model), else the
    given ``(dev, why)``: a remote GPU server's ceilings need no ``--device``."""
    from phasescope.theory.devices import get_device

    did = telemetry_device_id(recorder)
    return (get_device(did), None) if did else (dev, why)


def probe_section(recorder: Any, records: list[Any], result: dict[str, Any], device: str | None) -> dict[str, Any]:
    """probe's ``gpu`` section: the decode rate of its one-at-a-time requests against the
    smallest size's decode ceiling."""
    ceil = None
    for row in ((result.get("ceilings") or {}).get("sizes") or []):
        if row.get("decode_ceiling_tok_s"):
            ceil = row["decode_ceiling_tok_s"]
            break
    return finish_section(recorder, records, device_id=device if device else None, decode_ceiling_tok_s=ceil,
                          decode_tok_s=solo_decode_tok_s(records))


def telemetry_device_id(recorder: Any) -> str | None:
    """The catalog id of the GPUs a started recorder sees, when they are all one known model."""
    from phasescope.theory.devices import device_id_for_model_name

    ids = {device_id_for_model_name(s.model_name) for s in recorder.latest()}
    return ids.pop() if len(ids) == 1 and None not in ids else None


def explain_gpu_start(gpu_metrics: list[str] | None, nvml: bool = True, server_url: str | None = None) -> Any:
    """explain's recorder, started (``None`` without GPU telemetry)."""
    from phasescope.metrics.gpu import open_recorder

    rec = open_recorder(gpu_metrics, nvml=nvml, interval_s=0.25, server_url=server_url)
    if rec is not None:
        rec.start()
    return rec
