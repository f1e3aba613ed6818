"""``phasescope tune``: each setting of the server measured in turn (parse, call, print)."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from phasescope._results import Result, TuneResult
from phasescope.cli._common import api_option, console, err_console
from phasescope.cli._output import console_view, format_option, output
from phasescope.tuning.run import BENCH_TRAFFIC_ARGS


def _sizes(values: List[str]) -> list[int]:
    from phasescope.cli.cmd_probe import _sizes as probe_sizes

    return probe_sizes(values)


def _check_bench_args(a: dict[str, Any]) -> None:
    """The bench flags' own bounds, said before any server starts (one line, exit 2)."""
    import math

    from phasescope.errors import InputError
    from phasescope.safeio import user_file

    if a.get("duration_s") is not None and not (math.isfinite(a["duration_s"]) and a["duration_s"] > 0):
        raise InputError(f"--duration must be a positive number of seconds (got {a['duration_s']})")
    if not (math.isfinite(a.get("burstiness", 1.0)) and a.get("burstiness", 1.0) > 0):
        raise InputError(f"--burstiness must be > 0 (got {a['burstiness']})")
    if not 0 <= a.get("range_ratio", 0.0) < 1:
        raise InputError(f"--range-ratio must be ≥ 0 and < 1 (got {a['range_ratio']})")
    if a.get("prefix_len", 0) < 0 or a.get("prefix_groups", 1) < 1 or a.get("warmup", 1) < 0:
        raise InputError("--prefix-len and --warmup must be ≥ 0 and --prefix-groups ≥ 1")
    ds = a.get("dataset", "random")
    if ds not in DATASETS:
        raise InputError(f"--dataset {ds!r}: choose one of {', '.join(DATASETS)}")
    if ds not in ("random", "conversation"):
        if not a.get("dataset_path"):
            raise InputError(f"--dataset {ds} needs --dataset-path FILE")
        a["dataset_path"] = str(user_file(a["dataset_path"], "--dataset-path").resolve())
    traffic = [k for k in BENCH_TRAFFIC_ARGS if k in a]
    conv = {"users", "sessions", "turns", "turn_input_len", "system_prompt_len", "think_time_s"}
    if ds == "conversation" and set(traffic) - conv:
        raise InputError(f"--{(sorted(set(traffic) - conv)[0]).replace('_', '-')} is for --dataset mooncake|burstgpt, not conversation")
    if ds in ("mooncake", "burstgpt") and set(traffic) & conv:
        raise InputError(f"--{(sorted(set(traffic) & conv)[0]).replace('_', '-')} is for --dataset conversation, not {ds}")
    if ds not in ("conversation", "mooncake", "burstgpt") and traffic:
        raise InputError(f"--{traffic[0].replace('_', '-')} needs --dataset conversation, mooncake or burstgpt")
    if ds in ("conversation", "mooncake", "burstgpt"):  # bench's own checks (and the trace read), before any server
        from phasescope.load.datasets import check_workload
        from phasescope.tuning.run import bench_config

        check_workload(bench_config(a, None))


#: the bench datasets tune's bench workload runs (as `bench --dataset`)
DATASETS = ("random", "sharegpt", "jsonl", "conversation", "mooncake", "burstgpt")


