"""``phasescope probe``: the seed article's one-minute test, automated and measured exactly.

:func:`probe` resolves the target (or starts the embedded engine), builds prompts of exact token
lengths, sends a discarded warm-up and ``repeat`` rounds of each size one at a time, saves every
record as it completes (:func:`phasescope.lifecycle.run_output`: the run store and/or ``--out``, else
the fallback folder; Ctrl-C or a dead server keeps the partial run), and returns the result object that ``probe --json`` prints::

    {"target", "api", "engine", "engine_version", "model", "synthetic" (only on a synthetic GGUF),
     "sizes": [{"prompt_tokens", "repeats", "n", "ttft_s", "ttft_s_ci", "ttfo_s", "ttfo_s_ci", "ttft_net_s",
                "reasoning_tokens", "answer_tokens", "reasoning_tok_s", "answer_tok_s", "prefill_tok_s",
                "decode_tok_s", "decode_tok_s_ci", "itl_p50_s", "itl_p99_s", "intervals", "unstable",
                "server", "spec_decode" (only when the server speculates), ...}],
     "spec_decode" ({drafted, accepted, acceptance_rate, mean_accepted_len, tokens_per_step, source, steps}:
     :func:`phasescope.measure.derive.spec_decode_run`, absent when the server does not speculate),
     "verdict", "warmup", "ceilings", "ceilings_note", "waterfall", "plan", "host", "warnings", "run_id",
     "records_path"}

``waterfall`` is where each request's time went (:func:`phasescope.measure.waterfall.run_waterfall`).

``host`` is the machine's CPU contention during the run (:mod:`phasescope.measure.host`);
Every figure ``X`` of a size carries ``X_ci`` (its 95 % interval, ``[low, high]``) and, in
``intervals``, the :class:`~phasescope.measure.interval.Interval` it came from; ``repeat`` is
``"auto"`` by default (repeat each size until TTFT and decode are within ±10 %, at most
``max_repeat`` rounds) or a fixed count. ``warnings`` the run's
:class:`~phasescope.measure.warnings.MeasurementWarning` list as dicts.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable

from phasescope import errors as E
from phasescope.apis import new_session
from phasescope.apis.base import Timeouts
from phasescope.apis.otlp import OTLP_WAIT_S, join_after_run, start_listening
from phasescope.target import open_target
from phasescope.probing import ceilings as C
from phasescope.probing.runner import ProbePlan, run_probe
from phasescope.probing.summary import size_summary, verdict, warmup_summary

__all__ = ["ProbePlan", "parse_repeat", "probe", "summarize_run"]


def summarize_run(run: Any) -> dict[str, Any]:
    sizes = []
    for n in run.plan.sizes:
        recs = [r for r in run.records if r.tags.get("prompt_tokens_target") == n]
        sizes.append(size_summary(n, recs))
    out = {"sizes": sizes, "verdict": verdict(sizes), "warmup": warmup_summary(run.warmup, sizes)}
    from phasescope.measure import aggregate as A
    from phasescope.measure.derive import spec_decode_run

    sd = spec_decode_run(A.successful(A.measured(r for r in run.records if r.tags.get("prompt_tokens_target") in run.plan.sizes)))
    if sd is not None:  # speculative decoding over the run; absent when the server does not speculate
        out["spec_decode"] = sd
    return out


def parse_repeat(repeat: int | str, max_repeat: int = 8) -> tuple[bool, int]:
    """``--repeat auto|N`` and ``--max-repeat``: (auto, rounds) — rounds is the fixed count, or auto's most."""
    if isinstance(repeat, str) and repeat.strip().lower() == "auto":
        if isinstance(max_repeat, bool) or not isinstance(max_repeat, int) or max_repeat < 2:
            raise E.InputError(f"--max-repeat must be an integer ≥ 2 (got {max_repeat!r})")
        return True, max_repeat
    try:
        n = int(str(repeat).strip()) if not isinstance(repeat, bool) else -1
    except ValueError:
        raise E.InputError(f"--repeat: {repeat!r} is neither 'auto' nor an integer") from None
    if n < 1:
        raise E.InputError("--repeat must be 'auto' or at least 1")
    return False, n


