"""What else differs between two runs, and what makes them not comparable — the half of
``phasescope compare`` that is about the runs, not their numbers (:mod:`phasescope.report.compare`
draws the verdicts).

The comparison warns when the runs differ in something other than the parameter under test:
model, engine or its version, device, API, target, kind, requested prompt/output lengths, several
parameters at once, or when a run is partial.

It also refuses to be fooled (:func:`comparability`): when the two runs differ *beyond noise* in
something that moves the numbers by itself, the affected verdicts read ``not comparable`` instead
of better/worse, and the reason is said first:

* prefix-cache hit rate (per request ``cached_tokens`` / ``cache_n``, or the bench summary's
  ``prefix_cache_hit_rate``) differs by more than :data:`HIT_RATE_NOISE` → TTFT, TTFT p99,
  prefill tok/s and E2E;
* host contention (``host.during.other_cpu_share``, :mod:`phasescope.measure.host`): one run above
  the ``host_busy`` threshold and the two more than :data:`HOST_NOISE` apart → every metric;
* either run on a busy host (above a ``host_busy`` threshold, on average or in bursts, or carrying a
  ``host_busy`` warning) or with a saturated client (``client_saturated``), however alike the two
  loads → the p99 tails (:data:`TAIL_SIDE`): a tail is the few requests or token steps that waited for
  a core, so it measures the host's scheduling, and two runs of one server on a 40 % busy host were
  seen 42 % apart on ITL p99 with every trial agreeing; a busy host (not a saturated client) also makes
  TTFT and prefill tok/s (:data:`BUSY_SIDE`) not comparable: a short phase at each request's start includes
  its wait for a core, and two runs of one 20 ms-TTFT server on a 92 % busy host were seen 15 % apart on the
  TTFT median, the busy share (near 100 % in both) unable to tell their loads apart; ITL, TPOT, decode, E2E
  and throughput are still compared, so a doubled ITL still fails;
* engine build (version, ``/props`` ``build_info``), its flags (slots, context: ``server_build``)
  or the model file (path, size, quantization) → every metric;
* the server's prompt token counts differ by more than :data:`COUNT_NOISE` → the prefill side;
  output token counts → E2E and throughput;
* a run imported from another tool (``kind: import``) whose tool defines a metric otherwise than
  phasescope (its summary's ``definitions``, e.g. vLLM's per-event ITL, GuideLLM's token-weighted ITL)
  → that metric (:func:`imported_definitions`).
"""

from __future__ import annotations

from typing import Any

from phasescope.measure.host import BURST_SHARE, BUSY_SHARE
from phasescope.measure.aggregate import METRICS, cached_share, measured, median
from phasescope.measure.records import RequestRecord
from phasescope.measure.warnings import MeasurementWarning, coerce, warn
from phasescope.store import RunInfo

#: prefix-cache hit rates further apart than this (absolute) make TTFT-side verdicts not comparable
HIT_RATE_NOISE = 0.05
#: host contention shares further apart than this (with one run above the host_busy threshold)
HOST_NOISE = 0.10
#: relative difference of the mean server-counted token counts beyond which the runs differ
COUNT_NOISE = 0.01
PREFILL_SIDE = frozenset({"ttft_s", "ttft_p99_s", "prefill_tok_s", "e2e_s"})
OUTPUT_SIDE = frozenset({"e2e_s", "throughput_tok_s"})
TAIL_SIDE = frozenset({"ttft_p99_s", "itl_p99_s"})
#: what a busy host makes not comparable: the tails, and the short phase that starts each request (TTFT and
#: the prefill rate read from it), which on a busy host includes the wait for a core
BUSY_SIDE = TAIL_SIDE | frozenset({"ttft_s", "prefill_tok_s"})
ALL_METRICS = frozenset(m.key for m in METRICS)

# --- what else differs ------------------------------------------------------------------------
_ENV_FIELDS = (
    ("model", "model"),
    ("engine", "engine"),
    ("engine_version", "engine version"),
    ("device", "device"),
    ("api", "API"),
    ("kind", "run kind"),
)


def nc_warning(msg: str, evidence: dict[str, Any] | None = None, fix: str | None = None) -> MeasurementWarning:
    """A ``runs_not_comparable`` warning."""
    return MeasurementWarning("runs_not_comparable", msg, evidence or {}, fix)


