"""Server-side metrics alongside a load run: scrape Prometheus ``/metrics`` every ``interval_s``
during the run and keep a timeline, then summarize it next to the client's numbers.

Parsing and engine tables (vLLM, SGLang, TGI, llama.cpp) are :mod:`phasescope.metrics`'s; this
module only schedules scrapes and turns snapshots into bench rows. Scrapes run on their **own
thread and event loop** so parsing a large exposition never delays the runner's token timestamps.

Timeline row (one per scrape, ``t_s`` = seconds after the run's t0 on the same monotonic clock;
``wall_s`` for multi-process alignment): ``running``, ``waiting``, ``kv_usage`` (0–1), and over
the interval since the previous scrape ``prefix_cache_hit_rate``, ``generation_tok_s``,
``prompt_tok_s``, ``preemptions``; cumulative ``generation_tokens`` / ``prompt_tokens`` since the
first scrape.

Summary: ``max_running``, ``max_waiting``, ``time_with_queue_s`` (Σ intervals that start with
waiting > 0), ``kv_usage_peak``, ``preemptions``, run-wide ``prefix_cache_hit_rate``,
``generation_tokens`` (server count) and the server's TTFT histogram over the run
(``server_ttft_p50_ms``/``p99``/``mean``, from bucket deltas via ``histogram_quantile``) —
vLLM's TTFT histogram starts at request *arrival in the server*, the client's at send, so
client − server ≈ network + HTTP + client overhead (both include the server queue).

Speculative decoding (issue 33), ``summary["spec_decode"]`` (None when the server does not speculate):
vLLM and llama.cpp — Δ``spec_decode_num_drafts`` (verified steps), Δ``…_num_draft_tokens``,
Δ``…_num_accepted_tokens`` over the run; SGLang — the mean of the scrapes' ``spec_accept_length``
(tokens per verify step, bonus included) and ``spec_accept_rate`` gauges while it decoded, with the
run's Δ``generation_tokens``: steps = tokens ÷ length, accepted = tokens − steps, drafted = accepted ÷
rate. :func:`spec_decode_section` picks the run's ``spec_decode``: llama.cpp's per-response timings
first (the engine's own per-request truth), then these counters, then the arrival pattern (inferred).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.derive import spec_decode_run, spec_summary
from phasescope.metrics import Scraper, Snapshot, Timeline


@dataclass
class ServerMetricsResult:
    available: bool = False
    reason: str | None = None
    engine: str | None = None
    interval_s: float = 1.0
    timeline: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason, "engine": self.engine,
                "interval_s": self.interval_s, "summary": self.summary, "timeline": self.timeline,
                "notes": self.notes}


def _row(prev: Snapshot | None, cur: Snapshot, first: Snapshot, t0_ns: int) -> dict[str, Any]:
    """One timeline row from the current snapshot and the interval since ``prev``."""
    tl = Timeline(window_s=1e9)
    if prev is not None:
        tl.add(prev)
    tl.add(cur)
    s = tl.summary()
    whole = Timeline(window_s=1e9)
    whole.add(first)
    if cur is not first:
        whole.add(cur)
    row = {
        "t_s": (cur.t_ns - t0_ns) / 1e9,
        "wall_s": cur.wall_s,
        "running": s.get("running"),
        "waiting": s.get("waiting"),
        "kv_usage": s.get("kv_usage"),
        "prefix_cache_hit_rate": s.get("prefix_cache_hit_rate") if prev is not None else None,
        "generation_tok_s": s.get("generation_tok_s") if prev is not None else None,
        "prompt_tok_s": s.get("prompt_tok_s") if prev is not None else None,
        "preemptions": s.get("preemptions") if prev is not None else None,
        "generation_tokens": whole.total_increase("generation_tokens") if cur is not first else 0.0,
        "prompt_tokens": whole.total_increase("prompt_tokens") if cur is not first else 0.0,
    }
    return row


def summarize_snapshots(snaps: list[Snapshot], t0_ns: int, interval_s: float = 1.0) -> ServerMetricsResult:
    """Timeline + summary from snapshots in time order (pure; used by the recorder and tests)."""
    res = ServerMetricsResult(available=bool(snaps), interval_s=interval_s)
    if not snaps:
        res.reason = "no scrape succeeded"
        return res
    res.engine = snaps[-1].engine
    prev: Snapshot | None = None
    for s in snaps:
        res.timeline.append(_row(prev, s, snaps[0], t0_ns))
        prev = s
    whole = Timeline(window_s=1e9)
    for s in snaps:
        whole.add(s)
    ws = whole.summary()

    def col(name: str) -> list[float]:
        return [r[name] for r in res.timeline if r.get(name) is not None]

    waiting = col("waiting")
    running = col("running")
    kv = col("kv_usage")
    tq = 0.0
    for a, b in zip(res.timeline, res.timeline[1:]):
        if (a.get("waiting") or 0) > 0:
            tq += b["t_s"] - a["t_s"]

    def ms(v: Any) -> float | None:
        return None if v is None else float(v) * 1000.0

    res.summary = {
        "scrapes": len(snaps),
        "span_s": (snaps[-1].t_ns - snaps[0].t_ns) / 1e9,
        "max_running": max(running) if running else None,
        "max_waiting": max(waiting) if waiting else None,
        "time_with_queue_s": tq if waiting else None,
        "kv_usage_peak": max(kv) if kv else None,
        "preemptions": ws.get("preemptions"),
        "prefix_cache_hit_rate": ws.get("prefix_cache_hit_rate"),
        "generation_tokens": whole.total_increase("generation_tokens") if len(snaps) > 1 else None,
        "prompt_tokens": whole.total_increase("prompt_tokens") if len(snaps) > 1 else None,
        "generation_tok_s": ws.get("generation_tok_s"),
        "server_ttft_mean_ms": ms(ws.get("ttft_mean_s")),
        "server_ttft_p50_ms": ms(ws.get("ttft_p50_s")),
        "server_ttft_p99_ms": ms(ws.get("ttft_p99_s")),
        "server_ttft_observations": ws.get("ttft_observations"),
        "server_itl_mean_ms": ms(ws.get("itl_mean_s")),
        "server_queue_mean_ms": ms(ws.get("queue_mean_s")),
        "server_prefill_mean_ms": ms(ws.get("prefill_mean_s")),
    }
    res.summary["spec_decode"] = _spec_from_snapshots(snaps, whole)
    res.notes = whole.notes()
    return res


def _spec_from_snapshots(snaps: list[Snapshot], whole: Timeline) -> dict[str, Any] | None:
    """The run's speculative decoding from the engine's counters or gauges (module docstring)."""
    if len(snaps) < 2:
        return None
    drafted, accepted = whole.total_increase("spec_draft_tokens"), whole.total_increase("spec_accepted_tokens")
    steps = whole.total_increase("spec_drafts")
    if drafted and accepted is not None and steps:
        return spec_summary(drafted, accepted, steps, f"{snaps[-1].sources.get('spec_draft_tokens', 'spec_decode counters')}")
    lengths, rates = [], []
    for s in snaps:
        ls = [v for v in (s.gauges.get("spec_accept_length") or {}).values() if v == v and v > 0]
        rs = [v for v in (s.gauges.get("spec_accept_rate") or {}).values() if v == v and v > 0]
        if ls:
            lengths.append(sum(ls) / len(ls))
        if rs:
            rates.append(sum(rs) / len(rs))
    gen = whole.total_increase("generation_tokens")
    if not lengths or not gen or sum(lengths) / len(lengths) <= 1.0:
        return None
    length = sum(lengths) / len(lengths)
    steps_f = gen / length
    acc = gen - steps_f
    rate = sum(rates) / len(rates) if rates else None
    return spec_summary(acc / rate if rate else None, acc, steps_f, snaps[-1].sources.get("spec_accept_length", "spec_accept_length"))


def spec_decode_section(records: Any, server_metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """bench's ``spec_decode`` (module docstring): llama.cpp timings, else server metrics, else inferred."""
    recs = [r for r in records if getattr(r, "ok", False)]
    rec = spec_decode_run(recs)
    if rec is not None and rec.get("source") != "inferred":
        return rec
    srv = ((server_metrics or {}).get("summary") or {}).get("spec_decode")
    return srv or rec