def probe(url: str | None, *, api: str = "auto", model: str | None = None, api_key: str | None = None,
          timeouts: Timeouts | None = None, sizes: list[int] | None = None, max_tokens: int = 128,
          repeat: int | str = "auto", max_repeat: int = 8,
          warmup: bool = True, retries: int = 0, out_dir: str | os.PathLike[str] | None = None,
          model_spec: str | None = None, device: str | None = None, save: bool = True,
          progress: Callable[[str], None] | None = None, gpu_metrics: list[str] | None = None,
          nvml: bool = True, engine_spec: str | None = None, otlp_listen: str | None = None,
          otlp_wait_s: float = OTLP_WAIT_S, draft_model_spec: str | None = None,
          engine_draft_model: str | None = None) -> dict[str, Any]:
    sizes = sorted(set(sizes or [200, 2000]))
    from phasescope.engine.spec import check_engine_draft, check_engine_spec

    engine_spec = check_engine_spec(engine_spec, url)
    engine_draft_model = check_engine_draft(engine_draft_model, url)
    if engine_draft_model is not None and draft_model_spec is None:
        draft_model_spec = engine_draft_model  # the draft's own file: its exact bytes per drafted token
    if not sizes or sizes[0] < 1:
        raise E.InputError("--prompt-tokens must be positive integers")
    if max_tokens < 2:
        raise E.InputError("--max-tokens must be at least 2 (decode needs two tokens to time)")
    auto, repeat_n = parse_repeat(repeat, max_repeat)
    if retries < 0:
        raise E.InputError("--retries must be ≥ 0")
    from phasescope.theory.inputs import check_ceiling_inputs

    check_ceiling_inputs(model_spec, device)  # an unknown id is refused before the first request
    from phasescope.theory.inputs import load_draft_spec

    draft_spec = load_draft_spec(draft_model_spec)  # so is an unreadable draft model
    plan = ProbePlan(sizes=sizes, max_tokens=max_tokens, repeat=repeat_n, warmup=warmup, retries=retries, auto=auto)
    say = progress or (lambda s: None)
    if url is None:
        from phasescope.engine.synth import active

        syn = active()
        say("starting the embedded engine (llama.cpp llama-server + "
            + (f"synthetic {syn.shape_id} {syn.qtype})" if syn is not None else "Gemma 3 270M)"))
    from phasescope.metrics.gpu import open_recorder

    gpu = open_recorder(gpu_metrics, nvml=nvml, interval_s=0.25, server_url=url)  # None without GPU telemetry
    try:
        return asyncio.run(_probe(url, api, model, api_key, timeouts, plan, out_dir, model_spec, device, save, say, gpu,
                                  engine_spec=engine_spec, otlp_listen=otlp_listen, otlp_wait_s=otlp_wait_s,
                                  draft_spec=draft_spec, engine_draft_model=engine_draft_model))
    finally:
        if gpu is not None:
            gpu.stop()  # idempotent: the section already holds what it recorded


