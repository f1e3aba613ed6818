"""``phasescope explain``: calibrate, run the experiments within a time budget, diagnose, save.

The budget is split by fixed shares (each experiment's spec's ``share``, :mod:`phasescope.experiments.registry`);
before each experiment its share of the time
still left is recomputed, so an experiment that finished early leaves more for the next. Each
experiment sizes itself (prompt lengths, concurrency levels, injected prompt) from the calibrated
prefill/decode speed — a fast GPU server gets long prompts and high concurrency, a 2-core CPU
gets short ones — so the whole suite ends near the budget on any server. The budget
(:class:`~phasescope.experiments.context.Budget`) counts from the run's start, engine start and
calibration included; each experiment's clock is capped by it, and a request still running at the
hard deadline is stopped (:meth:`RunContext.bounded`), so ``duration_s`` ≤ 1.1 × ``budget_s``.

With no URL the embedded engine is started with :data:`EMBEDDED_ENGINE` (4 slots, 8192 tokens of
context each). Runs are recorded through :func:`phasescope.lifecycle.run_output` (kind ``explain``):
the run store with every raw record as it completes (the experiments hand records to ``RunContext.sink``,
a :class:`~phasescope.measure.records.ThreadedSink` over the run's sink), or the fallback folder without
the store; Ctrl-C or a failure keeps the partial run, marked with why it stopped.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from phasescope._results import Result
from phasescope.apis.base import Timeouts
from phasescope.diagnose import Ceilings, Diagnosis, diagnose
from phasescope.errors import InputError
from phasescope.experiments import registry
from phasescope.experiments.context import (
    Calibration,
    RunContext,
    ServerFacts,
    calibrate,
    calibration_prompts,
    discover_facts,
)
from phasescope.jsonutil import to_jsonable

#: below this many seconds an experiment is skipped rather than run badly
MIN_EXPERIMENT_S = 2.0
#: the calibration's clock: its requests are stopped past this share of the budget
CALIBRATION_SHARE = 0.1
#: how the embedded engine is started for explain: enough slots for batching and context per slot
EMBEDDED_ENGINE = {"parallel": 4, "ctx_size": 32768}


@dataclass(eq=False)
class ExplainReport(Result):
    """``phasescope explain``: the findings, the experiments that support them, the ceilings; ``to_json()`` is
    ``explain --json`` (a :class:`phasescope.Result`: ``report["findings"]`` reads the document)."""

    command = "explain"
    target: str
    engine: str | None
    model: str | None
    api: str
    budget_s: float
    facts: ServerFacts
    calibration: Calibration | None
    experiments: dict[str, Any]
    diagnosis: Diagnosis
    ceilings: Ceilings | None = None
    settings: Any = None
    run_id: str | None = None
    records_path: str | None = None
    duration_s: float | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    gpu: dict[str, Any] | None = None  # GPU telemetry per phase (metrics/gpu_phases.py); None: no source
    host: dict[str, Any] | None = None  # CPU contention during the run (phasescope.measure.host)
    server_build: dict[str, Any] | None = None  # engine build, flags, model file (phasescope.load.hygiene)
    status: str = "complete"  # complete · partial (stopped early: a dead server, a full disk) · failed (no success)
    stop_reason: str | None = None  # why it stopped early or failed (None: it did not)
    #: ``--otlp-listen`` (issue 35): where the time went from the server's spans, per experiment
    #: (:func:`span_attribution`), and each joined span by record id (``show --request`` reads them back)
    waterfall: dict[str, Any] | None = None
    server_spans: dict[str, Any] | None = None

    def warnings(self) -> list[dict[str, Any]]:
        """Every experiment's warnings (prefixed with its name) and ``host_busy``, as dicts."""
        from phasescope.measure.host import judge
        from phasescope.measure.warnings import coerce, to_json

        out: list[Any] = list(judge(self.host))
        for name, r in self.experiments.items():
            for w in getattr(getattr(r, "info", None), "warnings", None) or []:
                out.append(coerce(w).prefixed(f"{name}: "))
        return to_json(out)

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis.to_dict()
        return to_jsonable({
            "host": self.host, "warnings": self.warnings(), "server_build": self.server_build,
            "target": self.target, "engine": self.engine, "model": self.model, "api": self.api,
            "budget_s": self.budget_s, "duration_s": self.duration_s, "run_id": self.run_id,
            "status": self.status, "stop_reason": self.stop_reason,
            "records_path": self.records_path,
            "findings": d["findings"], "undecided": d["undecided"],
            "ceilings": self.ceilings, "server": self.facts, "calibration": self.calibration,
            "settings": self.settings,
            "skipped": self.skipped,
            "experiments": {k: v for k, v in self.experiments.items()},
            **({"gpu": self.gpu} if self.gpu is not None else {}),
            **({"waterfall": self.waterfall, "server_spans": self.server_spans} if self.waterfall is not None else {}),
        })


