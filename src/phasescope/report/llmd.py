"""``phasescope export RUN --format llmd``: one stored run as llm-d's Benchmark Report v0.2
(``llm-d/llm-d-benchmark:benchmark_report/schema_v0_2.py``), the one result schema other tools read.

What goes where (every statistic over the run's successful measured requests, as ``show`` prints them,
:mod:`phasescope.measure.aggregate`):

* ``run``: ``uid`` the run id, ``time.start``/``end`` (ISO 8601, UTC) and ``duration`` (ISO 8601, ``PT…S``);
* ``scenario.stack``: one ``generic`` component (the schema's free-form kind) naming the engine, its
  version and ``model.name``; ``scenario.load``: ``tool: phasescope``, its version, ``source: random``,
  the input and output lengths (``fixed`` when every request asked the same, else ``other`` at the mean),
  the concurrency or rate when the run set one, and the run's parameters under ``native.args``;
* ``results.request_performance.aggregate``: ``requests`` (total, failures, input/output lengths in
  ``count``), ``latency`` — ``time_to_first_token`` (s), ``time_per_output_token`` (s/token, first token
  excluded: phasescope's TPOT), ``inter_token_latency`` (s/token, per token, pooled over requests),
  ``request_latency`` (s) — each a ``Statistics`` block (mean, stddev, min, p0p1 … p99p9, max), and
  ``throughput.output_token_rate`` (tokens/s: output tokens over the run's span, as ``output_throughput``)
  and ``request_rate`` (queries/s).

Followed: ``schema_v0_2.py`` at llm-d-benchmark 8bc9f1d (2026-08-21, ``llmdbenchmark/analysis/benchmark_report/``):
a component's ``kind`` sits in ``standardized`` and the request rate is ``request_rate``; an earlier revision
of the same file (``benchmark_report/schema_v0_2.py``) had ``metadata.kind`` and ``requests_rate`` —
``phasescope import`` reads both.

phasescope's prefill rate (prompt ÷ TTFT) and decode tok/s have no field in v0.2 (its models forbid
extra keys), so they are not written; ``phasescope import`` of the file gives back every metric above.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from phasescope._version import __version__
from phasescope.measure import derive
from phasescope.measure.aggregate import METRIC_BY_KEY, measured, point_value, samples_of, successful
from phasescope.measure.records import RequestRecord
from phasescope.measure.stats import percentile
from phasescope.store import RunInfo

VERSION = "0.2"
#: the schema's percentile fields and the percentile each names
PERCENTILES = (("p0p1", 0.1), ("p1", 1.0), ("p5", 5.0), ("p10", 10.0), ("p25", 25.0), ("p50", 50.0), ("p75", 75.0),
               ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99p9", 99.9))


def statistics(xs: list[float], units: str) -> dict[str, Any] | None:
    """A v0.2 ``Statistics`` block of ``xs`` (None when empty): units, mean, stddev, min, the percentiles, max."""
    vals = [float(x) for x in xs if x is not None]
    if not vals:
        return None
    mean = sum(vals) / len(vals)
    out: dict[str, Any] = {"units": units, "mean": mean,
                           "stddev": (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5, "min": min(vals)}
    for name, q in PERCENTILES:
        out[name] = percentile(vals, q)
    out["max"] = max(vals)
    return out


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _length(vals: list[int]) -> dict[str, Any] | None:
    vals = [v for v in vals if v]
    if not vals:
        return None
    if len(set(vals)) == 1:
        return {"distribution": "fixed", "value": vals[0]}
    return {"distribution": "other", "value": max(1.0, sum(vals) / len(vals)), "min": min(vals), "max": max(vals)}


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in params.items() if isinstance(v, (str, int, float, bool)) or v is None}


def benchmark_report(info: RunInfo, records: list[RequestRecord]) -> dict[str, Any]:
    """The run as a Benchmark Report v0.2 document (plain JSON data)."""
    ok = successful(records)
    meas = measured(records)
    s = samples_of(meas)
    lat: dict[str, Any] = {}
    for key, values, units in (
        ("time_to_first_token", [derive.ttft_s(r) for r in ok], "s"),
        ("time_per_output_token", [derive.tpot_s(r) for r in ok], "s/token"),
        ("inter_token_latency", [g for r in ok for g in derive.itl_s(r)], "s/token"),
        ("request_latency", [derive.e2e_s(r) for r in ok], "s"),
    ):
        st = statistics([v for v in values if v is not None], units)
        if st is not None:
            lat[key] = st
    reqs: dict[str, Any] = {"total": len(meas), "failures": len(meas) - len(ok)}
    for key, vals in (("input_length", [r.prompt_tokens for r in ok if r.prompt_tokens]),
                      ("output_length", [r.output_tokens for r in ok if r.output_tokens])):
        st = statistics([float(v) for v in vals if v is not None], "count")
        if st is not None:
            reqs[key] = st
    thr: dict[str, Any] = {}
    tput = point_value(s, METRIC_BY_KEY["throughput_tok_s"])
    if tput is not None:
        thr["output_token_rate"] = {"units": "tokens/s", "mean": tput}
    starts = [r.t_start_ns for r in meas]
    ends = [r.t_done_ns or (r.events[-1].t_ns if r.events else r.t_start_ns) for r in meas]
    if ok and starts and max(ends) > min(starts):
        thr["request_rate"] = {"units": "queries/s", "mean": len(ok) / ((max(ends) - min(starts)) / 1e9)}
    params = info.params or {}
    load_std: dict[str, Any] = {"tool": "phasescope", "tool_version": info.phasescope_version or __version__,
                                "source": "random", "stage": 0,
                                "input_seq_len": _length([r.prompt_tokens_requested or r.prompt_tokens or 0 for r in meas])
                                or {"distribution": "other", "value": 1}}
    out_len = _length([r.max_tokens or 0 for r in meas])
    if out_len:
        load_std["output_seq_len"] = out_len
    conc = params.get("concurrency")
    if isinstance(conc, int) and not isinstance(conc, bool) and conc >= 1:
        load_std["concurrency"] = conc
    rate = params.get("rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
        load_std["rate_qps"] = float(rate)
    doc: dict[str, Any] = {
        "version": VERSION,
        "run": {"uid": info.id, "time": {k: v for k, v in (
            ("start", _iso(info.started_at)), ("end", _iso(info.ended_at)),
            ("duration", f"PT{info.ended_at - info.started_at:.3f}S" if info.ended_at else None)) if v is not None}},
        "scenario": {
            "stack": [{"metadata": {"schema_version": "0.0.1", "label": info.engine or "server",
                                    "cfg_id": info.id, "description": f"the server phasescope measured ({info.target or '?'})"},
                       "standardized": {"kind": "generic", "tool": info.engine or "unknown", "tool_version": info.engine_version or "unknown",
                                        **({"model": {"name": info.model}} if info.model else {})},
                       "native": {}}],
            "load": {"metadata": {"schema_version": "0.0.1", "description": f"phasescope {info.kind} run {info.id}"},
                     "standardized": load_std, "native": {"args": _plain(params)}},
        },
        "results": {"request_performance": {"aggregate": {"requests": reqs, "latency": lat, "throughput": thr}}},
    }
    return doc
