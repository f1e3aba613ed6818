"""``phasescope probe [URL]``: prefill and decode measured apart (parse, call, print)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from phasescope._results import ProbeResult, Result
from phasescope.cli._common import (DRAFT_MODEL_SPEC_HELP, ENGINE_DRAFT_HELP, ENGINE_SPEC_HELP, OTLP_LISTEN_HELP, api_key_option, api_option,
                                    check_otlp_listen, console, err_console, print_host_line, print_warnings)
from phasescope.cli._gpu import GPU_METRICS_HELP, NO_NVML_HELP
from phasescope.cli._output import console_view, format_option, output


def _sizes(values: List[str]) -> list[int]:
    from phasescope.errors import InputError

    out: list[int] = []
    for v in values:
        for part in v.replace(" ", ",").split(","):
            if not part:
                continue
            try:
                n = int(part.replace("_", ""))
            except ValueError:
                raise InputError(f"--prompt-tokens: {part!r} is not an integer") from None
            if n < 1:
                raise InputError(f"--prompt-tokens: {n} must be ≥ 1")
            out.append(n)
    return out


def probe(
    url: Optional[str] = typer.Argument(None, help="Server base URL (e.g. http://127.0.0.1:8000). Omit to start the embedded engine."),
    api: str = api_option(),
    model: Optional[str] = typer.Option(None, "--model", help="Model name to request (default: the server's first model)."),
    api_key: Optional[str] = api_key_option(),
    prompt_tokens: List[str] = typer.Option(["200,2000"], "--prompt-tokens", "-p", help="Prompt sizes in tokens, comma-separated or repeated."),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", help="Output tokens per request (fixed length where the server allows)."),
    repeat: str = typer.Option("auto", "--repeat", "-r", metavar="auto|N", help=(
        "Requests per prompt size: auto (repeat until the 95 % interval of the median TTFT and decode rate is "
        "within ±10 %, at most --max-repeat) or a fixed N. Medians are reported.")),
    max_repeat: int = typer.Option(8, "--max-repeat", help="--repeat auto: the most requests per size."),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="Send one discarded warm-up request first."),
    retries: int = typer.Option(0, "--retries", help="Retry 429/503 up to N times, honouring Retry-After (default: fail at once)."),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to establish a connection."),
    ttft_timeout: float = typer.Option(300.0, "--ttft-timeout", help="Seconds from request to first token."),
    itl_timeout: float = typer.Option(60.0, "--itl-timeout", help="Seconds of silence allowed between tokens."),
    device: Optional[str] = typer.Option(None, "--device", help="Device id for ceilings (default: `local` if `phasescope hw` measured it)."),
    model_spec: Optional[str] = typer.Option(None, "--model-spec", help="Model shape for ceilings: catalog id, config.json or .gguf (default: discovered)."),
    draft_model_spec: Optional[str] = typer.Option(None, "--draft-model-spec", help=DRAFT_MODEL_SPEC_HELP),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write records.jsonl and summary.json into this folder."),
    save: bool = typer.Option(True, "--save/--no-save", help="Record the run in the run store (--no-save without --out: ./phasescope-runs/probe-…/)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    fmt: Optional[str] = format_option(),
    gpu_metrics: Optional[List[str]] = typer.Option(None, "--gpu-metrics", help=GPU_METRICS_HELP),
    no_nvml: bool = typer.Option(False, "--no-nvml", help=NO_NVML_HELP),
    engine_spec: Optional[str] = typer.Option(None, "--engine-spec", help=ENGINE_SPEC_HELP),
    engine_draft_model: Optional[Path] = typer.Option(None, "--engine-draft-model", help=ENGINE_DRAFT_HELP),
    otlp_listen: Optional[str] = typer.Option(None, "--otlp-listen", metavar="[grpc://]HOST:PORT", help=OTLP_LISTEN_HELP),
) -> None:
    """Measure TTFT (prefill) and decode speed apart, next to their ceilings: the one-minute test."""
    from phasescope.apis.base import Timeouts
    from phasescope.probing import probe as run_probe

    sink = output(json_out, fmt)
    sizes = _sizes(prompt_tokens)
    otlp_listen = check_otlp_listen(otlp_listen)
    timeouts = Timeouts(connect_s=connect_timeout, first_token_s=ttft_timeout, between_tokens_s=itl_timeout)
    def progress_line(s: str) -> None:  # server-supplied names (model id, version) in it: no markup, no escapes
        from rich.markup import escape

        from phasescope.redact import printable

        err_console.print(f"[dim]· {escape(printable(s, one_line=True))}[/dim]", highlight=False)

    result = run_probe(url, api=api, model=model, api_key=api_key or None, timeouts=timeouts, sizes=sizes,
                       max_tokens=max_tokens, repeat=repeat, max_repeat=max_repeat, warmup=warmup, retries=retries,
                       out_dir=out,
                       model_spec=model_spec, device=device, save=save, progress=sink.progress(progress_line),
                       gpu_metrics=list(gpu_metrics or []), nvml=not no_nvml, engine_spec=engine_spec, otlp_listen=otlp_listen,
                       draft_model_spec=draft_model_spec,
                       engine_draft_model=None if engine_draft_model is None else str(engine_draft_model))
    sink.emit(ProbeResult.from_json(result))


@console_view("probe")
def show(result: Result) -> None:
    """The probe card, then GPU, host and warnings lines."""
    from phasescope.cli._gpu import print_gpu
    from phasescope.probing.card import render

    console.print(render(result.to_json()))
    print_gpu(result.get("gpu"))
    print_host_line(result.get("host"))
    print_warnings(result.get("warnings"))


def register(app: typer.Typer) -> None:
    from phasescope.cli._common import with_synthetic

    app.command("probe")(with_synthetic(probe))