def resolve_ceilings(*, model: str | None, device: str | None, detected: Any, embedded: bool,
                     draft: Any = None) -> tuple[Ceilings | None, float | None, float | None, str]:
    """(ceilings, weight bytes, growing KV bytes per token, model source) from ``phasescope.theory``.

    The model comes from ``--model`` (catalog id, config.json, GGUF), else llama.cpp's ``/props``
    (the GGUF when readable here, else ``/v1/models`` meta). The device is ``--device``, else the
    measured ``local`` device for the embedded engine (``phasescope hw``). Anything unknown → None.
    ``draft`` (a ModelSpec, ``--draft-model-spec``): the draft model's bytes, FLOPs and KV per drafted token
    join the ceilings (:func:`phasescope.theory.speculation.draft_model_of`).
    """
    from phasescope.theory import roofline
    from phasescope.theory.devices import get_device, load_local_device
    from phasescope.theory.hw import local_profile_clause
    from phasescope.theory.models import from_llamacpp_props, load_model_spec

    spec = None
    try:
        if model:
            spec = load_model_spec(model)
        elif detected is not None and getattr(detected, "props", None):
            spec = from_llamacpp_props(detected.props, meta=getattr(detected, "model_meta", None))
    except Exception:  # noqa: BLE001 - a model we cannot read just means "no ceiling"
        if model:
            raise
        spec = None
    dev = get_device(device) if device else (load_local_device() if embedded else None)
    w = kv = None
    src = "theory"
    if spec is not None:
        try:
            w = roofline.weight_bytes_read(spec)
        except Exception:  # noqa: BLE001
            w = None
        if spec.shape_known:
            kv = roofline.kv_bytes_per_token_global(spec) if spec.n_sliding_layers else roofline.kv_bytes_per_token(spec)
        src = f"theory: {spec.name} ({spec.source})"
    if spec is None or dev is None:
        return None, w, kv, src
    roofs = roofline.decode_ceiling(spec, dev, context=64, batch=1)
    c = Ceilings(decode_ceiling_tok_s=roofs.ceiling_tok_s,
                 source=f"theory: {spec.name} on {dev.name} ({dev.mem_bandwidth_gb_s:g} GB/s), batch 1"
                 + local_profile_clause(dev),
                 bandwidth_gb_s=dev.mem_bandwidth_gb_s, weight_bytes=w, device=dev.id,
                 **_compute_roof(spec, dev), **_draft_cost(draft))
    return c, w, kv, src


def _draft_cost(draft: Any, context: int = 64) -> dict[str, Any]:
    """The explain ceilings' draft fields from a draft ModelSpec (none: nothing, its cost counts as 0)."""
    if draft is None:
        return {}
    from phasescope.theory.speculation import draft_model_of

    try:
        d = draft_model_of(draft, context)
    except (ValueError, TypeError):
        return {}
    return {"draft_weight_bytes": d.weight_bytes, "draft_flops_per_token": d.flops_per_token,
            "draft_kv_bytes_per_seq": d.kv_bytes_per_seq, "draft_source": d.source}


def _compute_roof(spec: Any, dev: Any, context: int = 64) -> dict[str, Any]:
    """The compute roof's inputs for the explain ceilings (peak FLOPs on the model's math path, FLOPs and KV
    bytes per sequence per decoded token at ``context``); what cannot be computed is left out (None)."""
    from phasescope.theory import roofline

    out: dict[str, Any] = {}
    try:
        out["peak_flops"] = dev.peak_flops(roofline.compute_path(spec))
        out["flops_per_token"] = roofline.decode_flops_per_token(spec, context)
        out["kv_bytes_per_seq"] = roofline.kv_bytes_per_sequence(spec, context) if spec.shape_known else None
    except Exception:  # noqa: BLE001 - an incomplete shape just means no compute roof
        pass
    return out



