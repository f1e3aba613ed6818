"""Fetch ``/metrics`` over HTTP and turn it into a :class:`~phasescope.metrics.parse.Snapshot`.

The HTTP is :func:`phasescope.apis.prometheus.fetch_text` (re-exported here): the classic text
format, bounded, its failures mapped to one clear error. The timestamp of a snapshot is taken
when the body has arrived (``now_ns``), so a rate is Δcounter / Δ(arrival times) of two scrapes.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from phasescope.apis import Session, plain_session
from phasescope.apis.base import redact_url
from phasescope.apis.prometheus import ACCEPT, MAX_METRICS_BYTES, fetch_text
from phasescope.errors import InputError
from phasescope.metrics.engines import engine_aliases
from phasescope.metrics.parse import Snapshot, build_snapshot, parse_text

__all__ = ["ACCEPT", "MAX_METRICS_BYTES", "Scraper", "fetch_text", "metrics_url", "scrape_once"]


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


class Scraper:
    """Scrapes one server's /metrics repeatedly; the engine is detected on the first scrape.

    Use as ``async with Scraper(url) as s: snap = await s.scrape()``. It may share a caller's
    session (:data:`phasescope.apis.Session`; bench does), else it owns one.
    """

    def __init__(
        self,
        url: str,
        *,
        engine: str = "auto",
        timeout_s: float = 5.0,
        api_key: str | None = None,
        session: Session | None = None,
    ) -> None:
        self.url = metrics_url(url)
        self.engine = engine_aliases(engine)
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._session = session
        self._own = session is None

    async def __aenter__(self) -> Scraper:
        if self._session is None:
            self._session = plain_session()
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
            self._session = plain_session()
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
