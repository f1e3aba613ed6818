"""The one plain JSON request every info endpoint uses (not the timed generation exchange).

Server info (``/props``, ``/slots``, ``/v1/models``, ``/api/show``, ``/api/version``), the tokenizer
(``/tokenize``, ``/detokenize``), health and warm-up GETs all go through :func:`fetch_json`, which
lets connection errors propagate (detection maps them to one clear error), or :func:`try_json`,
which never raises for the server's failures.

Every body is read within limits, as user files are (:mod:`phasescope.safeio`): at most
:data:`MAX_BODY_BYTES`, within the request's ``timeout_s`` (a body that never ends, or trickles, is
cut there), and parsed by :func:`phasescope.safeio.loads_bounded` (nesting, integer digits, finite
numbers) — a breach is :class:`BodyRefused`, a :class:`~phasescope.errors.TargetError` (exit 3) that
names the URL and the limit, never a ``RecursionError`` or ``MemoryError``.

Headers come from :meth:`phasescope.apis.base.Target.headers` or :func:`auth_headers`, so an API key
is sent the same way everywhere and never printed.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope.apis._errors import TRANSPORT, transport_kind
from phasescope.errors import TargetError

#: an info endpoint's body larger than this is the server's failure (``/v1/models``, ``/props`` and
#: ``/metrics`` are kilobytes; a tokenizer answer for a 10M-token prompt is ~100 MB of ids)
MAX_BODY_BYTES = 256 * 1024**2


class BodyRefused(TargetError):
    """A server body past a limit (size, time, nesting, integer digits, a non-finite number)."""


async def read_body(resp: aiohttp.ClientResponse, url: str, *, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The body of ``resp``, at most ``max_bytes`` (:class:`BodyRefused` past it); the caller's
    timeout bounds how long it may take."""
    length = resp.content_length
    if length is not None and length > max_bytes:
        raise BodyRefused(f"{_shown(url)}: the server announced a body of {length:,} bytes (limit {max_bytes:,})")
    parts: list[bytes] = []
    got = 0
    while True:
        chunk = await resp.content.read(1 << 16)
        if not chunk:
            return b"".join(parts)
        got += len(chunk)
        if got > max_bytes:
            raise BodyRefused(f"{_shown(url)}: the server's body is longer than {max_bytes:,} bytes; stopped reading")
        parts.append(chunk)


def parse_body(raw: bytes, url: str) -> Any:
    """The JSON value of a server body, or None when it is not JSON; :class:`BodyRefused` for JSON past
    the limits of :func:`phasescope.safeio.loads_bounded` (100,000 levels deep, a 5,000-digit integer)."""
    from phasescope.safeio import Refused, loads_bounded

    try:
        return loads_bounded(raw.decode("utf-8", "replace"))
    except Refused as exc:
        raise BodyRefused(f"{_shown(url)}: the server's JSON is refused: {exc.reason}") from None
    except ValueError:
        return None


def _shown(url: str) -> str:
    from phasescope.apis.base import redact_url

    try:
        return redact_url(url)
    except ValueError:
        return "the server"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` when there is a key (the key itself is registered for redaction
    by :class:`~phasescope.apis.base.Target`)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def fetch_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET", body: Any = None,
                     headers: dict[str, str] | None = None, timeout_s: float = 5.0,
                     max_bytes: int = MAX_BODY_BYTES) -> tuple[int, Any, str]:
    """(HTTP status, parsed JSON body or None, body text). Connection errors and timeouts (the whole
    exchange, body included, within ``timeout_s``) propagate; a body past the limits is :class:`BodyRefused`."""
    kw: dict[str, Any] = {"headers": headers or {}, "timeout": aiohttp.ClientTimeout(total=timeout_s)}
    if body is not None:
        kw["json"] = body
    async with session.request(method, url, **kw) as r:
        raw = await read_body(r, url, max_bytes=max_bytes)
        text = raw.decode("utf-8", "replace")
        return r.status, parse_body(raw, url), text


async def try_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET", body: Any = None,
                   headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> tuple[int | None, Any, str]:
    """:func:`fetch_json` that never raises for the server's failures: (status or None, parsed body
    or None, why not — the start of a non-JSON body, or the connection error)."""
    try:
        status, obj, text = await fetch_json(session, url, method=method, body=body, headers=headers,
                                             timeout_s=timeout_s)
    except BodyRefused as exc:
        return None, None, exc.message
    except TRANSPORT as exc:
        if transport_kind(exc) in ("timeout", "connect_timeout"):
            return None, None, f"no answer within {timeout_s:g} s"
        return None, None, str(exc) or type(exc).__name__
    return status, obj, "" if obj is not None else text.strip()[:160]


async def json_object(session: aiohttp.ClientSession, url: str, *, method: str = "GET", body: Any = None,
                      headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The JSON object a 200 answer holds, else None (any failure)."""
    status, obj, _ = await try_json(session, url, method=method, body=body, headers=headers, timeout_s=timeout_s)
    return obj if status == 200 and isinstance(obj, dict) else None


def fetch_json_sync(url: str, *, timeout_s: float = 5.0) -> tuple[int, Any]:
    """GET without an event loop (the embedded engine's supervisor, before any client exists):
    (HTTP status, parsed JSON body or None). An HTTP error status is returned, not raised;
    ``urllib.error.URLError``/``OSError`` propagate when nothing answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback or the user's URL
            status, raw = int(resp.status), resp.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        status, raw = int(exc.code), exc.read(MAX_BODY_BYTES + 1) or b""
    if len(raw) > MAX_BODY_BYTES:
        return status, None
    try:
        return status, parse_body(raw, url)
    except BodyRefused:
        return status, None