def compare_ttft(client: dict[str, Any], server: dict[str, Any]) -> dict[str, Any] | None:
    """Client TTFT vs the server's TTFT histogram over the same run (ms; None when either is missing)."""
    c_mean, s_mean = client.get("mean_ttft_ms"), server.get("server_ttft_mean_ms")
    if c_mean is None or s_mean is None:
        return None
    out = {"client_mean_ttft_ms": c_mean, "server_mean_ttft_ms": s_mean, "client_minus_server_mean_ms": c_mean - s_mean}
    c50, s50 = client.get("median_ttft_ms"), server.get("server_ttft_p50_ms")
    if c50 is not None and s50 is not None:
        out.update({"client_median_ttft_ms": c50, "server_p50_ttft_ms": s50})
    return out


class ServerMetricsRecorder:
    """Background scraper: ``start(t0_ns)`` … ``stop() -> ServerMetricsResult``.

    A failed first scrape (404, 501 "start with --metrics", connection refused) marks the result
    unavailable with the reason; later failures are skipped (the run goes on).
    """

    def __init__(self, url: str, *, interval_s: float = 1.0, api_key: str | None = None, engine: str = "auto") -> None:
        self.url = url
        self.interval_s = interval_s
        self._api_key = api_key
        self._engine = engine
        self._snaps: list[Snapshot] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0_ns = now_ns()
        self.wall_t0_ns = wall_ns()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, t0_ns: int | None = None, *, wait: bool = True) -> None:
        if self._thread is not None:
            return
        self.t0_ns = t0_ns if t0_ns is not None else now_ns()
        self._thread = threading.Thread(target=self._run, name="phasescope-scrape", daemon=True)
        self._thread.start()
        if wait:
            self.wait_first()

    def wait_first(self) -> None:
        """Block until the baseline scrape is in (or failed): it must precede the first request,
        or that request's tokens fall outside the deltas."""
        self._first.wait(timeout=max(2.0, self.interval_s))

    def _run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        async with Scraper(self.url, engine=self._engine, api_key=self._api_key, timeout_s=max(2.0, self.interval_s)) as sc:
            while True:
                t = now_ns()
                try:
                    self._snaps.append(await sc.scrape())
                except Exception as exc:  # keep going; report the first reason
                    self._errors.append(f"{type(exc).__name__}: {exc}")
                    if not self._snaps and len(self._errors) >= 2:
                        self._first.set()
                        return  # /metrics is not there; stop trying
                self._first.set()
                left = self.interval_s - (now_ns() - t) / 1e9
                if self._stop.wait(max(0.0, left)):
                    # one final scrape so the last interval is covered
                    try:
                        self._snaps.append(await sc.scrape())
                    except Exception:
                        pass
                    return

    def stop(self) -> ServerMetricsResult:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        res = summarize_snapshots(self._snaps, self.t0_ns, self.interval_s)
        if not self._snaps:
            res.reason = self._errors[0] if self._errors else "no scrape completed"
        return res


