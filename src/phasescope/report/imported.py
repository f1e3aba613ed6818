"""Other tools' result files as phasescope runs: ``vllm bench serve --save-result`` JSON, GuideLLM's
``benchmarks.json``, AIPerf's ``profile_export_aiperf.json`` / ``profile_export.jsonl`` and llm-d's
Benchmark Report v0.2 — read, mapped onto phasescope's metric keys by each tool's documented
definition, with every difference of definition said (docs/commands/import.md names the file
versions followed and where each key comes from).

:func:`load_result` reads one file into an :class:`Imported`: ``summary`` holds phasescope's bench keys
(``median_ttft_ms``, ``p99_ttft_ms``, ``median_tpot_ms``, ``median_itl_ms``, ``p99_itl_ms``,
``median_e2el_ms``, ``output_throughput``, ``completed``, ``failed``, ``duration_s``) plus
``source`` (the tool, the file, the format) and ``definitions`` (metric key → how the tool's number
differs from phasescope's, ``comparable`` false where the difference changes the number); ``records``
holds one :class:`RequestRecord` per request where the file carries per-request timings (vLLM
``--save-detailed``: ``ttfts``/``itls``/``output_lens``; AIPerf's JSONL: per-record metrics), so
``compare``'s bootstrap works on them; else none, and compare reads the summary numbers (no interval).

A bad file is one :class:`~phasescope.errors.InputError` (exit 2), read through
:mod:`phasescope.safeio` (size, depth and number limits).

One job: other tools' files onto phasescope's keys, one reader per format sharing the summary keys, the
definition notes and the record builder; split by format, each reader would import the same helpers back.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from phasescope.errors import InputError
from phasescope.measure.records import EVENT_CONTENT, Event, RequestRecord
from phasescope.safeio import iter_user_jsonl, read_user_json

FORMATS = ("vllm", "guidellm", "aiperf", "llmd")
NS = 1_000_000_000
#: summary key → (phasescope metric key, scale to the metric's unit)
SUMMARY_METRICS: dict[str, tuple[str, float]] = {
    "median_ttft_ms": ("ttft_s", 1e-3), "p99_ttft_ms": ("ttft_p99_s", 1e-3), "median_tpot_ms": ("tpot_s", 1e-3),
    "median_itl_ms": ("itl_p50_s", 1e-3), "p99_itl_ms": ("itl_p99_s", 1e-3), "median_e2el_ms": ("e2e_s", 1e-3),
    "output_throughput": ("throughput_tok_s", 1.0),
}


@dataclass
class Imported:
    """One other tool's result, ready for the store (kind ``import``) or an on-the-fly compare."""

    source: str  # vllm | guidellm | aiperf | llmd
    path: str
    summary: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)
    model: str | None = None
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def metric_values(summary: dict[str, Any]) -> dict[str, float]:
    """phasescope metric key → value (seconds, tok/s) from an imported run's summary keys."""
    out: dict[str, float] = {}
    for k, (metric, scale) in SUMMARY_METRICS.items():
        v = summary.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[metric] = float(v) * scale
    return out


# --- reading and detecting ---------------------------------------------------------------------
def _read(path: str | Path) -> Any:
    p = Path(path).expanduser()
    if p.suffix.lower() == ".jsonl":
        return [obj for _, obj in iter_user_jsonl(p, what="result file")]
    return read_user_json(p, what="result file", expect=(dict, list))


def detect(doc: Any) -> str | None:
    """Which tool wrote this document, from keys only that tool writes; None when none fits."""
    if isinstance(doc, list):
        return "aiperf" if doc and all(isinstance(x, dict) and "metrics" in x and "metadata" in x for x in doc) else None
    if not isinstance(doc, dict):
        return None
    if str(doc.get("version")) == "0.2" and isinstance(doc.get("results"), dict) and "run" in doc:
        return "llmd"
    if isinstance(doc.get("benchmarks"), list):
        return "guidellm"
    if isinstance(doc.get("time_to_first_token"), dict) and ("request_count" in doc or "request_latency" in doc):
        return "aiperf"
    if any(k in doc for k in ("median_ttft_ms", "mean_ttft_ms")) and "completed" in doc:
        return "vllm"
    return None


