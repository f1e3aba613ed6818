"""The report's numbers as data: per run and measurement point, the numbers the page shows,
embedded in it as JSON (``<script id="ps-data" type="application/json">``) so a script reads them
to the last digit instead of parsing rounded text.

A probe run's numbers are its stored summary's ``sizes`` as stored (what ``probe --json`` printed);
any other run's are its records aggregated by :mod:`phasescope.measure.aggregate`, grouped as
``show`` groups them (what ``show`` prints). Group labels are ``show``'s (``prompt_tokens_target=512``).
"""

from __future__ import annotations

from typing import Any

from phasescope.measure.aggregate import group_label, group_records, point_summary
from phasescope.report.plots import Run
from phasescope.report.sections import probe_sizes

#: the numbers of each measurement point the report shows (and embeds as ``ps-data``)
POINT_KEYS = ("ttft_s", "ttft_p99_s", "prefill_tok_s", "decode_tok_s", "tpot_s", "itl_p50_s", "itl_p99_s", "e2e_s",
              "throughput_tok_s")


def _size_group(s: dict[str, Any]) -> str:
    for k in ("prompt_tokens_target", "prompt_tokens"):
        if s.get(k) is not None:
            return f"{k}={s[k]}"
    return ""


def run_points(info: Any, records: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """The numbers the report shows for each measurement point of one run, and where they came
    from: ``"summary"`` — a probe-shaped stored summary's ``sizes`` as stored (the numbers
    ``probe --json`` printed); else ``"records"`` — the records aggregated by
    :mod:`phasescope.measure.aggregate`, grouped as ``show`` groups them (the numbers ``show``
    prints). Group labels are ``show``'s (``prompt_tokens_target=512``)."""
    sizes, _ = probe_sizes(info.summary)
    if sizes:
        pts = []
        for s in sizes:
            srv = s.get("server") if isinstance(s.get("server"), dict) else {}
            pts.append({"group": _size_group(s), **{k: s.get(k) for k in POINT_KEYS if k in s},
                        "server_prefill_tok_s": srv.get("prefill_tok_s"), "n_ok": s.get("ok")})
        return "summary", pts
    out = []
    for g, rs in group_records(records).items():
        p = point_summary(rs)
        out.append({"group": group_label(g), **{k: p[k] for k in POINT_KEYS}, "n_ok": p["n_ok"], "n_err": p["n_err"]})
    return "records", out


def report_data(runs: list[Run]) -> dict[str, Any]:
    """``{"runs": [{"id", "kind", "source", "points": [...]}]}``: :func:`run_points` of each run —
    embedded in the page as JSON (``<script id="ps-data">``) so a script reads the report's numbers
    to the last digit instead of parsing rounded text."""
    out = []
    for info, recs in runs:
        source, pts = run_points(info, recs)
        out.append({"id": info.id, "kind": info.kind, "source": source, "points": pts})
    return {"runs": out}