def parse_budget(text: str) -> float:
    """``3m``, ``90s``, ``90``, ``1.5m``, ``1h`` → seconds."""
    s = str(text).strip().lower()
    mult = 1.0
    if s.endswith("ms"):
        raise InputError(f"--budget {text!r} is too short; use seconds or minutes, e.g. 3m")
    if s[-1:] in ("s", "m", "h"):
        mult = {"s": 1.0, "m": 60.0, "h": 3600.0}[s[-1]]
        s = s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise InputError(f"--budget {text!r} is not a duration (e.g. 3m, 90s)") from None
    if not math.isfinite(v):
        raise InputError(f"--budget {text!r} is not a finite duration (e.g. 3m, 90s)")
    if v < 10:
        raise InputError(f"--budget {text!r} is too short: the experiments need at least 10 s")
    return v


def budget_skip_reason(left: float, share_s: float | None = None) -> str:
    """Why an experiment did not run: the time left (and, where the experiments still to run split it,
    this one's share of it), or how far over the budget the earlier ones ran."""
    if left < 0:
        return f"budget exhausted (the earlier experiments ran {-left:.0f} s over it)"
    if share_s is not None and MIN_EXPERIMENT_S <= left and share_s < MIN_EXPERIMENT_S:
        return (f"budget exhausted ({left:.0f} s left for the experiments still to run; this one's share, "
                f"{share_s:.2f} s, is under the {MIN_EXPERIMENT_S:.0f} s an experiment needs)")
    left_s = f"{left:.1f}" if left < 2 * MIN_EXPERIMENT_S else f"{left:.0f}"  # never "2 s left, under the 2 s"
    return f"budget exhausted ({left_s} s left, under the {MIN_EXPERIMENT_S:.0f} s an experiment needs)"

async def run_suite(ctx: RunContext, budget_s: float, names: Sequence[str], *,
                    weight_bytes: float | None = None, kv_bytes_per_token: float | None = None,
                    model_source: str = "theory") -> tuple[dict[str, Any], dict[str, str]]:
    """Calibrate and run ``names`` in order within ``budget_s`` seconds, each by its spec."""
    from phasescope.experiments.context import Budget
    from phasescope.experiments.spec import SuiteInputs

    if ctx.budget is None:  # the run's budget starts now unless the caller started it earlier (run_explain)
        ctx.budget = Budget(ctx.clock(), budget_s, ctx.clock)
    if ctx.calib is None:
        # the calibration's share of the budget counts its requests, not the tokenizer round-trips that
        # build their prompts (a 150 ms network made those 3.4 s of a 2.2 s share, and the requests were cut)
        prompts = await calibration_prompts(ctx)
        ctx.start_clock(max(MIN_EXPERIMENT_S, CALIBRATION_SHARE * ctx.budget.left()))
        await calibrate(ctx, prompts)
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    suite = SuiteInputs(results, weight_bytes=weight_bytes, kv_bytes_per_token=kv_bytes_per_token,
                        model_source=model_source)
    specs = [_spec(n) for n in names]
    while specs:
        spec = specs.pop(0)
        name = spec.name
        left = ctx.budget.left()
        b = ctx.budget.allot(spec.share, spec.share + sum(s.share for s in specs))
        if b < MIN_EXPERIMENT_S:
            skipped[name] = budget_skip_reason(left, b)
            ctx.say(f"{name}: skipped, {skipped[name]}")
            continue
        cut0 = ctx.n_cut
        results[name] = await spec.run(ctx, b, suite)
        if ctx.n_cut > cut0:
            from phasescope.measure.warnings import warn

            results[name].info.warnings.append(warn("partial_run", "stopped_in_flight",
                                                    {"budget_s": round(b, 3), "stopped": ctx.n_cut - cut0},
                                                    n=ctx.n_cut - cut0, budget_s=b))
        if results[name].info.skipped:
            skipped[name] = results[name].info.skipped
        if ctx.aborted is not None:  # the server is gone: the experiments after this one are not run
            for rest in specs:
                skipped[rest.name] = f"not run: {ctx.aborted}"
            break
    ctx.deadline = ctx.hard_deadline = None
    return results, skipped


