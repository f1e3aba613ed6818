"""Small helpers shared by the command modules (output only; no logic)."""

from __future__ import annotations

import sys
from typing import Any, Callable

from rich.console import Console

from phasescope.jsonutil import dumps

#: ``--otlp-listen`` on probe, bench and explain (issue 35)
OTLP_LISTEN_HELP = ("HOST:PORT (OTLP/HTTP, POST /v1/traces) or grpc://HOST:PORT (OTLP/gRPC, vLLM's default): receive "
                    "the server's OpenTelemetry spans for the run and take each request's queue and prefill from its "
                    "span (vLLM --otlp-traces-endpoint, SGLang --enable-trace --otlp-traces-endpoint, TGI "
                    "--otlp-endpoint, gRPC only; see docs/commands/bench.md; explain uses them as evidence). Needs pip install 'phasescope\\[otlp]'.")


def check_otlp_listen(value: str | None) -> str | None:
    """``--otlp-listen``, checked before anything is sent: a bad address, or the extra missing, is bad input."""
    from phasescope.apis.otlp import check_listen

    return check_listen(value)


#: ``--engine-spec`` on probe and bench (issue 33)
DRAFT_MODEL_SPEC_HELP = ("The draft model's shape when the server speculates with one (llama-server -md, vLLM/SGLang draft "
                         "model or EAGLE/MTP head): catalog id, config.json or .gguf. Its bytes per drafted token join "
                         "the decode ceiling per verified step (default: none, counted as 0 — exact for n-gram speculation).")

ENGINE_DRAFT_HELP = ("Embedded engine only: speculate with this draft model (a GGUF sharing the model's vocabulary; "
                     "llama-server -md). probe counts its bytes per drafted token in the per-step ceiling, unless "
                     "--draft-model-spec names another shape.")
ENGINE_SPEC_HELP = ("Embedded engine only: speculative decoding, none (default) or ngram (n-gram lookup, no draft model; "
                    "llama-server --spec-type ngram-mod), or a --spec-type name (ngram-simple, ngram-map-k, ngram-mod, "
                    "ngram-cache). The JSON's spec_decode then reports drafted and accepted tokens from llama.cpp's timings.")

#: human output goes to stdout; progress and warnings to stderr so ``--json`` stays parseable
console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Print one JSON document to stdout (the ``--json`` contract)."""
    from phasescope.redact import write_json_text

    # redacted value by value in dumps; the console guard must not rewrite a key that equals a secret
    write_json_text(sys.stdout, dumps(obj, indent=2) + "\n")
    sys.stdout.flush()


#: one API-key rule for every command: ``--api-key``, then ``$PHASESCOPE_API_KEY``, then ``$OPENAI_API_KEY``
API_KEY_ENVVARS = ["PHASESCOPE_API_KEY", "OPENAI_API_KEY"]


def api_key_option(help: str = "Bearer key; else $PHASESCOPE_API_KEY, else $OPENAI_API_KEY (never printed or saved).") -> Any:
    """The ``--api-key`` option every command shares (see :data:`API_KEY_ENVVARS`)."""
    import typer

    return typer.Option(None, "--api-key", envvar=API_KEY_ENVVARS, show_default=False, show_envvar=False, help=help)


def api_help() -> str:
    """``--api`` help: ``auto`` and every registered protocol with its endpoint (:mod:`phasescope.apis.registry`)."""
    from phasescope.apis import registry

    return registry.help_text()


def api_option() -> Any:
    """The ``--api`` option every command that talks to a server shares."""
    import typer

    return typer.Option("auto", "--api", help=api_help())


def experiment_names() -> str:
    """``prompt-scaling, prefix-cache, …``: every registered experiment (:mod:`phasescope.experiments.registry`)."""
    from phasescope.experiments import registry

    return ", ".join(registry.names())


#: help texts read from the registries each time the command tree is built (:func:`refresh_help`), so a
#: protocol or an experiment registered after import shows in ``--help``: keyed ``--flag`` (every
#: command), ``command --flag``, ``command ARG`` (an argument, by its parameter name) or ``command`` (the
#: command's own help)
LIVE_HELP: dict[str, Callable[[], str]] = {"--api": api_help}


def refresh_help(root: Any) -> Any:
    """Set every help text :data:`LIVE_HELP` names on the click tree ``root`` (built from the typer app)."""

    def walk(cmd: Any, name: str) -> None:
        subs = getattr(cmd, "commands", None)
        for sub_name, sub in (subs or {}).items():
            walk(sub, sub_name)
        if name in LIVE_HELP and not subs:
            cmd.help = LIVE_HELP[name]()
        for p in getattr(cmd, "params", ()):
            for key in (f"{name} {p.name}", *(f"{name} {o}" for o in p.opts), *p.opts):
                if key in LIVE_HELP:
                    p.help = LIVE_HELP[key]()
                    break

    walk(root, "")
    return root


def print_warnings(ws: Any, *, title: str = "Warnings") -> None:
    """The console's one block of measurement warnings (stderr; ``--json`` carries them as data)."""
    from rich.markup import escape

    from phasescope.measure.warnings import render_lines

    lines = render_lines(ws or [])
    if not lines:
        return
    err_console.print(f"[yellow]{title} ({len(lines)}):[/yellow]")
    for ln in lines:
        err_console.print(f"  [yellow]•[/yellow] {escape(ln)}", highlight=False, soft_wrap=True)


