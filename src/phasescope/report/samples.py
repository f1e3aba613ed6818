"""Per-run samples of the phase metrics, derived from raw records — what ``show``, ``compare`` and
the HTML report read, whatever kind of run (probe, bench, explain) produced the records.

Every sample comes from :mod:`phasescope.measure.derive` (one hop to its definition):

* ``ttft_s``, ``e2e_s``, ``decode_tok_s``, ``tpot_s``, ``prefill_tok_s`` — one value per successful
  request (median reported).
* ``itl_s`` — per-token inter-token latencies, kept per request so that bootstrap resamples whole
  requests (tokens of one request are correlated). Reported as the pooled p50 and p99, as vLLM's
  ITL percentiles are over all tokens of all requests.
* ``throughput_tok_s`` — output tokens / (last token − first request start), vLLM's
  ``output_throughput``; for a verdict the run span is cut into equal windows and the output
  tokens landing in each window give per-window rates (token times on the wall clock:
  ``wall_start_ns + (t − t_start_ns)``, so records from several worker processes line up).

Warm-up records (``tags.warmup``, or ``tags.phase == "warmup"``) are left out. Requests are grouped by the workload tags that define a
measurement point (:data:`GROUP_TAGS`, e.g. ``prompt_tokens=512`` or ``concurrency=8``); a run
whose tags say nothing but whose requested prompt lengths vary is grouped by
``prompt_tokens_requested``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord

#: record tags that name a measurement point (in this order in labels)
GROUP_TAGS = ("experiment", "phase", "concurrency", "request_rate", "rate", "prompt_tokens_target", "prompt_tokens",
              "size", "context_target", "context_tokens", "cached")
#: tags that mark requests left out of metrics
SKIP_TAGS = ("warmup",)


@dataclass(frozen=True)
class MetricDef:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    kind: str  # "request" (one value per request) | "tail" (a percentile of one) | "token" (pooled, clustered) | "window"
    q: float = 50.0  # the percentile reported (token and tail metrics)
    source: str | None = None  # tail metrics: the per-request metric whose percentile this is


METRICS: tuple[MetricDef, ...] = (
    MetricDef("ttft_s", "TTFT", "s", False, "request"),
    MetricDef("ttft_p99_s", "TTFT p99", "s", False, "tail", 99.0, "ttft_s"),
    MetricDef("prefill_tok_s", "prefill tok/s", "tok/s", True, "request"),
    MetricDef("decode_tok_s", "decode tok/s", "tok/s", True, "request"),
    MetricDef("tpot_s", "TPOT", "s", False, "request"),
    MetricDef("itl_p50_s", "ITL p50", "s", False, "token", 50.0),
    MetricDef("itl_p99_s", "ITL p99", "s", False, "token", 99.0),
    MetricDef("e2e_s", "E2E", "s", False, "request"),
    MetricDef("throughput_tok_s", "throughput", "tok/s", True, "window"),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}

_REQUEST_FNS = {
    "ttft_s": derive.ttft_s,
    "prefill_tok_s": derive.prefill_tok_s,
    "decode_tok_s": derive.decode_tok_s,
    "tpot_s": derive.tpot_s,
    "e2e_s": derive.e2e_s,
}

Group = tuple[tuple[str, Any], ...]


def group_label(group: Group) -> str:
    return ", ".join(f"{k}={v}" for k, v in group)


def usable(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """Records that count: not warm-ups (``tags.warmup`` as probe/bench mark them, or
    ``tags.phase == "warmup"`` as experiments do)."""
    return [r for r in records if not any(r.tags.get(t) for t in SKIP_TAGS) and r.tags.get("phase") != "warmup"]


def group_records(records: list[RequestRecord]) -> dict[Group, list[RequestRecord]]:
    """Records by measurement point (see the module docstring), in first-seen order."""
    recs = usable(records)
    tagged = [k for k in GROUP_TAGS if any(k in r.tags for r in recs)]
    out: dict[Group, list[RequestRecord]] = defaultdict(list)
    if tagged:
        for r in recs:
            out[tuple((k, _hashable(r.tags.get(k))) for k in tagged if r.tags.get(k) is not None)].append(r)
        return dict(out)
    lens = {r.prompt_tokens_requested for r in recs if r.prompt_tokens_requested is not None}
    if len(lens) > 1:
        for r in recs:
            out[(("prompt_tokens", r.prompt_tokens_requested),) if r.prompt_tokens_requested is not None else ()].append(r)
        return dict(out)
    return {(): recs} if recs else {}


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def _wall(r: RequestRecord, t_ns: int) -> int:
    return (r.wall_start_ns + (t_ns - r.t_start_ns)) if r.wall_start_ns else t_ns


@dataclass
class Samples:
    """The samples of one group of one run."""

    records: list[RequestRecord]
    request: dict[str, list[float]] = field(default_factory=dict)
    itl_by_request: list[list[float]] = field(default_factory=list)
    n_ok: int = 0
    n_err: int = 0
    throughput_tok_s: float | None = None
    window_tok_s: list[float] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        return self.request.get(key, [])

    def pooled_itl(self) -> list[float]:
        return [x for xs in self.itl_by_request for x in xs]


def samples_of(records: list[RequestRecord], n_windows: int = 10) -> Samples:
    ok = [r for r in records if r.ok]
    s = Samples(records=records, n_ok=len(ok), n_err=len(records) - len(ok))
    for key, fn in _REQUEST_FNS.items():
        s.request[key] = [v for v in (fn(r) for r in ok) if v is not None]
    s.itl_by_request = [x for x in (derive.itl_s(r) for r in ok) if x]
    s.throughput_tok_s, s.window_tok_s = _throughput(ok, n_windows)
    return s


def _throughput(ok: list[RequestRecord], n_windows: int) -> tuple[float | None, list[float]]:
    starts = [_wall(r, r.t_start_ns) for r in ok]
    toks: list[tuple[int, float]] = []  # (wall ns, tokens)
    for r in ok:
        ev = r.token_events()
        if not ev:
            continue
        total = derive._output_tokens(r) or len(ev)
        known = all(e.n_tokens is not None for e in ev)
        for e in ev:
            toks.append((_wall(r, e.t_ns), float(e.n_tokens or 0) if known else total / len(ev)))
    if not toks or not starts:
        return None, []
    t0, t1 = min(starts), max(t for t, _ in toks)
    if t1 <= t0:
        return None, []
    total = sum(n for _, n in toks)
    rate = total / ((t1 - t0) / 1e9)
    if len(ok) < n_windows:
        return rate, []
    width = (t1 - t0) / n_windows
    bins = [0.0] * n_windows
    for t, n in toks:
        bins[min(int((t - t0) / width), n_windows - 1)] += n
    return rate, [b / (width / 1e9) for b in bins]


def run_samples(records: list[RequestRecord]) -> dict[Group, Samples]:
    return {g: samples_of(rs) for g, rs in group_records(records).items()}


def point_value(s: Samples, m: MetricDef) -> float | None:
    """The number reported for metric ``m``: the median, the pooled percentile, or the run rate."""
    from phasescope.measure.stats import median, percentile

    if m.kind == "request":
        return median(s.values(m.key))
    if m.kind == "tail":
        v = s.values(m.source or "")
        return percentile(v, m.q) if v else None
    if m.kind == "token":
        return percentile(s.pooled_itl(), m.q)
    return s.throughput_tok_s


def metric_table(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """Rows ``{"group", "metric", "label", "unit", "value", "n"}`` for ``show``."""
    rows: list[dict[str, Any]] = []
    for g, s in run_samples(records).items():
        for m in METRICS:
            v = point_value(s, m)
            if v is None:
                continue
            n = (len(s.values(m.key)) if m.kind == "request" else len(s.values(m.source or "")) if m.kind == "tail"
                 else (len(s.pooled_itl()) if m.kind == "token" else s.n_ok))
            rows.append({"group": group_label(g), "metric": m.key, "label": m.label, "unit": m.unit, "value": v, "n": n})
        if s.n_err:
            rows.append({"group": group_label(g), "metric": "errors", "label": "failed requests", "unit": "",
                         "value": s.n_err, "n": s.n_ok + s.n_err})
    return rows
