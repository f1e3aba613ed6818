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
)


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
    ok = [r for r in A.measured(records) if r.ok]
    samples = {
        "ttft_p50_s": s.values("ttft_s"), "ttft_p99_s": s.values("ttft_s"),
        "prefill_tok_s": s.values("prefill_tok_s"), "decode_tok_s": s.values("decode_tok_s"),
        "itl_p50_s": [v for v in (_itl_q(r, 50) for r in ok) if v is not None],
        "itl_p99_s": [v for v in (_itl_q(r, 99) for r in ok) if v is not None],
        "itl_max_s": [max(x) for x in s.itl_by_request if x],
        "throughput_tok_s": list(s.window_tok_s),
    }
    return m, samples


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
FINDING_METRICS = (("decode_tok_s", "decode"), ("ttft_p50_s", "TTFT"), ("itl_p99_s", "ITL p99"))


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
        out.append(f"{r['label']} vs {base['label']}: " + "; ".join(parts))
    return out


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
