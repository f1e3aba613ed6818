"""Aggregates of request records: the one module every summary, table, report and comparison
computes its numbers with, so one run prints one number everywhere (``probe --json``, ``bench``,
``show``, ``compare``, ``report``).

Per-record metrics live in :mod:`phasescope.measure.derive` (one hop from the name to its
definition); this module turns a group of records into one number per metric, with one rule for
which records count and one statistic per kind of metric.

Which records count — :func:`is_measured`: every record except warm-ups (``tags.warmup`` as probe
and bench mark them, ``tags.phase == "warmup"`` as the experiments do). Aggregates are over the
*successful* measured records (:func:`successful`); failures are counted, not averaged.

One statistic — :func:`percentile`, numpy's linear interpolation as ``vllm bench serve``
(``np.percentile``); the median *is* ``percentile(·, 50)`` everywhere (vLLM prints ``np.median``
for its ``median_*`` keys, the same number up to the last bit; we use one function so that two
outputs of the same run agree to the last bit).

The aggregates of one measurement point (:data:`METRICS`, computed by :func:`point_value` over
:func:`samples_of`), with their vLLM counterparts (``vllm/benchmarks/serve.py:calculate_metrics``):

* ``ttft_s`` — median over requests of :func:`~phasescope.measure.derive.ttft_s`; vLLM
  ``median_ttft_ms`` (÷ 1000). ``ttft_p99_s``: the 99th percentile; vLLM ``p99_ttft_ms``.
* ``prefill_tok_s`` — median over requests of prompt_tokens / TTFT
  (:func:`~phasescope.measure.derive.prefill_tok_s`). vLLM prints no prefill rate; this follows its
  rule for every per-request metric (a statistic of the per-request values), never a ratio of two
  medians: median(prompt) / median(TTFT) is not any request's rate and, with an even number of
  requests, not the median rate either.
* ``decode_tok_s`` — median over requests of (output − 1) / (last − first token); vLLM has no
  per-request decode rate (its ``output_throughput`` is all requests over the run), it is 1/TPOT.
* ``tpot_s`` — median of :func:`~phasescope.measure.derive.tpot_s`; vLLM ``median_tpot_ms``.
* ``itl_p50_s`` / ``itl_p99_s`` — percentiles of the per-token ITL pooled over the requests
  (:func:`~phasescope.measure.derive.itl_s`); vLLM ``median_itl_ms`` / ``p99_itl_ms`` (pooled over
  all tokens of all requests the same way; vLLM's are per event — ours per token).
* ``e2e_s`` — median of :func:`~phasescope.measure.derive.e2e_s`; vLLM ``median_e2el_ms``.
* ``throughput_tok_s`` — output tokens / (last token − first request start) on the wall clock;
  vLLM ``output_throughput``. For a verdict the span is cut into equal windows and each window's
  output tokens give a per-window rate.

Requests are grouped into measurement points by the workload tags that define one
(:data:`GROUP_TAGS`, e.g. ``prompt_tokens_target=512`` or ``concurrency=8``, :func:`group_records`);
a run whose tags say nothing but whose requested prompt lengths vary is grouped by
``prompt_tokens_requested``. :func:`metric_table` is the table ``show`` prints.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from phasescope.measure import derive
from phasescope.measure import stats
from phasescope.measure.records import RequestRecord


# --- which records count -----------------------------------------------------------------------
def is_warmup(r: RequestRecord) -> bool:
    """A warm-up: ``tags.warmup`` (probe, bench) or ``tags.phase == "warmup"`` (experiments)."""
    t = r.tags or {}
    return bool(t.get("warmup")) or t.get("phase") == "warmup"


def is_measured(r: RequestRecord) -> bool:
    """The one rule for which records an aggregate counts: every record that is not a warm-up."""
    return not is_warmup(r)


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records that count (:func:`is_measured`), in order."""
    return [r for r in records if is_measured(r)]


