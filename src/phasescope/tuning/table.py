"""The tune's answer: one row per setting from its stored run, ratios to the baseline, the
ceiling, and a finding computed from the table.

Every number comes from the setting's stored records through :mod:`phasescope.measure.aggregate`
(the one aggregation; warm-ups left out by ``is_measured``), so ``tune``, ``show`` and ``compare``
print one number for one run. Row keys (``metrics``): ``ttft_p50_s``, ``ttft_p99_s``,
``prefill_tok_s``, ``decode_tok_s``, ``itl_p50_s``, ``itl_p99_s``, ``itl_max_s`` (the longest
pause), ``throughput_tok_s``, ``n_ok``, ``n_err``; ``vs_baseline`` holds each metric's ratio to
setting 0; ``ceiling`` the decode bandwidth roof the probe set beside it (None without one).

Every metric carries its 95 % interval (:func:`row_intervals`; ``metrics_ci`` ``{key: [low, high]}``
and ``intervals`` in the row): the interval of the median of its per-request samples (TTFT, prefill
and decode rate; per-request ITL p50/p99 and longest pause for ITL; per-window rates for
throughput), widened to hold the reported value, by :func:`phasescope.measure.interval.median_interval`.

The noise rule (:func:`compare_metric`): a metric *changed* only when both settings have at least
two samples and their intervals do not overlap (:func:`phasescope.measure.interval.compare`), and
neither setting's run flagged the figure ``unstable`` (its repeats still disagreed: row
``unstable``). Otherwise the finding says "cannot tell" and gives both numbers with their spread,
so a sentence never claims what the table's own repeats do not show.
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.measure import aggregate as A
from phasescope.measure import derive
from phasescope.measure import interval as I

__all__ = ["METRIC_KEYS", "Verdict", "compare_metric", "finding", "row_intervals", "row_metrics", "with_ratios"]

#: the row's metrics in table order: (key, header, unit, higher is better)
METRIC_KEYS: tuple[tuple[str, str, str, bool], ...] = (
    ("ttft_p50_s", "TTFT p50", "s", False),
    ("ttft_p99_s", "TTFT p99", "s", False),
    ("prefill_tok_s", "prefill tok/s", "tok/s", True),
    ("decode_tok_s", "decode tok/s", "tok/s", True),
    ("itl_p50_s", "ITL p50", "s", False),
    ("itl_p99_s", "ITL p99", "s", False),
    ("itl_max_s", "longest pause", "s", False),
    ("throughput_tok_s", "throughput", "tok/s", True),
    ("ttft_long_p50_s", "TTFT p50 of the long prompts", "s", False),
)

#: metrics only a mixed workload has (the table shows their column only when a row has a value)
OPTIONAL_KEYS = ("ttft_long_p50_s",)

#: a run mixes prompt lengths when its shortest prompt is under this share of its longest; the
#: *long prompts* are then those of at least :data:`LONG_SHARE` of the longest
MIX_SHARE = 0.25
LONG_SHARE = 0.5


def long_prompt_records(records: Sequence[Any]) -> list[Any]:
    """The successful measured records of the run's long prompts (prompt ≥ LONG_SHARE × the longest),
    or [] when the run does not mix lengths (its shortest prompt ≥ MIX_SHARE × the longest)."""
    ok = [r for r in A.measured(records) if r.ok and r.prompt_tokens]
    if not ok:
        return []
    longest = max(r.prompt_tokens for r in ok)
    if min(r.prompt_tokens for r in ok) >= MIX_SHARE * longest:
        return []
    return [r for r in ok if r.prompt_tokens >= LONG_SHARE * longest]


def _itl_q(r: Any, q: float) -> float | None:
    xs = derive.itl_s(r)
    return A.percentile(xs, q) if xs else None


def row_metrics(records: Sequence[Any]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """(metrics, samples) of one setting's records: the row's numbers and, per metric, the
    per-request samples the noise rule compares."""
    s = A.samples_of(records)
    pooled = s.pooled_itl()
    m = {
        "ttft_p50_s": A.point_value(s, A.METRIC_BY_KEY["ttft_s"]),
        "ttft_p99_s": A.point_value(s, A.METRIC_BY_KEY["ttft_p99_s"]),
        "prefill_tok_s": A.point_value(s, A.METRIC_BY_KEY["prefill_tok_s"]),
        "decode_tok_s": A.point_value(s, A.METRIC_BY_KEY["decode_tok_s"]),
        "itl_p50_s": A.point_value(s, A.METRIC_BY_KEY["itl_p50_s"]),
        "itl_p99_s": A.point_value(s, A.METRIC_BY_KEY["itl_p99_s"]),
        "itl_max_s": max(pooled) if pooled else None,
        "throughput_tok_s": s.throughput_tok_s,
        "n_ok": s.n_ok,
        "n_err": s.n_err,
    }
    long_ttft = [v for v in (derive.ttft_s(r) for r in long_prompt_records(records)) if v is not None]
    m["ttft_long_p50_s"] = A.median(long_ttft) if long_ttft else None
    m["n_long"] = len(long_ttft)
    ok = [r for r in A.measured(records) if r.ok]
    samples = {
        "ttft_p50_s": s.values("ttft_s"), "ttft_p99_s": s.values("ttft_s"),
        "prefill_tok_s": s.values("prefill_tok_s"), "decode_tok_s": s.values("decode_tok_s"),
        "itl_p50_s": [v for v in (_itl_q(r, 50) for r in ok) if v is not None],
        "itl_p99_s": [v for v in (_itl_q(r, 99) for r in ok) if v is not None],
        "itl_max_s": [max(x) for x in s.itl_by_request if x],
        "throughput_tok_s": list(s.window_tok_s),
        "ttft_long_p50_s": long_ttft,
    }
    return m, samples


GGUF_SOURCE = "GGUF header of "


def roof_facts(ceilings: dict[str, Any] | None) -> dict[str, Any]:
    """Both decode roofs of a probe's setting at batch 1 and the bytes behind them, from the served
    file: when the probe read the served GGUF (``ceilings.model_spec.source``), its tensor table gives
    the exact bytes each decode step reads (``step_bytes``: every weight tensor at its own stored
    type, the tied output layer read in full, plus the KV) — not the quant type's nominal bits. Keys:
    ``bandwidth_tok_s``, ``compute_tok_s``, ``binding``, ``step_bytes``, ``output_layer`` (``{"type",
    "bytes", "tied"}``: the embedding/output matrix, on a small model with a large vocabulary most of the
    bytes). {} when the file or the device is not readable here."""
    c = ceilings if isinstance(ceilings, dict) else {}
    src = str((c.get("model_spec") or {}).get("source") or "")
    sizes = c.get("sizes") or []
    dev_id = (c.get("device") or {}).get("id")
    if not src.startswith(GGUF_SOURCE) or not sizes or not dev_id:
        return {}
    try:
        from phasescope.theory import devices as Dv
        from phasescope.theory import roofline as R
        from phasescope.theory.gguf_header import read_gguf_header
        from phasescope.theory.hw import local_profile_note
        from phasescope.theory.models.gguf import spec_from_gguf

        path = src[len(GGUF_SOURCE):]
        spec = spec_from_gguf(path)
        roofs = R.decode_ceiling(spec, Dv.get_device(str(dev_id)), context=int(sizes[0].get("prompt_tokens") or 0), batch=1)
        tensors = {t.name: t for t in read_gguf_header(path).tensors}
    except Exception:  # advisory facts: a file gone or unreadable since the run leaves the row as it was
        return {}
    out_t = tensors.get("output.weight") or tensors.get("token_embd.weight")
    return {"bandwidth_tok_s": roofs.bandwidth_tok_s, "compute_tok_s": roofs.compute_tok_s, "binding": roofs.binding,
            "step_bytes": roofs.step_bytes,
            "output_layer": None if out_t is None else {"type": out_t.type_name, "bytes": out_t.n_bytes,
                                                        "tied": "output.weight" not in tensors},
            "bytes_source": "the served GGUF's tensor table",
            "device_note": local_profile_note(c.get("device")).strip().rstrip(".")}


def with_ratios(rows: list[dict[str, Any]]) -> None:
    """Fill each ok row's ``vs_baseline`` (metric / the baseline's; None where either is missing)."""
    base = rows[0] if rows and rows[0].get("status") == "ok" else None
    for r in rows:
        if r.get("status") != "ok" or base is None:
            r["vs_baseline"] = r["vs_baseline_ci"] = None
            continue
        r["vs_baseline"] = {k: (r["metrics"][k] / base["metrics"][k]
                                if r["metrics"].get(k) is not None and base["metrics"].get(k) else None)
                            for k, *_ in METRIC_KEYS}
        # each ratio's interval (ends divided crosswise), where both rows have one from ≥ 2 samples
        ia, ib = _intervals_of(base), _intervals_of(r)
        r["vs_baseline_ci"] = {k: (I.to_ci(I.ratio(ib[k], ia[k])) if k in ia and k in ib and ia[k].known
                                   and ib[k].known and ia[k].low > 0 and ib[k].low >= 0 else None)
                               for k, *_ in METRIC_KEYS}
        bc, rc = (base.get("ceiling") or {}).get("decode_tok_s"), (r.get("ceiling") or {}).get("decode_tok_s")
        r["ceiling_ratio"] = rc / bc if rc and bc else None
        bb, rb = (base.get("ceiling") or {}).get("step_bytes"), (r.get("ceiling") or {}).get("step_bytes")
        r["bytes_ratio"] = rb / bb if rb and bb else None


class Verdict:
    CHANGED = "changed"
    NOISE = "within_noise"
    UNKNOWN = "cannot_tell"
    UNSTABLE = "unstable"


def row_intervals(metrics: dict[str, Any], samples: dict[str, list[float]]) -> dict[str, I.Interval]:
    """Each metric's 95 % interval: that of the median of its per-request samples, widened to hold the
    reported value (a pooled percentile or the run rate need not be the samples' median)."""
    out: dict[str, I.Interval] = {}
    for key, *_ in METRIC_KEYS:
        v = metrics.get(key)
        if v is None:
            continue
        iv = I.median_interval(samples.get(key) or [])
        if iv is None:
            out[key] = I.single(v)
        else:
            out[key] = I.Interval(float(v), min(iv.low, v), max(iv.high, v), iv.n, iv.method, iv.confidence,
                                  iv.min, iv.max)
    return out


def _intervals_of(row: dict[str, Any]) -> dict[str, I.Interval]:
    stored = row.get("intervals")
    if isinstance(stored, dict) and stored:
        return {k: I.Interval.from_json(d) for k, d in stored.items() if isinstance(d, dict)}
    return row_intervals(row.get("metrics") or {}, row.get("samples") or {})


def compare_metric(base: dict[str, Any], other: dict[str, Any], key: str) -> str:
    """:data:`Verdict.CHANGED` when both rows have an interval of ``key`` from ≥ 2 samples, neither
    flags it ``unstable``, and the intervals do not overlap; :data:`Verdict.UNSTABLE` when a row's run
    flagged it; :data:`Verdict.NOISE` when they overlap; :data:`Verdict.UNKNOWN` with fewer than 2 samples."""
    if key in (base.get("unstable") or []) or key in (other.get("unstable") or []):
        return Verdict.UNSTABLE
    a, b = _intervals_of(base).get(key), _intervals_of(other).get(key)
    if a is None or b is None or not (a.known and b.known):
        return Verdict.UNKNOWN
    return Verdict.NOISE if I.compare(a, b) == I.CANNOT_TELL else Verdict.CHANGED


#: the probe figures whose ``unstable`` flag (sizes[].unstable) stands for a row metric
UNSTABLE_TO_METRIC = {"ttft_s": "ttft_p50_s", "decode_tok_s": "decode_tok_s"}


def unstable_metrics(summary: dict[str, Any] | None) -> list[str]:
    """The row metrics a setting's stored run flagged ``unstable`` (a probe's sizes whose repeats still
    disagreed), so no finding rests on them."""
    s = summary if isinstance(summary, dict) else {}
    out: set[str] = set()
    for size in s.get("sizes") or []:
        if isinstance(size, dict):
            out |= {UNSTABLE_TO_METRIC[f] for f in size.get("unstable") or [] if f in UNSTABLE_TO_METRIC}
    for w in s.get("warnings") or []:
        if isinstance(w, dict) and w.get("kind") == "unstable":
            f = (w.get("evidence") or {}).get("figure")
            if f in UNSTABLE_TO_METRIC:
                out.add(UNSTABLE_TO_METRIC[f])
    return sorted(out)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.0f} tok/s" if v >= 10 else f"{v:.1f} tok/s"