def load_result(path: str | Path, fmt: str = "auto", index: int = 0) -> Imported:
    """Read one result file (``fmt``: auto or one of :data:`FORMATS`); ``index``: which benchmark of a
    GuideLLM file holding several."""
    if fmt not in ("auto", *FORMATS):
        raise InputError(f"--format must be auto, {', '.join(FORMATS)} (got {fmt!r})")
    doc = _read(path)
    found = detect(doc)
    if fmt == "auto":
        if found is None:
            raise InputError(f"{path}: not a result file phasescope can read (vllm bench serve --save-result JSON, "
                             "GuideLLM benchmarks.json, AIPerf profile_export_aiperf.json/profile_export.jsonl, "
                             "llm-d Benchmark Report v0.2); pass --format to say which")
        fmt = found
    elif found is not None and found != fmt:
        raise InputError(f"{path}: --format {fmt} given, but the file reads as {found} output")
    mapper: Callable[[Any, str, int], Imported] = _MAPPERS[fmt]
    try:
        return mapper(doc, str(path), index)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"{path}: not a valid {fmt} result file ({type(exc).__name__}: {exc})") from None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _source(tool: str, path: str, fmt_name: str, version: Any = None) -> dict[str, Any]:
    return {"tool": tool, "file": Path(path).name, "format": fmt_name, **({"version": version} if version else {})}


def _record(i: int, source: str, target: str | None, model: str | None, t0_ns: int, ttft_s: float | None,
            gaps_s: list[float], n_out: int | None, n_in: int | None, ok: bool, error: str | None = None,
            latency_s: float | None = None) -> RequestRecord:
    """One request rebuilt from its first-token time and the gaps between its later output events."""
    r = RequestRecord(id=f"{source}-{i}", api="imported", target=target or "", model=model, t_start_ns=t0_ns,
                      wall_start_ns=t0_ns, tags={"imported": source})
    r.ok = ok and ttft_s is not None
    if error:
        r.error_kind, r.error_message = "imported_error", str(error)[:200]
    if ttft_s is not None and r.ok:
        t = t0_ns + round(ttft_s * NS)
        r.events.append(Event(t, EVENT_CONTENT))
        for g in gaps_s:
            t += round(g * NS)
            r.events.append(Event(t, EVENT_CONTENT))
        r.t_done_ns = t0_ns + round(latency_s * NS) if latency_s is not None else t
    r.output_tokens, r.output_tokens_source = (n_out, "usage") if n_out is not None else (None, None)
    r.prompt_tokens, r.prompt_tokens_source = (n_in, "usage") if n_in is not None else (None, None)
    return r


def _one_per_event(records: list[RequestRecord]) -> bool:
    ok = [r for r in records if r.ok and r.output_tokens]
    return bool(ok) and all(len(r.events) == r.output_tokens for r in ok)


# --- vLLM ---------------------------------------------------------------------------------------
def _start_times(doc: dict[str, Any]) -> list[Any] | None:
    """Per-request start times (seconds on one clock) where the file has them: ``start_times`` (newer
    ``vllm/benchmarks/serve.py`` keeps it with --save-detailed), ``request_submit_times`` (some forks)."""
    for k in ("start_times", "request_submit_times"):
        v = doc.get(k)
        if isinstance(v, list) and len(v) == len(doc.get("ttfts") or []):
            return v
    return None


