"""Every failure a user can meet is one named error with one clear sentence.

The CLI turns a :class:`PhasescopeError` into ``phasescope: error: <message>`` on stderr and
its ``exit_code`` — never a traceback. Low-level exceptions (aiohttp, OSError, JSON) are mapped
onto this hierarchy in one place per API module, as httpx does in ``map_exceptions``.

Exit codes (the README's table; each code means one thing): 0 success (and ``compare --fail-on``'s
gate passed); 1 a phasescope bug (the last-resort guard saved a traceback file); 2 bad input (usage,
flag values, files, unknown ids); 3 the run failed: the target server failed us, no request
succeeded, or a result could not be written (:class:`OutputError`); 4 the embedded engine could not
be built or started; 5 ``compare --fail-on worse`` found a regression (:data:`EXIT_REGRESSION`);
6 ``compare --fail-on worse`` could not decide: a gated metric is not comparable or unstable
(:data:`EXIT_INCONCLUSIVE`); 130 interrupted.
"""

from __future__ import annotations

#: every exit code the CLI returns, and the one thing it means (README "Exit codes"; keep both true)
EXIT_OK = 0
EXIT_BUG = 1
EXIT_INPUT = 2
EXIT_RUN_FAILED = 3
EXIT_ENGINE = 4
#: ``compare --fail-on worse``: a gated metric is worse beyond noise and beyond its minimum effect
EXIT_REGRESSION = 5
#: ``compare --fail-on worse``: the gate cannot decide (a gated metric not comparable or unstable)
EXIT_INCONCLUSIVE = 6
EXIT_INTERRUPTED = 130
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_BUG: "a phasescope bug",
    EXIT_INPUT: "bad input",
    EXIT_RUN_FAILED: "the run failed",
    EXIT_ENGINE: "the embedded engine",
    EXIT_REGRESSION: "regression (compare --fail-on worse)",
    EXIT_INCONCLUSIVE: "inconclusive (compare --fail-on worse)",
    EXIT_INTERRUPTED: "interrupted",
}


class PhasescopeError(Exception):
    """Base class: a message a user can act on, and the process exit code."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


# --- bad input -------------------------------------------------------------------------------
class InputError(PhasescopeError):
    """Bad input from the user: a missing file, malformed JSON, an unknown id, a bad flag value."""

    exit_code = 2


class UnknownDeviceError(InputError):
    """A device id that is not in the catalog."""


class UnknownModelError(InputError):
    """A model id that is not in the catalog, or a config/GGUF we cannot read."""


class UnknownQuantError(InputError):
    """A quantization or dtype name we do not know the bits per weight of."""


# --- the target server -----------------------------------------------------------------------
class TargetError(PhasescopeError):
    """The server we measure did not behave: nothing listening, wrong API, errors, timeouts."""

    exit_code = 3


class ConnectError(TargetError):
    """Nothing is listening at the URL (connection refused / unreachable)."""


class WrongApiError(TargetError):
    """The server at the URL does not speak the API we were asked to use."""


class ModelNotFoundError(TargetError):
    """The server does not serve the requested model."""


class AuthError(TargetError):
    """HTTP 401/403: the API key is missing or wrong (the key itself is never printed)."""


class OverloadedError(TargetError):
    """HTTP 429/503: the server refused the request for load; ``retry_after_s`` when it said so."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_s = retry_after_s


def overloaded_hint(retried: int | None, levers: tuple[str, ...] = ("--max-concurrency", "--request-rate")) -> str:
    """What to do about a 429/503, in the terms of the command that prints it (the record of the
    refused request keeps only what the server said). ``retried``: how many retries that command
    already made, or ``None`` for a load run, which has no ``--retries``: there the load it sends is
    what to change, through ``levers`` (the flags that set it in that run's mode)."""
    if retried is None:
        return f"retry later or lower the load: {', '.join(levers)}"
    if retried == 0:
        return "retry later or pass --retries N"
    return f"still overloaded after {retried} retr{'y' if retried == 1 else 'ies'}; retry later or raise --retries"


class HttpError(TargetError):
    """Any other HTTP error status, with the server's own error text."""

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class TimeoutError_(TargetError):
    """Base of the timeouts (named with a trailing underscore to leave the builtin alone)."""


class ConnectTimeout(TimeoutError_):
    """Connecting to the server took longer than ``--connect-timeout``."""


class FirstTokenTimeout(TimeoutError_):
    """No first token within ``--ttft-timeout`` after the request was sent."""


class InterTokenTimeout(TimeoutError_):
    """The stream went silent for longer than ``--itl-timeout`` between tokens."""


class NoAnswerError(TimeoutError_):
    """A request before the run (a ``/tokenize`` probe, the prompt calibration, a warm-up) ran out of
    the user's timeouts: the server takes the connection but does not answer, so every later request
    would wait the same timeouts again — the command ends at the first (issue 31)."""


class StreamBrokenError(TargetError):
    """The stream ended before completion ([DONE]/done) — connection cut or server died."""


class NoTokenError(TargetError):
    """The response ended in good form but carried no output token (only ``[DONE]``, only empty text)."""


class MalformedEventError(TargetError):
    """An event in the stream could not be parsed (not JSON, or not the expected shape)."""


class ServerStreamError(TargetError):
    """The server sent an error event in the middle of the stream."""


# --- the embedded engine ----------------------------------------------------------------------
class EngineError(PhasescopeError):
    """The embedded llama-server could not be built, found or started."""

    exit_code = 4


#: error kind strings stored in RequestRecord.error_kind, one per class above
def error_kind(exc: BaseException) -> str:
    """A short stable string for a record's ``error_kind`` (e.g. ``connect``, ``first_token_timeout``)."""
    table: list[tuple[type[BaseException], str]] = [
        (RequestDeadline, "deadline"),
        (OverrunError, "overrun"),
        (ConnectTimeout, "connect_timeout"),
        (FirstTokenTimeout, "first_token_timeout"),
        (InterTokenTimeout, "inter_token_timeout"),
        (ConnectError, "connect"),
        (AuthError, "auth"),
        (ModelNotFoundError, "model_not_found"),
        (OverloadedError, "overloaded"),
        (WrongApiError, "wrong_api"),
        (HttpError, "http"),
        (StreamBrokenError, "stream_broken"),
        (NoTokenError, "no_token"),
        (MalformedEventError, "malformed_event"),
        (ServerStreamError, "server_error_event"),
        (TargetError, "target"),
    ]
    for cls, kind in table:
        if isinstance(exc, cls):
            return kind
    return "client"


# --- what phasescope itself could not do ------------------------------------------------------
class OutputError(PhasescopeError):
    """A result could not be written (disk full, permission, a file where a folder should be).
    Exit 3 like a failed run: what was written before stays on disk and is named in the message."""

    exit_code = 3


class RayError(PhasescopeError):
    """Ray could not run the load (cluster unreachable, no room for the actors, actor start failed)."""

    exit_code = 3


class RequestDeadline(TimeoutError_):
    """A request ran past its overall deadline (first-token timeout + its token budget × the
    between-tokens timeout): a stream that never ends is cut there."""


class OverrunError(TargetError):
    """The server kept streaming past the requested output (max_tokens plus a margin) without
    ending the stream; phasescope stopped reading."""


class NoSuccessError(TargetError):
    """A run in which no request succeeded."""
