"""``phasescope watch [URL]``: live prefill/decode dashboard from the server's Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Optional

import typer

from phasescope.cli._common import api_key_option, console, err_console, print_json
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
) -> None:
    """Live TTFT/ITL quantiles, queue, KV usage, prefix-cache hits and token rates from /metrics
    (vLLM, SGLang, TGI, llama.cpp), with alerts that say what to change."""
    from phasescope.metrics.watch import watch_loop, watch_once

    if duration is not None and duration <= 0:
        raise InputError("--duration must be > 0")
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
                print_json(state.as_json())
            else:
                from phasescope.metrics.dashboard import render

                console.print(render(state))
            return
        if json_out or not console.is_terminal:
            _plain_loop(target, interval, window, count, duration, engine, model, by, csv_path, api_key, timeout, json_out)
            return
        from rich.live import Live

        from phasescope.metrics.dashboard import render

        with Live(console=console, refresh_per_second=4, screen=False, auto_refresh=False) as live:
            asyncio.run(
                watch_loop(target, interval_s=interval, window_s=window, count=count, duration_s=duration,
                           engine=engine, select=_select(model), by=by, csv_path=csv_path, api_key=api_key,
                           timeout_s=timeout, on_update=lambda st: live.update(render(st), refresh=True))
            )


def _plain_loop(target: str, interval: float, window: float, count: int | None, duration: float | None, engine: str,
                model: str | None, by: str | None, csv_path: str | None, api_key: str | None, timeout: float,
                json_out: bool) -> None:
    """Not a terminal (or --json): print each refresh instead of redrawing (one JSON line, or the tables)."""
    import json as _json

    from phasescope.jsonutil import to_jsonable
    from phasescope.metrics.dashboard import render
    from phasescope.metrics.watch import watch_loop

    def show(st: object) -> None:
        if json_out:
            print(_json.dumps(to_jsonable(st.as_json()), ensure_ascii=False), flush=True)  # type: ignore[attr-defined]
        else:
            console.print(render(st))  # type: ignore[arg-type]
            console.rule()

    asyncio.run(
        watch_loop(target, interval_s=interval, window_s=window, count=count, duration_s=duration, engine=engine,
                   select=_select(model), by=by, csv_path=csv_path, api_key=api_key, timeout_s=timeout, on_update=show)
    )


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)