def _spec(name: str) -> Any:
    spec = registry.find(name)
    if spec is None:
        raise InputError(f"unknown experiment {name!r}; choose from: {', '.join(registry.names())}")
    return spec


def __getattr__(name: str) -> Any:
    # the tables the suite used to hold, read from the specs: each experiment's budget share, the id of
    # the rule that decides from it; and the experiment names
    if name == "SHARES":
        return registry.shares()
    if name == "RULE_OF":
        return {s.name: s.rule.id for s in registry.specs() if s.rule is not None}
    if name == "NAMES":
        return registry.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _server_build(det: Any) -> dict[str, Any] | None:
    from phasescope.load.hygiene import server_build

    return server_build(det)


def add_skipped(diag: Diagnosis, skipped: dict[str, str]) -> None:
    """An experiment that did not run is a "cannot tell" for its rule (its spec's), with the reason."""
    from phasescope.diagnose import Undecided

    have = set(diag.ids()) | set(diag.undecided_ids())
    for name, why in skipped.items():
        spec = registry.find(name)
        rid = spec.rule.id if spec is not None and spec.rule is not None else name
        if rid not in have:
            diag.undecided.append(Undecided(rid, f"{name} did not run: {why} (a longer --budget runs it)"))


def run_explain(url: str | None, *, budget_s: float = 180.0, names: Sequence[str] | None = None, api: str = "auto",
                model: str | None = None, model_spec: str | None = None, device: str | None = None,
                api_key: str | None = None, progress: Callable[[str], None] | None = None, save: bool = True,
                timeouts: Timeouts | None = None, store_path: str | None = None,
                gpu_metrics: list[str] | None = None, nvml: bool = True,
                server_flags: str | None = None, otlp_listen: str | None = None,
                otlp_wait_s: float | None = None, draft_model_spec: str | None = None) -> ExplainReport:
    """Everything ``phasescope explain`` / ``experiment`` do, synchronously (``names``: default every
    registered experiment; ``draft_model_spec``: the draft model's shape, ``--draft-model-spec``).
    ``otlp_listen``: ``--otlp-listen`` (:mod:`phasescope.experiments.spans`); after the suite, wait at most
    ``otlp_wait_s`` (:data:`~phasescope.apis.otlp.OTLP_WAIT_S`) for the spans."""
    names = registry.names() if names is None else names
    bad = [n for n in names if registry.find(n) is None]
    if bad:
        raise InputError(f"unknown experiment {bad[0]!r}; choose from: {', '.join(registry.names())}")
    from phasescope.diagnose.settings import parse_server_flags

    parse_server_flags(server_flags)  # a bad value is one clear line before anything starts
    from phasescope.theory.inputs import check_ceiling_inputs

    check_ceiling_inputs(model_spec, device)  # so is an unknown --model-spec or --device
    from phasescope.apis.otlp import OTLP_WAIT_S, check_listen
    from phasescope.theory.inputs import load_draft_spec

    check_listen(otlp_listen)  # and a bad --otlp-listen, or its extra missing
    draft = load_draft_spec(draft_model_spec)  # and an unreadable --draft-model-spec
    return asyncio.run(_run_explain(url, budget_s=budget_s, names=list(names), api=api, model=model,
                                    model_spec=model_spec, device=device, api_key=api_key, progress=progress,
                                    save=save, timeouts=timeouts, store_path=store_path,
                                    gpu_metrics=gpu_metrics, nvml=nvml, server_flags=server_flags,
                                    otlp=(otlp_listen, OTLP_WAIT_S if otlp_wait_s is None else otlp_wait_s),
                                    draft=draft))


