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
      "high": "58 ms", "pct": 13.6},
     lambda v: (f"{v['prompt_tokens']}-token {v['figure']}: the repeats still disagree after {v['n']} runs (--max-repeat "
                f"{v['max_repeat']}): {v['spread']}, a 95 % interval of {v['low']}–{v['high']} (±{v['pct']:.0f}%); no "
                "sentence rests on it."),
     "run on a quiet machine (see the host line), or raise --max-repeat"),
    ("unstable", "fixed",
     {"prompt_tokens": 64, "figure": "decode rate", "n": 3, "max_repeat": 3, "spread": "80–97 tok/s",
      "low": "79 tok/s", "high": "99 tok/s", "pct": 11.2},
     lambda v: (f"{v['prompt_tokens']}-token {v['figure']}: the repeats still disagree over --repeat {v['n']}: "
                f"{v['spread']}, a 95 % interval of {v['low']}–{v['high']} (±{v['pct']:.0f}%); no sentence rests on it."),
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
    ("runs_not_comparable", "field", {"name": "engine version", "a": "b4000", "b": "?"},
     lambda v: f"{v['name']} differs: {v['a']} → {v['b']}", None),
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
