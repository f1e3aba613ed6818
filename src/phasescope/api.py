"""The Python API: each command of the CLI as one function that returns what its ``--json`` prints.

    import phasescope
    result = phasescope.probe()                       # the embedded engine; or probe("http://127.0.0.1:8000")
    result["sizes"][0]["prefill_tok_s"], result["sizes"][0]["decode_tok_s"]

Every function takes the CLI's options as keyword arguments with the same meaning (``--max-tokens`` is
``max_tokens=``), runs synchronously, stores the run in the run store unless ``save=False`` /
``store=False``, and returns a plain ``dict`` — the same document, key for key, that the command prints
with ``--json`` (schemas in docs/commands/). Bad input raises :class:`phasescope.InputError` (a subclass
of :class:`phasescope.PhasescopeError`, like every error the package raises on purpose); a server that
cannot be measured raises a :class:`phasescope.TargetError`. ``url=None`` starts the embedded engine
(upstream llama.cpp ``llama-server`` with the bundled Gemma 3 270M, built on first use).

The heavy modules load on first call, so ``import phasescope`` stays cheap. docs/api.md has a runnable
walk-through; tests/integration/test_api_doc.py runs it against the embedded engine.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from phasescope.errors import InputError

__all__ = ["bench", "ceiling", "explain", "open_store", "plan", "probe"]


def _options(cls: type, given: dict[str, Any], what: str) -> Any:
    """``cls(**given)``, with an unknown name as one clear InputError that lists the known ones."""
    names = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(set(given) - names)
    if bad:
        raise InputError(f"{what}() got unknown option {bad[0]!r}; known: {', '.join(sorted(names))}")
    return cls(**given)


def _timeouts(connect_s: float | None, first_token_s: float | None, between_tokens_s: float | None) -> Any:
    from phasescope.apis.base import Timeouts

    return Timeouts(connect_s=connect_s, first_token_s=first_token_s, between_tokens_s=between_tokens_s)


def probe(url: str | None = None, *, model: str | None = None, api: str = "auto", api_key: str | None = None,
          prompt_tokens: Sequence[int] = (200, 2000), max_tokens: int = 128, repeat: int | str = "auto",
          max_repeat: int = 8, warmup: bool = True, retries: int = 0, out: str | os.PathLike[str] | None = None,
          model_spec: str | None = None, device: str | None = None, save: bool = True,
          connect_timeout_s: float | None = 10.0, first_token_timeout_s: float | None = 300.0,
          between_tokens_timeout_s: float | None = 60.0, gpu_metrics: Sequence[str] = (), nvml: bool = True,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``phasescope probe``: TTFT, prefill and decode speed per prompt size, next to the ceilings.

    Returns the ``probe --json`` document: ``sizes`` (one entry per prompt size with ``ttft_s``,
    ``prefill_tok_s``, ``decode_tok_s``, ``itl_p50_s``, ``itl_p99_s``, each with its ``*_ci`` interval,
    ``repeats``, the server's own timings), ``verdict``, ``ceilings``, ``warnings``, ``host``, ``run_id``,
    ``records_path``. ``repeat``: ``"auto"`` (until TTFT and decode are within ±10 %, at most ``max_repeat``)
    or a fixed count."""
    from phasescope.probe import probe as _probe

    return _probe(url, api=api, model=model, api_key=api_key,
                  timeouts=_timeouts(connect_timeout_s, first_token_timeout_s, between_tokens_timeout_s),
                  sizes=list(prompt_tokens), max_tokens=max_tokens, repeat=repeat, max_repeat=max_repeat,
                  warmup=warmup, retries=retries, out_dir=out, model_spec=model_spec, device=device, save=save,
                  progress=progress, gpu_metrics=list(gpu_metrics) or None, nvml=nvml)


