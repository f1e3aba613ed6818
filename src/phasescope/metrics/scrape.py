"""Fetch ``/metrics`` over HTTP and turn it into a :class:`~phasescope.metrics.parse.Snapshot`.

We ask for the classic text format (``Accept: text/plain;version=0.0.4``): prometheus_client's
``choose_encoder`` (SGLang, vLLM's mount) answers OpenMetrics only to clients that advertise it.
The timestamp of a snapshot is taken when the body has arrived (``now_ns``), so a rate is
Δcounter / Δ(arrival times) of two scrapes.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from phasescope.apis._errors import nothing_listening
from phasescope.apis.base import redact_url
from phasescope.errors import HttpError, InputError, TargetError
from phasescope.measure.clock import now_ns
from phasescope.metrics.engines import engine_aliases
from phasescope.metrics.parse import Snapshot, build_snapshot, parse_text

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


def metrics_url(url: str) -> str:
    """The /metrics URL for a server base URL (``http://h:p`` or ``http://h:p/v1`` → ``http://h:p/metrics``).

    A URL that already ends in ``/metrics`` (or a custom path ending in ``metrics``) is kept as is.
    """
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if not parts.hostname:
        raise InputError(f"not a URL: {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("metrics"):
        return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path + "/metrics", parts.query, ""))


#: a /metrics (or DCGM exporter) exposition larger than this is the server's failure (they are ~100 KB)
MAX_METRICS_BYTES = 64 * 1024**2


async def fetch_text(
    session: aiohttp.ClientSession, url: str, *, timeout_s: float = 5.0, api_key: str | None = None
) -> tuple[str, str, int]:
    """GET the exposition; return (text, content type, arrival ``now_ns``). Errors → TargetError."""
    headers = {"Accept": ACCEPT}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    shown = redact_url(url)
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            from phasescope.apis._json import read_body  # bounded: a /metrics body that never ends is cut

            body = (await read_body(resp, url, max_bytes=MAX_METRICS_BYTES)).decode("utf-8", "replace")
            t = now_ns()
            if resp.status in (404, 501):
                detail = _error_text(body)
                raise HttpError(
                    f"no Prometheus metrics at {shown} (HTTP {resp.status}{': ' + detail if detail else ''})",
                    status=resp.status,
                    hint="llama-server needs --metrics; SGLang needs --enable-metrics" if resp.status == 501 or "metrics" in detail.lower() else None,
                )
            if resp.status in (401, 403):
                raise HttpError(f"{shown} refused the metrics scrape (HTTP {resp.status}); pass --api-key", status=resp.status)
            if resp.status >= 400:
                raise HttpError(f"{shown} answered HTTP {resp.status}: {_error_text(body) or 'no detail'}", status=resp.status)
            return body, resp.headers.get("Content-Type", ""), t
    except aiohttp.ClientConnectorError as exc:
        raise nothing_listening(shown, exc.os_error, hint=None) from None
    except asyncio.TimeoutError:
        raise TargetError(f"{shown} did not answer the metrics scrape within {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        raise TargetError(f"scraping {shown} failed: {exc}") from None


def _error_text(body: str) -> str:
    """The server's error message from a JSON error body (or the first line of a text one)."""
    import json

    try:
        obj = json.loads(body)
    except ValueError:
        return body.strip().splitlines()[0][:160] if body.strip() else ""
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj))
        if isinstance(err, dict):
            return str(err.get("message", ""))[:160]
        return str(err)[:160]
    return ""


class Scraper:
    """Scrapes one server's /metrics repeatedly; the engine is detected on the first scrape.

    Use as ``async with Scraper(url) as s: snap = await s.scrape()``. It may share a caller's
    ``aiohttp.ClientSession`` (bench does), else it owns one.
    """

    def __init__(
        self,
        url: str,
        *,
        engine: str = "auto",
        timeout_s: float = 5.0,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = metrics_url(url)
        self.engine = engine_aliases(engine)
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._session = session
        self._own = session is None

    async def __aenter__(self) -> Scraper:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape(self) -> Snapshot:
        """One scrape → Snapshot (``t_ns`` = arrival of the body)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._own = True
        text, ctype, t = await fetch_text(self._session, self.url, timeout_s=self.timeout_s, api_key=self._api_key)
        raw = parse_text(text, ctype)
        snap = build_snapshot(raw, engine=self.engine, t_ns=t, url=redact_url(self.url), raw_text=text)
        self.engine = snap.engine
        return snap


def scrape_once(url: str, *, engine: str = "auto", timeout_s: float = 5.0, api_key: str | None = None) -> Snapshot:
    """Synchronous one-shot scrape (for scripts and sync callers; not inside a running loop)."""

    async def _go() -> Snapshot:
        async with Scraper(url, engine=engine, timeout_s=timeout_s, api_key=api_key) as s:
            return await s.scrape()

    return asyncio.run(_go())