def _span_why(records: list[RequestRecord], s: dict[str, Any]) -> str | None:
    """How the throughput rebuilt from requests placed in time differs from the file's ``output_throughput``:
    vLLM divides by its benchmark duration (from before the first request is created to after the last reply
    is read), phasescope by the requests' span (first start → last token)."""
    ok = [r for r in records if r.ok and r.t_done_ns is not None]
    tput, dur = s.get("output_throughput"), s.get("duration_s")
    if not ok or tput is None or dur is None:
        return None
    span = (max(r.t_done_ns or 0 for r in ok) - min(r.t_start_ns for r in ok)) / NS
    out = sum(r.output_tokens or 0 for r in ok)
    if span <= 0:
        return None
    return (f"rebuilt from the requests' span (first start → last token, {span:.3f} s): {out / span:.1f} tok/s; "
            f"the file's output_throughput, {tput:.1f} tok/s, divides by vLLM's benchmark duration ({dur:.3f} s, "
            "from before the first request to after the last reply); compare reads both runs by span")


def _e2el_from_latencies(doc: dict[str, Any], s: dict[str, Any]) -> str | None:
    """``median_e2el_ms`` from the file's per-request ``latencies`` where vLLM wrote no aggregate for it (e2el is
    not among its default --percentile-metrics) and every request succeeded: ``latencies`` holds every output's,
    failed ones too, and a file without --save-detailed does not say which failed. Sets it in ``s``; why, or None."""
    lat = doc.get("latencies")
    if "median_e2el_ms" in s or not isinstance(lat, list) or not lat or s.get("failed", 0) != 0:
        return None
    vals = [_num(x) for x in lat]
    if len(vals) != s["completed"] or any(v is None or v <= 0 for v in vals):
        return None
    s["median_e2el_ms"] = statistics.median(float(v or 0) for v in vals) * 1000
    return ("the median of the file's per-request latencies (vLLM's E2EL: last token − request start; the file has "
            "no median_e2el_ms, which vLLM writes only when --percentile-metrics names e2el)")


def _vllm(doc: dict[str, Any], path: str, index: int) -> Imported:
    s: dict[str, Any] = {"source": _source("vllm bench serve", path, "vllm --save-result JSON")}
    for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms",
              "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "output_throughput",
              "request_throughput", "total_token_throughput"):
        if (v := _num(doc.get(k))) is not None:
            s[k] = v
    completed = int(doc["completed"])
    s["completed"] = completed
    if (f := _num(doc.get("failed"))) is not None:
        s["failed"] = int(f)
    elif (n := _num(doc.get("num_prompts"))) is not None:
        s["failed"] = max(0, int(n) - completed)
    if (d := _num(doc.get("duration"))) is not None:
        s["duration_s"] = d
    e2e_why = _e2el_from_latencies(doc, s)
    model = doc.get("model_id") if isinstance(doc.get("model_id"), str) else None
    target = None
    records: list[RequestRecord] = []
    ttfts, itls = doc.get("ttfts"), doc.get("itls")
    if isinstance(ttfts, list) and isinstance(itls, list) and len(ttfts) == len(itls):
        outs = doc.get("output_lens") or [None] * len(ttfts)
        ins = doc.get("input_lens") or [None] * len(ttfts)
        errs = doc.get("errors") or [""] * len(ttfts)
        starts = _start_times(doc)
        t = 0
        for i, (tt, gaps) in enumerate(zip(ttfts, itls)):
            ok = not errs[i] and _num(tt) is not None and _num(tt) > 0  # type: ignore[operator]
            gl = [float(g) for g in gaps] if isinstance(gaps, list) else []
            t0 = round(float(starts[i]) * NS) if starts and _num(starts[i]) is not None else t
            records.append(_record(i, "vllm", target, model, t0, _num(tt) if ok else None, gl,
                                   int(outs[i]) if _num(outs[i]) else None,
                                   int(ins[i]) if _num(ins[i]) else None, ok, errs[i] or None))
            if starts is None:  # no start times in the file: requests laid end to end (throughput is not rebuilt)
                t = records[-1].t_done_ns or t
    defs: dict[str, dict[str, Any]] = {
        "ttft_s": {"comparable": True, "why": "vLLM's TTFT runs from just before the POST to the first SSE event with "
                   "output (0.33 skips the role-only opening delta; older revisions latched on any event with choices)"},
        "tpot_s": {"comparable": True, "why": "vLLM's TPOT = (E2EL − TTFT)/(out − 1), excluding the first token: "
                   "phasescope's TPOT"},
    }
    itl_why = "vLLM's ITL is the gap between streamed events (per chunk); phasescope's is per token"
    if records and _one_per_event(records):
        defs["itl_p50_s"] = defs["itl_p99_s"] = {"comparable": True, "why": itl_why + "; every request here had one "
                                                 "token per event, so the two coincide"}
    else:
        defs["itl_p50_s"] = defs["itl_p99_s"] = {"comparable": False, "why": itl_why + " (equal only at one token per "
                                                 "event, which this file does not show)"}
    if e2e_why:
        defs["e2e_s"] = {"comparable": True, "why": e2e_why}
    if records and _start_times(doc) is None:
        defs["throughput_tok_s"] = {"comparable": False, "why": "the file has no per-request start times, so throughput "
                                    f"cannot be rebuilt from its requests (vLLM's output_throughput: "
                                    f"{s.get('output_throughput', float('nan')):.1f} tok/s)"}
    elif records and (why := _span_why(records, s)) is not None:
        defs["throughput_tok_s"] = {"comparable": True, "why": why}
    s["definitions"] = defs
    params: dict[str, Any] = {k: doc[k] for k in ("backend", "endpoint_type", "num_prompts", "request_rate", "burstiness",
                                  "max_concurrency") if k in doc and isinstance(doc[k], (int, float, str))}
    return Imported("vllm", path, s, records, model, target, params)