def print_host_line(host: Any) -> None:
    """One line on host contention (``host`` section of probe/bench/explain), or nothing."""
    d = (host or {}).get("during") if isinstance(host, dict) else None
    if not d:
        return
    h = host or {}
    thr = h.get("threshold") or 0.25
    load = h.get("loadavg_1m_start")
    share = d.get("other_cpu_share") or 0
    burst, bthr = h.get("worst_1s_other_cpu_share"), h.get("burst_threshold")
    bursts = isinstance(burst, (int, float)) and isinstance(bthr, (int, float))
    # "(host_busy above 25 %)" after a 1 % share read as if the host were busy: say which side of the line it is
    over = [f"the {100 * thr:.0f} % host_busy threshold" + (" on average" if bursts else "")] if share > thr else []
    if bursts and burst > bthr:
        over.append(f"the {100 * bthr:.0f} % for bursts")
    verdict = ("above " + " and ".join(over) if over
               else f"quiet: within the {100 * thr:.0f} % host_busy threshold"
               + (f" and the {100 * bthr:.0f} % for bursts" if bursts else ""))
    if h.get("server_local"):
        verdict += "; stricter: the server runs on this machine"
    console.print(f"host: other work took {100 * share:.0f} % of the {d.get('cores')} cores "
                  f"during the run" + (f", {100 * burst:.0f} % in its worst 1-s windows" if bursts else "")
                  + f" ({verdict})"
                  + (f", load average {load:.2f} at start" if isinstance(load, (int, float)) else ""),
                  highlight=False, soft_wrap=True, style="dim")


# --- ``--synthetic SHAPE [--quant TYPE]`` (issue 36): the embedded engine on a synthetic model ----------
SYNTHETIC_HELP = ("Start the embedded engine on a synthetic model of this shape (a catalog id such as "
                  "llama-3.2-1b, or a config.json): its exact tensor shapes, a real tokenizer, synthetic weights; "
                  "real timings, meaningless text. Made once by `engine synth`, cached. Not with a URL.")
SYNTHETIC_QUANT_HELP = "--synthetic: the weight type (q8_0, f16, bf16, f32 written directly; q4_k_m, q6_k, … by llama-quantize)."


def with_synthetic(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a typer command) with ``--synthetic SHAPE`` and ``--quant TYPE`` added: with a shape, the
    synthetic GGUF is made (or found in the cache) first and the command runs inside
    :func:`phasescope.lifecycle.use_synthetic`, so the embedded engine it starts serves that file and
    every run it stores says "synthetic weights". One decorator, so each command's own code is unchanged."""
    import functools
    import inspect
    from typing import Optional

    import typer

    sig = inspect.signature(fn, eval_str=True)
    extra = [
        inspect.Parameter("synthetic", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                          default=typer.Option(None, "--synthetic", metavar="SHAPE", help=SYNTHETIC_HELP)),
        inspect.Parameter("synthetic_quant", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                          default=typer.Option(None, "--quant", help=SYNTHETIC_QUANT_HELP, show_default="q8_0")),
    ]
    params = list(sig.parameters.values())

    @functools.wraps(fn)
    def wrapper(*args: Any, synthetic: Optional[str] = None, synthetic_quant: Optional[str] = None, **kwargs: Any) -> Any:
        from phasescope.errors import InputError

        if synthetic is None:
            if synthetic_quant is not None:
                raise InputError("--quant sets the synthetic model's weight type: give --synthetic SHAPE with it")
            return fn(*args, **kwargs)

        if kwargs.get("url") or kwargs.get("serve"):
            raise InputError("--synthetic starts the embedded engine on a synthetic model; it takes no server URL "
                             "(or --serve template)")
        from phasescope.engine.synth import synthesize
        from phasescope.lifecycle import use_synthetic

        quiet = bool(kwargs.get("json_out"))
        res = synthesize(synthetic, synthetic_quant or "q8_0", say=None if quiet else (lambda m: err_console.print(f"[dim]· {m}[/dim]", highlight=False)))
        if not quiet:
            err_console.print(f"[bold]synthetic weights[/bold]: {res.shape_id} {res.qtype} ({res.size_bytes / 1e9:.2f} GB, "
                              f"tokenizer {res.vocab}; real shapes and timings, meaningless text) — {res.path}",
                              highlight=False, soft_wrap=True)
        with use_synthetic(res):
            return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params + extra)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in params}, "synthetic": Optional[str],
                               "synthetic_quant": Optional[str], "return": sig.return_annotation}
    return wrapper