def cached_share(records: Iterable[RequestRecord]) -> float | None:
    """Σ cached ÷ Σ prompt tokens over the given records whose server reported a cached count
    (:func:`phasescope.measure.derive.cached_prompt_tokens`): the prefix-cache hit rate by tokens,
    as vLLM's ``prefix_cache_hits / prefix_cache_queries``. None when no record reports one. The
    caller picks the records (measured, successful, …)."""
    known = [(c, r.prompt_tokens) for r in records
             if r.prompt_tokens and (c := derive.cached_prompt_tokens(r)) is not None]
    return sum(c for c, _ in known) / sum(p for _, p in known) if known else None


def successful(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The measured records that succeeded: what every latency and rate is aggregated over."""
    return [r for r in records if is_measured(r) and r.ok]


# --- the one statistic -------------------------------------------------------------------------
def percentile(xs: Sequence[float | None], q: float) -> float | None:
    """q in [0, 100], numpy's linear interpolation (vLLM's ``np.percentile``); None and non-finite
    values are left out; ``None`` for an empty sample."""
    return stats.percentile(xs, q)


def median(xs: Sequence[float | None]) -> float | None:
    """``percentile(xs, 50)``: the one median of every output."""
    return stats.percentile(xs, 50)


def distribution(xs: Sequence[float | None], percentiles: Sequence[float], *, scale: float = 1.0) -> dict[str, float | None]:
    """``{"mean", "median", "std", "p<q>"...}`` of ``xs`` × ``scale`` — the statistics of a vLLM
    metric block (std is population std, vLLM's ``np.std``). The median and percentiles are
    computed on the unscaled values and then scaled, so ``median × 1000`` (ms) is exactly the
    median in seconds × 1000 that :func:`median` gives elsewhere."""
    d = stats.describe(xs, ())
    out: dict[str, float | None] = {
        "mean": None if d["mean"] is None else d["mean"] * scale,
        "median": None if d["mean"] is None else median(xs) * scale,  # type: ignore[operator]
        "std": None if d["std"] is None else d["std"] * scale,
    }
    for q in percentiles:
        v = percentile(xs, q)
        out[f"p{_pword(q)}"] = None if v is None else v * scale
    return out


def _pword(q: float) -> str:
    """vLLM's key form: 99 → "99", 99.9 → "99.9"."""
    return str(int(q)) if float(q).is_integer() else str(q)


# --- the metrics of one measurement point --------------------------------------------------------
@dataclass(frozen=True)
class MetricDef:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    kind: str  # "request" (median of one value per request) | "tail" (a percentile of one) | "token" (pooled) | "window"
    q: float = 50.0  # the percentile reported (token and tail metrics)
    source: str | None = None  # tail metrics: the per-request metric whose percentile this is


METRICS: tuple[MetricDef, ...] = (
    MetricDef("ttft_s", "TTFT", "s", False, "request"),
    MetricDef("ttft_p99_s", "TTFT p99", "s", False, "tail", 99.0, "ttft_s"),
    # prompt ÷ TTFT: a prefill speed only for a request alone (probe); under load TTFT includes waiting
    MetricDef("prefill_tok_s", "prompt ÷ TTFT", "tok/s", True, "request"),
    MetricDef("decode_tok_s", "decode tok/s", "tok/s", True, "request"),
    MetricDef("tpot_s", "TPOT", "s", False, "request"),
    MetricDef("itl_p50_s", "ITL p50", "s", False, "token", 50.0),
    MetricDef("itl_p99_s", "ITL p99", "s", False, "token", 99.0),
    MetricDef("e2e_s", "E2E", "s", False, "request"),
    MetricDef("throughput_tok_s", "throughput", "tok/s", True, "window"),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}

#: the per-request metric behind each ``request`` metric (and the extra ones probe reports)
REQUEST_FNS = {
    "ttft_s": derive.ttft_s,
    "prefill_tok_s": derive.prefill_tok_s,
    "decode_tok_s": derive.decode_tok_s,
    "tpot_s": derive.tpot_s,
    "e2e_s": derive.e2e_s,
}


@dataclass
class Samples:
    """The samples of one group of one run: per-request values of :data:`REQUEST_FNS` over the
    successful measured records, the per-token ITL kept per request (a bootstrap resamples whole
    requests: one request's tokens are correlated), the run rate and its per-window rates."""

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


def samples_of(records: Sequence[RequestRecord], n_windows: int = 10) -> Samples:
    """The :class:`Samples` of a group of records (warm-ups left out by :func:`is_measured`)."""
    recs = measured(records)
    ok = [r for r in recs if r.ok]
    s = Samples(records=recs, n_ok=len(ok), n_err=len(recs) - len(ok))
    for key, fn in REQUEST_FNS.items():
        s.request[key] = [v for v in (fn(r) for r in ok) if v is not None]
    s.itl_by_request = [x for x in (derive.itl_s(r) for r in ok) if x]
    s.throughput_tok_s, s.window_tok_s = _throughput(ok, n_windows)
    return s


def point_value(s: Samples, m: MetricDef) -> float | None:
    """The number reported for metric ``m`` (see the module docstring)."""
    if m.kind == "request":
        return median(s.values(m.key))
    if m.kind == "tail":
        v = s.values(m.source or "")
        return percentile(v, m.q) if v else None
    if m.kind == "token":
        return percentile(s.pooled_itl(), m.q)
    return s.throughput_tok_s


def point_n(s: Samples, m: MetricDef) -> int:
    """How many samples stand behind :func:`point_value` (requests; tokens for ITL)."""
    if m.kind == "request":
        return len(s.values(m.key))
    if m.kind == "tail":
        return len(s.values(m.source or ""))
    if m.kind == "token":
        return len(s.pooled_itl())
    return s.n_ok


def point_summary(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Every :data:`METRICS` value of one group, plus ``n_ok`` and ``n_err``."""
    s = samples_of(records)
    out: dict[str, Any] = {m.key: point_value(s, m) for m in METRICS}
    out.update(n_ok=s.n_ok, n_err=s.n_err)
    return out


def _wall(r: RequestRecord, t_ns: int) -> int:
    return (r.wall_start_ns + (t_ns - r.t_start_ns)) if r.wall_start_ns else t_ns


def _throughput(ok: list[RequestRecord], n_windows: int) -> tuple[float | None, list[float]]:
    """Output tokens / (last token − first start) on the wall clock (records of several worker
    processes line up: ``wall_start_ns + (t − t_start_ns)``), and the per-window rates."""
    starts = [_wall(r, r.t_start_ns) for r in ok]
    toks: list[tuple[int, float]] = []  # (wall ns, tokens)
    for r in ok:
        ev = r.token_events()
        if not ev:
            continue
        total = derive.output_tokens(r) or len(ev)
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


# --- measurement points --------------------------------------------------------------------------
#: record tags that name a measurement point (in this order in labels)
GROUP_TAGS = ("experiment", "phase", "concurrency", "request_rate", "rate", "prompt_tokens_target", "prompt_tokens",
              "size", "context_target", "context_tokens", "cached")

Group = tuple[tuple[str, Any], ...]


def group_label(group: Group) -> str:
    return ", ".join(f"{k}={v}" for k, v in group)


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def group_records(records: Sequence[RequestRecord]) -> dict[Group, list[RequestRecord]]:
    """Measured records by measurement point (see the module docstring), in first-seen order."""
    recs = measured(records)
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


def run_samples(records: Sequence[RequestRecord]) -> dict[Group, Samples]:
    return {g: samples_of(rs) for g, rs in group_records(records).items()}


def metric_table(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Rows ``{"group", "metric", "label", "unit", "value", "n"}``: what ``show`` prints."""
    rows: list[dict[str, Any]] = []
    for g, s in run_samples(records).items():
        for m in METRICS:
            v = point_value(s, m)
            if v is None:
                continue
            rows.append({"group": group_label(g), "metric": m.key, "label": m.label, "unit": m.unit, "value": v,
                         "n": point_n(s, m)})
        if s.n_err:
            rows.append({"group": group_label(g), "metric": "errors", "label": "failed requests", "unit": "",
                         "value": s.n_err, "n": s.n_ok + s.n_err})
    return rows
