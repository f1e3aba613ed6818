"""``phasescope watch [URL]``: live prefill/decode dashboard from the server's Prometheus metrics (and llama.cpp's /slots)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, List, Optional

import typer

from phasescope.cli._common import api_key_option, console, err_console, print_json
from phasescope.cli._gpu import GPU_METRICS_HELP, NO_NVML_HELP
from phasescope.errors import InputError


@contextlib.contextmanager
def _target(url: str | None) -> Iterator[str]:
    """The URL to watch; with none, the embedded engine (started here, stopped on exit)."""
    if url:
        yield url
        return
    from phasescope.engine import running_engine

    err_console.print("watch: no URL given, starting the embedded engine (llama-server, Gemma 3 270M)…")
    with running_engine() as eng:
        err_console.print(f"watch: embedded engine at {eng.url}")
        yield eng.url


def _select(model: str | None) -> dict[str, str] | None:
    return {"model_name": model} if model else None


def watch(
    url: Optional[str] = typer.Argument(None, help="Server base URL (or its /metrics URL). None: the embedded engine."),
    interval: float = typer.Option(2.0, "--interval", "-i", help="Seconds between scrapes (dashboard refresh)."),
    window: float = typer.Option(60.0, "--window", "-w", help="Seconds of history for quantiles and rates."),
    once: bool = typer.Option(False, "--once", help="Take two scrapes --interval apart, print one snapshot, exit."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (with --once; without it: one JSON line per refresh)."),
    csv_path: Optional[str] = typer.Option(None, "--csv", help="Write every sample (one row per scrape) to this CSV file."),
    count: Optional[int] = typer.Option(None, "--count", "-n", help="Stop after this many refreshes."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop after this many seconds."),
    engine: str = typer.Option("auto", "--engine", help="auto | vllm | sglang | tgi | llamacpp."),
    model: Optional[str] = typer.Option(None, "--model", help="Only series with this model_name label."),
    by: Optional[str] = typer.Option(None, "--by", help="Also show one row per value of this label (e.g. model_name, engine)."),
    api_key: Optional[str] = api_key_option(),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds to wait for one scrape."),
    gpu_metrics: Optional[List[str]] = typer.Option(None, "--gpu-metrics", help=GPU_METRICS_HELP),
    no_nvml: bool = typer.Option(False, "--no-nvml", help=NO_NVML_HELP),
) -> None:
    """Live TTFT/ITL quantiles, queue, KV usage, prefix-cache hits and token rates from /metrics
    (vLLM, SGLang, TGI, llama.cpp), with alerts that say what to change; on llama.cpp also each
    slot from /slots (state, prompt/decoded tokens, context fill, prompt-cache reuse)."""
    if duration is not None and duration <= 0:
        raise InputError("--duration must be > 0")
    from phasescope.metrics.gpu import open_recorder

    gpu = open_recorder(gpu_metrics, nvml=not no_nvml, interval_s=interval, server_url=url)  # None: no GPU rows
    if gpu is not None:
        gpu.start()
    try:
        _watch(url, interval, window, once, json_out, csv_path, count, duration, engine, model, by, api_key,
               timeout, gpu)
    finally:
        if gpu is not None:
            gpu.stop()


def _with_gpu(view: Any, gpu: Any) -> Any:
    """The server dashboard with the GPU rows under it (unchanged without a GPU source)."""
    if gpu is None:
        return view
    from rich.console import Group

    from phasescope.cli._gpu import watch_table

    return Group(view, watch_table(gpu.latest()))


def _json_with_gpu(doc: dict[str, Any], gpu: Any) -> dict[str, Any]:
    if gpu is not None:
        from phasescope.cli._gpu import latest_rows

        doc["gpu"] = latest_rows(gpu.latest())
    return doc


def _watch(url: str | None, interval: float, window: float, once: bool, json_out: bool, csv_path: str | None,
           count: int | None, duration: float | None, engine: str, model: str | None, by: str | None,
           api_key: str | None, timeout: float, gpu: Any) -> None:
    from phasescope.metrics.watch import watch_loop, watch_once

    with _target(url) as target:
        if once:
            state = asyncio.run(
                watch_once(target, interval_s=interval, engine=engine, select=_select(model), by=by,
                           api_key=api_key, timeout_s=timeout)
            )
            if csv_path:
                from phasescope.metrics.watch import CsvLog

                log = CsvLog(csv_path)
                log.write(state)
                log.close()
            if json_out:
                print_json(_json_with_gpu(state.as_json(), gpu))
            else:
                from phasescope.metrics.dashboard import render

                console.print(_with_gpu(render(state), gpu))
            return
        if json_out or not console.is_terminal:
            _plain_loop(target, interval, window, count, duration, engine, model, by, csv_path, api_key, timeout, json_out,
                        gpu)
            return
        from rich.live import Live

        from phasescope.metrics.dashboard import render

        with Live(console=console, refresh_per_second=4, screen=False, auto_refresh=False) as live:
            asyncio.run(
                watch_loop(target, interval_s=interval, window_s=window, count=count, duration_s=duration,
                           engine=engine, select=_select(model), by=by, csv_path=csv_path, api_key=api_key,
                           timeout_s=timeout, on_update=lambda st: live.update(_with_gpu(render(st), gpu), refresh=True))
            )


def _plain_loop(target: str, interval: float, window: float, count: int | None, duration: float | None, engine: str,
                model: str | None, by: str | None, csv_path: str | None, api_key: str | None, timeout: float,
                json_out: bool, gpu: Any = None) -> None:
    """Not a terminal (or --json): print each refresh instead of redrawing (one JSON line, or the tables)."""
    import json as _json

    from phasescope.jsonutil import to_jsonable
    from phasescope.metrics.dashboard import render
    from phasescope.metrics.watch import watch_loop

    def show(st: object) -> None:
        if json_out:
            print(_json.dumps(to_jsonable(_json_with_gpu(st.as_json(), gpu)), ensure_ascii=False), flush=True)  # type: ignore[attr-defined]
        else:
            console.print(_with_gpu(render(st), gpu))  # type: ignore[arg-type]
            console.rule()

    asyncio.run(
        watch_loop(target, interval_s=interval, window_s=window, count=count, duration_s=duration, engine=engine,
                   select=_select(model), by=by, csv_path=csv_path, api_key=api_key, timeout_s=timeout, on_update=show)
    )


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)