# --- GuideLLM -----------------------------------------------------------------------------------
def _dist(metrics: dict[str, Any], key: str, stat: str) -> float | None:
    """``metrics[key].successful.<stat>`` of a GuideLLM StatusDistributionSummary (stat: median, mean, pNN)."""
    d = metrics.get(key)
    if not isinstance(d, dict):
        return None
    ok = d.get("successful")
    if not isinstance(ok, dict):
        return None
    if stat.startswith("p"):
        pct = ok.get("percentiles")
        return _num(pct.get(stat)) if isinstance(pct, dict) else None
    return _num(ok.get(stat))


def _guidellm(doc: dict[str, Any], path: str, index: int) -> Imported:
    benches = doc["benchmarks"]
    if not benches:
        raise ValueError("the file holds no benchmarks")
    if not 0 <= index < len(benches):
        raise InputError(f"{path}: holds {len(benches)} benchmarks; --index must be 0–{len(benches) - 1}")
    b = benches[index]
    m = b["metrics"]
    s: dict[str, Any] = {"source": _source("GuideLLM", path, "guidellm benchmarks.json (GenerativeBenchmark)")}
    s["source"]["benchmark_index"] = index
    pairs = {"median_ttft_ms": ("time_to_first_token_ms", "median", 1.0), "p99_ttft_ms": ("time_to_first_token_ms", "p99", 1.0),
             # GuideLLM's ITL = (last − first token)/(out − 1): phasescope's TPOT
             "median_tpot_ms": ("inter_token_latency_ms", "median", 1.0),
             "median_e2el_ms": ("request_latency", "median", 1000.0),  # seconds in GuideLLM
             "output_throughput": ("output_tokens_per_second", "mean", 1.0)}
    for k, (src, stat, scale) in pairs.items():
        v = _dist(m, src, stat)
        if v is not None:
            s[k] = v * scale
    totals = m.get("request_totals") if isinstance(m.get("request_totals"), dict) else {}
    if (c := _num(totals.get("successful"))) is not None:
        s["completed"] = int(c)
    if (e := _num(totals.get("errored"))) is not None:
        s["failed"] = int(e)
    s["definitions"] = {
        "ttft_s": {"comparable": True, "why": "GuideLLM's TTFT runs from time.time() before the request to the first "
                   "line with content (wall clock)"},
        "tpot_s": {"comparable": False, "why": "phasescope's TPOT is GuideLLM's ITL, (last − first token)/(out − 1), "
                   "but GuideLLM's distribution weights each request by out − 1 tokens, so its median is not the "
                   "per-request median (GuideLLM's own 'TPOT' includes the first token and is not used)"},
        "e2e_s": {"comparable": True, "why": "GuideLLM's request_latency (seconds): request end − start"},
        "throughput_tok_s": {"comparable": False, "why": "GuideLLM's output_tokens_per_second is a mean of per-second "
                             "rates over its benchmark window, not output tokens over the run's span"},
    }
    notes = []
    if len(benches) > 1:
        notes.append(f"the file holds {len(benches)} benchmarks; read benchmark {index} (choose with --index)")
    cfg = b.get("config") if isinstance(b.get("config"), dict) else {}
    params = {"strategy": str((cfg.get("strategy") or {}).get("type_", ""))} if isinstance(cfg.get("strategy"), dict) else {}
    model = None
    for where in (b.get("worker"), (doc.get("args") or {}) if isinstance(doc.get("args"), dict) else {}):
        if isinstance(where, dict) and isinstance(where.get("model"), str):
            model = where["model"]
    return Imported("guidellm", path, s, [], model, None, params, notes)


