"""``phasescope bench`` as a library call: config → workload × driver → summary.

:func:`run_bench` does one load run; :func:`phasescope.load.sweep.run_sweep` chains several. The
CLI only parses flags into a :class:`BenchConfig`, passes a progress callback and prints.

One job: one load run from its config to its summary, entered once. The config chooses, once, its
**workload** (:func:`phasescope.load.datasets.workload_for`: flags checked, schedule, prompts, the
summary's own sections) and its **driver** (:func:`phasescope.load.drivers.driver_for`: one process,
``--workers`` processes, Ray actors, the conversation driver); what they measured is aggregated in
:mod:`phasescope.load.summary` from the per-record rules of :mod:`phasescope.measure.derive`.

Lifecycle: the run's output is opened by :func:`phasescope.lifecycle.run_output` (the run store and/or
``--out``, else the fallback folder); the driver gets its
:class:`~phasescope.measure.records.RecordSink` and writes every record as it completes; Ctrl-C becomes
the ``stop`` event (:func:`phasescope.signals.on_sigint`), so the summary of what finished is still
assembled and the run finishes ``partial``; an exception leaves the stored run ``partial`` with why.

The result (``BenchResult.summary``) is one flat JSON object: the keys ``vllm bench serve
--save-result`` writes, with the same meanings (``date``, ``backend``, ``model_id``,
``num_prompts``, ``request_rate``, ``burstiness``, ``max_concurrency``, ``duration``,
``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``request_goodput``, ``output_throughput``, ``total_token_throughput``,
``{mean,median,std,pXX}_{ttft,tpot,itl,e2el}_ms``, ``max_output_tokens_per_s``,
``max_concurrent_requests``, ``{...}_client_queue_time_ms``), plus phasescope's own
(``{mean,median,std,pXX}_ttfo_ms`` (time to the first answer token: TTFT when there is no reasoning),
``reasoning_tokens``, ``answer_tokens``, ``median_reasoning_tok_s``, ``median_answer_tok_s``, ``*_event_gap_ms``, ``errors_by_kind``, ``achieved_rate``, ``token_count_source``,
``runner_health``, ``warnings``, ``server_metrics``, ``partial``, ``stop_reason``, ``run_id``,
``records_path``). See ``docs/commands/bench.md`` for the schema.
"""

from __future__ import annotations

import math
import secrets
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Callable

from phasescope.apis.base import Target, Timeouts
from phasescope.apis.otlp import OTLP_WAIT_S, join_after_run, start_listening
from phasescope.errors import InputError
from phasescope.load.datasets import Workload, workload_for
from phasescope.load.drivers import Drive, Driver, driver_for, say_nothing
from phasescope.load.health import health_warnings
from phasescope.load.runner import RunResult
from phasescope.load.schedule import Schedule
from phasescope.load.server_metrics import (
    MultiServerMetricsRecorder,
    ServerMetricsRecorder,
    ServerMetricsResult,
    compare_ttft,
)
from phasescope.load.summary import DEFAULT_PERCENTILES, summarize
from phasescope.load.workload import WorkItem
from phasescope.measure.records import RequestRecord

SCHEMA = "phasescope.bench/1"


