"""measure/warnings.WARNINGS: each kind's sentences live beside it, and call sites pass values.

Every sentence is rendered both ways: by its template (:func:`warn`) and by the f-string its call site
composed before the templates moved into the table (copied here from those call sites), with the same
values; the text a user reads, in the console and in ``--json``, is the same.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from phasescope.measure.warnings import KINDS, WARNINGS, MeasurementWarning, warn

BUDGET_FIX = "give explain a longer --budget"


def _host_old(v: dict[str, Any]) -> str:
    return (v["took"] + " while the run measured (" + v["limits"] + v["where"] + v["named"]
            + "): the client and the server waited for CPU, so latencies read high and rates low"
            + (", and the requests or repeats that ran inside a burst disagree with the rest" if v["bursty"] else ""))


def _ceiling_head(v: dict[str, Any]) -> str:
    return (f"{v['where']}: measured {v['measured']:,.1f} tok/s is {v['ratio']:.1f}× the bandwidth ceiling "
            f"{v['ceiling']:,.1f} tok/s — physically impossible, so an input is wrong")


HEAD = {"where": "decode", "measured": 1234.56, "ratio": 3.21, "ceiling": 384.6}
#: load/health's lag figures (already ``or 0.0``), its --workers phrase and its full-cores phrase
LAG = {"p50": 1.234, "p99": 7.89, "max": 15.0}
MORE = "--workers 4 (or run with uvloop: pip install 'phasescope[fast]', less client CPU per streamed event)"
FULL = (" while the client used only 31 % of a core: this machine's cores were 96 % busy (the server on it took 80 % "
        "of them), so the client waited for a core")
CORES_FULL_FIX = ("pin the server and the client to separate cores (taskset), or give the server fewer threads; "
                  "more --workers would compete for the same cores")


def _loop_lag(v: dict[str, Any]) -> str:
    return (f"The client's event loop lagged {v['p50']:.1f} ms at the median and {v['p99']:.1f} ms at p99 "
            f"(max {v['max']:.1f} ms)")


def _burst(v: dict[str, Any]) -> str:
    return (f"Requests sent all at once left {v['p50']:.1f} ms after t0 at the median and {v['p99']:.1f} ms "
            f"at p99 (max {v['max']:.1f} ms): putting the burst on the wire took that long, so the "
            "server saw it spread over that time (each TTFT still starts at its own request's send).")


def _late(v: dict[str, Any]) -> str:
    return (f"Requests left {v['p50']:.1f} ms late at the median and {v['p99']:.1f} ms at p99 (max "
            f"{v['max']:.1f} ms) versus their schedule: the client was busy, so the offered load "
            "was lower than requested and TTFTs started late.")

#: planning/twin's values for one shortfall, and the sentence it composed inline before the table held it
TWIN = {"where": "at concurrency 16", "metric": "TTFT", "p": 50.0, "x": 2.345, "who": "probe", "calib_id": "p1",
        "predicted_ms": 41.25, "low_ms": 36.0, "high_ms": 47.5, "m_low_ms": 90.04, "m_high_ms": 101.96, "slots": 8}


def _twin_old(v: dict[str, Any]) -> str:
    return (f"{v['where']} this server's {v['metric']} p{v['p']:g} is {v['x']:.1f}× what its own {v['who']} "
            f"({v['calib_id']}) predicts (predicted {v['predicted_ms']:.1f} ms, band {v['low_ms']:.1f}–"
            f"{v['high_ms']:.1f} ms; measured {v['m_low_ms']:.1f}–{v['m_high_ms']:.1f} ms)")


#: (kind, says, values, the old message, the old fix)
CASES: list[tuple[str, str, dict[str, Any], Callable[[dict[str, Any]], str], str | None]] = [
    ("host_busy", "contention",
     {"took": "other work on this machine took 41 % of its 2 cores' CPU time", "limits": "more than the 10 % phasescope "
      "accepts on average", "where": "", "named": "; busiest: cc1 (30 %)",
      "bursty": ", and the requests or repeats that ran inside a burst disagree with the rest"},
     _host_old, "rerun on a quiet machine (stop the other jobs, or pin the server and client to cores nothing else uses "
     "with taskset); compare only runs with similar host load"),
    ("unstable", "auto",
     {"prompt_tokens": 512, "figure": "TTFT", "n": 9, "max_repeat": 9, "spread": "40–61 ms", "low": "44 ms",
      "high": "58 ms", "pct": 13.6, "rests": "a sentence rests on it only where its whole interval supports the claim"},
     lambda v: (f"{v['prompt_tokens']}-token {v['figure']}: the repeats still disagree after {v['n']} runs (--max-repeat "
                f"{v['max_repeat']}): {v['spread']}, a 95 % interval of {v['low']}–{v['high']} (±{v['pct']:.0f}%); "
                f"{v['rests']}."),
     "run on a quiet machine (see the host line), or raise --max-repeat"),
    ("unstable", "fixed",
     {"prompt_tokens": 64, "figure": "decode rate", "n": 3, "max_repeat": 3, "spread": "80–97 tok/s",
      "low": "79 tok/s", "high": "99 tok/s", "pct": 11.2, "rests": "no sentence rests on it"},
     lambda v: (f"{v['prompt_tokens']}-token {v['figure']}: the repeats still disagree over --repeat {v['n']}: "
                f"{v['spread']}, a 95 % interval of {v['low']}–{v['high']} (±{v['pct']:.0f}%); {v['rests']}."),
     "use --repeat auto (repeats until stable), or run on a quiet machine"),
    ("token_count_mismatch", "prompt_lengths", {"by_size": "asked 64, server counted 65"},
     lambda v: (f"The server counted other prompt lengths than were asked for ({v['by_size']}): prefill rates use the "
                "server's count."),
     "use an API with a tokenizer endpoint and token-id prompts (--api openai on vLLM, SGLang, llama.cpp)"),
    ("cold_start", "first_request", {"first_ms": 812.4, "times": 6.26},
     lambda v: (f"The first request's TTFT ({v['first_ms']:.0f} ms) was {v['times']:.1f}× the later ones of its size, "
                "with no warm-up: the median still holds, but the spread does not."),
     "drop --no-warmup"),
    ("too_few_samples", "repeat", {"repeat": 1},
     lambda v: (f"--repeat {v['repeat']}: a median of fewer than 3 requests per size has no spread to judge noise by."),
     "use --repeat 3 or more"),
    ("too_few_samples", "scrapes", {"scrapes": 1},
     lambda v: f"{v['scrapes']} scrape(s) so far: rates and percentiles need two scrapes of the counters.",
     "watch for longer than one --interval"),
    ("too_few_samples", "trials", {"why": "only run A has two or more complete trials: the intervals resample requests"},
     lambda v: f"compare: {v['why']}", "run both with bench --trials 3 or more"),
    ("above_ceiling", "device_bandwidth",
     {**HEAD, "why": "; reading 4.92 GB per token at that speed needs 6,074 GB/s, more than h100's 3,350.0 GB/s",
      "because": "the model bytes are exact"},
     lambda v: _ceiling_head(v) + v["why"] + f": the device bandwidth is likely wrong ({v['because']})",
     "pass --device with the hardware the server runs on, or re-measure this machine with `phasescope hw` on a quiet "
     "machine"),
    ("above_ceiling", "quant",
     {**HEAD, "device_gb_s": 3350.0, "max_gb": 2.7135, "implied_bits": 5.04, "format": "bf16", "bits": 16.0},
     lambda v: (_ceiling_head(v) + f"; at {v['device_gb_s']:,.1f} GB/s the server can read at most {v['max_gb']:,.3g} GB "
                f"per token, ~{v['implied_bits']:.1f} bits per weight, not {v['format']}'s {v['bits']:.0f}: the weights "
                "are likely quantized (quant)"),
     "pass --model-spec with the served file (.gguf or its config.json), so the bytes per token match what is read"),
    ("above_ceiling", "model_bytes", {**HEAD, "why": ""},
     lambda v: (_ceiling_head(v) + v["why"] + ": the model bytes per token are likely overstated (another or smaller "
                "model, MoE active weights)"),
     "pass --model-spec with the served model's config.json or .gguf"),
    ("runs_not_comparable", "field", {"name": "engine version", "a": "b4000", "b": "b4100"},
     lambda v: f"{v['name']} differs: {v['a']} → {v['b']}", None),
    ("runs_not_comparable", "field_unknown", {"name": "API", "which": "B", "known": "openai"},
     lambda v: f"{v['name']} is not recorded in run {v['which']} ({v['known']} in the other), so whether it differs "
               "is unknown", None),
    ("runs_not_comparable", "host", {"a": "http://10.0.0.2:8000", "b": "http://10.0.0.3:8000"},
     lambda v: f"target host differs: {v['a']} → {v['b']} (fine if the server is what you compare)", None),
    ("runs_not_comparable", "prompt_lengths", {"a": "{64, 512}", "b": "{64}"},
     lambda v: f"prompt lengths differ: {v['a']} → {v['b']} tokens", None),
    ("runs_not_comparable", "output_lengths", {"a": "{128}", "b": "{256}"},
     lambda v: f"requested output lengths differ: {v['a']} → {v['b']} tokens", None),
    ("partial_run", "status", {"name": "B", "id": "r-42", "status": "partial", "error": ": interrupted"},
     lambda v: f"run {v['name']} ({v['id']}) is {v['status']}" + v["error"], None),
    ("partial_run", "budget", {}, lambda v: "stopped at the time budget: the server was slower than its calibration",
     BUDGET_FIX),
    ("partial_run", "stopped_in_flight", {"n": 3, "budget_s": 41.6},
     lambda v: (f"{v['n']} request(s) still running at the end of its {v['budget_s']:.0f} s were stopped, so the run "
                "keeps to --budget; they are kept as stopped_by_client and left out of its figures"),
     "give explain a longer --budget (the server was slower than its calibration)"),
    ("no_success", "run", {"name": "A"}, lambda v: f"run {v['name']} has no successful request", None),
    ("gpu_telemetry", "source", {"name": "http://gpu:9400/metrics", "kind": "dcgm", "reason": "nothing is listening"},
     lambda v: f"GPU source {v['name']} ({v['kind']}) gave no samples: {v['reason']}",
     "check the URL (dcgm-exporter listens on :9400/metrics by default)"),
    ("gpu_telemetry", "coarse", {"majority": 0.6, "interval_s": 2.0},
     lambda v: (f"no sampling window was ≥ {v['majority']:.0%} prefill or decode: the interval ({v['interval_s']} s) "
                "is longer than the phases"),
     "lower --metrics-interval (and dcgm-exporter's -c), or use longer prompts/outputs"),
    ("gpu_telemetry", "stale", {"stale": 4},
     lambda v: (f"the GPU counters did not change over {v['stale']} consecutive samples while the load did: the "
                "exporter collects less often than phasescope scrapes"),
     "start dcgm-exporter with -c 1000 or less (its default collect interval is 30000 ms)"),
    ("gpu_telemetry", "no_dram", {}, lambda v: "no DRAM-active counter: phase activity rests on GPU utilization only",
     "DCGM_FI_PROF_* needs a datacenter GPU (Volta or newer) and the DCP fields in dcgm-exporter's counters CSV; NVML "
     "needs Hopper or newer for GPM"),
    ("gpu_telemetry", "unknown_gpu", {"model_name": "NVIDIA X9"},
     lambda v: f"GPU model {v['model_name']!r} is not in the device catalog: no peak bandwidth",
     "pass --device ID (see `phasescope devices`)"),
    # load/ (issue 32): bench's hygiene, health, summary, trials and Ray sentences
    ("host_busy", "client_lag",
     {"contention": "other work on this machine took 41 % of its 2 cores' CPU time while the run measured (x)",
      "lags": "The client's event loop lagged 2.1 ms at the median and 9.0 ms at p99 (max 12.0 ms); requests left 3.0 "
      "ms late at the median and 8.0 ms at p99 versus their schedule", "cpu_percent": 12.4},
     lambda v: (f"{v['contention']}. {v['lags']} while the client used only {v['cpu_percent']:.0f} % of a core: that "
                "delay is this contention (the client waited for a CPU), not the client's own load, so more --workers "
                "would not help"),
     "rerun on a quiet machine (stop the other jobs, or pin the server and client to cores nothing else uses with "
     "taskset); compare only runs with similar host load"),
    ("unstable", "trials",
     {"n": 2, "plural": "s", "trials": 3, "threshold_pct": 10.0, "named": "ttft_p50 0.01–0.02 (±31 %), itl_p50 …"},
     lambda v: (f"{v['n']} figure{v['plural']} disagree across the {v['trials']} trials (95 % interval "
                f"wider than ±{v['threshold_pct']:.0f} % of the mean): {v['named']}"),
     "run more trials (--trials), longer trials (--num-prompts), or on a quieter machine"),
    ("prefix_cache_hits", "reused", {"rate_pct": 93.75, "sources": "requests 0.938, server metrics 0.941",
                                     "expected_pct": 0.0},
     lambda v: (f"The server answered {v['rate_pct']:.1f} % of prompt tokens from its prefix cache ({v['sources']}; "
                f"expected {v['expected_pct']:.1f} %): " + "--reuse-prompts sent the same prompts as an earlier run: "
                "TTFT measures the cache, not prefill" + "."),
     "drop --reuse-prompts (every run salts its prompts)"),
    ("prefix_cache_hits", "unexpected", {"rate_pct": 41.26, "sources": "requests 0.413", "expected_pct": 12.5},
     lambda v: (f"The server answered {v['rate_pct']:.1f} % of prompt tokens from its prefix cache ({v['sources']}; "
                f"expected {v['expected_pct']:.1f} %): " + "the workload should have none: TTFT and prefill rates "
                "measure the cache, not prefill" + "."),
     "check that nothing else sends these prompts; use a new --seed, or disable the server's prefix cache"),
    ("client_saturated", "loop_lag", {**LAG, "full": "", "more": "--workers 2"},
     lambda v: _loop_lag(v) + v["full"] + ": token timestamps include that much client delay, so TTFT/ITL can read high.",
     "spread the load with --workers 2 or lower the concurrency"),
    ("client_saturated", "loop_lag_cores_full", {**LAG, "full": FULL, "more": "--workers 2"},
     lambda v: _loop_lag(v) + v["full"] + ": token timestamps include that much client delay, so TTFT/ITL can read high.",
     CORES_FULL_FIX),
    ("client_saturated", "cpu", {"cpu_percent": 97.6, "more": MORE},
     lambda v: f"The client used {v['cpu_percent']:.0f}% of a CPU core: it is near saturation and may be skewing latencies.",
     f"use {MORE}"),
    ("client_saturated", "send_burst", {**LAG, "full": "", "more": MORE},
     lambda v: _burst(v), f"use {MORE} to send the burst faster, or pace it with --request-rate"),
    ("client_saturated", "send_burst_cores_full", {**LAG, "full": FULL, "more": MORE},
     lambda v: _burst(v).rstrip(".") + v["full"] + ".", CORES_FULL_FIX),
    ("client_saturated", "send_late", {**LAG, "full": "", "more": MORE},
     lambda v: _late(v), f"use {MORE} or a lower --request-rate"),
    ("client_saturated", "send_late_cores_full", {**LAG, "full": FULL, "more": MORE},
     lambda v: _late(v).replace("the client was busy", "the client waited for a core").rstrip(".") + v["full"] + ".",
     CORES_FULL_FIX),
    ("token_count_mismatch", "output_counts", {"mismatched": 3, "compared": 40},
     lambda v: (f"Output token counts disagree for {v['mismatched']} of {v['compared']} requests: the server's usage "
                "count differs from the tokens the client saw streamed. Throughput and TPOT use the server's count."),
     "check the server's usage counting (speculative decoding, stream interval) before trusting per-token rates"),
    ("token_count_mismatch", "prompt_counts", {"mismatched": 5, "compared": 40, "differences": "+1, +2"},
     lambda v: (f"Prompt token counts disagree for {v['mismatched']} of {v['compared']} requests: usage.prompt_tokens "
                f"differs from the length that was asked for (server − asked: {v['differences']} tokens). Input "
                "throughput uses the server's count."),
     "use an API that takes token ids (--api openai on vLLM, SGLang, llama.cpp) for exact prompt lengths"),
    ("token_count_mismatch", "negative", {"n": 2, "total": 10, "example": {"completion_tokens": -3}},
     lambda v: (f"The server reported negative token counts for {v['n']} of {v['total']} requests "
                f"(e.g. {v['example']}): not trusted; those requests are counted from the "
                "streamed events and the prompt that was sent."),
     "check the server's usage reporting"),
    ("cold_start", "no_warmup", {"first_ms": 812.4, "times": 6.26, "median_ms": 129.8},
     lambda v: (f"The first request's TTFT was {v['first_ms']:.0f} ms, {v['times']:.1f}× the median of the others "
                f"({v['median_ms']:.0f} ms), and no warm-up was sent: it paid a one-off cost inside the measurement."),
     "keep --warmup 1 (the default) or more"),
    ("too_few_samples", "p99", {"completed": 40, "percentile": 99.0, "more": "send 100 or more requests (--num-prompts)"},
     lambda v: (f"Only {v['completed']} requests completed: a p{v['percentile']:g} of {v['completed']} values is close "
                "to the maximum of a few requests, not a tail estimate."),
     "send 100 or more requests (--num-prompts)"),
    ("too_few_samples", "steady_state", {"reason": None},
     lambda v: f"--steady-state: {v['reason']}; the figures cover the whole run",
     "send more requests (--num-prompts or --duration) than the concurrency several times over"),
    ("too_few_samples", "trials_complete", {"done": 1, "trials": 3},
     lambda v: f"only {v['done']} of {v['trials']} trials completed: no run-level interval",
     "run again with --trials 3 or more"),
    ("rate_not_reached", "send_rate", {"achieved": 7.456, "requested": 10.0},
     lambda v: (f"Achieved send rate {v['achieved']:.2f} req/s is below the requested {v['requested']:.2f} req/s "
                "(a --max-concurrency cap, a slow server or a busy client held requests back)."),
     "raise --max-concurrency, or use --workers when the client is busy"),
    ("no_server_counts", "events", {},
     lambda v: ("The server sent no usage counts: output tokens were counted from streamed events "
                "(one event = one token unless the event said otherwise)."), None),
    ("version_mismatch", "ray_actor", {"actor": "w1", "node_ip": "10.0.0.7", "actor_version": "0.9.0",
                                       "driver_version": "1.0.0"},
     lambda v: (f"actor {v['actor']} on {v['node_ip']} runs phasescope {v['actor_version']} but the driver runs "
                f"{v['driver_version']}"),
     "install the same phasescope version on every node"),
    ("twin_shortfall", "decode", dict(TWIN), _twin_old,
     "decode runs slower than at calibration: another load on the server, a throttled device, or a changed engine, "
     "model or quantization — probe again and compare"),
    ("twin_shortfall", "queue", dict(TWIN), _twin_old,
     "requests wait before they start while each decodes at the calibrated speed: the server queues sooner than its "
     "calibration — check max sequences / slots (the twin assumed 8) and the batch budget"),
]


@pytest.mark.parametrize("kind, says, values, old, fix", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_each_sentence_renders_as_its_call_site_composed_it(kind: str, says: str, values: dict[str, Any],
                                                           old: Callable[[dict[str, Any]], str], fix: str | None) -> None:
    w = warn(kind, says, {"n": 1}, **values)
    assert (w.kind, w.message, w.fix, dict(w.evidence)) == (kind, old(values), fix, {"n": 1})
    by_hand = MeasurementWarning(kind, old(values), {"n": 1}, fix)
    assert w.line() == by_hand.line() and w.to_dict() == by_hand.to_dict()


def test_every_sentence_in_the_table_is_rendered_above() -> None:
    table = {(k, s) for k, kind in WARNINGS.items() for s in kind.says}
    assert table == {(c[0], c[1]) for c in CASES}
    assert list(KINDS) == list(WARNINGS) and all(KINDS[k] == WARNINGS[k].meaning for k in KINDS)


def test_a_missing_value_or_an_unknown_sentence_fails_loudly() -> None:
    with pytest.raises(KeyError):
        warn("cold_start", "first_request", first_ms=1.0)  # `times` not passed
    with pytest.raises(KeyError):
        warn("cold_start", "no_such_sentence")


def test_prefixed_keeps_everything_but_the_message() -> None:
    w = warn("too_few_samples", "repeat", {"repeat": 1}, repeat=1)
    p = w.prefixed("prompt_scaling: ")
    assert (p.kind, p.evidence, p.fix) == (w.kind, w.evidence, w.fix)
    assert p.message == "prompt_scaling: " + w.message


def test_load_composes_no_warning_inline() -> None:
    """load/ builds every warning with :func:`warn` (or carries one over with ``prefixed``): no
    ``MeasurementWarning(...)`` call there composes a sentence of its own (18 did before issue 32)."""
    import ast
    from pathlib import Path

    import phasescope.load

    root = Path(phasescope.load.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "MeasurementWarning":
                bad.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not bad, "warnings composed inline in load/ (add a template to WARNINGS, call warn): " + ", ".join(bad)