# --- AIPerf -------------------------------------------------------------------------------------
def _ms(block: Any, stat: str) -> float | None:
    """A value of an AIPerf metric block, in ms (AIPerf writes ``unit``: ms, or sec/ns)."""
    if not isinstance(block, dict):
        return None
    v = _num(block.get(stat))
    unit = str(block.get("unit", "ms"))
    scale = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "ns": 1e-6, "us": 1e-3}.get(unit, 1.0)
    return None if v is None else v * scale


_AIPERF_DEFS = {
    "ttft_s": {"comparable": True, "why": "AIPerf's TTFT: first non-empty response − request start (its first "
               "request's TTFT includes the TCP connect)"},
    "tpot_s": {"comparable": True, "why": "AIPerf's ITL = (request_latency − TTFT)/(OSL − 1): phasescope's TPOT, but "
               "OSL is counted with a client tokenizer unless --use-server-token-count"},
}


def _aiperf(doc: Any, path: str, index: int) -> Imported:
    if isinstance(doc, list):
        return _aiperf_records(doc, path)
    s: dict[str, Any] = {"source": _source("AIPerf", path, "aiperf profile_export_aiperf.json")}
    for k, (src, stat) in {"median_ttft_ms": ("time_to_first_token", "p50"), "p99_ttft_ms": ("time_to_first_token", "p99"),
                           "median_tpot_ms": ("inter_token_latency", "p50"), "median_e2el_ms": ("request_latency", "p50"),
                           "mean_ttft_ms": ("time_to_first_token", "avg")}.items():
        if (v := _ms(doc.get(src), stat)) is not None:
            s[k] = v
    thr = doc.get("output_token_throughput")
    if isinstance(thr, dict) and (v := _num(thr.get("avg"))) is not None:
        s["output_throughput"] = v
    rc = doc.get("request_count")
    if isinstance(rc, dict) and (v := _num(rc.get("avg"))) is not None:
        s["completed"] = int(v)
    if (v := _num(doc.get("error_request_count"))) is not None:
        s["failed"] = int(v)
    dur = doc.get("benchmark_duration")
    if isinstance(dur, dict) and (v := _num(dur.get("avg"))) is not None:
        s["duration_s"] = v
    s["definitions"] = dict(_AIPERF_DEFS, throughput_tok_s={
        "comparable": True, "why": "AIPerf's output_token_throughput: Σ OSL / (last response − first request)"})
    ep = ((doc.get("input_config") or {}).get("endpoint") or {}) if isinstance(doc.get("input_config"), dict) else {}
    names = ep.get("model_names") if isinstance(ep, dict) else None
    model = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    return Imported("aiperf", path, s, [], model, None, {})


