"""``phasescope explain [URL]`` and ``phasescope experiment NAME [URL]`` (parse, call, print)."""

from __future__ import annotations

from typing import List, Optional

from phasescope._results import Result

import typer

from phasescope.apis.base import Timeouts
from phasescope.cli._common import (
    DRAFT_MODEL_SPEC_HELP,
    LIVE_HELP,
    OTLP_LISTEN_HELP,
    check_otlp_listen,
    api_key_option,
    api_option,
    console,
    err_console,
    experiment_names,
    print_host_line,
    print_warnings,
)
from phasescope.cli._gpu import GPU_METRICS_HELP, NO_NVML_HELP
from phasescope.cli._output import console_view, format_option, output
from phasescope.experiments import registry

_URL_HELP = "Server base URL (e.g. http://127.0.0.1:8000). Omit to start the embedded engine."


def _only_help() -> str:
    return f"Comma-separated subset of: {experiment_names()}."


def _name_help() -> str:
    return f"One of: {experiment_names()}."


def _experiment_help() -> str:
    return f"Run one experiment ({experiment_names()})."


# the experiment lists in help are the registry's when the command tree is built (phasescope.cli.run)
LIVE_HELP.update({"explain --only": _only_help, "experiment name": _name_help, "experiment": _experiment_help})


def _common(url: Optional[str], names: list[str], budget: str, api: str, model: Optional[str], api_key: Optional[str],
            model_spec: Optional[str], device: Optional[str], save: bool, json_out: bool, connect_timeout: float,
            ttft_timeout: float, itl_timeout: float, single: bool, gpu_metrics: Optional[list[str]] = None,
            nvml: bool = True, server_flags: Optional[str] = None, fmt: Optional[str] = None,
            otlp_listen: Optional[str] = None, draft_model_spec: Optional[str] = None) -> None:
    from phasescope._results import ExperimentResult
    from phasescope.experiments.suite import parse_budget, run_explain

    sink = output(json_out, fmt)
    budget_s = parse_budget(budget)
    otlp_listen = check_otlp_listen(otlp_listen)  # a bad address or a missing extra: one line, before any request

    def progress(msg: str) -> None:
        err_console.print(f"[dim]…[/dim] {msg}")

    rep = run_explain(url, budget_s=budget_s, names=names, api=api, model=model, api_key=api_key or None,
                      model_spec=model_spec, device=device, progress=sink.progress(progress, always=True), save=save,
                      server_flags=server_flags, draft_model_spec=draft_model_spec,
                      timeouts=Timeouts(connect_s=connect_timeout, first_token_s=ttft_timeout, between_tokens_s=itl_timeout),
                      gpu_metrics=list(gpu_metrics or []), nvml=nvml, otlp_listen=otlp_listen)
    sink.emit(ExperimentResult.of(rep, names[0]) if single else rep)


@console_view("experiment")
def _show_experiment(result: Result) -> None:
    _show(result.report)  # type: ignore[attr-defined]  # an ExperimentResult: the run it was part of


@console_view("explain")
def _show(result: Result) -> None:
    """The findings, then the supporting measurements, GPU, host and warnings lines, and where the run is."""
    from phasescope.experiments.render import render_experiments, render_findings

    doc = result.to_json()
    console.print(f"[bold]phasescope explain[/bold] {doc['target']} — {doc['engine'] or 'unknown engine'}, "
                  f"model {doc['model']}, {doc['duration_s']:.0f} s of a {doc['budget_s']:.0f} s budget")
    render_findings(doc, console)
    console.rule("supporting measurements")
    render_experiments(doc["experiments"], console)
    from phasescope.cli._gpu import print_gpu

    print_gpu(doc.get("gpu"))
    print_host_line(doc.get("host"))
    print_warnings(doc.get("warnings"))
    if doc.get("run_id"):
        console.print(f"[dim]saved as run {doc['run_id']} (raw records: {doc['records_path']})[/dim]")
    elif doc.get("records_path"):  # not in the store: the fallback folder (phasescope.lifecycle)
        console.print(f"[dim]raw records: {doc['records_path']}[/dim]")