#: what the finding speaks about, in order
FINDING_METRICS = (("decode_tok_s", "decode"), ("ttft_p50_s", "TTFT"), ("itl_p99_s", "ITL p99"),
                   ("itl_max_s", "longest pause"), ("ttft_long_p50_s", "TTFT of the long prompts"))


def finding(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per ok setting against the baseline, computed from the rows (module docstring)."""
    if not rows or rows[0].get("status") != "ok":
        return ["the baseline setting did not run: nothing to compare with"] if rows else []
    base = rows[0]
    units = {k: u for k, _, u, _ in METRIC_KEYS}
    out = []
    for r in rows[1:]:
        if r.get("status") != "ok":
            out.append(f"{r['label']}: failed ({r.get('reason') or 'no reason recorded'})")
            continue
        parts = []
        ivs_a, ivs_b = _intervals_of(base), _intervals_of(r)
        for key, word in FINDING_METRICS:
            a, b = base["metrics"].get(key), r["metrics"].get(key)
            if key in OPTIONAL_KEYS and a is None and b is None:
                continue  # not a mixed workload: no long prompts to speak of
            if a is None or b is None:
                parts.append(f"{word}: not measured")
                continue
            v = compare_metric(base, r, key)
            nums = f"{_fmt(a, units[key])} → {_fmt(b, units[key])}"
            if v == Verdict.CHANGED:
                verb = "raised" if b > a else "lowered"
                parts.append(f"{verb} {word} {b / a:.2f}× ({nums})")
            elif v == Verdict.UNSTABLE:
                who = [x["label"] for x in (base, r) if key in (x.get("unstable") or [])]
                parts.append(f"{word}: cannot tell, the repeats of {' and '.join(who)} disagree "
                             f"({_spread(ivs_a.get(key), a, units[key])} → {_spread(ivs_b.get(key), b, units[key])})")
            elif v == Verdict.NOISE:
                parts.append(f"{word}: cannot tell, within the repeat spread "
                             f"({_spread(ivs_a.get(key), a, units[key])} → {_spread(ivs_b.get(key), b, units[key])})")
            else:
                parts.append(f"{word}: cannot tell, fewer than 2 samples ({nums})")
        pred = r.get("ceiling_ratio")
        if pred is not None and abs(pred - 1) > 1e-9:
            parts.append(f"the bandwidth roof predicts decode {pred:.2f}×")
        k = r.get("bytes_ratio")
        if k is not None and abs(k - 1) > 0.005:
            parts.append(f"bytes read per token {_mb(base['ceiling']['step_bytes'])} → {_mb(r['ceiling']['step_bytes'])} "
                         f"({k:.2f}× from the files' tensors, not the types' nominal bits)")
        out.append(f"{r['label']} vs {base['label']}: " + "; ".join(parts))
    roofs = roof_sentence(rows)
    return out + ([roofs] if roofs else [])


def _spread(iv: I.Interval | None, v: float, unit: str) -> str:
    """The value, with the range of its samples where its interval is wider than ±10 %."""
    if iv is None or not iv.known or iv.tight():
        return _fmt(v, unit)
    lo = iv.min if iv.min is not None else iv.low
    hi = iv.max if iv.max is not None else iv.high
    return f"{_fmt(v, unit)} [{_fmt(lo, unit)}–{_fmt(hi, unit)}, n={iv.n}]"


def _mb(b: float) -> str:
    return f"{b / 1e6:.0f} MB"


def _eff(row: dict[str, Any]) -> float:
    c = row.get("ceiling") or {}
    d = (row.get("metrics") or {}).get("decode_tok_s")
    return d / c["bandwidth_tok_s"] if d and c.get("bandwidth_tok_s") else 0.0


#: settings whose bytes per token differ by at least this factor tell whether decode follows the bytes
BYTES_SPREAD = 1.3
#: ... and it does when their attained GB/s (bytes per token × decode) differ by at most this factor
ATTAINED_SPREAD = 1.35
#: a single setting at or above this share of its bandwidth roof is called bandwidth-bound
BW_BOUND = 0.7


def _gbs(r: dict[str, Any]) -> float:
    return r["metrics"]["decode_tok_s"] * r["ceiling"]["step_bytes"] / 1e9


def _span(lo: float, hi: float, fmt: str = "{:.0f}") -> str:
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else f"{a}–{b}"


def roof_sentence(rows: list[dict[str, Any]]) -> str | None:
    """Which roof binds decode here, from the ok rows' roofs, bytes and measured decode (None without roofs).

    The lower roof by the device's numbers comes first. Then, with settings whose bytes per token differ
    (≥ :data:`BYTES_SPREAD`×), the attained bandwidth (bytes × decode) of each: about equal (within
    :data:`ATTAINED_SPREAD`×) — decode follows the bytes, bandwidth-bound at the GB/s the engine's kernels
    attain (which can be well under the device's, so the share of the roof alone does not say compute-bound);
    spread wider — each type's kernel binds as much as its bytes. Otherwise only the share of the roof."""
    ok = [r for r in rows if r.get("status") == "ok" and (r.get("ceiling") or {}).get("bandwidth_tok_s")
          and (r.get("ceiling") or {}).get("step_bytes") and (r.get("metrics") or {}).get("decode_tok_s")]
    if not ok:
        return None
    effs = [_eff(r) for r in ok]
    c0 = ok[0]["ceiling"]
    comp = c0.get("compute_tok_s")
    lower = f"the {c0.get('binding') or 'bandwidth'} roof is the lower one (bandwidth {c0['bandwidth_tok_s']:.0f} tok/s" + (
        f", compute {comp:.0f} tok/s" if comp else ", compute unknown") + f" for {ok[0]['label']})"
    dev = c0["bandwidth_tok_s"] * c0["step_bytes"] / 1e9
    gbs = [_gbs(r) for r in ok]
    reach = (f"decode reaches {_span(100 * min(effs), 100 * max(effs))} % of it, attaining "
             f"{_span(min(gbs), max(gbs))} GB/s (bytes per token × decode) of the device's {dev:.0f} GB/s"
             + (f" ({c0['device_note']})" if c0.get("device_note") else ""))
    steps = [r["ceiling"]["step_bytes"] for r in ok]
    # the claims rest on each setting's decode interval, not its median alone
    ivs = [_intervals_of(r).get("decode_tok_s") for r in ok]
    unknown = [r["label"] for r, iv in zip(ok, ivs) if iv is None or not iv.known]
    shaky = [r["label"] for r, iv in zip(ok, ivs) if r["label"] not in unknown
             and "decode_tok_s" in (r.get("unstable") or [])]
    if unknown or shaky:
        why = ([f"the decode repeats of {', '.join(shaky)} disagree"] if shaky else []) + (
            [f"{', '.join(unknown)} has one decode sample (no spread)"] if unknown else [])
        verdict = f"cannot tell which binds: {'; '.join(why)}"
    else:
        lo_gbs = [iv.low * r["ceiling"]["step_bytes"] / 1e9 for r, iv in zip(ok, ivs)]
        hi_gbs = [iv.high * r["ceiling"]["step_bytes"] / 1e9 for r, iv in zip(ok, ivs)]
        lo_eff = [iv.low / r["ceiling"]["bandwidth_tok_s"] for r, iv in zip(ok, ivs)]
        hi_eff = [iv.high / r["ceiling"]["bandwidth_tok_s"] for r, iv in zip(ok, ivs)]
        if max(steps) / min(steps) >= BYTES_SPREAD:
            if max(hi_gbs) / min(lo_gbs) <= ATTAINED_SPREAD:
                verdict = ("every setting attains about the same GB/s while its bytes differ, so decode follows the "
                           "bytes read per token: bandwidth-bound, at the bandwidth this engine's kernels attain here")
            elif max(lo_gbs) / min(hi_gbs) > ATTAINED_SPREAD:
                verdict = ("the GB/s attained differ from setting to setting, so each type's kernel (its "
                           "dequantization work) binds as much as its bytes: a type with more bytes but a cheaper "
                           "kernel loses less decode than its bytes say, and one with fewer bytes but a costlier "
                           "kernel gains less")
            else:
                verdict = (f"cannot tell whether decode follows the bytes: within the decode rates' intervals the GB/s "
                           f"attained span {min(lo_gbs):.0f}–{max(hi_gbs):.0f}, on both sides of a "
                           f"{ATTAINED_SPREAD:.2f}× spread")
        elif min(lo_eff) >= BW_BOUND:
            verdict = "close to the roof: bandwidth-bound, so decode follows the bytes read per token"
        elif max(hi_eff) < BW_BOUND:
            verdict = ("far below the roof, and these settings read about the same bytes, so they do not tell whether "
                       "the bytes (at the bandwidth the kernels attain) or the kernels' work bind; vary the quant type "
                       "to see")
        else:
            verdict = (f"cannot tell whether decode is bandwidth-bound: its interval reaches "
                       f"{100 * min(lo_eff):.0f}–{100 * max(hi_eff):.0f} % of the roof, on both sides of "
                       f"{100 * BW_BOUND:.0f} %")
    out = c0.get("output_layer")
    tail = ""
    if out and out.get("tied") and out["bytes"] > 0.3 * c0["step_bytes"]:
        tail = (f"; the tied output layer alone is {_mb(out['bytes'])} ({out['type']}) of the {_mb(c0['step_bytes'])} "
                f"{ok[0]['label']} reads per token")
    return f"roofs (decode, batch 1): {lower}; {reach}; {verdict}{tail}"


#: ``--slo`` keys tune can judge, and the row metric (p99, seconds) each is compared with
SLO_METRICS = {"ttft": "ttft_p99_s", "itl": "itl_p99_s"}


def recommend(rows: list[dict[str, Any]], slo: dict[str, float] | None) -> dict[str, Any] | None:
    """The ok setting with the highest throughput among those whose p99s meet ``slo`` (ms), with the
    reason; None without an SLO. ``{"index", "params", "label", "reason"}`` (index None: none meets it)."""
    if not slo:
        return None
    words = ", ".join(f"{k.upper()} p99 ≤ {v:g} ms" for k, v in slo.items())
    ok = [r for r in rows if r.get("status") == "ok"]
    within = [r for r in ok if all((r["metrics"].get(SLO_METRICS[k]) is not None
                                    and r["metrics"][SLO_METRICS[k]] * 1000 <= v) for k, v in slo.items())]
    if not within:
        return {"index": None, "params": None, "label": None,
                "reason": f"none of the {len(ok)} measured settings meets the SLO ({words})"}
    best = max(within, key=lambda r: r["metrics"].get("throughput_tok_s") or 0.0)
    tp = best["metrics"].get("throughput_tok_s")
    return {"index": best["index"], "params": dict(best["params"]), "label": best["label"],
            "reason": f"the highest throughput ({_fmt(tp, 'tok/s')}) of the {len(within)} of {len(ok)} settings "
                      f"within the SLO ({words})"}
