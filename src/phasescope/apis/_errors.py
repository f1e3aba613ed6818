"""HTTP failures → the error class a user can act on, and a failed request's record fields.

:func:`http_error` maps a status (401/403 auth, 404 model or endpoint, 405/501 wrong API, 429/503
overloaded with ``Retry-After``, the rest plain HTTP) with the server's own sentence
(:func:`error_message_of` reads every engine's error body shape); :func:`fail` writes ``ok=False``,
``error_kind`` and a redacted one-line ``error_message`` into a record (a 401 body may echo the key).

Transport failures (what aiohttp, asyncio and the socket raise) are sorted by one table,
:data:`TRANSPORT_ERRORS` (as httpx maps httpcore's exceptions in one table): each exception class
to the kind of failure it is. Every ``except`` in ``apis/`` that catches a transport exception reads
its kind there (:func:`transport_kind`), and the other packages never see an aiohttp exception: they
get a :class:`~phasescope.errors.PhasescopeError` (for an info request, :func:`transport_error`).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from phasescope import errors as E
from phasescope.apis.base import Target
from phasescope.measure.records import RequestRecord


# --- transport errors: one table ------------------------------------------------------------
#: every exception the transport raises → the kind of failure, most specific first (the first class
#: an exception is an instance of wins): ``connect_timeout`` (no connection within the connect
#: timeout), ``not_listening`` (refused, unreachable, a host that does not resolve), ``timeout`` (the
#: request's own timeout: no answer, or a body that did not end), ``cut`` (the connection ended
#: mid-exchange), ``http`` (anything else aiohttp raises: a malformed answer, a bad redirect...)
TRANSPORT_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ConnectionTimeoutError, "connect_timeout"),
    (aiohttp.ClientConnectorError, "not_listening"),
    (asyncio.TimeoutError, "timeout"),  # aiohttp's ServerTimeoutError is one too
    (aiohttp.ClientPayloadError, "cut"),
    (aiohttp.ServerDisconnectedError, "cut"),
    (aiohttp.ClientOSError, "cut"),
    (ConnectionResetError, "cut"),
    (aiohttp.ClientError, "http"),
)
#: every class of :data:`TRANSPORT_ERRORS`, for an ``except`` clause
TRANSPORT: tuple[type[BaseException], ...] = tuple(cls for cls, _ in TRANSPORT_ERRORS)


def transport_kind(exc: BaseException) -> str | None:
    """The kind :data:`TRANSPORT_ERRORS` gives ``exc``; None when it is no transport failure."""
    for cls, kind in TRANSPORT_ERRORS:
        if isinstance(exc, cls):
            return kind
    return None


def transport_error(exc: BaseException, shown: str, *, what: str, doing: str, timeout_s: float,
                    hint: str | None = None) -> E.TargetError:
    """An info request's transport failure as the one error a user reads (``what``: "the metrics
    scrape", ``doing``: "scraping"): nothing listening (:func:`nothing_listening`, with ``hint``), no
    answer within ``timeout_s`` (a connect timeout included), anything else as aiohttp said it."""
    kind = transport_kind(exc)
    if kind == "not_listening":
        assert isinstance(exc, aiohttp.ClientConnectorError)
        return nothing_listening(shown, exc.os_error, hint=hint)
    if kind in ("timeout", "connect_timeout"):
        return E.TargetError(f"{shown} did not answer {what} within {timeout_s:g} s")
    return E.TargetError(f"{doing} {shown} failed: {exc}")


#: body bytes kept from an HTTP error response for the message (both receive paths)
ERR_BODY_MAX = 4096


def connect_timeout(target: Target) -> E.ConnectTimeout:
    return E.ConnectTimeout(f"connecting to {target.display_url} took longer than {target.timeouts.connect_s:g} s",
                            hint="raise --connect-timeout")


#: what to do when nothing answers at the URL (a server to start, or the embedded engine)
NOT_LISTENING_HINT = ("start a server there, run the embedded one with `phasescope serve`, or omit the URL "
                      "to let phasescope start it")


def nothing_listening(shown: str, os_error: OSError, hint: str | None = NOT_LISTENING_HINT) -> E.ConnectError:
    """A connection to ``shown`` (a redacted URL) that could not be made: a host name that does not
    resolve (a typo, no DNS) is said as such, anything else is a port with nothing behind it.
    Every caller's sentence (requests on both receive paths, detection, metrics scrapes)."""
    if isinstance(os_error, socket.gaierror):
        host = urlsplit(shown).hostname or shown
        return E.ConnectError(f"cannot resolve host {host!r} of {shown} ({os_error.strerror or os_error})",
                              hint="check the host name in the URL (127.0.0.1 or localhost for a server on this machine)")
    return E.ConnectError(f"nothing is listening at {shown} ({os_error.strerror or os_error})", hint=hint)