def _unknown(name: str, x: Any, y: Any) -> MeasurementWarning:
    """A field one run records and the other does not: whether it differs is unknown."""
    return warn("runs_not_comparable", "field_unknown", {"a": x, "b": y}, name=name,
                which="A" if not x else "B", known=x or y)


def environment_warnings(a: RunInfo, ra: list[RequestRecord], b: RunInfo, rb: list[RequestRecord]) -> list[MeasurementWarning]:
    out: list[MeasurementWarning] = []
    for attr, name in _ENV_FIELDS:
        if attr in ("model", "engine_version"):
            continue  # said by comparability(), with the verdicts it affects
        x, y = getattr(a, attr), getattr(b, attr)
        if x != y and x is not None and y is not None:
            out.append(warn("runs_not_comparable", "field", {"a": x, "b": y}, name=name, a=x, b=y))
        elif x != y:  # one run does not say (an imported `vllm bench serve` file records no API or engine)
            out.append(_unknown(name, x, y))
    if _host(a.target) != _host(b.target):  # a new port alone (e.g. the embedded engine's) is no warning
        if a.target and b.target:
            out.append(warn("runs_not_comparable", "host", a=a.target, b=b.target))
        else:
            out.append(_unknown("target host", a.target, b.target))
    pa, pb = _lengths(ra, "prompt"), _lengths(rb, "prompt")
    if pa and pb and pa != pb:
        out.append(warn("runs_not_comparable", "prompt_lengths", a=_fmt_set(pa), b=_fmt_set(pb)))
    oa, ob = _lengths(ra, "output"), _lengths(rb, "output")
    if oa and ob and oa != ob:
        out.append(warn("runs_not_comparable", "output_lengths", a=_fmt_set(oa), b=_fmt_set(ob)))
    for i, name in ((a, "A"), (b, "B")):
        if i.status != "complete":
            out.append(warn("partial_run", "status", name=name, id=i.id, status=i.status,
                            error=f": {i.error}" if i.error else ""))
    for recs, name in ((ra, "A"), (rb, "B")):
        if not [r for r in recs if r.ok]:
            out.append(warn("no_success", "run", name=name))
    for i, name in ((a, "A"), (b, "B")):  # a run that was itself shaky stays shaky in the comparison
        for w in i.warnings:
            if w["kind"] in ("host_busy", "prefix_cache_hits", "client_saturated"):
                out.append(coerce(w).prefixed(f"run {name} ({i.id}): "))
    return out


# --- what makes two runs not comparable ----------------------------------------------------------
def _summary(i: RunInfo) -> dict[str, Any]:
    return i.summary if isinstance(i.summary, dict) else {}


def hit_rate(info: RunInfo, recs: list[RequestRecord]) -> float | None:
    """The run's prefix-cache hit rate: Σ cached / Σ prompt tokens over its requests, else the
    summary's (bench: ``prefix_cache_hit_rate``, server /metrics)."""
    share = cached_share(r for r in measured(recs) if r.ok)
    if share is not None:
        return share
    v = _summary(info).get("prefix_cache_hit_rate")
    return float(v) if isinstance(v, (int, float)) else None


def host_share(info: RunInfo) -> tuple[float | None, float]:
    h = _summary(info).get("host") or {}
    d = h.get("during") or {} if isinstance(h, dict) else {}
    v = d.get("other_cpu_share")
    return (float(v) if isinstance(v, (int, float)) else None), float(h.get("threshold") or BUSY_SHARE) if isinstance(h, dict) else BUSY_SHARE


def _tail_noise(info: RunInfo, name: str) -> str | None:
    """Why run ``name``'s p99 tails measure more than its server (a busy host, a saturated client), or None."""
    share, thr = host_share(info)
    h = _summary(info).get("host")
    h = h if isinstance(h, dict) else {}
    burst = h.get("worst_1s_other_cpu_share")
    bt = h.get("burst_threshold")
    burst_thr = float(bt) if isinstance(bt, (int, float)) else BURST_SHARE
    kinds = {w.get("kind") for w in info.warnings}
    if share is not None and share > thr:
        return f"the host was busy during run {name} (other work took {share * 100:.0f} % of the cores)"
    if isinstance(burst, (int, float)) and burst > burst_thr:
        return f"the host was busy during run {name} (other work took {burst * 100:.0f} % in its worst 1-second windows)"
    if "host_busy" in kinds:
        return f"the host was busy during run {name} (its host_busy warning)"
    if "client_saturated" in kinds:
        return f"the client was saturated during run {name} (its event loop lagged)"
    return None


