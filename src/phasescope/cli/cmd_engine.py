"""``phasescope engine install|status|quantize|synth`` and ``phasescope serve`` (parse, call, print)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from phasescope.cli._common import err_console, print_json


def _out(text: str) -> None:
    """One line to stdout, never re-wrapped (paths must stay copyable)."""
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _CliReporter:
    """Prints install steps to stderr; build progress as a live bar on a terminal, else every 10 %."""

    def __init__(self) -> None:
        self._progress: Any = None  # rich.progress.Progress, imported when the bar first draws
        self._task: Any = None
        self._last_decile = -1

    def step(self, message: str) -> None:
        _err(f"engine: {message}")

    def progress(self, done: int, total: int, elapsed_s: float, line: str) -> None:
        if err_console.is_terminal:
            if self._progress is None:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                self._progress = Progress(
                    TextColumn("building"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
                    TimeElapsedColumn(), console=err_console, transient=False,
                )
                self._progress.start()
                self._task = self._progress.add_task("build", total=total)
            self._progress.update(self._task, completed=done, total=total)
            return
        decile = int(10 * done / max(total, 1))
        if decile != self._last_decile:
            self._last_decile = decile
            _err(f"engine: build {done}/{total} steps, {elapsed_s:.0f} s elapsed")

    def finish_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def install(
    llama_server: Optional[Path] = typer.Option(
        None, "--llama-server", help="Use this llama-server binary instead of building one (also $PHASESCOPE_LLAMA_SERVER)."
    ),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Parallel compile jobs (default: all cores, ~0.7 GB RAM each)."),
    force: bool = typer.Option(False, "--force", help="Run the build step even if the cache says it is done."),
    no_model: bool = typer.Option(False, "--no-model", help="Do not assemble the bundled Gemma 3 270M GGUF."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Build llama-server (+ llama-bench, llama-quantize) from the pinned llama.cpp source and assemble the bundled model.

    Cached in $PHASESCOPE_ENGINE_DIR (default ~/.cache/phasescope/engine): a second run takes seconds.
    """
    from phasescope.engine.build import install as do_install

    t0 = time.monotonic()
    res = do_install(llama_server=llama_server, jobs=jobs, force=force, with_model=not no_model, reporter=_CliReporter())  # type: ignore[arg-type]  # duck-types build.Reporter
    out = {
        "llama_server": str(res.llama_server),
        "version": res.version,
        "cached": res.cached,
        "external": res.external,
        "build_s": res.build_s,
        "model_path": str(res.model_path) if res.model_path else None,
        "stamp": str(res.stamp) if res.stamp else None,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if json_out:
        print_json(out)
    else:
        _out(f"engine ready: {res.llama_server} ({'cached' if res.cached else 'built'}, {out['elapsed_s']:.1f} s)")


def status(
    llama_server: Optional[Path] = typer.Option(None, "--llama-server", help="Report on this binary instead."),
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON on stdout."),
) -> None:
    """Say what is installed (source, binaries, bundled model, quantized copies, synthetic models) and where."""
    from phasescope.engine.status import engine_status

    st = engine_status(llama_server)
    if json_out:
        print_json(st)
        return

    def mb(n: object) -> str:
        return f"{n / 1e6:.1f} MB" if isinstance(n, int) else "-"

    srv = st["llama_server"]
    _out(f"engine dir          {st['engine_dir']}")
    _out(f"ready               {'yes' if st['ready'] else 'no (run `phasescope engine install`)'}")
    src = st["source"]
    _out(f"source              {src['package']}  sdist {'present' if src['sdist']['exists'] else 'absent'}, "
                  f"{'unpacked' if src['unpacked'] else 'not unpacked'}")
    if srv["version"]:
        _out(f"llama-server        {srv['path']}  ({srv['source']}, version {srv['version']})")
    else:
        _out(f"llama-server        {srv['error']}")
    for name, info in st["build"]["binaries"].items():
        if name != "llama-server":
            _out(f"{name:<19} {info['path'] if info['exists'] else 'not built'}  {mb(info['size_bytes'])}")
    m = st["model"]
    state = "verified" if m["verified"] else ("present, not verified" if m["exists"] else "not assembled")
    _out(f"model               {m['path']}  {mb(m['size_bytes'])}, {state}")
    for q in st["quantized"]:
        _out(f"quantized           {q['path']}  {mb(q['size_bytes'])}")
    for q in st.get("synthetic") or []:
        _out(f"synthetic           {q['path']}  {mb(q['size_bytes'])}  (synthetic weights)")
    _out(f"logs                {st['logs_dir']}")


def quantize(
    types: list[str] = typer.Argument(..., help="Target types, e.g. F16 Q8_0 Q4_0."),
    model: Optional[Path] = typer.Option(None, "--model", help="Input GGUF (default: the bundled Gemma 3 270M Q4_K_M)."),
    allow_requantize: bool = typer.Option(False, "--allow-requantize", help="Allow requantizing an already quantized model (the bundled one is)."),
    pure: bool = typer.Option(False, "--pure", help="Every tensor at the target type (else llama-quantize keeps some, e.g. the embedding, higher)."),
    force: bool = typer.Option(False, "--force", help="Redo even when the output is cached."),
    json_out: bool = typer.Option(False, "--json", help="Print the outputs as JSON on stdout."),
) -> None:
    """Make other precisions of a GGUF with llama-quantize (cached under <engine dir>/models/quant)."""
    from phasescope.engine.quantize import normalize_type, quantize as do_quantize

    for t in types:  # validate all before doing any
        normalize_type(t)
    results = []
    for t in types:
        r = do_quantize(t, model_path=model, allow_requantize=allow_requantize, pure=pure, force=force)
        results.append({"type": r.type, "path": str(r.path), "size_bytes": r.size_bytes, "cached": r.cached,
                        "seconds": r.seconds})
        if not json_out:
            how = "cached" if r.cached else f"made in {r.seconds:.1f} s"
            _out(f"{r.type:<7} {r.path}  {r.size_bytes / 1e6:.1f} MB  ({how})")
    if json_out:
        print_json(results)


def serve(
    port: Optional[int] = typer.Option(None, "--port", help="Port on 127.0.0.1 (default: a free one)."),
    parallel: int = typer.Option(4, "--parallel", help="Server slots (concurrent sequences); each gets ctx-size/parallel tokens."),
    ctx_size: int = typer.Option(16384, "--ctx-size", help="Total KV context in tokens, split over the slots."),
    model: Optional[Path] = typer.Option(None, "--model", help="Any GGUF file (default: the bundled Gemma 3 270M Q4_K_M)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Compute threads (default: all cores)."),
    llama_server: Optional[Path] = typer.Option(None, "--llama-server", help="Use this llama-server binary (also $PHASESCOPE_LLAMA_SERVER)."),
    server_args: str = typer.Option("", "--server-args", help="Extra llama-server flags, one shell-quoted string."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object (url, port, pid, model...) on stdout when ready."),
) -> None:
    """Run the embedded llama-server on 127.0.0.1 in the foreground until Ctrl-C."""
    from phasescope.engine.server import running_engine

    extra = tuple(shlex.split(server_args))
    try:
        with running_engine(parallel=parallel, ctx_size=ctx_size, model_path=model, port=port, threads=threads,
                            extra_args=extra, llama_server=llama_server) as eng:
            info = {
                "url": eng.url, "port": eng.port, "pid": eng.pid, "model_alias": eng.model_alias,
                "model_path": str(eng.model_path), "parallel": eng.parallel, "ctx_size": eng.ctx_size,
                "threads": eng.threads, "log_path": str(eng.log_path), "startup_s": round(eng.startup_s, 3),
            }
            if json_out:
                print_json(info)
            else:
                _out(f"serving {eng.model_alias} at {eng.url}")
                _out(
                    f"  {eng.parallel} slots x {eng.ctx_size // max(eng.parallel, 1)} tokens, {eng.threads} threads, "
                    f"pid {eng.pid}, ready in {eng.startup_s:.1f} s")
                _out(f"  model {eng.model_path}")
                _out(f"  log   {eng.log_path}")
                _out(f"  try:  phasescope probe {eng.url}")
                _out("Press Ctrl-C to stop.")
            while eng.alive:
                time.sleep(0.5)
            raise eng.died_error()
    except KeyboardInterrupt:
        _err("stopped")


def synth(
    shape: str = typer.Argument(..., help="Model shape: a catalog id (see `phasescope models`), or a config.json."),
    quant: str = typer.Option("q8_0", "--quant", help="Weight type: f32, f16, bf16, q8_0 written directly; q4_k_m, q6_k, q4_0, … by llama-quantize from the Q8_0 file."),
    vocab: Optional[str] = typer.Option(None, "--vocab", help="Tokenizer: a pinned ggml-vocab-NAME.gguf (llama-bpe, llama-spm, qwen2, gemma-4, …; default: the shape's family)."),
    force: bool = typer.Option(False, "--force", help="Write it again even when cached."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (tensors, sizes, tokenizer) without writing."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Write a GGUF with SHAPE's exact tensors, a real tokenizer and synthetic weights (cached under <engine dir>/models/synthetic).

    Its timings on the embedded engine are that shape's at that type on this machine; its text is
    meaningless. Run it with `phasescope probe --synthetic SHAPE --quant TYPE` (also bench, explain, tune).
    """
    from phasescope.engine.synth import bytes_to_write, plan_synth, synthesize

    if dry_run:
        plan = plan_synth(shape, quant, vocab=vocab)
        out = {"shape": plan.shape_id, "quant": plan.qtype, "arch": plan.arch, "vocab": plan.vocab,
               "path": str(plan.path()), "cached": plan.path().exists(), "params": plan.n_params,
               "native_type": plan.native_type, "native_bytes": plan.native_bytes,
               "final_bytes_estimate": plan.final_bytes, "bytes_to_write": bytes_to_write(plan),
               "notes": plan.notes, "tensors": [[t.name, list(t.shape), t.type] for t in plan.tensors]}
        if json_out:
            print_json(out)
            return
        _out(f"synthetic {plan.shape_id} {plan.qtype}: {plan.arch}, {plan.n_params / 1e9:.3f} B params, "
             f"{len(plan.tensors)} tensors, tokenizer {plan.vocab}")
        _out(f"  {plan.native_type} file {plan.native_bytes / 1e9:.2f} GB"
             + (f", {plan.qtype} about {plan.final_bytes / 1e9:.2f} GB by llama-quantize" if plan.needs_quantize else ""))
        for n in plan.notes:
            _out(f"  {n}")
        _out(f"  {plan.path()}{' (cached)' if plan.path().exists() else ''}")
        return
    res = synthesize(shape, quant, vocab=vocab, force=force, say=None if json_out else _err)
    if json_out:
        print_json(res.to_dict())
    else:
        how = "cached" if res.cached else f"made in {res.seconds:.1f} s"
        _out(f"synthetic {res.shape_id} {res.qtype}  {res.path}  {res.size_bytes / 1e6:.1f} MB  ({how}; synthetic weights)")


def register(app: typer.Typer) -> None:
    eng = typer.Typer(name="engine", help="The embedded llama.cpp engine: install, status, quantize, synth.",
                      no_args_is_help=True)
    eng.command("install")(install)
    eng.command("status")(status)
    eng.command("quantize")(quantize)
    eng.command("synth")(synth)
    app.add_typer(eng, name="engine")
    app.command("serve")(serve)