# Summary keys that add up over endpoints (counters and rates of disjoint servers) and keys whose
# fleet value is the largest endpoint's (a gauge peak of one server, not of the sum).
_SUM_KEYS = ("preemptions", "generation_tokens", "prompt_tokens", "generation_tok_s", "server_ttft_observations")
_MAX_KEYS = ("kv_usage_peak",)


def aggregate_results(per_endpoint: dict[str, ServerMetricsResult]) -> ServerMetricsResult:
    """The fleet view of several endpoints' results.

    ``summary``: Σ over endpoints with metrics of ``generation_tokens``, ``prompt_tokens``,
    ``preemptions``, ``generation_tok_s``, ``server_ttft_observations``; ``kv_usage_peak`` = max over
    endpoints; ``max_running_sum`` / ``max_waiting_sum`` = Σ of each endpoint's peak (an upper
    bound of the fleet's simultaneous peak); ``server_ttft_mean_ms`` = observation-weighted mean of
    the endpoints' histogram means; ``endpoints_with_metrics`` / ``endpoints`` counts. Percentiles do
    not aggregate (no merged histogram) and are left out. ``timeline`` is empty: each endpoint
    keeps its own (scrapes are not simultaneous across servers).
    """
    ok = {u: r for u, r in per_endpoint.items() if r.available}
    res = ServerMetricsResult(available=bool(ok), interval_s=next(iter(per_endpoint.values())).interval_s
                              if per_endpoint else 1.0)
    if not ok:
        reasons = sorted({r.reason or "unavailable" for r in per_endpoint.values()})
        res.reason = "no endpoint exposed /metrics (" + "; ".join(reasons) + ")"
        return res
    engines = sorted({r.engine for r in ok.values() if r.engine})
    res.engine = engines[0] if len(engines) == 1 else (",".join(engines) or None)
    summ: dict[str, Any] = {"endpoints": len(per_endpoint), "endpoints_with_metrics": len(ok)}
    for k in _SUM_KEYS:
        vals = [r.summary.get(k) for r in ok.values() if r.summary.get(k) is not None]
        summ[k] = float(sum(vals)) if vals else None
    for k in _MAX_KEYS:
        vals = [r.summary.get(k) for r in ok.values() if r.summary.get(k) is not None]
        summ[k] = max(vals) if vals else None
    for k in ("max_running", "max_waiting"):
        vals = [r.summary.get(k) for r in ok.values() if r.summary.get(k) is not None]
        summ[k + "_sum"] = float(sum(vals)) if vals else None
    pairs = [(r.summary.get("server_ttft_mean_ms"), r.summary.get("server_ttft_observations")) for r in ok.values()]
    pairs = [(m, n) for m, n in pairs if m is not None and n]
    summ["server_ttft_mean_ms"] = (sum(m * n for m, n in pairs) / sum(n for _, n in pairs)) if pairs else None
    res.summary = summ
    res.notes = [f"{u}: {n}" for u, r in per_endpoint.items() for n in r.notes]
    missing = [u for u, r in per_endpoint.items() if not r.available]
    if missing:
        res.notes.append("no /metrics from " + ", ".join(missing))
    return res


