"""The Python API: each command of the CLI as one function, its flags as keywords, its result typed.

    import phasescope
    result = phasescope.probe(max_tokens=32)          # the embedded engine; or probe("http://127.0.0.1:8000")
    result.sizes[0]["prefill_tok_s"], result["sizes"][0]["decode_tok_s"], result.to_json()

A keyword is a flag's name in snake case (``--max-tokens 32`` is ``max_tokens=32``, ``--no-save`` is
``no_save=True`` or ``save=False``, a repeatable flag takes a list); :func:`keywords` lists a command's.
Each function runs the command itself — the same parsing, checks and defaults as the CLI, through the
same command tree (:func:`phasescope.cli.command_tree`) — with its result captured at the output seam
(:mod:`phasescope.cli._output`) instead of printed, so it returns the typed result whose ``to_json()`` is,
key for key, what the command prints with ``--json`` (schemas in docs/commands/). A result is also a
read-only mapping over that document (``result["sizes"]``), as when the API returned dicts.

Runs are stored in the run store unless ``save=False`` (``no_store=True`` for bench). A misspelt keyword
raises :class:`phasescope.InputError` with the nearest name (never a ``TypeError``); bad values raise the
same one-line :class:`phasescope.InputError` the CLI prints; a server that cannot be measured raises a
:class:`phasescope.TargetError`. ``url=None`` starts the embedded engine (upstream llama.cpp
``llama-server`` with the bundled Gemma 3 270M, built on first use). The keywords of the API before
issue 32 (``duration_s``, ``shape``, ``budget_s``, ``experiments``, ``nvml``, ``store``, BenchConfig's and
PlanOptions' field names, …) are still accepted: :data:`ALIASES`.

The heavy modules load on first call, so ``import phasescope`` stays cheap. docs/api.md has a runnable
walk-through; tests/integration/test_api_doc.py runs it against the embedded engine.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from phasescope._results import BenchSummary, CeilingReport, PlanResult, ProbeResult, Result, TuneResult
from phasescope.errors import EXIT_INTERRUPTED, InputError, PhasescopeError

if TYPE_CHECKING:
    from phasescope.experiments.suite import ExplainReport

__all__ = ["ALIASES", "bench", "ceiling", "explain", "keywords", "open_store", "plan", "probe", "tune"]

R = TypeVar("R", bound=Result)

#: flags that choose how a result is shown, not what is measured: the API returns the result itself
OUTPUT_FLAGS = ("--json", "--format", "--help")


def _not(flag: str) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {flag: not v}


def _seconds(v: Any) -> dict[str, Any]:
    return {"budget": f"{float(v):g}s"}


def _timeouts(v: Any) -> dict[str, Any]:
    return {"connect_timeout": v.connect_s, "ttft_timeout": v.first_token_s, "itl_timeout": v.between_tokens_s}


def _goodput(v: Any) -> dict[str, Any]:
    return {"goodput": [f"{k}:{ms:g}" for k, ms in v.items()] if isinstance(v, Mapping) else v}


def _renamed(flag: str) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {flag: v}


_COMMON: dict[str, Callable[[Any], dict[str, Any]]] = {
    "nvml": _not("no_nvml"), "timeouts": _timeouts, "out_dir": _renamed("out"),
    "connect_timeout_s": _renamed("connect_timeout"), "first_token_timeout_s": _renamed("ttft_timeout"),
    "between_tokens_timeout_s": _renamed("itl_timeout"),
}

#: the keywords of the API before it took the CLI's flag names, per command: each turns into flags
ALIASES: dict[str, dict[str, Callable[[Any], dict[str, Any]]]] = {
    "probe": {**_COMMON, "sizes": _renamed("prompt_tokens")},
    "bench": {**_COMMON, "duration_s": _renamed("duration"), "shape": _renamed("load_shape"),
              "trace_path": _renamed("trace"), "ignore_eos": _not("no_ignore_eos"),
              "metrics_interval_s": _renamed("metrics_interval"), "server_metrics": _not("no_server_metrics"),
              "store": _not("no_store"), "save": _not("no_store"), "engine_parallel": _renamed("parallel"),
              "prewarm": _not("no_prewarm"), "targets": _renamed("target"), "ray_address": _renamed("ray_address_arg"),
              "system_prompt_scope": _renamed("system_prompt"), "goodput": _goodput,
              "cache_prompt": lambda v: {"no_cache_prompt": v is False}},
    "explain": {**_COMMON, "budget_s": _seconds, "experiments": lambda v: {"only": list(v) if v else None}},
    "plan": {"duration_s": _renamed("duration"), "chunked_prefill": _not("no_chunked_prefill"),
             "prefix_caching": _not("no_prefix_caching"), "save": _not("no_save")},
    "tune": {},
    "ceiling": {},
}

#: the config dataclass whose fields the API also takes, for the few that no flag sets (set on it as given)
_CONFIGS = {"bench": ("phasescope.load.bench", "BenchConfig"), "plan": ("phasescope.planning.api", "PlanOptions")}


def _snake(opt: str) -> str:
    return opt.lstrip("-").replace("-", "_")


def _command(name: str) -> Any:
    from phasescope.cli import command_tree

    return command_tree().commands[name]


def _flag_keywords(cmd: Any) -> dict[str, tuple[Any, str | None]]:
    """keyword → (click parameter, the flag it spells; None for an argument) for every flag of ``cmd``."""
    out: dict[str, tuple[Any, str | None]] = {}
    for p in cmd.params:
        if getattr(p, "param_type_name", "") == "argument":
            out[p.name] = (p, None)
            continue
        for opt in (*p.opts, *getattr(p, "secondary_opts", ())):
            if opt not in OUTPUT_FLAGS:  # a short flag too: plan(n=20) is plan -n 20
                out[_snake(opt)] = (p, opt)
    return out


def _config_fields(command: str) -> set[str]:
    if command not in _CONFIGS:
        return set()
    module, cls = _CONFIGS[command]
    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}


def keywords(command: str) -> list[str]:
    """The keywords the API function of ``command`` takes: its flags in snake case, then the older spellings."""
    flags = [k for k in _flag_keywords(_command(command)) if len(k) > 1]  # the short flags work, unlisted
    return sorted(flags) + sorted((set(ALIASES.get(command, {})) | _config_fields(command)) - set(flags))


def _text(v: Any) -> str:
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_text(x) for x in v)
    return str(v)


def _argv(command: str, cmd: Any, given: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The command line that ``given`` (keyword → value) spells, and the config fields no flag sets."""
    flags = _flag_keywords(cmd)
    aliases = ALIASES.get(command, {})
    fields = _config_fields(command)
    words: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    for key, value in given.items():
        if key in flags:
            words[key] = value
        elif key in aliases:
            words.update(aliases[key](value))
        elif key in fields:
            overrides[key] = value
        else:
            near = difflib.get_close_matches(key, [*flags, *aliases], n=1, cutoff=0.6)
            raise InputError(f"{command}() got unknown option {key!r}; "
                             + (f"did you mean {near[0]!r}? " if near else "")
                             + f"`phasescope.api.keywords({command!r})` lists them (the flags of "
                               f"`phasescope {command} --help`, in snake case)")
    argv: list[str] = []
    for key, value in words.items():
        p, opt = flags[key]
        if value is None or opt is None:  # the default; an argument (placed below)
            continue
        if getattr(p, "is_flag", False) and not getattr(p, "multiple", False):
            secondary = list(getattr(p, "secondary_opts", ()))
            if opt in secondary:  # --no-save=True is --no-save; False is --save
                argv.append(opt if value else next(o for o in p.opts if o.startswith("--")))
            elif value:
                argv.append(opt)
            elif secondary:
                argv.append(secondary[0])
        elif getattr(p, "multiple", False):
            for one in (value if isinstance(value, (list, tuple)) else [value]):
                argv += [opt, _text(one)]
        else:
            argv += [opt, _text(value)]
    order = [p.name for p in cmd.params if getattr(p, "param_type_name", "") == "argument"]
    positional = [_text(words[k]) for k in order if words.get(k) is not None]
    return argv + (["--", *positional] if positional else []), overrides