def _mean_count(recs: list[RequestRecord], which: str) -> float | None:
    vals = [getattr(r, which) for r in measured(recs) if r.ok and getattr(r, which) is not None
            and getattr(r, f"{which}_source") in ("usage", "server")]
    return sum(vals) / len(vals) if vals else None


def _build(info: RunInfo) -> dict[str, Any]:
    sb = _summary(info).get("server_build")
    return sb if isinstance(sb, dict) else {}


def comparability(a: RunInfo, ra: list[RequestRecord], b: RunInfo, rb: list[RequestRecord], *,
                  shared: tuple[list[RequestRecord], list[RequestRecord]] | None = None,
                  ) -> list[tuple[MeasurementWarning, frozenset[str]]]:
    """Each difference beyond noise that moves the numbers by itself, with the metrics it affects.
    ``shared``: the records of the measurement points both runs have (token counts are compared there)."""
    out: list[tuple[MeasurementWarning, frozenset[str]]] = []
    ha, hb = hit_rate(a, ra), hit_rate(b, rb)
    if ha is not None and hb is not None and abs(ha - hb) > HIT_RATE_NOISE:
        what = f"prefix-cache hit rate {ha:.3f} → {hb:.3f}"
        out.append((nc_warning(f"{what}: one run was served from the prefix cache, so its TTFT and prefill rate measure the "
                        "cache, not prefill", {"what": what, "a": ha, "b": hb, "noise": HIT_RATE_NOISE},
                        "rerun both without --reuse-prompts (bench salts its prompts per run)"), PREFILL_SIDE))
    (sa, ta), (sb_, tb) = host_share(a), host_share(b)
    if sa is not None and sb_ is not None and max(sa, sb_) > min(ta, tb) and abs(sa - sb_) > HOST_NOISE:
        what = f"host contention {sa * 100:.0f} % → {sb_ * 100:.0f} % of the cores"
        out.append((nc_warning(f"{what}: other work took CPU from one run more than the other", {"what": what, "a": sa, "b": sb_,
                        "threshold": min(ta, tb), "noise": HOST_NOISE}, "rerun the busy one on a quiet machine"), ALL_METRICS))
    shaky = [w for w in (_tail_noise(a, "A"), _tail_noise(b, "B")) if w]
    if shaky:
        what = "; ".join(shaky)
        busy = any("host was busy" in w for w in shaky)
        if busy:  # the wait for a core lands on every request's start, and a share near 100 % cannot rank it
            out.append((nc_warning(f"{what}: a p99 tail is the few steps that waited for a core, and TTFT and prefill "
                                   "include each request's wait for one, so they measure the host's scheduling, not "
                                   "the server (ITL, TPOT, decode, E2E and throughput are still compared)",
                                   {"what": what}, "rerun both on a quiet machine to gate on TTFT and the tails"),
                        BUSY_SIDE))
        else:
            out.append((nc_warning(f"{what}: a p99 tail is the few steps that waited for a core, so it measures the "
                                   "host's scheduling, not the server (the medians are still compared)", {"what": what},
                                   "rerun both on a quiet machine to gate on the tails"), TAIL_SIDE))
    if None in (a.model, b.model) and "import" in (a.kind, b.kind) and (a.model or b.model):
        what = f"model {a.model or '?'} → {b.model or '?'}"
        out.append((nc_warning(f"{what}: the imported file does not say which model it measured; make sure it is "
                               "the same", {"what": what}), frozenset()))
    elif (a.model or b.model) and a.model != b.model:
        what = f"model {a.model or '?'} → {b.model or '?'}"
        out.append((nc_warning(f"{what}: a different model is a different workload", {"what": what}), ALL_METRICS))
    if (a.engine_version or b.engine_version) and a.engine_version != b.engine_version and a.engine == b.engine:
        what = f"engine build {a.engine_version or '?'} → {b.engine_version or '?'}"
        out.append((nc_warning(f"{what}: compare builds on purpose only (then this is the change under test)",
                        {"what": what}), ALL_METRICS))
    ba, bb = _build(a), _build(b)
    # another server (llamacpp → vllm) is not "other flags"; its version then says nothing more
    other_server = ba.get("engine") is not None and bb.get("engine") is not None and ba["engine"] != bb["engine"]
    for k in sorted(set(ba) & set(bb)):
        if k != "build_info" and ba[k] != bb[k] and ba[k] is not None and bb[k] is not None:
            if other_server and k == "version":
                continue
            what = f"server {k} {ba[k]} → {bb[k]}"
            why = ("another server is a different system" if other_server and k == "engine"
                   else "the engine ran with other flags or another model file")
            out.append((nc_warning(f"{what}: {why}", {"what": what}), ALL_METRICS))
    out += imported_definitions(a, "A") + imported_definitions(b, "B")
    for which, keys, name in (("prompt_tokens", PREFILL_SIDE, "prompt"), ("output_tokens", OUTPUT_SIDE, "output")):
        ma, mb = _mean_count(shared[0] if shared else ra, which), _mean_count(shared[1] if shared else rb, which)
        if ma and mb and abs(mb - ma) / ma > COUNT_NOISE:
            what = f"mean {name} tokens (server count) {ma:.1f} → {mb:.1f}"
            out.append((nc_warning(f"{what}: the requests were not the same size", {"what": what, "a": ma, "b": mb}), keys))
    return out


