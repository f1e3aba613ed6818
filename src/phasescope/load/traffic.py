"""The glue between ``bench`` and issue 17's workloads: conversations and traces with prefix structure.

:mod:`phasescope.load.bench` calls four functions here, one per step of its run, for
``--dataset conversation|mooncake|burstgpt``: :func:`check_workload` (flags, before anything
starts), :func:`workload_schedule` (the arrival plan), :func:`workload_items` (the prompts) and
:func:`add_workload_sections` (``turns``, ``conversation``, ``trace`` in the summary); conversations
run on their own driver through :func:`run_conversation_bench`. The workloads themselves live in
:mod:`phasescope.load.conversation` and :mod:`phasescope.load.traces`.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Callable

from phasescope.errors import InputError
from phasescope.load.loop import run_boxed
from phasescope.load.schedule import Schedule, build_schedule
from phasescope.load.workload import WorkItem, random_workload

TRACE_DATASETS = ("mooncake", "burstgpt")

_memo: dict[tuple[Any, ...], tuple[list[Any], dict[str, Any]]] = {}


def trace_entries(cfg: Any) -> tuple[list[Any], dict[str, Any]]:
    """The trace's windowed entries and facts, read once per run (schedule, items and summary share them)."""
    from phasescope.load.traces import read_trace_dataset

    p = Path(cfg.dataset_path) if cfg.dataset_path else None
    try:
        mtime = p.stat().st_mtime_ns if p is not None else None
    except OSError:
        mtime = None
    key = (cfg.dataset, str(p), mtime, cfg.block_size, cfg.trace_start, cfg.trace_duration, cfg.num_prompts, cfg.trace_speed)
    if key not in _memo:
        _memo.clear()
        _memo[key] = read_trace_dataset(cfg)
    return _memo[key]


def check_workload(cfg: Any) -> None:
    """Bad flag combinations are one clear line before anything starts."""
    if cfg.dataset == "conversation":
        from phasescope.load.conversation import ConversationSpec

        ConversationSpec.from_config(cfg)
        if cfg.workers > 1 or cfg.ray or cfg.targets:
            raise InputError("--dataset conversation runs its sessions in one client process on one endpoint; "
                             "drop --workers, --ray and --target")
        if cfg.shape != "poisson" or cfg.trace_path:
            raise InputError("--dataset conversation sets its own arrivals (--users, --session-rate); drop --load-shape/--trace")
        if cfg.num_prompts is not None:
            raise InputError("--dataset conversation sends --sessions × --turns turns, not --num-prompts requests; "
                             "drop --num-prompts (or set --sessions)")
        return
    if cfg.trace_path:
        raise InputError(f"--dataset {cfg.dataset} reads its trace from --dataset-path; drop --trace")
    if cfg.shape not in ("poisson", "trace"):
        raise InputError(f"--dataset {cfg.dataset} replays the trace's own arrivals; drop --load-shape {cfg.shape}")
    if cfg.ray:
        raise InputError(f"--dataset {cfg.dataset} does not run on --ray yet; use --workers")
    cfg.shape = "trace"
    trace_entries(cfg)


def workload_schedule(cfg: Any) -> Schedule:
    if cfg.dataset == "conversation":
        # the sessions are planned by the conversation driver; the schedule carries the warm-ups
        return build_schedule(1, warmup=cfg.warmup, seed=cfg.seed)
    entries, facts = trace_entries(cfg)
    if cfg.dataset == "mooncake":
        cfg.implied_hit_rate = facts.get("implied_hit_rate")
    return build_schedule(None, shape="trace", trace=entries, trace_speed=cfg.trace_speed,
                          duration_s=cfg.duration_s, warmup=cfg.warmup, seed=cfg.seed)