def _run(command: str, kind: type[R], given: dict[str, Any], progress: Callable[[str], None] | None) -> R:
    """Run ``phasescope COMMAND`` with the keywords ``given`` and return its result (captured, not printed)."""
    cmd = _command(command)
    argv, overrides = _argv(command, cmd, given)
    return _execute(command, kind, cmd, argv, overrides, progress)


def _execute(command: str, kind: type[R], cmd: Any, argv: list[str], overrides: dict[str, Any],
             progress: Callable[[str], None] | None) -> R:
    """``cmd`` run on ``argv`` in this process, its result captured at the output seam."""
    from phasescope.cli import _click_exception_types
    from phasescope.cli._output import capture

    usage_errors, click_errors, aborts = _click_exception_types()
    with capture(progress, overrides) as box:
        try:
            code = cmd.main(args=argv, prog_name=f"phasescope {command}", standalone_mode=False)
        except (usage_errors + click_errors) as exc:
            raise InputError(f"{command}(): {exc.format_message()}") from None
        except aborts:
            raise KeyboardInterrupt from None
        except PhasescopeError:
            if box.result is None:
                raise
            # after the result: a failed or cut-short run's exit status; the API returns the result, which says so
    if box.result is None and code == EXIT_INTERRUPTED:  # typer makes Ctrl-C exit 130; a caller gets what it pressed
        raise KeyboardInterrupt
    if box.result is None:
        raise PhasescopeError(f"{command}() produced no result (exit {code}; this is a phasescope bug)")
    if not isinstance(box.result, kind):
        raise PhasescopeError(f"{command}() produced a {type(box.result).__name__}, not a {kind.__name__}")
    return box.result