async def _probe(url: str | None, api: str, model: str | None, api_key: str | None, timeouts: Timeouts | None,
                 plan: ProbePlan, out_dir: Any, model_spec: str | None, device: str | None, save: bool,
                 say: Callable[[str], None], gpu: Any = None, engine_spec: str | None = None,
                 otlp_listen: str | None = None, otlp_wait_s: float = OTLP_WAIT_S, draft_spec: Any = None,
                 engine_draft_model: str | None = None) -> dict[str, Any]:
    ekw: dict[str, Any] = {"ctx_size": max(16384, 4 * (max(plan.sizes) + plan.max_tokens + 64))}
    if engine_spec:
        ekw["spec"] = engine_spec
    if engine_draft_model:
        ekw["draft_model"] = engine_draft_model
    ot = open_target(url, api=api, model=model, api_key=api_key, timeouts=timeouts, engine_kwargs=ekw)
    async with ot as target:
        say(f"target {target.display_url}: {target.engine} {target.engine_version or ''}, api {target.api}, model {target.model}")
        params = {"sizes": plan.sizes, "max_tokens": plan.max_tokens, "repeat": "auto" if plan.auto else plan.repeat,
                  "max_repeat": plan.repeat if plan.auto else None, "warmup": plan.warmup,
                  "retries": plan.retries, "api": target.api}
        if engine_spec:
            params["engine_spec"] = engine_spec
        if engine_draft_model:
            params["engine_draft_model"] = engine_draft_model
        from phasescope.lifecycle import run_output

        # the store and/or --out, else the fallback folder; each record written as it completes
        with run_output("probe", target, params, out_dir=out_dir, store=save, say=say,
                        engine_version=target.engine_version) as out:
            from phasescope.measure.host import HostSampler

            async with new_session(connect_timeout_s=target.timeouts.connect_s) as session:
                if gpu is not None:
                    gpu.start()
                host = HostSampler(target.base_url).start()
                otlp = start_listening(otlp_listen)  # --otlp-listen: the server's spans, joined after the run
                try:
                    run = await run_probe(target, plan, on_record=out.write, progress=say, session=session)
                except BaseException:
                    if otlp is not None:
                        otlp.stop()
                    raise
                finally:
                    host_d = host.stop()
                spans_received = None
                if otlp is not None:
                    say(f"waiting up to {otlp_wait_s:g} s for the server's spans (--otlp-listen {otlp_listen})")
                    spans_received = await asyncio.to_thread(join_after_run, otlp, run.records, otlp_wait_s)
                result: dict[str, Any] = {
                    "target": target.display_url, "api": target.api, "engine": target.engine,
                    "engine_version": target.engine_version, "model": target.model,
                }
                result.update(summarize_run(run))
                result.setdefault("warnings", [])
                from phasescope.engine.synth import synthetic_of_props

                synthetic = synthetic_of_props(getattr(ot.detected, "props", None))
                if synthetic is not None:  # a synthetic GGUF (engine synth): the card and the stored run say so
                    result["synthetic"] = synthetic
                spec, why_spec = await C.discover_spec(session, target, ot.detected, model_spec)
                dev, why_dev = C.get_device(device, same_machine=C.is_loopback(target.base_url))
                if gpu is not None and device is None:  # the GPU the telemetry names beats a guess
                    from phasescope.metrics.gpu_phases import telemetry_device

                    dev, why_dev = telemetry_device(gpu, dev, why_dev)
                if spec is not None and dev is not None:
                    try:
                        result["ceilings"] = C.ceilings(spec, dev, result["sizes"])
                        C.add_per_step_ceilings(result["ceilings"], result["sizes"], spec, dev, draft_spec)
                        result["ceilings_note"] = None
                        result["warnings"] += [w.to_dict() for w in C.above_ceiling_warnings(spec, dev, result["sizes"],
                                                                                              draft_spec)]
                    except Exception as exc:  # noqa: BLE001 - theory is advisory; never lose the measurement
                        result["ceilings"], result["ceilings_note"] = None, f"ceilings failed: {exc}"
                else:
                    result["ceilings"] = None
                    result["ceilings_note"] = why_spec or why_dev
                from phasescope.measure.aggregate import measured
                from phasescope.measure.waterfall import run_waterfall
                from phasescope.theory.ceilings import waterfall_bounds

                try:  # where each request's time went (issue 35): derived from the server's own timings
                    result["waterfall"] = run_waterfall(
                        measured(run.records), waterfall_bounds(spec, dev) if spec is not None and dev is not None else None)
                except Exception as exc:  # noqa: BLE001 - advisory; never lose the measurement
                    result["waterfall"] = {"derived": True, "spans_joined": 0, "spans_missing": None, "bands": {},
                                           "sentence": None, "reason": f"waterfall failed: {exc}"}
                if spans_received is not None:
                    from phasescope.measure.waterfall import keep_spans

                    keep_spans(result, run.records, spans_received, otlp_listen)
                if gpu is not None:
                    from phasescope.metrics.gpu_phases import probe_section

                    result["gpu"] = probe_section(gpu, run.records, result, device)
            result["plan"] = params
            result["host"] = host_d
            from phasescope.load.hygiene import server_build

            result["server_build"] = server_build(ot.detected)
            from phasescope.probing.summary import probe_warnings

            result["warnings"] = probe_warnings(result, run, host_d, result.get("warnings"))
            result["records_path"] = out.records_path
            result["run_id"] = out.store_id
            out.finish(result)
            return result