def _aiperf_records(rows: list[dict[str, Any]], path: str) -> Imported:
    target, records = "", []
    t_first = None
    for i, row in enumerate(rows):
        md, m = row.get("metadata") or {}, row.get("metrics") or {}
        start = _num(md.get("request_start_ns"))
        if start is None:
            raise ValueError(f"record {i + 1} has no metadata.request_start_ns")
        t_first = start if t_first is None else min(t_first, start)
        ttft = _ms(m.get("time_to_first_token"), "value")
        icl = m.get("inter_chunk_latency")
        gaps: list[float] = []
        if isinstance(icl, dict) and isinstance(icl.get("value"), list):
            to_s = {"ms": 1e-3, "sec": 1.0, "s": 1.0, "ns": 1e-9, "us": 1e-6}.get(str(icl.get("unit", "ms")), 1e-3)
            gaps = [float(g) * to_s for g in icl["value"]]
        lat = _ms(m.get("request_latency"), "value")
        osl = _num((m.get("output_sequence_length") or {}).get("value")) if isinstance(m.get("output_sequence_length"), dict) else None
        isl = _num((m.get("input_sequence_length") or {}).get("value")) if isinstance(m.get("input_sequence_length"), dict) else None
        err = row.get("error")
        ok = not err and ttft is not None
        r = _record(i, "aiperf", target, None, int(start), ttft / 1000 if ok and ttft is not None else None, gaps,
                    int(osl) if osl else None, int(isl) if isl else None, ok,
                    (err.get("message") or err.get("type")) if isinstance(err, dict) else (str(err) if err else None),
                    latency_s=lat / 1000 if lat is not None else None)
        if r.output_tokens is not None:
            r.output_tokens_source = "tokenizer"  # AIPerf's OSL: client tokenizer unless --use-server-token-count
        records.append(r)
    ok = [r for r in records if r.ok]
    s: dict[str, Any] = {"source": _source("AIPerf", path, "aiperf profile_export.jsonl"),
                         "completed": len(ok), "failed": len(records) - len(ok)}
    defs = dict(_AIPERF_DEFS)
    itl_why = "rebuilt from AIPerf's inter_chunk_latency (ICL, per chunk) spread over its OSL tokens"
    defs["itl_p50_s"] = defs["itl_p99_s"] = {"comparable": _one_per_event(records), "why": itl_why + (
        "; one token per chunk here, so per chunk is per token" if _one_per_event(records)
        else "; phasescope's ITL is per token, AIPerf's ICL per chunk")}
    s["definitions"] = defs
    return Imported("aiperf", path, s, records, None, None, {})


# --- llm-d Benchmark Report v0.2 ----------------------------------------------------------------
_LLMD_TIME = {"s": 1000.0, "ms": 1.0, "s/token": 1000.0, "ms/token": 1.0}