def bench(url: str | None = None, *, progress: Callable[[str], None] | None = None,
          **options: Any) -> dict[str, Any]:
    """``phasescope bench``: a load run at parity with ``vllm bench serve``; returns its summary.

    ``options`` are the fields of :class:`phasescope.load.bench.BenchConfig` (``num_prompts``,
    ``request_rate``, ``max_concurrency``, ``input_len``, ``output_len``, ``dataset``, ``seed``,
    ``out_dir``, ``store``, …). The result is the ``bench --json`` summary: ``ttft_ms``, ``tpot_ms``,
    ``itl_ms`` percentiles, throughputs, ``completed``, ``failed``, ``partial``, ``warnings``,
    ``run_id``. Ctrl-C stops the run and returns the partial summary (``partial: true``)."""
    from phasescope.load.bench import BenchConfig, run_bench

    cfg = _options(BenchConfig, {"url": url, **options}, "bench")
    return run_bench(cfg, on_status=progress).summary


def explain(url: str | None = None, *, budget_s: float = 180.0, experiments: Sequence[str] | None = None,
            model: str | None = None, api: str = "auto", api_key: str | None = None,
            model_spec: str | None = None, device: str | None = None, save: bool = True,
            server_flags: str | None = None, gpu_metrics: Sequence[str] = (), nvml: bool = True,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``phasescope explain``: the experiments within ``budget_s`` seconds, then the diagnosis.

    ``experiments``: a subset of :data:`phasescope.experiments.NAMES` (default: all that fit).
    Returns the ``explain --json`` document: ``findings`` (each with evidence and advice),
    ``undecided``, ``experiments`` (each one's result, with its own fits), ``ceilings``, ``warnings``."""
    from phasescope.experiments.suite import NAMES, run_explain

    rep = run_explain(url, budget_s=budget_s, names=list(experiments) if experiments else NAMES, api=api,
                      model=model, model_spec=model_spec, device=device, api_key=api_key, progress=progress,
                      save=save, gpu_metrics=list(gpu_metrics) or None, nvml=nvml, server_flags=server_flags)
    return rep.to_json()


def plan(**options: Any) -> dict[str, Any]:
    """``phasescope plan``: simulate a serving stack (no server needed); returns the ``plan --json`` document.

    ``options`` are the fields of :class:`phasescope.plan.api.PlanOptions` (``model``, ``device``,
    ``quant``, ``tp``, ``gpus``, ``rate``, ``concurrency``, ``input_len``, ``output_len``, ``slo``,
    ``sweep``, ``capacity``, ``calibrate_from``, ``save``, …)."""
    from phasescope.plan.api import PlanOptions, run_plan

    return run_plan(_options(PlanOptions, options, "plan"))


def ceiling(model: str | None = None, device: str | Sequence[str] | None = None, *, dtype: str | None = None,
            context: int = 0, batch: int = 1, prompt: int = 2000, kv_dtype: str = "fp16", tp: int = 1,
            config: str | None = None, gguf: str | None = None, weights_gb: float | None = None,
            bandwidth_gb_s: float | None = None) -> dict[str, Any]:
    """``phasescope ceiling``: the decode ceiling (bandwidth and compute roofs, which binds), the batch
    aggregate, the ridge batch and the prefill floor per device. No server needed.

    ``model``: a catalog id, a config.json or a .gguf path; ``device``: one id, a list, ``"all"`` or
    ``"local"``. Returns the ``ceiling --json`` document (``model``, ``devices``: one row per device with
    ``decode_ceiling_tok_s``, ``binding_roof``, ``bandwidth_roof_tok_s``, ``compute_roof_tok_s``, …)."""
    from phasescope.theory.report import ceiling_report, resolve_devices, resolve_model

    spec = resolve_model(model=model, config=config, gguf=gguf, weights_gb=weights_gb, dtype=dtype)
    devs = [device] if isinstance(device, str) else (list(device) if device else None)
    return ceiling_report(spec, resolve_devices(devs, bandwidth_gb_s), quant=dtype, context=context, batch=batch,
                          prompt_tokens=prompt, kv_dtype=kv_dtype, tp=tp)


def open_store(path: str | os.PathLike[str] | None = None) -> Any:
    """The run store (``$PHASESCOPE_STORE``, default ~/.local/share/phasescope/runs.db): ``.list_runs()`` (newest first),
    ``.get(run_id)`` (a RunInfo: ``.summary``, ``.params``, ``.to_dict()``), ``.load_records(run_id)`` (the
    :class:`phasescope.RequestRecord` list) — what ``phasescope runs`` / ``show`` read."""
    from phasescope.store import open_store as _open

    return _open(path)
