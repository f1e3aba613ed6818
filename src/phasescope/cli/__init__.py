"""The ``phasescope`` command line: a thin shell over the library.

Each ``cli/cmd_*.py`` module defines its commands and a ``register(app)`` function; they are
discovered here so that a command lives in one file. Commands parse, call one library function
and print; they hold no logic. Every :class:`~phasescope.errors.PhasescopeError` becomes one line
on stderr and its exit code.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

import typer

from phasescope._version import __version__
from phasescope.errors import EXIT_BUG, EXIT_INPUT, EXIT_INTERRUPTED, PhasescopeError

app = typer.Typer(
    name="phasescope",
    help=(
        "Measure LLM inference prefill (TTFT) and decode (tokens/s) apart on any self-hosted server, "
        "next to their physical ceilings, and say what to change. With no URL, commands that need a "
        "server start the embedded llama.cpp engine."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"phasescope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """phasescope: prefill and decode, measured apart."""


#: help lists commands in this order (the main job first); modules not named here follow by name
_ORDER = ("cmd_probe", "cmd_explain", "cmd_bench", "cmd_watch", "cmd_runs", "cmd_plan", "cmd_theory", "cmd_engine")


def _discover() -> None:
    import phasescope.cli as pkg

    def rank(name: str) -> tuple[int, str]:
        return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: rank(m.name)):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"phasescope.cli.{info.name}")
            register = getattr(module, "register", None)
            if register is not None:
                register(app)


_discover()


def _click_exception_types() -> tuple[Any, Any, Any]:  # classes of whichever click is importable
    """Usage, other click and abort exception classes: typer ≥ 0.25 vendors click as
    ``typer._click``, older typer uses the ``click`` package; catch whichever is in use."""
    mods = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    aborts = {typer.Abort, *(m.Abort for m in mods if hasattr(m, "Abort"))}
    return (
        tuple(m.UsageError for m in mods),
        tuple(m.ClickException for m in mods),
        tuple(aborts),
    )


def _say(line: str) -> None:
    from phasescope.redact import encodable, printable, redact_field

    # an error line may quote a server's body: every secret masked, no terminal escape kept
    print(printable(redact_field(encodable(line))), file=sys.stderr)


def _command_path(argv: list[str]) -> str:
    words = [a for a in argv[:2] if not a.startswith("-")]
    return " ".join(["phasescope", *words[:1]])


def save_traceback(exc: BaseException) -> str | None:
    """Write the traceback of an unanticipated exception to a file for a bug report (redacted);
    the path, or None when even that failed."""
    import os
    import tempfile
    import traceback

    from phasescope.safeio import new_run_id, write_text

    text = (f"phasescope {__version__}, python {sys.version.split()[0]}, argv {sys.argv!r}\n\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    for folder in (os.environ.get("PHASESCOPE_CRASH_DIR"), tempfile.gettempdir()):
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
            return str(write_text(os.path.join(folder, new_run_id("phasescope-crash-") + ".txt"), text,
                                  what="traceback file"))
        except Exception:  # noqa: BLE001 - the guard itself must not fail
            continue
    return None


def command_tree() -> Any:
    """The click command tree the CLI runs (and the Python API, :mod:`phasescope.api`, runs through): help that
    lists a registry (--api's protocols, the experiments, the output formats) read now, every command's flags
    checked first (:func:`phasescope.cli.validate.install`)."""
    import typer.main

    from phasescope.cli._common import refresh_help
    from phasescope.cli.validate import install

    return install(refresh_help(typer.main.get_command(app)))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI in this process and return its exit code (``main`` without ``sys.exit``).

    Exit codes (README "Exit codes", :data:`phasescope.errors.EXIT_CODES`): 0 ok; 1 a bug (the
    last-resort guard: one line and a saved traceback); 2 bad input; 3 the run failed (server, no
    request succeeded, a write failed); 4 the embedded engine; 5 ``compare --fail-on worse`` found a
    regression; 6 its gate was inconclusive; 130 interrupted.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    usage_errors, click_errors, aborts = _click_exception_types()
    try:
        cmd = command_tree()
        # standalone_mode=False: click hands usage errors to us instead of drawing a panel, so bad
        # flags get the same one line as every other bad input
        code = cmd.main(args=args, prog_name="phasescope", standalone_mode=False)
    except PhasescopeError as exc:
        _say(f"phasescope: error: {exc}")
        return exc.exit_code
    except usage_errors as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:  # bare `phasescope`: the help
            print(ctx.get_help())
            return 0
        where = ctx.command_path if ctx is not None else "phasescope"
        _say(f"phasescope: error: {exc.format_message()} (see `{where} --help`)")
        return EXIT_INPUT
    except click_errors as exc:  # click's other errors (a file it could not open) are bad input, not a bug
        _say(f"phasescope: error: {exc.format_message()}")
        return EXIT_INPUT
    except (KeyboardInterrupt, *aborts):
        _say("phasescope: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last-resort guard: one line, a saved traceback, exit 1
        path = save_traceback(exc)
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] if str(exc) else type(exc).__name__
        saved = f"traceback saved to {path}" if path else "the traceback could not be saved"
        _say(f"phasescope: error: unexpected failure in `{_command_path(args)}`: {what} "
             f"(this is a phasescope bug; {saved} — please attach it to a bug report)")
        return EXIT_BUG
    if isinstance(code, int) and code:
        return code
    return 0


def main() -> None:
    """Console-script entry point: run the app, turning our errors into one clear line."""
    from phasescope.lifecycle import sigterm_as_interrupt
    from phasescope.redact import install_console_guard

    sigterm_as_interrupt()  # SIGTERM takes Ctrl-C's path (phasescope.lifecycle)
    install_console_guard()  # nothing printed carries a secret (phasescope.redact)
    sys.exit(run())
