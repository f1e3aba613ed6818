"""Warnings are data: one :class:`MeasurementWarning` type for every command.

Modelled on hyperfine's ``Warnings`` enum (``src/output/warnings.rs``): each warning says what
happened (``message``), the numbers behind it (``evidence``), and which flag or change fixes it
(``fix``). Probe, bench, explain, experiment, watch, plan and compare attach a list of them to their
results; ``--json`` carries ``"warnings": [w.to_dict(), ...]``, the console prints them in one block
(:func:`render_lines`), the run store keeps them with the run, and the HTML report shows them.

Each kind's sentences sit beside it in :data:`WARNINGS` (message and fix templates, by name); a
call site passes the values, ``warn("cold_start", "first_request", evidence, first_ms=812, times=6.3)``,
and composes no sentence itself. :meth:`MeasurementWarning.prefixed` leads a carried-over warning
with where it came from (an experiment, a compared run).

Legacy string warnings (older stored runs, or code not yet converted) are accepted everywhere a list
of warnings is read: :func:`coerce` turns a string into a warning of kind ``note``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

@dataclass(frozen=True)
class Template:
    """One way a kind is said: ``message`` and ``fix`` are ``str.format`` templates whose fields the
    call site passes (a number with its format in the template, or a phrase the call site composed)."""

    message: str
    fix: str | None = None


@dataclass(frozen=True)
class Kind:
    """A kind of warning: what it means, and its sentences by name (:func:`warn` renders them)."""

    meaning: str
    says: Mapping[str, Template] = field(default_factory=dict)


_T = Template
_BUDGET_FIX = "give explain a longer --budget"
_QUIET_FIX = ("rerun on a quiet machine (stop the other jobs, or pin the server and client to cores nothing else uses "
              "with taskset); compare only runs with similar host load")
#: the client lagged because the machine's cores were full (``full``: the phrase saying how full)
_CORES_FULL_FIX = ("pin the server and the client to separate cores (taskset), or give the server fewer threads; more "
                   "--workers would compete for the same cores")
_LOOP_LAG = ("The client's event loop lagged {p50:.1f} ms at the median and {p99:.1f} ms at p99 (max {max:.1f} ms){full}: "
             "token timestamps include that much client delay, so TTFT/ITL can read high.")
_SEND_BURST = ("Requests sent all at once left {p50:.1f} ms after t0 at the median and {p99:.1f} ms at p99 (max "
               "{max:.1f} ms): putting the burst on the wire took that long, so the server saw it spread over that "
               "time (each TTFT still starts at its own request's send){full}.")
_SEND_LATE = ("Requests left {p50:.1f} ms late at the median and {p99:.1f} ms at p99 (max {max:.1f} ms) versus their "
              "schedule: the client {busy}, so the offered load was lower than requested and TTFTs started late{full}.")


def _busy(sentence: str, busy: str | None) -> str:
    """``sentence`` for a client that was busy itself (``busy`` None: no ``{full}`` phrase) or
    waited for a core of a full machine (``busy``: how it is said; ``{full}`` says how full)."""
    if busy is None:
        return sentence.replace("{full}", "").replace("{busy}", "was busy")
    return sentence.replace("{busy}", busy)


_TWIN = ("{where} this server's {metric} p{p:g} is {x:.1f}× what its own {who} ({calib_id}) predicts (predicted "
         "{predicted_ms:.1f} ms, band {low_ms:.1f}–{high_ms:.1f} ms; measured {m_low_ms:.1f}–{m_high_ms:.1f} ms)")
_PREFIX_HITS = ("The server answered {rate_pct:.1f} % of prompt tokens from its prefix cache ({sources}; expected "
                "{expected_pct:.1f} %): ")

#: every kind a warning can have, with what it means and the sentences that say it. New kinds and new
#: sentences are added here, never composed inline: a call site passes values to :func:`warn`.
WARNINGS: dict[str, Kind] = {
    "host_busy": Kind("other work on this machine took CPU time while the run measured", {
        "contention": _T("{took} while the run measured ({limits}{where}{named}): the client and the server waited "
                         "for CPU, so latencies read high and rates low{bursty}", _QUIET_FIX),
        # the host's contention (``contention``: that sentence) with the client lag it caused (``lags``)
        "client_lag": _T("{contention}. {lags} while the client used only {cpu_percent:.0f} % of a core: that delay is "
                         "this contention (the client waited for a CPU), not the client's own load, so more --workers "
                         "would not help", _QUIET_FIX),
    }),
    "high_variance": Kind("repeated measurements of one point spread more than the effect being measured"),
    "unstable": Kind("a figure's repeats still disagree after the most repeats allowed: its interval is wider than ±10 %", {
        "auto": _T("{prompt_tokens}-token {figure}: the repeats still disagree after {n} runs (--max-repeat {max_repeat}): "
                   "{spread}, a 95 % interval of {low}–{high} (±{pct:.0f}%); {rests}.",
                   "run on a quiet machine (see the host line), or raise --max-repeat"),
        "fixed": _T("{prompt_tokens}-token {figure}: the repeats still disagree over --repeat {n}: {spread}, a 95 % "
                    "interval of {low}–{high} (±{pct:.0f}%); {rests}.",
                    "use --repeat auto (repeats until stable), or run on a quiet machine"),
        "trials": _T("{n} figure{plural} disagree across the {trials} trials (95 % interval wider than ±{threshold_pct:.0f} "
                     "% of the mean): {named}",
                     "run more trials (--trials), longer trials (--num-prompts), or on a quieter machine"),
    }),
    "prefix_cache_hits": Kind("the server answered from its prefix cache on a workload that should have none", {
        "reused": _T(_PREFIX_HITS + "--reuse-prompts sent the same prompts as an earlier run: TTFT measures the cache, "
                     "not prefill.", "drop --reuse-prompts (every run salts its prompts)"),
        "unexpected": _T(_PREFIX_HITS + "the workload should have none: TTFT and prefill rates measure the cache, not "
                         "prefill.", "check that nothing else sends these prompts; use a new --seed, or disable the "
                         "server's prefix cache"),
    }),
    "client_saturated": Kind("the client itself added latency (event-loop lag, send lag)", {
        # ``more``: the --workers to use (and the fast parts missing); ``full`` (the ``*_cores_full``
        # sentences): the phrase saying how full the machine's cores were
        "loop_lag": _T(_busy(_LOOP_LAG, None), "spread the load with {more} or lower the concurrency"),
        "loop_lag_cores_full": _T(_LOOP_LAG, _CORES_FULL_FIX),
        "cpu": _T("The client used {cpu_percent:.0f}% of a CPU core: it is near saturation and may be skewing latencies.",
                  "use {more}"),
        "send_burst": _T(_busy(_SEND_BURST, None), "use {more} to send the burst faster, or pace it with --request-rate"),
        "send_burst_cores_full": _T(_SEND_BURST, _CORES_FULL_FIX),
        "send_late": _T(_busy(_SEND_LATE, None), "use {more} or a lower --request-rate"),
        "send_late_cores_full": _T(_busy(_SEND_LATE, "waited for a core"), _CORES_FULL_FIX),
    }),
    "token_count_mismatch": Kind("the server counted a different number of tokens than was asked for", {
        "prompt_lengths": _T("The server counted other prompt lengths than were asked for ({by_size}): prefill rates "
                             "use the server's count.",
                             "use an API with a tokenizer endpoint and token-id prompts (--api openai on vLLM, SGLang, "
                             "llama.cpp)"),
        "output_counts": _T("Output token counts disagree for {mismatched} of {compared} requests: the server's usage "
                            "count differs from the tokens the client saw streamed. Throughput and TPOT use the server's "
                            "count.", "check the server's usage counting (speculative decoding, stream interval) before "
                            "trusting per-token rates"),
        "prompt_counts": _T("Prompt token counts disagree for {mismatched} of {compared} requests: usage.prompt_tokens "
                            "differs from the length that was asked for (server − asked: {differences} tokens). Input "
                            "throughput uses the server's count.",
                            "use an API that takes token ids (--api openai on vLLM, SGLang, llama.cpp) for exact prompt "
                            "lengths"),
        "negative": _T("The server reported negative token counts for {n} of {total} requests (e.g. {example}): not "
                       "trusted; those requests are counted from the streamed events and the prompt that was sent.",
                       "check the server's usage reporting"),
    }),
    "cold_start": Kind("the first request paid a one-off cost (model load, graph capture)", {
        "first_request": _T("The first request's TTFT ({first_ms:.0f} ms) was {times:.1f}× the later ones of its size, "
                            "with no warm-up: the median still holds, but the spread does not.", "drop --no-warmup"),
        "no_warmup": _T("The first request's TTFT was {first_ms:.0f} ms, {times:.1f}× the median of the others "
                        "({median_ms:.0f} ms), and no warm-up was sent: it paid a one-off cost inside the measurement.",
                        "keep --warmup 1 (the default) or more"),
    }),
    "too_few_samples": Kind("too few measurements for the statistic to mean much", {
        "repeat": _T("--repeat {repeat}: a median of fewer than 3 requests per size has no spread to judge noise by.",
                     "use --repeat 3 or more"),
        "scrapes": _T("{scrapes} scrape(s) so far: rates and percentiles need two scrapes of the counters.",
                      "watch for longer than one --interval"),
        "trials": _T("compare: {why}", "run both with bench --trials 3 or more"),
        # ``more``: the workload's way to send more requests (Workload.more_requests)
        "p99": _T("Only {completed} requests completed: a p{percentile:g} of {completed} values is close to the maximum "
                  "of a few requests, not a tail estimate.", "{more}"),
        "steady_state": _T("--steady-state: {reason}; the figures cover the whole run",
                           "send more requests (--num-prompts or --duration) than the concurrency several times over"),
        "trials_complete": _T("only {done} of {trials} trials completed: no run-level interval",
                              "run again with --trials 3 or more"),
    }),
    "above_ceiling": Kind("a measured rate is above its physical ceiling: an input (device, model bytes, quant) is wrong", {
        "device_bandwidth": _T("{where}: measured {measured:,.1f} tok/s is {ratio:.1f}× the bandwidth ceiling "
                               "{ceiling:,.1f} tok/s — physically impossible, so an input is wrong{why}: the device "
                               "bandwidth is likely wrong ({because})",
                               "pass --device with the hardware the server runs on, or re-measure this machine with "
                               "`phasescope hw` on a quiet machine"),
        "quant": _T("{where}: measured {measured:,.1f} tok/s is {ratio:.1f}× the bandwidth ceiling {ceiling:,.1f} "
                    "tok/s — physically impossible, so an input is wrong; at {device_gb_s:,.1f} GB/s the server can "
                    "read at most {max_gb:,.3g} GB per token, ~{implied_bits:.1f} bits per weight, not {format}'s "
                    "{bits:.0f}: the weights are likely quantized (quant)",
                    "pass --model-spec with the served file (.gguf or its config.json), so the bytes per token match "
                    "what is read"),
        "model_bytes": _T("{where}: measured {measured:,.1f} tok/s is {ratio:.1f}× the bandwidth ceiling {ceiling:,.1f} "
                          "tok/s — physically impossible, so an input is wrong{why}: the model bytes per token are "
                          "likely overstated (another or smaller model, MoE active weights)",
                          "pass --model-spec with the served model's config.json or .gguf"),
    }),
    "runs_not_comparable": Kind("two runs differ in more than the parameter under test", {
        "field": _T("{name} differs: {a} → {b}"),
        "field_unknown": _T("{name} is not recorded in run {which} ({known} in the other), so whether it differs is "
                            "unknown"),
        "host": _T("target host differs: {a} → {b} (fine if the server is what you compare)"),
        "prompt_lengths": _T("prompt lengths differ: {a} → {b} tokens"),
        "output_lengths": _T("requested output lengths differ: {a} → {b} tokens"),
    }),
    "partial_run": Kind("the run stopped early; its numbers cover only part of the planned load", {
        "status": _T("run {name} ({id}) is {status}{error}"),
        "budget": _T("stopped at the time budget: the server was slower than its calibration", _BUDGET_FIX),
        "stopped_in_flight": _T("{n} request(s) still running at the end of its {budget_s:.0f} s were stopped, so the "
                                "run keeps to --budget; they are kept as stopped_by_client and left out of its figures",
                                _BUDGET_FIX + " (the server was slower than its calibration)"),
    }),
    "no_success": Kind("no request succeeded", {
        "run": _T("run {name} has no successful request"),
    }),
    "request_errors": Kind("some requests failed"),
    "overrun": Kind("the server sent more output than was asked for"),
    "gpu_telemetry": Kind("GPU telemetry was missing, too coarse or stale to set against the phases", {
        "source": _T("GPU source {name} ({kind}) gave no samples: {reason}",
                     "check the URL (dcgm-exporter listens on :9400/metrics by default)"),
        "coarse": _T("no sampling window was ≥ {majority:.0%} prefill or decode: the interval ({interval_s} s) is "
                     "longer than the phases", "lower --metrics-interval (and dcgm-exporter's -c), or use longer "
                     "prompts/outputs"),
        "stale": _T("the GPU counters did not change over {stale} consecutive samples while the load did: the exporter "
                    "collects less often than phasescope scrapes",
                    "start dcgm-exporter with -c 1000 or less (its default collect interval is 30000 ms)"),
        "no_dram": _T("no DRAM-active counter: phase activity rests on GPU utilization only",
                      "DCGM_FI_PROF_* needs a datacenter GPU (Volta or newer) and the DCP fields in dcgm-exporter's "
                      "counters CSV; NVML needs Hopper or newer for GPM"),
        "unknown_gpu": _T("GPU model {model_name!r} is not in the device catalog: no peak bandwidth",
                          "pass --device ID (see `phasescope devices`)"),
    }),
    "rate_not_reached": Kind("the load generator sent requests slower than the requested rate", {
        "send_rate": _T("Achieved send rate {achieved:.2f} req/s is below the requested {requested:.2f} req/s (a "
                        "--max-concurrency cap, a slow server or a busy client held requests back).",
                        "raise --max-concurrency, or use --workers when the client is busy"),
    }),
    "no_server_counts": Kind("the server reported no token counts; the client counted or estimated them", {
        "events": _T("The server sent no usage counts: output tokens were counted from streamed events (one event = one "
                     "token unless the event said otherwise)."),
    }),
    "version_mismatch": Kind("the machines of one run ran different phasescope versions", {
        "ray_actor": _T("actor {actor} on {node_ip} runs phasescope {actor_version} but the driver runs {driver_version}",
                        "install the same phasescope version on every node"),
    }),
    "twin_shortfall": Kind("the server measured outside the band its own calibration predicts (bench's twin)", {
        # a slow decode is the engine; a slow start with a normal decode is queueing
        "decode": _T(_TWIN, "decode runs slower than at calibration: another load on the server, a throttled device, "
                             "or a changed engine, model or quantization — probe again and compare"),
        "queue": _T(_TWIN, "requests wait before they start while each decodes at the calibrated speed: the server "
                           "queues sooner than its calibration — check max sequences / slots (the twin assumed {slots}) "
                           "and the batch budget"),
    }),
    "note": Kind("an observation that fits no other kind"),
}

#: every kind with what it means (the table above without its sentences)
KINDS: dict[str, str] = {k: v.meaning for k, v in WARNINGS.items()}


def warn(kind: str, says: str, evidence: Mapping[str, Any] | None = None, /, **values: Any) -> "MeasurementWarning":
    """The warning ``kind`` said its ``says`` way (:data:`WARNINGS`), its templates filled with ``values``."""
    t = WARNINGS[kind].says[says]
    return MeasurementWarning(kind, t.message.format(**values), dict(evidence or {}),
                              t.fix.format(**values) if t.fix is not None else None)


@dataclass(frozen=True)
class MeasurementWarning:
    """One warning: ``kind`` (a key of :data:`KINDS`), what happened, the evidence, and the fix."""

    kind: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown warning kind {self.kind!r}; add it to measure.warnings.KINDS")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message,
                "evidence": {k: _plain(v) for k, v in self.evidence.items()}, "fix": self.fix}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MeasurementWarning":
        kind = str(d.get("kind") or "note")
        return cls(kind if kind in KINDS else "note", str(d.get("message") or ""),
                   dict(d.get("evidence") or {}), d.get("fix"))

    def line(self) -> str:
        """One console line: ``[kind] message — fix: …``."""
        text = f"[{self.kind}] {self.message}"
        return f"{text} — fix: {self.fix}" if self.fix else text

    def prefixed(self, prefix: str) -> "MeasurementWarning":
        """The same warning, its message led by ``prefix`` (``"prompt_scaling: "``, ``"run A (id): "``)."""
        return MeasurementWarning(self.kind, prefix + self.message, self.evidence, self.fix)

    def __str__(self) -> str:  # so old code that joins warnings as strings keeps reading well
        return self.line()


def _plain(v: Any) -> Any:
    """JSON-safe evidence: non-finite floats become ``None`` (JSON has no NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def coerce(w: "MeasurementWarning | Mapping[str, Any] | str") -> MeasurementWarning:
    """Any stored or legacy form (a dict from JSON, a plain string) as a :class:`MeasurementWarning`."""
    if isinstance(w, MeasurementWarning):
        return w
    if isinstance(w, Mapping):
        return MeasurementWarning.from_dict(w)
    return MeasurementWarning("note", str(w))


def to_json(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> list[dict[str, Any]]:
    """The ``"warnings"`` array of every ``--json`` object, de-duplicated in order."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for w in ws or []:
        cw = coerce(w)
        key = (cw.kind, cw.message)
        if key not in seen:
            seen.add(key)
            out.append(cw.to_dict())
    return out


def render_lines(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> list[str]:
    """The console block: one line per warning, in order, duplicates dropped."""
    return [coerce(d).line() for d in to_json(ws)]


def kinds(ws: Iterable["MeasurementWarning | Mapping[str, Any] | str"]) -> set[str]:
    return {coerce(w).kind for w in ws or []}