def tune(
    param: List[str] = typer.Option([], "--param", help="NAME=V1,V2,… (repeatable). Embedded engine: ub, b, parallel, threads, fa, cache-reuse, ctx, cache-ram, ctx-checkpoints, spec, draft (a GGUF or none), quant. With --serve: any {name} of the template."),
    one_at_a_time: bool = typer.Option(False, "--one-at-a-time", help="Vary one parameter at a time around the baseline (each parameter's first value) instead of the full grid."),
    workload: str = typer.Option("probe", "--workload", help="probe | bench | explain: what runs against each setting."),
    api: str = api_option(),
    serve: Optional[str] = typer.Option(None, "--serve", help="Launch command template for any engine, e.g. 'vllm serve M --port {port} --max-num-batched-tokens {mnbt}'. Omit for the embedded engine."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue the stored tune ID (its own --param/--workload/--serve)."),
    fresh: bool = typer.Option(False, "--fresh", help="Start a new tune even if the same one is in the store (default: continue it)."),
    prompt_tokens: List[str] = typer.Option(["128"], "--prompt-tokens", "-p", help="probe: prompt sizes in tokens."),
    max_tokens: int = typer.Option(32, "--max-tokens", "-n", help="probe: output tokens per request."),
    repeat: str = typer.Option("3", "--repeat", "-r", metavar="N|auto", help=(
        "probe: requests per size, or auto (until TTFT and decode are within ±10 %, at most 8); the intervals of "
        "the repeats are the noise rule.")),
    num_prompts: int = typer.Option(12, "--num-prompts", help="bench: requests."),
    request_rate: float = typer.Option(float("inf"), "--request-rate", help="bench: requests/s (inf = all at once)."),
    max_concurrency: Optional[int] = typer.Option(4, "--max-concurrency", help="bench: requests in flight at most."),
    input_len: int = typer.Option(128, "--input-len", help="bench: prompt tokens."),
    output_len: int = typer.Option(32, "--output-len", help="bench: output tokens."),
    duration: Optional[float] = typer.Option(None, "--duration", help="bench: stop sending after this many seconds."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="bench: Gamma shape of inter-arrival gaps (1 = Poisson)."),
    range_ratio: float = typer.Option(0.0, "--range-ratio", help="bench: lengths uniform in [L(1-r), L(1+r)] (a mix of short and long prompts)."),
    prefix_len: int = typer.Option(0, "--prefix-len", help="bench: shared prefix tokens per group."),
    prefix_groups: int = typer.Option(1, "--prefix-groups", help="bench: number of distinct shared prefixes."),
    seed: int = typer.Option(0, "--seed", help="bench: seed for arrivals and prompts."),
    warmup: int = typer.Option(1, "--warmup", help="bench: warm-up requests sent first and excluded."),
    dataset: str = typer.Option("random", "--dataset", help="bench: random | sharegpt | jsonl | conversation | mooncake | burstgpt (as bench)."),
    dataset_path: Optional[str] = typer.Option(None, "--dataset-path", help="bench: ShareGPT JSON, prompts JSONL, Mooncake trace JSONL or BurstGPT CSV file."),
    users: Optional[int] = typer.Option(None, "--users", help="bench conversation: concurrent users (bench's default 4)."),
    sessions: Optional[int] = typer.Option(None, "--sessions", help="bench conversation: sessions in all."),
    turns: Optional[str] = typer.Option(None, "--turns", help="bench conversation: turns per session, N or LO-HI."),
    turn_input_len: Optional[int] = typer.Option(None, "--turn-input-len", help="bench conversation: tokens of each turn's new message."),
    system_prompt_len: Optional[int] = typer.Option(None, "--system-prompt-len", help="bench conversation: system prompt tokens."),
    think_time_s: Optional[str] = typer.Option(None, "--think-time-s", help="bench conversation: pause before each later turn, S or exp:S."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="bench mooncake: prompt tokens per hash id."),
    trace_start: Optional[float] = typer.Option(None, "--trace-start", help="bench trace replay: skip the first S seconds."),
    trace_duration: Optional[float] = typer.Option(None, "--trace-duration", help="bench trace replay: replay S seconds of the trace."),
    trace_speed: Optional[float] = typer.Option(None, "--trace-speed", help="bench trace replay: this many times faster."),
    budget: str = typer.Option("60s", "--budget", help="explain: time per setting (e.g. 60s, 2m)."),
    only: Optional[str] = typer.Option(None, "--only", help="explain: comma-separated experiments."),
    model_spec: Optional[str] = typer.Option(None, "--model-spec", help="probe: model shape for ceilings."),
    device: Optional[str] = typer.Option(None, "--device", help="probe: device id for ceilings."),
    slo: Optional[List[str]] = typer.Option(None, "--slo", help="p99 targets in ms, e.g. --slo ttft:500 itl:50: recommend the highest-throughput setting meeting them."),
    startup_timeout: float = typer.Option(120.0, "--startup-timeout", help="Seconds each setting's server has to get ready."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (keys in docs/commands/tune.md)."),
    fmt: Optional[str] = format_option(),
) -> None:
    """Measure prefill and decode for each server setting in turn: start, warm up, run, stop, next (resumable)."""
    from phasescope.errors import InputError
    from phasescope.tuning.run import WORKLOADS, find_tune_spec, run_tune
    from phasescope.tuning.spec import TuneSpec, check_template, parse_param

    import math

    sink = output(json_out, fmt)
    if not (math.isfinite(startup_timeout) and startup_timeout > 0):
        raise InputError(f"--startup-timeout must be a positive number of seconds (got {startup_timeout})")
    if resume:
        if param or serve or fresh:
            raise InputError("--resume ID takes the tune's own --param and --serve; give neither (nor --fresh)")
        from phasescope.store import open_store

        spec = find_tune_spec(open_store(None), resume)
    else:
        if workload not in WORKLOADS:
            raise InputError(f"--workload {workload!r}: choose one of {', '.join(WORKLOADS)}")
        parsed = [parse_param(p, engine=serve is None) for p in param]
        if not parsed:
            raise InputError("tune needs at least one --param NAME=V1,V2,… (e.g. --param ub=32,512)")
        if serve is not None:
            check_template(serve, [n for n, _ in parsed])
        args: dict[str, Any]
        if workload == "probe":
            from phasescope.probing import parse_repeat

            if max_tokens < 2:
                raise InputError("--max-tokens must be ≥ 2")
            auto, n_repeat = parse_repeat(repeat)  # a fixed count stays an int: the tune id of a spec is unchanged
            args = {"prompt_tokens": _sizes(prompt_tokens), "max_tokens": max_tokens,
                    "repeat": "auto" if auto else n_repeat}
            if model_spec:
                args["model_spec"] = model_spec
            if device:
                args["device"] = device
        elif workload == "bench":
            args = {"num_prompts": num_prompts, "request_rate": str(request_rate), "max_concurrency": max_concurrency,
                    "input_len": input_len, "output_len": output_len}
            # bench's workload flags, in the spec only when given (a tune without them keeps its id)
            extra = {"duration_s": (duration, None), "burstiness": (burstiness, 1.0), "range_ratio": (range_ratio, 0.0),
                     "prefix_len": (prefix_len, 0), "prefix_groups": (prefix_groups, 1), "seed": (seed, 0),
                     "warmup": (warmup, 1), "dataset": (dataset, "random"), "dataset_path": (dataset_path, None)}
            args.update({k: v for k, (v, default) in extra.items() if v != default})
            given = {"users": users, "sessions": sessions, "turns": turns, "turn_input_len": turn_input_len,
                     "system_prompt_len": system_prompt_len, "think_time_s": think_time_s, "block_size": block_size,
                     "trace_start": trace_start, "trace_duration": trace_duration, "trace_speed": trace_speed}
            args.update({k: v for k, v in given.items() if v is not None})
            _check_bench_args(args)
        else:
            from phasescope.experiments import registry
            from phasescope.experiments.suite import parse_budget

            bad = [n.strip() for n in (only or "").split(",") if n.strip() and registry.find(n.strip()) is None]
            if bad:
                raise InputError(f"--only: unknown experiment {bad[0]!r}; choose from: {', '.join(registry.names())}")
            args = {"budget_s": parse_budget(budget), "only": only}
        if api != "auto":  # in the spec only when given: a tune without it keeps its id
            args["api"] = api
        salt = None
        if fresh:
            import secrets

            salt = secrets.token_hex(4)
        spec = TuneSpec(params=parsed, workload=workload, workload_args=args, serve=serve,
                        one_at_a_time=one_at_a_time, salt=salt)
    from phasescope.load.sweep import parse_slo
    from phasescope.tuning.table import SLO_METRICS

    slo_d = parse_slo(slo)
    if any(k not in SLO_METRICS for k in slo_d):
        bad = next(k for k in slo_d if k not in SLO_METRICS)
        raise InputError(f"--slo {bad}: tune judges {' and '.join(SLO_METRICS)} (p99, ms)")
    progress = sink.progress(lambda s: err_console.print(f"[dim]· {s}[/dim]", highlight=False))
    result = run_tune(spec, say=progress, startup_timeout_s=startup_timeout, slo=slo_d)
    sink.emit(TuneResult.from_json(result))
    if result["n_ok"] == 0:
        raise typer.Exit(3)


@console_view("tune")
def _show(result: Result) -> None:
    from phasescope.tuning.render import render

    console.print(render(result.to_json()))


def register(app: typer.Typer) -> None:
    from phasescope.cli._common import with_synthetic

    app.command("tune")(with_synthetic(tune))