def cut_mid_response(target: Target, path: str, rec: RequestRecord, why: str) -> E.StreamBrokenError:
    """The connection ended before the answer did; ``why``: what the transport saw."""
    return E.StreamBrokenError(f"{target.display_url}{path}: connection cut mid-response "
                               f"({len(rec.token_events())} token events received): {why}")


def _error_text(body: bytes) -> str:
    """The server's own error sentence from any of the usual shapes."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return re.sub(r"\s+", " ", text)[:300]
    return error_message_of(obj) or re.sub(r"\s+", " ", text)[:300]


def error_message_of(obj: Any) -> str | None:
    """``{"error": {"message": ...}}`` (OpenAI/vLLM/llama.cpp), ``{"error": "..."}`` (Ollama, TGI),
    ``{"message": ...}``, ``{"detail": ...}`` (FastAPI)."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg")
        return str(msg) if msg is not None else json.dumps(err)[:300]
    if isinstance(err, str):
        return err
    for k in ("message", "detail"):
        if isinstance(obj.get(k), str):
            return obj[k]
    return None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds form; an HTTP-date is converted too)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime
        import datetime as _dt

        when = parsedate_to_datetime(value)
        return max(0.0, (when - _dt.datetime.now(when.tzinfo)).total_seconds())
    except (TypeError, ValueError):
        return None


def http_error(status: int, body: bytes, headers: Any, target: Target, path: str) -> E.TargetError:
    """Map an HTTP error status to the error class a user can act on."""
    from phasescope.redact import from_server

    # 401 bodies may echo "Bearer <key>"; a hostile body may carry terminal escapes
    msg = from_server(_error_text(body), one_line=True)
    where = f"{target.display_url}{path}"
    if status in (401, 403):
        what = "unauthorized (401)" if status == 401 else "forbidden (403)"
        hint = "pass --api-key or set PHASESCOPE_API_KEY (or OPENAI_API_KEY)" if not target.api_key else "check the API key"
        return E.AuthError(f"{where}: {what}: {msg}", hint=hint)
    if status == 404:
        low = msg.lower()
        if "model" in low:
            return E.ModelNotFoundError(f"{where}: model not found: {msg}", hint="list models with GET /v1/models or pass --model")
        return E.WrongApiError(f"{where}: 404 {msg}", hint="the server does not have this endpoint; try --api auto")
    if status in (405, 501):
        return E.WrongApiError(f"{where}: {status} {msg}", hint="the server does not support this endpoint; try --api auto")
    if status in (429, 503):
        ra = parse_retry_after(headers.get("Retry-After") if headers is not None else None)
        extra = f"; Retry-After {ra:g} s" if ra is not None else ""
        return E.OverloadedError(f"{where}: server overloaded ({status}): {msg}{extra}", retry_after_s=ra)  # the hint is the caller's: E.overloaded_hint
    return E.HttpError(f"{where}: HTTP {status}: {msg}", status=status)


def fail(rec: RequestRecord, exc: E.PhasescopeError) -> None:
    from phasescope.redact import from_server

    rec.ok = False
    rec.error_kind = E.error_kind(exc)
    # a server's error body may echo the Authorization header, or carry terminal escapes
    rec.error_message = from_server(str(exc), one_line=True)
    if isinstance(exc, E.OverloadedError):
        rec.retry_after_s = exc.retry_after_s
    if isinstance(exc, E.HttpError):
        rec.http_status = exc.status
