"""The tune's answer: one row per setting from its stored run, ratios to the baseline, the
ceiling, and a finding computed from the table.

Every number comes from the setting's stored records through :mod:`phasescope.measure.aggregate`
(the one aggregation; warm-ups left out by ``is_measured``), so ``tune``, ``show`` and ``compare``
print one number for one run. Row keys (``metrics``): ``ttft_p50_s``, ``ttft_p99_s``,
``prefill_tok_s``, ``decode_tok_s``, ``itl_p50_s``, ``itl_p99_s``, ``itl_max_s`` (the longest
pause), ``throughput_tok_s``, ``n_ok``, ``n_err``; ``vs_baseline`` holds each metric's ratio to
setting 0; ``ceiling`` the decode bandwidth roof the probe set beside it (None without one).

The noise rule (:func:`compare_samples`): a metric *changed* only when both settings have at
least two samples (per-request values: TTFT, prefill and decode rate; per-request ITL p50/p99 for
ITL) and their ranges do not overlap — every repeat of one is above every repeat of the other.
Otherwise the finding says "cannot tell" and gives both numbers, so a sentence never claims
what the table's own repeat spread does not show.
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.measure import aggregate as A
from phasescope.measure import derive

__all__ = ["METRIC_KEYS", "Verdict", "compare_samples", "finding", "row_metrics", "with_ratios"]

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
            r["vs_baseline"] = None
            continue
        r["vs_baseline"] = {k: (r["metrics"][k] / base["metrics"][k]
                                if r["metrics"].get(k) is not None and base["metrics"].get(k) else None)
                            for k, *_ in METRIC_KEYS}
        bc, rc = (base.get("ceiling") or {}).get("decode_tok_s"), (r.get("ceiling") or {}).get("decode_tok_s")
        r["ceiling_ratio"] = rc / bc if rc and bc else None
        bb, rb = (base.get("ceiling") or {}).get("step_bytes"), (r.get("ceiling") or {}).get("step_bytes")
        r["bytes_ratio"] = rb / bb if rb and bb else None


class Verdict:
    CHANGED = "changed"
    NOISE = "within_noise"
    UNKNOWN = "cannot_tell"


def compare_samples(base: Sequence[float], other: Sequence[float]) -> str:
    """:data:`Verdict.CHANGED` when both have ≥ 2 samples and their ranges do not overlap;
    :data:`Verdict.NOISE` when they overlap; :data:`Verdict.UNKNOWN` with fewer than 2 samples."""
    if len(base) < 2 or len(other) < 2:
        return Verdict.UNKNOWN
    if min(other) > max(base) or max(other) < min(base):
        return Verdict.CHANGED
    return Verdict.NOISE


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
        for key, word in FINDING_METRICS:
            a, b = base["metrics"].get(key), r["metrics"].get(key)
            if key in OPTIONAL_KEYS and a is None and b is None:
                continue  # not a mixed workload: no long prompts to speak of
            if a is None or b is None:
                parts.append(f"{word}: not measured")
                continue
            v = compare_samples(base["samples"].get(key) or [], r["samples"].get(key) or [])
            nums = f"{_fmt(a, units[key])} → {_fmt(b, units[key])}"
            if v == Verdict.CHANGED:
                verb = "raised" if b > a else "lowered"
                parts.append(f"{verb} {word} {b / a:.2f}× ({nums})")
            elif v == Verdict.NOISE:
                parts.append(f"{word}: cannot tell, within the repeat spread ({nums})")
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
    if max(steps) / min(steps) >= BYTES_SPREAD:
        if max(gbs) / min(gbs) <= ATTAINED_SPREAD:
            verdict = ("every setting attains about the same GB/s while its bytes differ, so decode follows the bytes "
                       "read per token: bandwidth-bound, at the bandwidth this engine's kernels attain here")
        else:
            verdict = ("the GB/s attained differ from setting to setting, so each type's kernel (its dequantization "
                       "work) binds as much as its bytes: a type with more bytes but a cheaper kernel loses less "
                       "decode than its bytes say, and one with fewer bytes but a costlier kernel gains less")
    elif min(effs) >= BW_BOUND:
        verdict = "close to the roof: bandwidth-bound, so decode follows the bytes read per token"
    else:
        verdict = ("far below the roof, and these settings read about the same bytes, so they do not tell whether "
                   "the bytes (at the bandwidth the kernels attain) or the kernels' work bind; vary the quant type to see")
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