async def _run_explain(url: str | None, *, budget_s: float, names: list[str], api: str, model: str | None,
                       model_spec: str | None, device: str | None, api_key: str | None,
                       progress: Callable[[str], None] | None, save: bool, timeouts: Timeouts | None,
                       store_path: str | None, gpu_metrics: list[str] | None = None,
                       nvml: bool = True, server_flags: str | None = None,
                       otlp: tuple[str | None, float] = (None, 0.0), draft: Any = None) -> ExplainReport:
    from phasescope.target import open_target

    say = progress or (lambda _m: None)
    if url is None:
        say(f"starting the embedded engine ({EMBEDDED_ENGINE['parallel']} slots, "
            f"{EMBEDDED_ENGINE['ctx_size'] // EMBEDDED_ENGINE['parallel']} tokens each)")
    ot = open_target(url, api=api, model=model, api_key=api_key, timeouts=timeouts,
                     engine_kwargs=dict(EMBEDDED_ENGINE) if url is None else None)
    t_start = time.monotonic()
    async with ot as target:
        det = ot.detected
        from phasescope.metrics.gpu_phases import explain_gpu_start, telemetry_device_id

        gpu = explain_gpu_start(gpu_metrics, nvml, url)  # None without GPU telemetry
        device = device or (telemetry_device_id(gpu) if gpu is not None else None)
        ceil, w, kv, msrc = resolve_ceilings(model=model_spec, device=device, detected=det, embedded=url is None,
                                             draft=draft)
        from phasescope.lifecycle import run_output

        # the store (or the fallback folder); every record written as it completes. Leaving the block
        # by an exception or Ctrl-C keeps the partial run, marked with why it stopped.
        with run_output("explain", target, {"budget_s": budget_s, "experiments": names},
                        store=(store_path or True) if save else False, say=say,
                        engine_version=getattr(det, "version", None), device=ceil.device if ceil else None) as out:
            try:
                return await _explain_in(ot, target, det, out, budget_s, names, say, server_flags, url, gpu, ceil,
                                         w, kv, msrc, t_start, otlp, _bounds(model_spec, device, det, url is None))
            except BaseException:
                if gpu is not None:
                    gpu.stop()
                raise


async def _explain_in(ot: Any, target: Any, det: Any, out: Any, budget_s: float, names: list[str],
                      say: Callable[[str], None], server_flags: str | None, url: str | None, gpu: Any,
                      ceil: Ceilings | None, w: float | None, kv: float | None, msrc: str,
                      t_start: float, otlp: tuple[str | None, float] = (None, 0.0), bounds: Any = None) -> ExplainReport:
    from phasescope.experiments.context import experiment_session
    from phasescope.measure.records import ThreadedSink
    from phasescope.diagnose.gpu_evidence import explain_gpu_finish

    async with experiment_session(ot.timeouts.connect_s) as session:
        facts = await discover_facts(session, target, props=getattr(det, "props", None))
        from phasescope.diagnose.settings import discover_settings, from_device

        eng_args = list(getattr(ot.engine, "args", None) or []) if url is None else None
        settings = await discover_settings(session, target, props=getattr(det, "props", None),
                                           server_flags=server_flags, engine_args=eng_args)
        from_device(settings, ceil.device if ceil is not None else None)  # a catalog GPU/CPU: the backend
        say(f"target {target.display_url}: {target.engine or 'unknown engine'}, model {target.model}, "
            f"slots {facts.slots or '?'}, context/seq {facts.ctx_per_seq or '?'}, "
            f"/metrics {'yes' if facts.metrics else 'no'}")
        # a disk flush on a thread of its own never stalls the loop timestamping other streams
        sink = ThreadedSink(out.sink, name="explain-records")
        from phasescope.experiments.context import Budget

        # the budget counts from the start of the run (the embedded engine's start and discovery included)
        ctx = RunContext(target=target, session=session, facts=facts, sink=sink.write, progress=say,
                         budget=Budget(t_start, budget_s))
        from phasescope.measure.host import HostSampler

        host = HostSampler(target.base_url).start()
        from phasescope.apis.otlp import join_after_run, start_listening

        listen, wait_s = otlp
        rx = start_listening(listen)  # --otlp-listen: the server's spans, joined after the suite
        try:
            results, skipped = await run_suite(ctx, budget_s, names, weight_bytes=w, kv_bytes_per_token=kv,
                                               model_source=msrc)
        except BaseException:
            if rx is not None:
                rx.stop()
            raise
        finally:
            host_d = host.stop()
            await ctx.close()
            sink.close()  # every record is on disk before the run is finished
    spans_doc = server_spans = span_att = None
    if rx is not None:
        from phasescope.experiments.spans import explain_spans

        say(f"waiting up to {wait_s:g} s for the server's spans (--otlp-listen {listen})")
        received = await asyncio.to_thread(join_after_run, rx, ctx.records, wait_s)
        spans_doc, server_spans = explain_spans(ctx.records, list(results), received, listen, bounds)
        span_att = spans_doc["experiments"]
    diag = diagnose(results, engine=target.engine, ceilings=ceil, records=ctx.records, settings=settings,
                    facts=facts, rules=registry.rules(), spans=span_att)
    add_skipped(diag, skipped)
    from phasescope.probing.ceilings import explain_above_ceiling

    explain_above_ceiling(results, ceil, ctx.records)  # decode above the (per-step) bandwidth roof → experiment warning
    gpu_doc = explain_gpu_finish(gpu, ctx.records, diag, ceil)  # + the GPU's evidence findings
    rp = out.records_path
    for r in results.values():
        r.info.records_path = rp
    report = ExplainReport(
        target=target.display_url, engine=target.engine, model=target.model, api=target.api,
        budget_s=budget_s, facts=facts, calibration=ctx.calib, experiments=results, diagnosis=diag,
        ceilings=ceil, settings=settings, run_id=out.store_id, records_path=rp,
        duration_s=time.monotonic() - t_start, skipped=skipped, gpu=gpu_doc, host=host_d,
        server_build=_server_build(det), waterfall=spans_doc, server_spans=server_spans)
    if sink.error is not None:  # a record could not be written (a full disk): partial, and said
        report.status, report.stop_reason = "partial", f"stopped: {sink.error}"
        out.finish(report.to_json(), status="partial")
        from phasescope.errors import OutputError

        raise OutputError(f"{sink.error}; the explain run is kept as partial", hint=f"records: {rp}")
    failure = _run_failure(ctx)
    if failure is not None:  # bench's rule: a dead server's stop is partial, no success at all failed; exit 3
        report.status, report.stop_reason = failure
        out.finish(report.to_json(), status=report.status)
        from phasescope.errors import TargetError

        what = "stopped there" if ctx.aborted is not None else "ended"
        raise TargetError(f"{report.stop_reason}; the explain run {what} and is kept as {report.status} "
                          f"({len(ctx.records)} records)", hint=f"records: {rp}")
    out.finish(report.to_json())
    return report