def probe(url: str | None = None, *, progress: Callable[[str], None] | None = None, **options: Any) -> ProbeResult:
    """``phasescope probe``: TTFT, prefill and decode speed per prompt size, next to the ceilings.

    ``options``: probe's flags (``prompt_tokens=[64, 512]``, ``max_tokens``, ``repeat`` — ``"auto"`` or a
    count —, ``max_repeat``, ``warmup``, ``retries``, ``model``, ``api``, ``api_key``, ``model_spec``,
    ``device``, ``out``, ``save``, ``connect_timeout``, ``ttft_timeout``, ``itl_timeout``, ``gpu_metrics``,
    ``no_nvml``). Returns the :class:`~phasescope.ProbeResult`: ``sizes`` (one entry per prompt size with
    ``ttft_s``, ``prefill_tok_s``, ``decode_tok_s``, ``itl_p50_s``, ``itl_p99_s``, each with its ``*_ci``
    interval, ``repeats``, the server's own timings), ``verdict``, ``run_id``; ``to_json()`` adds
    ``ceilings``, ``warnings``, ``host``, ``records_path``."""
    return _run("probe", ProbeResult, {"url": url, **options}, progress)


def bench(url: str | None = None, *, progress: Callable[[str], None] | None = None, **options: Any) -> BenchSummary:
    """``phasescope bench``: a load run at parity with ``vllm bench serve``; returns its summary.

    ``options``: bench's flags (``num_prompts``, ``duration``, ``request_rate``, ``max_concurrency``,
    ``input_len``, ``output_len``, ``dataset``, ``seed``, ``trials``, ``out``, ``no_store``, …). The
    :class:`~phasescope.BenchSummary` holds ``completed``, ``failed``, ``partial``, throughputs and TTFT/ITL
    percentiles; ``to_json()`` is the ``bench --json`` summary. ``sweep=True`` returns a
    :class:`~phasescope.BenchSweep`. Ctrl-C stops the run and returns the partial summary (``partial: true``)."""
    from phasescope._results import BenchSweep

    kind: Any = BenchSweep if options.get("sweep") else BenchSummary
    return _run("bench", kind, {"url": url, **options}, progress)


