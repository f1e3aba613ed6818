"""The one plain JSON request every info endpoint uses (not the timed generation exchange).

Server info (``/props``, ``/slots``, ``/v1/models``, ``/api/show``, ``/api/version``), the tokenizer
(``/tokenize``, ``/detokenize``), health and warm-up GETs all go through :func:`fetch_json`, which
lets connection errors propagate (detection maps them to one clear error), or :func:`try_json`,
which never raises for the server's failures. Headers come from :meth:`phasescope.apis.base.Target.headers` or
:func:`auth_headers`, so an API key is sent the same way everywhere and never printed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` when there is a key (the key itself is registered for redaction
    by :class:`~phasescope.apis.base.Target`)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def fetch_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET", body: Any = None,
                     headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> tuple[int, Any, str]:
    """(HTTP status, parsed JSON body or None, body text). Connection errors and timeouts propagate."""
    kw: dict[str, Any] = {"headers": headers or {}, "timeout": aiohttp.ClientTimeout(total=timeout_s)}
    if body is not None:
        kw["json"] = body
    async with session.request(method, url, **kw) as r:
        text = await r.text(errors="replace")
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        return r.status, obj, text


async def try_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET", body: Any = None,
                   headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> tuple[int | None, Any, str]:
    """:func:`fetch_json` that never raises for the server's failures: (status or None, parsed body
    or None, why not — the start of a non-JSON body, or the connection error)."""
    try:
        status, obj, text = await fetch_json(session, url, method=method, body=body, headers=headers,
                                             timeout_s=timeout_s)
    except asyncio.TimeoutError:
        return None, None, f"no answer within {timeout_s:g} s"
    except aiohttp.ClientError as exc:
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
            status, raw = int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = int(exc.code), exc.read() or b""
    try:
        return status, json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return status, None
