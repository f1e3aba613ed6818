"""The output seam: every command builds one result (:mod:`phasescope._results`) and hands it to :func:`emit`
through :func:`output`; how it is shown is decided here and nowhere else.

A *format* is a name and a function that renders any result: ``console`` (the command's console view, a
function each ``cmd_*`` module registers with :func:`console_view`) and ``json`` (``to_json()``, the
``--json`` contract) are built in; a new one is one :func:`register_format` call in one file, and every
command that takes ``--format`` (and ``--json``, which is ``--format json``) renders with it. The Python
API runs the same commands with the result *captured* (:func:`capture`) instead of rendered, which is
how ``phasescope.bench(...)`` returns what ``phasescope bench --json`` prints.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from phasescope._results import Result
from phasescope.cli._common import LIVE_HELP
from phasescope.errors import InputError

Renderer = Callable[[Result], None]


@dataclass(frozen=True)
class Format:
    name: str
    render: Renderer
    help: str
    #: a person reads it as the run goes: progress lines and bars on stderr (machine formats stay quiet)
    human: bool = False


#: every output format, by its ``--format`` name
FORMATS: dict[str, Format] = {}
#: each command's console view, by :attr:`phasescope.Result.command`
VIEWS: dict[str, Renderer] = {}


def register_format(name: str, render: Renderer, help: str, *, human: bool = False) -> Format:
    """Add (or replace) the output format ``name``: ``render(result)`` writes it (stdout)."""
    fmt = Format(name, render, help, human)
    FORMATS[name] = fmt
    return fmt


def console_view(command: str) -> Callable[[Renderer], Renderer]:
    """Decorator: the function that draws ``command``'s result on the console."""

    def add(fn: Renderer) -> Renderer:
        VIEWS[command] = fn
        return fn

    return add


def _console(result: Result) -> None:
    view = VIEWS.get(result.command)
    if view is None:  # a command without a view of its own: its document, readable
        from phasescope.cli._common import console

        console.print_json(data=result.to_json(), default=str)
        return
    view(result)


def _json(result: Result) -> None:
    from phasescope.cli._common import print_json

    print_json(result.to_json())


register_format("console", _console, "the command's tables and lines (default)", human=True)
register_format("json", _json, "the --json document")


def format_help() -> str:
    """``--format`` help: every registered format (read when the command tree is built)."""
    return "Output: " + "; ".join(f"{f.name} ({f.help})" for f in FORMATS.values()) + ". --json is --format json."


LIVE_HELP["--format"] = format_help  # a format registered after import shows in --help


def format_option() -> Any:
    """The ``--format`` option of every command that returns a result."""
    import typer

    return typer.Option(None, "--format", metavar="NAME", show_default=False, help=format_help())


@dataclass
class Capture:
    """What the Python API catches instead of rendering (:func:`capture`)."""

    progress: Optional[Callable[[str], None]] = None
    result: Optional[Result] = None
    overrides: dict[str, Any] = field(default_factory=dict)  # config fields the CLI has no flag for


_CAPTURE: contextvars.ContextVar[Optional[Capture]] = contextvars.ContextVar("phasescope_capture", default=None)


@contextlib.contextmanager
def capture(progress: Optional[Callable[[str], None]] = None,
            overrides: Optional[dict[str, Any]] = None) -> Iterator[Capture]:
    """Run a command with its result kept in the returned :class:`Capture` instead of rendered."""
    box = Capture(progress=progress, overrides=dict(overrides or {}))
    token = _CAPTURE.set(box)
    try:
        yield box
    finally:
        _CAPTURE.reset(token)


@dataclass
class Output:
    """Where one command's output goes: a format, or the API's capture."""

    fmt: Format
    captured: Optional[Capture] = None

    @property
    def human(self) -> bool:
        """Progress lines, bars and notes on stderr as the run goes."""
        return self.captured is None and self.fmt.human

    @property
    def overrides(self) -> dict[str, Any]:
        """Config fields the API set that no flag sets (:mod:`phasescope.api`'s older keywords)."""
        return self.captured.overrides if self.captured is not None else {}

    def progress(self, line: Callable[[str], None], *, always: bool = False) -> Optional[Callable[[str], None]]:
        """``line`` for a human format (any format with ``always``: stderr, beside stdout's document), the
        API's callback when captured, else None (quiet)."""
        if self.captured is not None:
            return self.captured.progress
        return line if self.fmt.human or always else None

    def emit(self, result: Result) -> None:
        if self.captured is not None:
            self.captured.result = result
            return
        self.fmt.render(result)


def output(json_out: bool = False, fmt: Optional[str] = None) -> Output:
    """The output a command's ``--json`` and ``--format`` choose (one clear line for a bad pair or name)."""
    if json_out and fmt not in (None, "json"):
        raise InputError(f"--json is --format json; give one of --json and --format {fmt}")
    name = "json" if json_out else (fmt or "console")
    if name not in FORMATS:
        import difflib

        near = difflib.get_close_matches(name, FORMATS, n=1)
        raise InputError(f"--format {name!r}: " + (f"did you mean {near[0]!r}? " if near else "")
                         + f"choose one of {', '.join(FORMATS)}")
    return Output(FORMATS[name], _CAPTURE.get())


def emit(result: Result, json_out: bool = False, fmt: Optional[str] = None) -> None:
    """Render ``result`` as ``--json`` / ``--format`` say (or hand it to the API's capture)."""
    output(json_out, fmt).emit(result)
