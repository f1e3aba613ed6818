"""What ``bench`` sends, one :class:`Workload` per ``--dataset``, chosen once per config by :func:`workload_for`.

A workload knows everything about its dataset that a bench run asks: whether the flags fit it
(:meth:`~Workload.check`, before anything starts), the arrival plan (:meth:`~Workload.schedule`), the
prompts (:meth:`~Workload.build`), what it adds to the summary (:meth:`~Workload.add_sections`,
:meth:`~Workload.header`) and what a correct run of it hits in the prefix cache. ``bench``
(:mod:`phasescope.load.bench`) asks the workload; it never asks which dataset it is. The driver that
sends the items is chosen beside it (:mod:`phasescope.load.drivers`).

* ``random``, ``sharegpt``, ``jsonl`` — a list of items (:mod:`phasescope.load.workload`) sent on
  ``--request-rate``/``--max-concurrency``/``--load-shape``, or on a plain ``--trace`` file's arrivals
  (``--load-shape trace``: its lengths, for ``random``);
* ``mooncake``, ``burstgpt`` — a trace with its own arrivals and, for Mooncake, prefix structure
  (:mod:`phasescope.load.traces`);
* ``conversation`` — sessions of dependent turns, on their own driver (:mod:`phasescope.load.conversation`);
* ``agentic`` — sessions that grow, call tools and fork parallel sub-agents from a shared prefix, or a
  replayed Weka / OpenTelemetry agent trace, on the agentic driver (:mod:`phasescope.load.agentic`).

This module is the one place that branches on ``cfg.dataset`` (the :data:`WORKLOADS` table).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from phasescope.errors import InputError
from phasescope.load.schedule import Schedule, build_schedule, read_trace
from phasescope.load.workload import WorkItem, jsonl_workload, random_workload, sharegpt_workload

class Workload:
    """One config's workload (see the module docstring). Subclasses set :attr:`name` and override what
    their dataset does differently; ``cfg`` is the run's :class:`~phasescope.load.bench.BenchConfig`."""

    name: ClassVar[str] = ""
    #: requests go out as fast as the flags allow (random, ShareGPT, jsonl): with no rate, cap or
    #: paced shape they all leave at once, which --steady-state refuses and the host-lag rule knows
    plain: ClassVar[bool] = False
    #: the driver it runs on (:data:`phasescope.load.drivers.DRIVERS`); None: the config's (one
    #: process, ``--workers``, ``--ray``)
    driver: ClassVar[str | None] = None

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        #: what the ``trace`` section says about a replayed trace (None: no trace)
        self.trace_facts: dict[str, Any] | None = None

    # --- before the run -----------------------------------------------------------------------
    def check(self) -> None:
        """Bad flag combinations are one clear line, before anything starts."""

    def default_num_prompts(self) -> int | None:
        """``num_prompts`` as the run reads it (None: the schedule or the workload bounds the run)."""
        return self.cfg.num_prompts

    def prepare_target(self, target: Any) -> Any:
        """The target as this workload talks to it (a conversation resends its history on the chat API)."""
        return target

    def schedule(self, n_items: int | None = None) -> Schedule:
        raise NotImplementedError

    def build(self, target: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        """The ``n`` items of one run (measured + warm-ups) through the server's tokenizer. ``run_salt``:
        this run's salt for the prompts' texts (None: the seed's own prompts, ``--reuse-prompts``). A
        server that does not answer the prompt building's first request within the user's timeouts ends
        the command here (:class:`~phasescope.errors.NoAnswerError`, exit 3): before a run is opened, so
        nothing is stored and no warm-up or measured request waits the same timeouts again."""
        from phasescope.load.loop import run_boxed

        async def _items() -> list[WorkItem]:
            from phasescope.apis import new_session
            from phasescope.prompting import prompt_maker_for

            async with new_session() as s:
                maker = await prompt_maker_for(s, target)
                return await self.items(maker, n, sched, run_salt)

        return run_boxed(_items())  # a list of every prompt: kept out of the main task's repr

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        raise NotImplementedError

    # --- after the run ------------------------------------------------------------------------
    def after_run(self, res: Any) -> None:
        """What the run's records tell the workload (a conversation's implied hit rate)."""

    def add_sections(self, summary: dict[str, Any], res: Any) -> None:
        """The workload's own summary sections (``trace``; ``turns`` and ``conversation``)."""
        if self.trace_facts is not None:
            summary["trace"] = dict(self.trace_facts)

    def header(self) -> dict[str, Any]:
        """The summary's ``input_len`` and ``output_len`` for this workload."""
        return {"input_len": None, "output_len": self.cfg.output_len if self.cfg.output_len is not None else 64}

    def expected_hit_rate(self, n_ok: int) -> float:
        """The most a correct run can hit in the prefix cache (the workload's implied rate when it has one)."""
        implied = getattr(self.cfg, "implied_hit_rate", None)
        return float(implied) if implied is not None else 0.0

    def more_requests(self, n: int) -> str:
        """too_few_samples' fix: the flag that sends at least ``n`` requests of *this* workload — a
        conversation's requests are its sessions' turns, a trace's its entries in the replayed window, a
        timed run's what its rate fits in its duration; only a plain dataset counts them with --num-prompts."""
        if self.cfg.num_prompts is None and self.cfg.duration_s is not None:
            return f"send at least {n} requests (a longer --duration, or a higher --request-rate) before reading p99"
        return f"send at least {n} requests (--num-prompts) before reading p99"


# --- items sent at a rate, a cap, a shape or a plain --trace ---------------------------------------
class _Listed(Workload):
    plain = True

    def default_num_prompts(self) -> int | None:
        cfg = self.cfg
        if cfg.num_prompts is None and cfg.duration_s is None and cfg.shape != "trace":
            return 50
        return cfg.num_prompts

    def schedule(self, n_items: int | None = None) -> Schedule:
        cfg = self.cfg
        if cfg.shape == "trace" and not cfg.trace_path:  # before reading it: read_trace(None) is a TypeError
            raise InputError("--load-shape trace needs --trace FILE")
        trace = read_trace(cfg.trace_path) if cfg.shape == "trace" and cfg.trace_path else None
        rows_read = len(trace) if trace is not None else 0
        if trace is not None and (cfg.trace_start is not None or cfg.trace_duration is not None):
            from phasescope.load.traces import window

            trace = window(trace, start_s=cfg.trace_start, duration_s=cfg.trace_duration)
        if (n_items is None and self.default_num_prompts() is None and math.isinf(cfg.request_rate)
                and cfg.max_concurrency and cfg.shape != "trace"):
            # closed loop bounded by --duration only: cycle through enough distinct prompts that a
            # repeated prompt is not a prefix-cache hit within a few rounds
            n_items = max(4 * cfg.max_concurrency, 64)
        sched = build_schedule(
            self.default_num_prompts(), rate=cfg.request_rate, burstiness=cfg.burstiness, shape=cfg.shape,
            ramp_start_rate=cfg.ramp_start_rate, ramp_end_rate=cfg.ramp_end_rate, duration_s=cfg.duration_s,
            max_concurrency=cfg.max_concurrency, num_items=n_items, warmup=cfg.warmup, trace=trace,
            trace_speed=cfg.trace_speed, seed=cfg.seed)
        if trace is not None:  # every replay says how many rows it skipped and why (issue 30)
            from phasescope.load.traces import trace_facts

            offs = [e.offset_s for e in trace]
            self.trace_facts = sched.trace_facts = trace_facts(
                cfg, dataset="trace", path=cfg.trace_path, entries_in_file=rows_read, rows_in_file=rows_read,
                entries_replayed=len(sched.requests),
                why={"outside_window": rows_read - len(trace),
                     "beyond_num_prompts": max(0, len(trace) - len(sched.requests))},
                span_s=(max(offs) - min(offs)) if offs else 0.0)
        return sched

    def lengths(self, sched: Schedule) -> list[tuple[int | None, int | None]] | None:
        """A plain --trace's per-request lengths (warm-ups: the item's own), else None."""
        if self.cfg.shape != "trace":
            return None
        return [(r.input_len, r.output_len) for r in sched.requests] + [(None, None)] * len(sched.warmups)

    def _path(self) -> str:
        if not self.cfg.dataset_path:
            raise InputError(f"--dataset {self.cfg.dataset} needs --dataset-path FILE")
        return str(self.cfg.dataset_path)


class RandomWorkload(_Listed):
    """Prompts of exact lengths (``--input-len``, ``--range-ratio``, ``--prefix-len`` groups)."""

    name = "random"

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        cfg = self.cfg
        lengths = self.lengths(sched)
        if lengths and any(a is not None for a, _ in lengths):
            # trace replay: one item per trace entry with its own lengths
            items = []
            for i, (il, ol) in enumerate(lengths):
                one = await random_workload(1, input_len=il or cfg.input_len, output_len=ol or cfg.output_len or 64,
                                            maker=maker, seed=cfg.seed * 7_919 + i, run_salt=run_salt)
                items.extend(one)
            return items
        return await random_workload(n, input_len=cfg.input_len, output_len=cfg.output_len or 64, maker=maker,
                                     range_ratio=cfg.range_ratio, prefix_len=cfg.prefix_len,
                                     prefix_groups=cfg.prefix_groups, seed=cfg.seed, run_salt=run_salt)

    def header(self) -> dict[str, Any]:
        return {**super().header(), "input_len": self.cfg.input_len}

    def expected_hit_rate(self, n_ok: int) -> float:
        """With a shared prefix, every request reusing its group's prefix (the warm-ups may already have
        cached each group's); else 0 for unique prompts."""
        cfg = self.cfg
        if getattr(cfg, "implied_hit_rate", None) is not None or not cfg.prefix_len or n_ok <= 0:
            return super().expected_hit_rate(n_ok)
        return cfg.prefix_len / (cfg.prefix_len + cfg.input_len)


class ShareGPTWorkload(_Listed):
    """A ShareGPT file's first turns; the reply's length asked for unless ``--output-len`` is given."""

    name = "sharegpt"

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        return await sharegpt_workload(self._path(), n, count=maker.count, seed=self.cfg.seed,
                                       output_len=self.cfg.output_len, count_source=maker.source)

    def header(self) -> dict[str, Any]:
        return {**super().header(), "output_len": self.cfg.output_len}


class JsonlWorkload(_Listed):
    """One ``{"prompt", "output_len"}`` per line, in file order."""

    name = "jsonl"

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        return await jsonl_workload(self._path(), n, default_output_len=self.cfg.output_len or 64,
                                    count=maker.count, count_source=maker.source)


# --- traces with their own arrivals ---------------------------------------------------------------
class _TraceWorkload(Workload):
    """A trace file (``--dataset-path``) replayed on its own arrivals, windowed by ``--trace-start`` and
    ``--trace-duration``, capped by ``--num-prompts``; read once per workload."""

    #: the summary's ``block_size`` (None: the trace has no hash blocks)
    blocks: ClassVar[bool] = False

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self._read: tuple[list[Any], dict[str, Any]] | None = None

    def _file(self) -> tuple[list[Any], dict[str, int]]:
        """(entries in file order, rows skipped by reason)."""
        raise NotImplementedError

    def _more_facts(self, entries: list[Any]) -> dict[str, Any]:
        return {}

    def entries(self) -> tuple[list[Any], dict[str, Any]]:
        """The trace's windowed entries and the facts for the summary."""
        if self._read is None:
            from phasescope.load.traces import trace_facts, window

            cfg = self.cfg
            if not cfg.dataset_path:
                raise InputError(f"--dataset {self.name} needs --dataset-path FILE")
            entries, why = self._file()
            read = len(entries)
            entries = window(entries, start_s=cfg.trace_start, duration_s=cfg.trace_duration)
            why["outside_window"] = read - len(entries)
            if cfg.num_prompts is not None:
                why["beyond_num_prompts"] = max(0, len(entries) - cfg.num_prompts)
                entries = entries[: cfg.num_prompts]
            dropped = why.get("zero_response_tokens", 0) + why.get("zero_request_tokens", 0)
            facts = trace_facts(cfg, dataset=self.name, path=cfg.dataset_path, entries_in_file=read,
                                rows_in_file=read + dropped, entries_replayed=len(entries), why=why,
                                rows_skipped=dropped, block_size=int(cfg.block_size) if self.blocks else None,
                                span_s=(entries[-1].offset_s - entries[0].offset_s) if entries else 0.0)
            facts.update(self._more_facts(entries))
            self._read = (entries, facts)
        return self._read

    def check(self) -> None:
        cfg = self.cfg
        if cfg.trace_path:
            raise InputError(f"--dataset {self.name} reads its trace from --dataset-path; drop --trace")
        if cfg.shape not in ("poisson", "trace"):
            raise InputError(f"--dataset {self.name} replays the trace's own arrivals; drop --load-shape {cfg.shape}")
        if cfg.ray:
            raise InputError(f"--dataset {self.name} does not run on --ray yet; use --workers")
        cfg.shape = "trace"
        self.entries()

    def schedule(self, n_items: int | None = None) -> Schedule:
        entries, _ = self.entries()
        cfg = self.cfg
        return build_schedule(None, shape="trace", trace=entries, trace_speed=cfg.trace_speed,
                              duration_s=cfg.duration_s, warmup=cfg.warmup, seed=cfg.seed)

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        from phasescope.load.traces import trace_items

        cfg = self.cfg
        entries, _ = self.entries()
        return await trace_items(entries, maker=maker, block_size=int(cfg.block_size), seed=cfg.seed,
                                 run_salt=run_salt, warmups=max(0, n - len(entries)),
                                 warmup_len=max(8, min(cfg.input_len, 256)), output_len=int(cfg.output_len or 64))

    def add_sections(self, summary: dict[str, Any], res: Any) -> None:
        from phasescope.load.traces import trace_section

        entries, facts = self.entries()
        summary["trace"] = trace_section(facts, res.records, summary, entries)

    def more_requests(self, n: int) -> str:
        cap = " (--num-prompts only caps the entries)" if self.cfg.num_prompts is not None else ""
        return f"replay at least {n} trace entries (a longer --trace-duration window){cap} before reading p99"


class MooncakeWorkload(_TraceWorkload):
    """Mooncake's trace: arrivals, lengths and prefix-hash blocks of ``--block-size`` tokens."""

    name = "mooncake"
    blocks = True

    def _file(self) -> tuple[list[Any], dict[str, int]]:
        from phasescope.load.traces import read_mooncake

        return read_mooncake(str(self.cfg.dataset_path), block_size=int(self.cfg.block_size)), {}

    def _more_facts(self, entries: list[Any]) -> dict[str, Any]:
        from phasescope.load.traces import implied_hit_rate

        return {"implied_hit_rate": implied_hit_rate(entries, int(self.cfg.block_size)),
                "distinct_blocks": len({h for e in entries for h in e.hash_ids})}

    def schedule(self, n_items: int | None = None) -> Schedule:
        self.cfg.implied_hit_rate = self.entries()[1].get("implied_hit_rate")
        return super().schedule(n_items)


class BurstGPTWorkload(_TraceWorkload):
    """BurstGPT's CSV: arrivals and lengths (no prefix structure; failed rows skipped)."""

    name = "burstgpt"

    def _file(self) -> tuple[list[Any], dict[str, int]]:
        from phasescope.load.traces import read_burstgpt_rows

        return read_burstgpt_rows(str(self.cfg.dataset_path))


# --- conversations ---------------------------------------------------------------------------------
class ConversationWorkload(Workload):
    """Sessions of dependent turns (``--users``, ``--sessions``, ``--turns``...), on the chat API and on
    the conversation driver; the schedule carries only the warm-ups."""

    name = "conversation"
    driver = "conversation"

    def spec(self) -> Any:
        from phasescope.load.conversation import ConversationSpec

        return ConversationSpec.from_config(self.cfg)

    def check(self) -> None:
        cfg = self.cfg
        self.spec()
        if cfg.workers > 1 or cfg.ray or cfg.targets:
            raise InputError("--dataset conversation runs its sessions in one client process on one endpoint; "
                             "drop --workers, --ray and --target")
        if cfg.shape != "poisson" or cfg.trace_path:
            raise InputError("--dataset conversation sets its own arrivals (--users, --session-rate); drop --load-shape/--trace")
        if cfg.num_prompts is not None:
            raise InputError("--dataset conversation sends --sessions × --turns turns, not --num-prompts requests; "
                             "drop --num-prompts (or set --sessions)")

    def prepare_target(self, target: Any) -> Any:
        from phasescope.load.conversation import chat_target

        return chat_target(target)

    def schedule(self, n_items: int | None = None) -> Schedule:
        # the sessions are planned by the conversation driver; the schedule carries the warm-ups
        return build_schedule(1, warmup=self.cfg.warmup, seed=self.cfg.seed)

    async def items(self, maker: Any, n: int, sched: Schedule, run_salt: str | None) -> list[WorkItem]:
        """Warm-up items only: unique single-message prompts."""
        cfg = self.cfg
        return await random_workload(max(1, n), input_len=max(8, min(cfg.turn_input_len, 256)),
                                     output_len=min(int(cfg.output_len or 64), 16), maker=maker, seed=cfg.seed + 1,
                                     run_salt=run_salt)

    async def sessions(self, maker: Any, run_salt: str | None) -> list[Any]:
        """The run's sessions, built through the server's tokenizer (the conversation driver's items)."""
        from phasescope.load.conversation import build_sessions

        return await build_sessions(self.spec(), maker, seed=self.cfg.seed, run_salt=run_salt)

    def after_run(self, res: Any) -> None:
        from phasescope.load.conversation_stats import expected_cache_share

        self.cfg.implied_hit_rate = expected_cache_share(res.records)

    def add_sections(self, summary: dict[str, Any], res: Any) -> None:
        from phasescope.load.conversation_stats import conversation_section, turn_rows

        summary["turns"] = turn_rows(res.records)
        summary["conversation"] = conversation_section(res.records, self.spec())
        summary["num_prompts"] = summary["conversation"]["turns_sent"]
        summary["load_shape"] = "sessions"

    def more_requests(self, n: int) -> str:
        return f"run at least {n} turns (more --sessions, or longer --turns) before reading p99"


# --- agentic sessions -----------------------------------------------------------------------------
class AgenticWorkload(ConversationWorkload):
    """Agentic sessions (``--fork-at``, ``--fork-width``, ``--subagent-turns`` on top of the conversation
    flags), or a Weka / OpenTelemetry agent trace (``--dataset-path``), on the agentic driver."""

    name = "agentic"
    driver = "agentic"

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.facts: dict[str, Any] | None = None
        self.planned: int | None = None  # calls in the sessions built for the run

    def spec(self) -> Any:
        from phasescope.load.agentic import AgenticSpec

        return AgenticSpec.from_config(self.cfg)

    def check(self) -> None:
        cfg = self.cfg
        spec = self.spec()
        if cfg.workers > 1 or cfg.ray or cfg.targets:
            raise InputError("--dataset agentic runs its sessions in one client process on one endpoint; "
                             "drop --workers, --ray and --target")
        if cfg.shape != "poisson" or cfg.trace_path:
            raise InputError("--dataset agentic sets its own arrivals (--users sessions at a time); drop --load-shape/--trace")
        if cfg.num_prompts is not None:
            raise InputError("--dataset agentic sends its sessions' calls, not --num-prompts requests; "
                             "drop --num-prompts (or set --sessions)")
        if cfg.session_rate is not None:
            raise InputError("--dataset agentic runs a closed loop of --users sessions; drop --session-rate")
        if spec.trace_path is not None:  # the trace read and checked before anything starts
            from phasescope.load.agent_traces import check_trace

            check_trace(spec.trace_path, speed=spec.trace_speed, limit=cfg.sessions)

    async def sessions(self, maker: Any, run_salt: str | None) -> list[Any]:
        """The run's sessions: synthetic, or the trace's (built through the server's tokenizer)."""
        spec = self.spec()
        if spec.trace_path is None:
            from phasescope.load.agentic import build_agentic

            self.facts = None
            built = await build_agentic(spec, maker, seed=self.cfg.seed, run_salt=run_salt)
            self.planned = sum(len(s.calls) for s in built)
            return built
        from phasescope.load.agent_traces import trace_sessions

        _, ss, self.facts = await trace_sessions(spec.trace_path, maker=maker, seed=self.cfg.seed, run_salt=run_salt,
                                                 speed=spec.trace_speed, default_out=spec.output_len,
                                                 limit=self.cfg.sessions)
        self.planned = sum(len(s.calls) for s in ss)
        return ss

    def after_run(self, res: Any) -> None:
        from phasescope.load.agentic_stats import implied_reuse

        self.cfg.implied_hit_rate = implied_reuse(res.records)

    def add_sections(self, summary: dict[str, Any], res: Any) -> None:
        from phasescope.load.agentic_stats import agentic_section

        sec = agentic_section(res.records, self.spec().to_dict(), self.facts, self.planned)
        summary["agentic"] = sec
        summary["num_prompts"] = sec["calls_sent"]
        summary["load_shape"] = "sessions"

    def more_requests(self, n: int) -> str:
        return f"run at least {n} calls (more --sessions, longer --turns or wider forks) before reading p99"


#: ``--dataset`` → its workload: the one table that tells the datasets apart
WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (
    RandomWorkload, ShareGPTWorkload, JsonlWorkload, ConversationWorkload, MooncakeWorkload, BurstGPTWorkload,
    AgenticWorkload)}


def workload_for(cfg: Any) -> Workload:
    """The workload of ``cfg.dataset`` (an unknown name is one :class:`InputError` line)."""
    kind = WORKLOADS.get(cfg.dataset)
    if kind is None:
        raise InputError(f"unknown --dataset {cfg.dataset!r} (choose {', '.join(WORKLOADS)})")
    return kind(cfg)


def check_workload(cfg: Any) -> Workload:
    """The config's workload, its flags checked (bench and tune call it before any server is looked for)."""
    wl = workload_for(cfg)
    wl.check()
    return wl