def explain(
    url: Optional[str] = typer.Argument(None, help=_URL_HELP),
    budget: str = typer.Option("3m", "--budget", help="Time for the whole suite (e.g. 3m, 90s); experiments size themselves to it."),
    only: Optional[str] = typer.Option(None, "--only", help=_only_help()),
    api: str = api_option(),
    model: Optional[str] = typer.Option(None, "--model", help="Model name to request (default: the server's first model)."),
    api_key: Optional[str] = api_key_option(),
    model_spec: Optional[str] = typer.Option(None, "--model-spec", help="Model shape for ceilings: catalog id, config.json or .gguf (default: discovered)."),
    draft_model_spec: Optional[str] = typer.Option(None, "--draft-model-spec", help=DRAFT_MODEL_SPEC_HELP),
    device: Optional[str] = typer.Option(None, "--device", help="Device id for the bandwidth ceiling (default: `local` for the embedded engine, when `phasescope hw` measured it)."),
    save: bool = typer.Option(True, "--save/--no-save", help="Record the run (kind explain) in the run store (--no-save: records in ./phasescope-runs/explain-…/)."),
    json_out: bool = typer.Option(False, "--json", help="Print findings and experiments as JSON on stdout."),
    fmt: Optional[str] = format_option(),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to establish a connection."),
    ttft_timeout: float = typer.Option(300.0, "--ttft-timeout", help="Seconds from request to first token."),
    itl_timeout: float = typer.Option(60.0, "--itl-timeout", help="Seconds of silence allowed between tokens."),
    gpu_metrics: Optional[List[str]] = typer.Option(None, "--gpu-metrics", help=GPU_METRICS_HELP),
    no_nvml: bool = typer.Option(False, "--no-nvml", help=NO_NVML_HELP),
    server_flags: Optional[str] = typer.Option(None, "--server-flags", help="The server's command line (e.g. \"-b 512 -np 4\", \"--max-num-batched-tokens 2048\"): advice is set against these values."),
    otlp_listen: Optional[str] = typer.Option(None, "--otlp-listen", metavar="[grpc://]HOST:PORT", help=OTLP_LISTEN_HELP),
) -> None:
    """Run experiments that expose each prefill/decode effect, then say what to change and why."""
    from phasescope.errors import InputError

    names = list(registry.names())
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        bad = [n for n in names if registry.find(n) is None]
        if bad or not names:
            raise InputError(f"--only: unknown experiment {bad[0] if bad else only!r}; choose from: {experiment_names()}")
    _common(url, names, budget, api, model, api_key, model_spec, device, save, json_out, connect_timeout,
            ttft_timeout, itl_timeout, single=False, gpu_metrics=gpu_metrics, nvml=not no_nvml, server_flags=server_flags, fmt=fmt,
            otlp_listen=otlp_listen, draft_model_spec=draft_model_spec)


def experiment(
    name: str = typer.Argument(..., help=_name_help()),
    url: Optional[str] = typer.Argument(None, help=_URL_HELP),
    budget: str = typer.Option("1m", "--budget", help="Time for this experiment (e.g. 60s, 2m)."),
    api: str = api_option(),
    model: Optional[str] = typer.Option(None, "--model", help="Model name to request."),
    api_key: Optional[str] = api_key_option(),
    model_spec: Optional[str] = typer.Option(None, "--model-spec", help="Model shape for ceilings/predictions."),
    draft_model_spec: Optional[str] = typer.Option(None, "--draft-model-spec", help=DRAFT_MODEL_SPEC_HELP),
    device: Optional[str] = typer.Option(None, "--device", help="Device id for the bandwidth ceiling."),
    save: bool = typer.Option(True, "--save/--no-save", help="Record the run in the run store (--no-save: records in ./phasescope-runs/explain-…/)."),
    json_out: bool = typer.Option(False, "--json", help="Print the experiment's result as JSON."),
    fmt: Optional[str] = format_option(),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to establish a connection."),
    ttft_timeout: float = typer.Option(300.0, "--ttft-timeout", help="Seconds from request to first token."),
    itl_timeout: float = typer.Option(60.0, "--itl-timeout", help="Seconds of silence allowed between tokens."),
    gpu_metrics: Optional[List[str]] = typer.Option(None, "--gpu-metrics", help=GPU_METRICS_HELP),
    no_nvml: bool = typer.Option(False, "--no-nvml", help=NO_NVML_HELP),
    server_flags: Optional[str] = typer.Option(None, "--server-flags", help="The server's command line (e.g. \"-b 512 -np 4\", \"--max-num-batched-tokens 2048\"): advice is set against these values."),
    otlp_listen: Optional[str] = typer.Option(None, "--otlp-listen", metavar="[grpc://]HOST:PORT", help=OTLP_LISTEN_HELP),
) -> None:
    """Run one experiment (its name: see the NAME argument)."""
    from phasescope.errors import InputError

    if registry.find(name) is None:
        raise InputError(f"unknown experiment {name!r}; choose from: {experiment_names()}")
    _common(url, [name], budget, api, model, api_key, model_spec, device, save, json_out, connect_timeout,
            ttft_timeout, itl_timeout, single=True, gpu_metrics=gpu_metrics, nvml=not no_nvml, server_flags=server_flags, fmt=fmt,
            otlp_listen=otlp_listen, draft_model_spec=draft_model_spec)


def register(app: typer.Typer) -> None:
    from phasescope.cli._common import with_synthetic

    app.command("explain")(with_synthetic(explain))
    app.command("experiment", help=_experiment_help())(with_synthetic(experiment))