def imported_definitions(info: RunInfo, name: str) -> list[tuple[MeasurementWarning, frozenset[str]]]:
    """An imported run's (``kind: import``) metrics whose tool defines them otherwise than phasescope does
    (its summary's ``definitions``, :mod:`phasescope.report.imported`): each is not comparable, and why."""
    if info.kind != "import":
        return []
    defs = _summary(info).get("definitions")
    src = _summary(info).get("source")
    tool = src.get("tool") if isinstance(src, dict) else None
    out: list[tuple[MeasurementWarning, frozenset[str]]] = []
    for key, d in sorted((defs or {}).items()) if isinstance(defs, dict) else []:
        if key in ALL_METRICS and isinstance(d, dict) and d.get("comparable") is False:
            what = f"run {name} ({tool or 'imported'}) defines {key} otherwise: {d.get('why', '')}"
            out.append((nc_warning(what, {"what": what, "metric": key, "tool": tool}), frozenset({key})))
    return out


def _host(url: str | None) -> str | None:
    from urllib.parse import urlsplit

    return None if not url else (urlsplit(url).hostname or url)


def _lengths(recs: list[RequestRecord], which: str) -> frozenset[int]:
    rs = measured(recs)
    if which == "prompt":
        vals = [r.prompt_tokens_requested for r in rs if r.prompt_tokens_requested is not None]
        if not vals:  # fall back to measured prompt sizes, rounded to 2 significant digits
            vals = [_round2(r.prompt_tokens) for r in rs if r.prompt_tokens]
    else:
        vals = [r.max_tokens for r in rs if r.max_tokens is not None]
    return frozenset(int(v) for v in vals if v is not None)


def _round2(n: int | None) -> int | None:
    if not n:
        return n
    mag = 10 ** max(0, len(str(int(n))) - 2)
    return int(round(n / mag) * mag)


def _fmt_set(s: frozenset[int]) -> str:
    v = sorted(s)
    if len(v) > 6:
        return f"{len(v)} lengths {v[0]}–{v[-1]} (median {median([float(x) for x in v]):.0f})"
    return "/".join(str(x) for x in v)


#: parameters that change nothing that is measured: free text, where the files go, which
#: percentiles are printed (every record is kept, so any percentile can be derived later)
NOT_MEASURED = frozenset({"label", "out_dir", "store", "percentiles"})


def param_changes(pa: dict[str, Any], pb: dict[str, Any]) -> dict[str, list[Any]]:
    """Parameters both runs recorded whose values differ (flattened with dots), as ``{name: [a, b]}``.
    A parameter only one run recorded (e.g. added by a newer phasescope) is unknown for the other,
    not a difference; neither is one of :data:`NOT_MEASURED`."""
    fa, fb = _flatten(pa or {}), _flatten(pb or {})
    return {k: [fa[k], fb[k]] for k in sorted(set(fa) & set(fb))
            if fa[k] != fb[k] and k.split(".", 1)[0] not in NOT_MEASURED}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