@dataclass
class BenchConfig:
    """Every knob of one load run (flag names in the comments)."""

    url: str | None = None
    api: str = "auto"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    # load shape
    num_prompts: int | None = None  # --num-prompts
    duration_s: float | None = None  # --duration
    request_rate: float = math.inf  # --request-rate
    burstiness: float = 1.0  # --burstiness
    shape: str = "poisson"  # --load-shape poisson|constant|ramp|trace
    ramp_start_rate: float | None = None
    ramp_end_rate: float | None = None
    trace_path: str | None = None  # --trace
    trace_speed: float = 1.0
    max_concurrency: int | None = None  # --max-concurrency
    warmup: int = 1  # --warmup
    seed: int = 0
    trials: int = 1  # --trials N: the workload N times (fresh prompts each), run-level intervals across them
    steady_state: bool = False  # --steady-state: report the window between the ramp-up and the drain
    # workload
    dataset: str = "random"  # --dataset random|sharegpt|jsonl
    dataset_path: str | None = None
    input_len: int = 128
    output_len: int | None = None  # None: 64 for random/jsonl, the dataset's reply length for ShareGPT
    range_ratio: float = 0.0
    prefix_len: int = 0
    prefix_groups: int = 1
    ignore_eos: bool = True
    engine_flags: str | None = None  # --engine-flags: how the server was started, as the user says (compare reads it)
    reuse_prompts: bool = False  # --reuse-prompts: same prompt texts for the same seed, run after run (the cache on purpose)
    # analysis / output
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    goodput: dict[str, float] = field(default_factory=dict)
    workers: int = 1
    metrics_interval_s: float = 1.0
    server_metrics: bool = True
    gpu_metrics: list[str] = field(default_factory=list)  # --gpu-metrics URL (repeatable): dcgm-exporter
    nvml: bool = True  # sample local GPUs through NVML when nvidia-ml-py and a GPU are there (--no-nvml)
    otlp_listen: str | None = None  # --otlp-listen HOST:PORT: receive the server's OTLP spans (phasescope.apis.otlp)
    otlp_wait_s: float = OTLP_WAIT_S  # after the run, wait this long at most for spans still to come
    out_dir: str | None = None
    store: bool = True
    label: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    abort_after_errors: int = 8
    prewarm: bool = True  # open the first second's connections before t0 (--no-prewarm)
    drain_timeout_s: float | None = 60.0
    engine_parallel: int = 4  # embedded engine slots when no URL
    engine_spec: str | None = None  # --engine-spec: embedded engine's speculative decoding (llama-server --spec-type)
    engine_draft_model: str | None = None  # --engine-draft-model: the embedded engine's draft GGUF (llama-server -md)
    # scale-out (issue 10; phasescope.load.routing / phasescope.load.ray)
    targets: list[str] = field(default_factory=list)  # --target URL (repeatable): more endpoints
    route: str = "round-robin"  # --route round-robin|random|least-outstanding
    ray: bool = False  # --ray [ADDRESS]
    ray_address: str | None = None  # None = start a local cluster on 127.0.0.1 for the run
    ray_workers: int = 2  # --ray-workers
    ray_actor_cpus: float = 1.0  # --ray-actor-cpus
    # conversations (issue 17; phasescope.load.conversation): --dataset conversation
    users: int = 4  # --users (closed loop)
    sessions: int | None = None  # --sessions (default: one per user; 10 with --session-rate)
    turns: str = "4"  # --turns N | LO-HI
    system_prompt_len: int = 0  # --system-prompt-len
    system_prompt_scope: str = "shared"  # --system-prompt shared|per-user
    turn_input_len: int = 64  # --turn-input-len
    think_time_s: str | None = None  # --think-time-s S | exp:S
    tool_output_len: int = 0  # --tool-output-len
    session_rate: float | None = None  # --session-rate (open loop, sessions/s)
    cache_prompt: bool | None = None  # --no-cache-prompt → False (llama.cpp's per-request cache_prompt)
    # agentic sessions (issue 34; phasescope.load.agentic): --dataset agentic, with the conversation flags
    fork_at: str = "2"  # --fork-at TURNS (comma separated; none: no forks)
    fork_width: int = 2  # --fork-width (sub-agents per fork)
    subagent_turns: int = 1  # --subagent-turns
    # traces with prefix structure (issue 17; phasescope.load.traces): --dataset mooncake|burstgpt
    block_size: int = 512  # --block-size (tokens per Mooncake hash id)
    trace_start: float | None = None  # --trace-start (s of trace time)
    trace_duration: float | None = None  # --trace-duration (s of trace time)
    #: the prefix-cache hit rate this workload implies (conversation, Mooncake); set by the run, read by hygiene
    implied_hit_rate: float | None = None
    #: the twin (issue 36 item 4): called with the summary and records once the run is measured; set by the
    #: command layer (plan may not be imported here), None: no twin
    twin: Any = field(default=None, repr=False, compare=False)

    def default_num_prompts(self) -> int | None:
        """``num_prompts`` as the run reads it: 50 for a plain dataset given no bound; sessions and traces
        bound their own runs (:meth:`phasescope.load.datasets.Workload.default_num_prompts`)."""
        return workload_for(self).default_num_prompts()

    def params(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("api_key", None)
        d.pop("twin", None)
        if d.get("gpu_metrics"):  # exporter URLs may carry user:password
            from phasescope.apis.base import redact_url

            d["gpu_metrics"] = [redact_url(u) for u in d["gpu_metrics"]]
        d["timeouts"] = asdict(self.timeouts)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return d


@dataclass
class BenchResult:
    summary: dict[str, Any]
    records: list[RequestRecord]
    run: RunResult
    server: ServerMetricsResult | None
    records_path: str | None
    out_dir: str | None


ProgressFn = Callable[[RequestRecord | tuple[Any, ...]], None]


def make_schedule(cfg: BenchConfig, n_items: int | None = None) -> Schedule:
    """The config's arrival plan (its workload's :meth:`~phasescope.load.datasets.Workload.schedule`)."""
    return workload_for(cfg).schedule(n_items)


def run_bench(cfg: BenchConfig, *, on_record: ProgressFn | None = None, on_status: Callable[[str], None] | None = None,
              stop: threading.Event | None = None, target: Target | None = None) -> BenchResult:
    """One load run, start to summary. Blocking; Ctrl-C (SIGINT) sets ``stop`` and yields a
    partial result. ``target``: an already resolved target (sweeps reuse one)."""
    from phasescope.target import open_target

    status = on_status or say_nothing
    if cfg.workers < 1:
        raise InputError("--workers must be at least 1")
    if cfg.output_len is not None and cfg.output_len < 1:
        raise InputError(f"--output-len must be at least 1 (got {cfg.output_len})")  # 0 used to mean 64
    if cfg.input_len < 1:
        raise InputError(f"--input-len must be at least 1 (got {cfg.input_len})")
    if cfg.ray and cfg.workers > 1:
        raise InputError("--ray and --workers do not combine: use --ray-workers N")
    if cfg.trials < 1:
        raise InputError(f"--trials must be at least 1 (got {cfg.trials})")
    if cfg.trials > 1 and cfg.reuse_prompts:
        raise InputError("--trials sends every trial prompts of its own; --reuse-prompts would make trials 2+ "
                         "prefix-cache hits of trial 1: drop one of them")
    wl = workload_for(cfg)  # chosen once for the run (its flags are checked below, after the common ones)
    if cfg.steady_state and math.isinf(cfg.request_rate) and not cfg.max_concurrency and cfg.shape in (
            "poisson", "constant") and wl.plain:
        raise InputError("--steady-state needs a sustained load: all requests sent at once have a ramp-up and a "
                         "drain but nothing between (add --max-concurrency N or --request-rate R)")
    if cfg.gpu_metrics:  # a malformed exporter URL is bad input, before anything is started or stored
        from phasescope.metrics.gpu import dcgm_url

        for u in cfg.gpu_metrics:
            dcgm_url(u)
    wl.check()  # conversations and traces: their flags, and the trace read, before anything starts
    if target is not None:
        return _run_on_target(cfg, wl, target, on_record, status, stop)
    if cfg.targets:
        from phasescope.load.routing import open_targets

        with open_targets(cfg, status) as tgt:
            return _run_on_target(cfg, wl, tgt, on_record, status, stop)
    status("resolving target" if cfg.url else "starting the embedded engine")
    ekw: dict[str, Any] | None = {"parallel": cfg.engine_parallel} if cfg.url is None else None
    if ekw is not None and cfg.engine_spec:
        ekw["spec"] = cfg.engine_spec
    if ekw is not None and cfg.engine_draft_model:
        ekw["draft_model"] = cfg.engine_draft_model
    ot = open_target(cfg.url, api=cfg.api, model=cfg.model, api_key=cfg.api_key, timeouts=cfg.timeouts,
                     engine_kwargs=ekw)
    with ot as tgt:
        from phasescope.load.hygiene import server_build

        return _run_on_target(cfg, wl, tgt, on_record, status, stop, build=server_build(ot.detected))


def _run_on_target(cfg: BenchConfig, wl: Workload, target: Target, on_record: ProgressFn | None,
                   status: Callable[[str], None], stop: threading.Event | None,
                   build: dict[str, Any] | None = None) -> BenchResult:
    stop = stop or threading.Event()
    target = wl.prepare_target(target)
    driver = driver_for(cfg, wl)  # chosen once for the run (every trial runs on it)
    sched = wl.schedule()
    # warm-ups use items after the measured ones; a lazily continued schedule cycles a bounded pool
    pool = sched.tail.num_items if sched.tail is not None and sched.tail.num_items else len(sched.requests)
    n_items = max(1, pool) + len(sched.warmups)

    def prompts(trial: int | None) -> tuple[str | None, list[WorkItem]]:
        status(f"building {n_items} prompts" + (f" for trial {trial} of {cfg.trials}" if trial else ""))
        run_salt = None if cfg.reuse_prompts else secrets.token_hex(6)
        return run_salt, wl.build(target, n_items, sched, run_salt)

    run_salt, items = prompts(1 if cfg.trials > 1 else None)

    from phasescope.lifecycle import run_output

    # the store and/or --out, else the fallback folder; every record written as it completes
    with run_output("bench", target, cfg.params(), out_dir=cfg.out_dir, store=cfg.store, say=status) as out:
        run = _Run(cfg, wl, driver, target, sched, on_record, status, stop, build)
        if cfg.trials <= 1:
            summary, res, server = _measure(run, run_salt, items, out, out.id)
            return _finish(summary, res, out, server)
        return _run_trials(run, (run_salt, items), prompts, out)


@dataclass
class _Run:
    """What every trial of one run shares: its config, workload, driver, target, schedule and callbacks."""

    cfg: BenchConfig
    wl: Workload
    driver: Driver
    target: Target
    sched: Schedule
    on_record: ProgressFn | None
    status: Callable[[str], None]
    stop: threading.Event
    build: dict[str, Any] | None


def _run_trials(run: _Run, first: tuple[str | None, list[WorkItem]],
                prompts: Callable[[int | None], tuple[str | None, list[WorkItem]]], out: Any) -> BenchResult:
    """``--trials N``: the same schedule N times into one stored run, each trial with prompts of its
    own (a fresh salt: nothing one trial sent is a prefix-cache hit for the next), its records tagged
    ``tags.trial``; then the run-level summary (:func:`phasescope.load.trials.combine_trials`). A trial
    cut short (Ctrl-C, a dead server) ends the run there: the trials before it and the partial one are kept."""
    from phasescope.load.trials import TrialOut, combine_trials

    cfg, stop, status = run.cfg, run.stop, run.status
    summaries: list[dict[str, Any]] = []
    results: list[RunResult] = []
    salt, items = first
    cut_between = False  # Ctrl-C while the next trial's prompts were built: the trials so far stand
    for i in range(1, cfg.trials + 1):
        if i > 1:
            try:
                salt, items = prompts(i)
            except KeyboardInterrupt:
                cut_between = True
                break
        status(f"trial {i} of {cfg.trials}")
        summary, res, server = _measure(run, salt, items, TrialOut(out, i), f"{out.id}-t{i}")
        summary["trial"] = i
        summary["status"] = run_status(summary, res)
        summaries.append(summary)
        results.append(res)
        if stop.is_set() or res.partial or res.write_error or summary["status"] == "failed":
            break
    summary = combine_trials(cfg.trials, summaries)
    summary["run_id"] = out.id
    last = results[-1]
    merged = RunResult(records=[r for x in results for r in x.records],
                       warmup_records=[r for x in results for r in x.warmup_records])
    for k in ("interrupted", "aborted", "write_error", "hit_duration", "t0_ns", "wall_t0_ns", "health"):
        setattr(merged, k, getattr(last, k))
    merged.interrupted = merged.interrupted or cut_between
    if len(summaries) < cfg.trials and not merged.partial:
        merged.aborted = (f"trial {len(summaries)} of {cfg.trials} had no successful request; "
                          "the trials after it were not run")
    summary["partial"] = merged.partial
    summary["stop_reason"] = (merged.aborted or ("interrupted (Ctrl-C)" if merged.interrupted else None)
                              or summaries[-1].get("stop_reason"))
    return _finish(summary, merged, out, server)


def _finish(summary: dict[str, Any], res: RunResult, out: Any, server: ServerMetricsResult | None) -> BenchResult:
    """Close the run's output with its summary and status (``out.finish``)."""
    rpath = out.records_path
    if out.out_dir is not None:
        summary["out_dir"] = str(out.out_dir)
    summary["records_path"] = rpath
    summary["status"] = run_status(summary, res)
    if summary["status"] == "failed":
        summary["first_error"] = next((r.error_message for r in res.records if not r.ok and r.error_message), None)
    out.finish(summary, status=summary["status"])
    return BenchResult(summary, res.records, res, server, rpath, str(out.out_dir) if out.out_dir else None)


def _measure(run: _Run, run_salt: str | None, items: list[WorkItem], out: Any,
             run_id: str) -> tuple[dict[str, Any], RunResult, ServerMetricsResult | None]:
    """One load run (one trial) on the run's driver into ``out``'s sink: its summary (not yet
    finished), its result and the server's /metrics over it."""
    cfg, wl, target, sched, build = run.cfg, run.wl, run.target, run.sched, run.build
    recorder: ServerMetricsRecorder | MultiServerMetricsRecorder | None = None
    from phasescope.load.routing import MultiTarget, is_multi

    if cfg.server_metrics and is_multi(target):  # one scraper per endpoint
        assert isinstance(target, MultiTarget)
        recorder = MultiServerMetricsRecorder({e.display_url: e.base_url for e in target.endpoints},
                                              interval_s=cfg.metrics_interval_s, api_key=target.api_key)
    elif cfg.server_metrics:
        recorder = ServerMetricsRecorder(target.base_url, interval_s=cfg.metrics_interval_s, api_key=target.api_key)
    from phasescope.metrics.gpu import open_recorder

    gpu_rec = open_recorder(cfg.gpu_metrics, nvml=cfg.nvml, interval_s=cfg.metrics_interval_s,
                            server_url=target.base_url)
    if gpu_rec is not None:  # GPU telemetry, if any: none → the summary has no "gpu" key at all
        gpu_rec.start()
    from phasescope.measure.host import HostSampler

    host = HostSampler(getattr(target, "base_url", None)).start()
    otlp = start_listening(cfg.otlp_listen)
    try:
        res = run.driver.run(Drive(cfg, wl, sched, items, target, out, run.on_record, run.stop, run_id, recorder,
                                   run_salt, run.status))
        wl.after_run(res)
    except BaseException:  # the run output marks the stored run partial on the way out
        host.stop()
        if otlp is not None:
            otlp.stop()
        if recorder is not None:
            recorder.stop()
        if gpu_rec is not None:
            gpu_rec.stop()
        raise
    server = recorder.stop() if recorder is not None and recorder.started else None
    per_ep: dict[str, ServerMetricsResult] = (
        recorder.per_endpoint if server is not None and isinstance(recorder, MultiServerMetricsRecorder) else {})
    if server is not None and cfg.workers > 1 and res.wall_t0_ns:
        # workers' t0 is a wall-clock instant: place the timeline on it
        for one in [server, *per_ep.values()]:
            for row in one.timeline:
                row["t_s"] = row["wall_s"] - res.wall_t0_ns / 1e9

    host_d = host.stop()
    spans_received = join_after_run(otlp, res.records, cfg.otlp_wait_s) if otlp is not None else None
    summary = assemble_summary(cfg, target, res, server, sched, host=host_d, workload=wl)
    wl.add_sections(summary, res)  # trace; turns + conversation (issue 17)
    from phasescope.load.bench_ceilings import add_bench_ceilings

    add_bench_ceilings(cfg, target, res.records, summary)  # prompt ÷ TTFT named honestly, + ceilings (issue 30)
    if spans_received is not None:
        from phasescope.measure.waterfall import keep_spans

        keep_spans(summary, res.records, spans_received, cfg.otlp_listen)
    summary["prompt_salt"] = run_salt
    if cfg.engine_flags:
        build = dict(build or {}, user_flags=cfg.engine_flags)
    summary["server_build"] = build
    summary["run_id"] = out.id
    if cfg.twin is not None:  # the twin block and its findings (phasescope.planning.twin, via the command layer)
        cfg.twin(summary, res.records)
    if gpu_rec is not None:
        from phasescope.metrics.gpu_phases import finish_section

        summary["gpu"] = finish_section(gpu_rec, res.records, t0_ns=res.t0_ns if cfg.workers == 1 else None)
    from phasescope.load.ray import add_ray_summary
    from phasescope.load.routing import endpoint_breakdown

    add_ray_summary(summary, res)
    summary["endpoints"] = endpoint_breakdown(res.records, target, percentiles=cfg.percentiles,
                                              goodput=cfg.goodput or None) or None
    for ep in summary["endpoints"] or []:  # each endpoint's own /metrics (None: not scraped)
        one = per_ep.get(ep["endpoint"])
        ep["server_metrics"] = one.to_dict() if one is not None else None
        ep["ttft_client_vs_server"] = compare_ttft(ep, one.summary) if one is not None and one.available else None
    return summary, res, server


def run_status(summary: dict[str, Any], res: RunResult) -> str:
    """``complete``; ``partial`` (stopped early: Ctrl-C, a dead server, a write failure); ``failed``
    (no request succeeded — the CLI exits 3 with the error kinds counted). A run a full disk stopped
    before any measured request finished is ``partial``: the disk stopped it, not the server."""
    if not summary.get("completed") and not res.interrupted and not res.write_error:
        return "failed"
    return "partial" if res.partial else "complete"


def assemble_summary(cfg: BenchConfig, target: Target, res: RunResult, server: ServerMetricsResult | None,
                     sched: Schedule, host: dict[str, Any] | None = None,
                     workload: Workload | None = None) -> dict[str, Any]:
    """Header keys as vLLM writes them, then :func:`summarize`, then phasescope's sections.
    ``workload``: the run's (None: the config's)."""
    wl = workload or workload_for(cfg)
    head: dict[str, Any] = {
        "schema": SCHEMA,
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": target.api,
        "endpoint_type": target.api,
        "label": cfg.label,
        "model_id": target.model,
        "target": target.display_url,
        "engine": target.engine,
        "num_prompts": wl.default_num_prompts(),
        "request_rate": "inf" if math.isinf(cfg.request_rate) else cfg.request_rate,
        "burstiness": cfg.burstiness,
        "max_concurrency": cfg.max_concurrency,
        "load_shape": cfg.shape,
        "workers": cfg.workers,
        "dataset": cfg.dataset,
        **wl.header(),  # input_len, output_len
    }
    skw: dict[str, Any] = dict(percentiles=cfg.percentiles, goodput=cfg.goodput or None,
                               t0_ns=res.t0_ns if cfg.workers == 1 and res.t0_ns else None,
                               requested_rate=sched.requested_rate)
    steady_warn: list[Any] = []
    if cfg.steady_state:  # the window between the ramp-up and the drain (load.summary.STEADY_RULE)
        from phasescope.load.summary import steady_summary, steady_window
        from phasescope.measure.warnings import warn as make_warning

        win = steady_window(res.records, target_concurrency=cfg.max_concurrency)
        used = not win["empty"]
        s = steady_summary(res.records, win, **skw) if used else summarize(res.records, **skw)
        head["steady_state"] = {"used": used,
                                **{k: v for k, v in win.items() if k not in ("ids", "start_ns", "end_ns")}}
        if not used:
            steady_warn.append(make_warning(
                "too_few_samples", "steady_state",
                {k: win.get(k) for k in ("requests_total", "target_concurrency", "start_s", "end_s")},
                reason=win.get("reason")))
    else:
        s = summarize(res.records, **skw)
    head.update(s)
    head["warmup_requests"] = len(res.warmup_records)
    # kept for readers of older summaries: a prompt calibration that runs out of the timeouts now ends
    # the command before the run (NoAnswerError), so no run skips its warm-up
    head["warmup_skipped"] = None
    head["sent"] = res.sent
    head["cancelled"] = res.cancelled
    head["partial"] = res.partial
    head["stop_reason"] = (res.aborted or ("interrupted (Ctrl-C)" if res.interrupted else None)
                           or ("duration reached" if res.hit_duration else None))
    head["runner_health"] = asdict(res.health)
    warn: list[Any] = list(health_warnings(res.health, workers=cfg.workers, achieved_rate=s.get("achieved_rate"),
                                           requested_rate=s.get("requested_rate") if cfg.max_concurrency is None else None,
                                           burst=(math.isinf(cfg.request_rate) and cfg.max_concurrency is None
                                                  and cfg.shape in ("poisson", "constant") and wl.plain),
                                           completed=s.get("completed"), host=host))
    warn += list(s.get("count_warnings", [])) + steady_warn
    if server is not None:
        head["server_metrics"] = server.to_dict()
        head["ttft_client_vs_server"] = compare_ttft(s, server.summary) if server.available else None
    else:
        head["server_metrics"] = None
        head["ttft_client_vs_server"] = None
    from phasescope.load.server_metrics import spec_decode_section

    sd = spec_decode_section(res.records, head["server_metrics"])
    if sd is not None:  # speculative decoding: absent when the server does not speculate (issue 33)
        head["spec_decode"] = sd
    from phasescope.load.hygiene import bench_warnings, prefix_cache_section
    from phasescope.measure.host import judge
    from phasescope.measure.warnings import to_json

    head["reuse_prompts"] = cfg.reuse_prompts
    head["prefix_cache"] = prefix_cache_section(cfg, res.records, head["server_metrics"], workload=wl)
    head["prefix_cache_hit_rate"] = head["prefix_cache"]["hit_rate"]
    head["host"] = host
    warn += bench_warnings(cfg, head, res.records, res.warmup_records, workload=wl)
    warn += [] if any(getattr(w, "kind", None) == "host_busy" for w in warn) else judge(host)  # once, lag included
    head["warnings"] = to_json(warn)
    return head