def _bounds(model_spec: str | None, device: str | None, det: Any, embedded: bool) -> Any:
    """The waterfall's prefill floor and decode ceiling (:func:`phasescope.theory.ceilings.waterfall_bounds`) for
    the model and device :func:`resolve_ceilings` reads, or None when either is unknown (advisory: never fails)."""
    try:
        from phasescope.theory.ceilings import waterfall_bounds
        from phasescope.theory.devices import get_device, load_local_device
        from phasescope.theory.models import from_llamacpp_props, load_model_spec

        spec = (load_model_spec(model_spec) if model_spec else
                from_llamacpp_props(det.props, meta=getattr(det, "model_meta", None))
                if det is not None and getattr(det, "props", None) else None)
        dev = get_device(device) if device else (load_local_device() if embedded else None)
        return waterfall_bounds(spec, dev) if spec is not None and dev is not None else None
    except Exception:  # noqa: BLE001 - no bounds is no failure: the phases stand alone
        return None


def _run_failure(ctx: RunContext) -> tuple[str, str] | None:
    """(status, why) of a run that must not end ``complete``: the server failed ``ABORT_AFTER``
    requests in a row (``partial``, or ``failed`` with no experiment request answered well), or no
    experiment request succeeded (``failed``); None otherwise. The calibration sizes the run and is
    not one of its measurements; requests explain stopped itself (``stopped_by_client``) are neither."""
    mine = [r for r in ctx.records if (r.tags or {}).get("experiment") != "calibrate"
            and r.error_kind != "stopped_by_client"]
    ok = sum(1 for r in mine if r.ok)
    if ctx.aborted is not None:
        return ("partial" if ok else "failed"), ctx.aborted
    if mine and not ok:
        kinds: dict[str, int] = {}
        for r in mine:
            kinds[r.error_kind or "error"] = kinds.get(r.error_kind or "error", 0) + 1
        first = next((r.error_message for r in mine if r.error_message), None)
        return "failed", (f"no experiment request succeeded ({len(mine)} failed: "
                          + ", ".join(f"{k} {v}" for k, v in kinds.items()) + ")"
                          + (f": {first}" if first else ""))
    return None