def _llmd(doc: dict[str, Any], path: str, index: int) -> Imported:
    agg = ((doc["results"].get("request_performance") or {}).get("aggregate")) or {}
    lat, thr, req = agg.get("latency") or {}, agg.get("throughput") or {}, agg.get("requests") or {}
    s: dict[str, Any] = {"source": _source("llm-d Benchmark Report", path, "llm-d benchmark report v0.2", doc.get("version"))}

    def stat(block: Any, name: str) -> float | None:
        if not isinstance(block, dict):
            return None
        v = _num(block.get(name))
        u = block.get("units")
        if v is None:
            return None
        if u not in _LLMD_TIME:
            raise ValueError(f"unknown latency units {u!r}")
        return v * _LLMD_TIME[u]

    for k, (blk, st) in {"median_ttft_ms": ("time_to_first_token", "p50"), "p99_ttft_ms": ("time_to_first_token", "p99"),
                         "median_tpot_ms": ("time_per_output_token", "p50"), "median_itl_ms": ("inter_token_latency", "p50"),
                         "p99_itl_ms": ("inter_token_latency", "p99"), "median_e2el_ms": ("request_latency", "p50"),
                         "mean_ttft_ms": ("time_to_first_token", "mean")}.items():
        if (v := stat(lat.get(blk), st)) is not None:
            s[k] = v
    otr = thr.get("output_token_rate")
    if isinstance(otr, dict) and (v := _num(otr.get("mean"))) is not None:
        s["output_throughput"] = v
    if (v := _num(req.get("total"))) is not None:
        s["completed"] = int(v) - int(_num(req.get("failures")) or 0)
        s["failed"] = int(_num(req.get("failures")) or 0)
    load = ((doc.get("scenario") or {}).get("load") or {}).get("standardized") or {}
    tool = load.get("tool") if isinstance(load, dict) else None
    s["source"]["harness"] = tool
    same = tool == "phasescope"
    s["definitions"] = {
        "tpot_s": {"comparable": True, "why": "the report's time_per_output_token excludes the first token (the schema's "
                   "definition)"},
        "itl_p50_s": {"comparable": same, "why": "the schema notes ITL 'may differ from TPOT depending on tool'"
                      + ("; written by phasescope (per token)" if same else f"; written by {tool or 'an unnamed tool'}")},
    }
    s["definitions"]["itl_p99_s"] = s["definitions"]["itl_p50_s"]
    model = None
    for comp in ((doc.get("scenario") or {}).get("stack") or []):
        nm = ((comp.get("standardized") or {}).get("model") or {}).get("name") if isinstance(comp, dict) else None
        if isinstance(nm, str):
            model = nm
            break
    return Imported("llmd", path, s, [], model, None, {})


_MAPPERS: dict[str, Callable[[Any, str, int], Imported]] = {
    "vllm": _vllm, "guidellm": _guidellm, "aiperf": _aiperf, "llmd": _llmd,
}


# --- into the store, or beside it -----------------------------------------------------------------
def _summary_of(imp: Imported) -> dict[str, Any]:
    s = dict(imp.summary)
    if imp.notes:
        s["notes"] = list(imp.notes)
    return s


def store_imported(store: Any, imp: Imported) -> Any:
    """Store ``imp`` as a run of kind ``import`` (its records, if any, and its summary); its RunInfo."""
    with store.recording(kind="import", target=imp.target, params=dict(imp.params), model=imp.model) as run:
        for r in imp.records:
            run.add(r)
        run.finish(_summary_of(imp))
        run_id = run.id
    return store.get(run_id)


def looks_like_file(ref: str) -> bool:
    """A compare/report argument that names a result file rather than a run id."""
    p = Path(ref).expanduser()
    return p.suffix.lower() in (".json", ".jsonl") or p.is_file()


class WithFiles:
    """A run store whose ``get``/``load_records`` also take a result file's path: the file is imported on
    the fly (:func:`load_result`, format detected) and never stored — unless ``keep``, then it is
    stored as a run of kind ``import`` like ``phasescope import`` does."""

    def __init__(self, store: Any, keep: bool = False) -> None:
        self._store, self._keep = store, keep
        self._files: dict[str, tuple[Any, list[RequestRecord]]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, ref: str) -> Any:
        if not looks_like_file(ref):
            return self._store.get(ref)
        imp = load_result(ref)
        if self._keep:
            return store_imported(self._store, imp)
        from phasescope.store import RunInfo

        import time

        run_id = f"file:{Path(ref).name}"
        info = RunInfo(id=run_id, kind="import", status="complete", started_at=time.time(), target=imp.target,
                       model=imp.model, params=dict(imp.params),
                       summary=_summary_of(imp), n_records=len(imp.records), n_warmup=0)
        self._files[run_id] = (info, imp.records)
        return info

    def load_records(self, run_id: str) -> list[RequestRecord]:
        if run_id in self._files:
            return list(self._files[run_id][1])
        return list(self._store.load_records(run_id))
