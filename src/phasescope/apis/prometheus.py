"""``GET /metrics``: the Prometheus exposition of a server (or a dcgm-exporter), as text.

We ask for the classic text format (``Accept: text/plain;version=0.0.4``): prometheus_client's
``choose_encoder`` (SGLang, vLLM's mount) answers OpenMetrics only to clients that advertise it.
The arrival time is taken when the body has arrived (``now_ns``), so a rate is Δcounter /
Δ(arrival times) of two scrapes. Parsing is :mod:`phasescope.metrics`' job; this is the HTTP.
"""

from __future__ import annotations

import json

import aiohttp

from phasescope.apis._errors import TRANSPORT, transport_error
from phasescope.apis._json import read_body
from phasescope.apis._session import Session
from phasescope.apis.base import redact_url
from phasescope.errors import HttpError
from phasescope.measure.clock import now_ns

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


#: a /metrics (or DCGM exporter) exposition larger than this is the server's failure (they are ~100 KB)
MAX_METRICS_BYTES = 64 * 1024**2


async def fetch_text(
    session: Session, url: str, *, timeout_s: float = 5.0, api_key: str | None = None
) -> tuple[str, str, int]:
    """GET the exposition; return (text, content type, arrival ``now_ns``). Errors → TargetError."""
    headers = {"Accept": ACCEPT}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    shown = redact_url(url)
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            # bounded: a /metrics body that never ends is cut
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
    except TRANSPORT as exc:
        raise transport_error(exc, shown, what="the metrics scrape", doing="scraping", timeout_s=timeout_s) from None


def _error_text(body: str) -> str:
    """The server's error message from a JSON error body (or the first line of a text one)."""
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