class MultiServerMetricsRecorder:
    """One :class:`ServerMetricsRecorder` per endpoint (own thread each), behind the recorder's
    interface (``start``/``t0_ns``/``started``/``stop``). ``stop()`` returns the aggregate
    (:func:`aggregate_results`); the per-endpoint results are in ``per_endpoint`` after it, keyed
    by URL. An endpoint without /metrics only marks its own result unavailable."""

    def __init__(self, endpoints: dict[str, str], *, interval_s: float = 1.0, api_key: str | None = None) -> None:
        """``endpoints``: display URL → base URL to scrape."""
        self.recorders = {u: ServerMetricsRecorder(base, interval_s=interval_s, api_key=api_key)
                          for u, base in endpoints.items()}
        self.per_endpoint: dict[str, ServerMetricsResult] = {}
        self._t0_ns = now_ns()

    @property
    def t0_ns(self) -> int:
        return self._t0_ns

    @t0_ns.setter
    def t0_ns(self, v: int) -> None:
        self._t0_ns = v
        for r in self.recorders.values():
            r.t0_ns = v

    @property
    def started(self) -> bool:
        return any(r.started for r in self.recorders.values())

    def start(self, t0_ns: int | None = None) -> None:
        self._t0_ns = t0_ns if t0_ns is not None else now_ns()
        for r in self.recorders.values():  # all threads first, then wait: baselines in parallel
            r.start(self._t0_ns, wait=False)
        for r in self.recorders.values():
            r.wait_first()

    def stop(self) -> ServerMetricsResult:
        for r in self.recorders.values():
            r._stop.set()
        self.per_endpoint = {u: r.stop() for u, r in self.recorders.items()}
        return aggregate_results(self.per_endpoint)