async def workload_items(cfg: Any, maker: Any, n: int, *, run_salt: str | None) -> list[WorkItem]:
    out_len = int(cfg.output_len or 64)
    if cfg.dataset == "conversation":  # warm-up items only: unique single-message prompts
        return await random_workload(max(1, n), input_len=max(8, min(cfg.turn_input_len, 256)), output_len=min(out_len, 16),
                                     maker=maker, seed=cfg.seed + 1, run_salt=run_salt)
    from phasescope.load.traces import trace_items

    entries, _ = trace_entries(cfg)
    return await trace_items(entries, maker=maker, block_size=int(cfg.block_size), seed=cfg.seed, run_salt=run_salt,
                             warmups=max(0, n - len(entries)), warmup_len=max(8, min(cfg.input_len, 256)),
                             output_len=out_len)


def run_conversation_bench(cfg: Any, items: list[WorkItem], target: Any, out: Any,
                           on_record: Callable[[Any], None] | None, stop: threading.Event, run_id: str, recorder: Any,
                           run_salt: str | None, status: Callable[[str], None]) -> Any:
    """``bench --dataset conversation`` in this process: build the sessions through the server's
    tokenizer, then run them, every turn's record going to the run's sink as it completes
    (``out``: the bench's :class:`~phasescope.lifecycle.RunOutput`, as for any bench run). Ctrl-C →
    a partial result."""
    from phasescope.signals import on_sigint
    from phasescope.load.conversation import ConversationSpec, build_sessions, run_sessions
    from phasescope.load.conversation_stats import expected_cache_share
    from phasescope.load.routing import send_for

    spec = ConversationSpec.from_config(cfg)
    warm = items[: cfg.warmup]

    async def main() -> Any:
        from phasescope.apis import new_session
        from phasescope.prompting import TokenizePromptMaker, prompt_maker_for

        s = new_session()
        maker = await prompt_maker_for(s, target)
        sessions = await build_sessions(spec, maker, seed=cfg.seed, run_salt=run_salt)
        # each reply re-counted as the history resends it, where the server has /tokenize
        counter = maker.count_part if isinstance(maker, TokenizePromptMaker) else None
        turns = sum(len(sp.turns) for sp in sessions)
        status(f"running {len(sessions)} sessions ({turns} turns) for "
               + (f"{spec.users} users" if not spec.open_loop else f"{spec.session_rate:g} sessions/s"))
        loop = asyncio.get_running_loop()
        astop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.05)
            astop.set()

        watcher = loop.create_task(watch())

        async def gate() -> int:
            from phasescope.measure.clock import now_ns

            if recorder is not None:
                await loop.run_in_executor(None, recorder.start)
            t0 = now_ns()
            if recorder is not None:
                recorder.t0_ns = t0
            return t0

        try:
            return await run_sessions(
                sessions, spec, target, send=send_for(target), warmups=warm,
                writer=out.sink, on_record=on_record, stop=astop, run_id=run_id,
                start_gate=gate, abort_after_errors=cfg.abort_after_errors, duration_s=cfg.duration_s,
                ignore_eos=cfg.ignore_eos, prewarm_connections=min(spec.users, 64) if cfg.prewarm else 0,
                drain_timeout_s=cfg.drain_timeout_s, count=counter)
        finally:
            watcher.cancel()
            await s.close()

    with on_sigint(stop.set):  # the watcher turns it into the loop's stop
        res = run_boxed(main())
    cfg.implied_hit_rate = expected_cache_share(res.records)
    return res


def add_workload_sections(cfg: Any, summary: dict[str, Any], res: Any) -> None:
    """``turns`` + ``conversation`` (conversation) or ``trace`` (mooncake, burstgpt) in the summary."""
    if cfg.dataset == "conversation":
        from phasescope.load.conversation import ConversationSpec
        from phasescope.load.conversation_stats import conversation_section, turn_rows

        spec = ConversationSpec.from_config(cfg)
        summary["turns"] = turn_rows(res.records)
        summary["conversation"] = conversation_section(res.records, spec)
        summary["num_prompts"] = summary["conversation"]["turns_sent"]
        summary["load_shape"] = "sessions"
        return
    from phasescope.load.traces import trace_section

    entries, facts = trace_entries(cfg)
    summary["trace"] = trace_section(facts, res.records, summary, entries)