def explain(url: str | None = None, *, progress: Callable[[str], None] | None = None,
            **options: Any) -> ExplainReport:
    """``phasescope explain``: the experiments within ``budget`` (``"3m"``, ``"90s"``; ``budget_s=`` seconds),
    then the diagnosis.

    ``options``: explain's flags (``budget``, ``only`` — a list or ``"a,b"`` of experiment names —, ``model``,
    ``api``, ``model_spec``, ``device``, ``save``, ``server_flags``, …). Returns the
    :class:`~phasescope.ExplainReport`: ``to_json()`` is the ``explain --json`` document — ``findings`` (each
    with evidence and advice), ``undecided``, ``experiments`` (each one's result, with its own fits),
    ``ceilings``, ``warnings``."""
    from phasescope.experiments.suite import ExplainReport as Report

    return _run("explain", Report, {"url": url, **options}, progress)


def plan(*, progress: Callable[[str], None] | None = None, **options: Any) -> PlanResult:
    """``phasescope plan``: simulate a serving stack (no server needed); returns the :class:`~phasescope.PlanResult`.

    ``options``: plan's flags (``model``, ``device``, ``quant``, ``tp``, ``gpus``, ``rate``, ``concurrency``,
    ``num_requests``, ``input_len``, ``output_len``, ``slo``, ``sweep``, ``capacity``, ``calibrate_from``,
    ``no_save``, …)."""
    return _run("plan", PlanResult, options, progress)


def tune(*, progress: Callable[[str], None] | None = None, **options: Any) -> TuneResult:
    """``phasescope tune``: each server setting measured in turn; returns the :class:`~phasescope.TuneResult`.

    ``options``: tune's flags (``param=["ub=32,512"]``, ``workload``, ``serve``, ``one_at_a_time``, ``resume``,
    ``slo``, and the workload's own: ``prompt_tokens``, ``max_tokens``, ``num_prompts``, ``budget``, …)."""
    return _run("tune", TuneResult, options, progress)


def ceiling(model: str | None = None, device: str | Sequence[str] | None = None, **options: Any) -> CeilingReport:
    """``phasescope ceiling``: the decode ceiling (bandwidth and compute roofs, which binds), the batch
    aggregate, the ridge batch and the prefill floor per device. No server needed.

    ``model``: a catalog id, a config.json or a .gguf path; ``device``: one id, a list, ``"all"`` or
    ``"local"``; ``options``: ceiling's flags (``dtype``, ``context``, ``batch``, ``prompt``, ``kv_dtype``,
    ``tp``, ``config``, ``gguf``, ``weights_gb``, ``bandwidth_gb_s``). Returns the
    :class:`~phasescope.CeilingReport` (``model``, ``devices``: one row per device with
    ``decode_ceiling_tok_s``, ``binding_roof``, ``bandwidth_roof_tok_s``, ``compute_roof_tok_s``, …)."""
    return _run("ceiling", CeilingReport, {"model": model, "device": device, **options}, None)


def open_store(path: str | os.PathLike[str] | None = None) -> Any:
    """The run store (``$PHASESCOPE_STORE``, default ~/.local/share/phasescope/runs.db): ``.list_runs()`` (newest first),
    ``.get(run_id)`` (a RunInfo: ``.summary``, ``.params``, ``.to_dict()``), ``.load_records(run_id)`` (the
    :class:`phasescope.RequestRecord` list) — what ``phasescope runs`` / ``show`` read."""
    from phasescope.store import open_store as _open

    return _open(path)
