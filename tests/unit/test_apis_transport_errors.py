"""apis/_errors.TRANSPORT_ERRORS: the one table that sorts what aiohttp, asyncio and the socket raise.

Most specific class first: a connect timeout is a timeout too, and a refused connection is an OS
error, so the order of the table is what the tests pin. An info request's failure
(:func:`transport_error`) reads as the metrics scrape's sentences always did.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from phasescope import errors as E
from phasescope.apis._errors import TRANSPORT, transport_error, transport_kind

KEY = ConnectionKey("127.0.0.1", 9, False, True, None, None, None)


@pytest.mark.parametrize("exc, kind", [
    (aiohttp.ConnectionTimeoutError("connect"), "connect_timeout"),  # a ServerTimeoutError and a TimeoutError too
    (aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "Connection refused")), "not_listening"),
    (aiohttp.ServerTimeoutError("read"), "timeout"),
    (asyncio.TimeoutError(), "timeout"),
    (aiohttp.ClientPayloadError("bad chunk"), "cut"),
    (aiohttp.ServerDisconnectedError(), "cut"),
    (aiohttp.ClientOSError(104, "reset"), "cut"),
    (ConnectionResetError(104, "reset"), "cut"),
    (aiohttp.InvalidURL("x"), "http"),
    (ValueError("not transport"), None),
])
def test_each_transport_exception_has_one_kind(exc: BaseException, kind: str | None) -> None:
    assert transport_kind(exc) == kind
    assert isinstance(exc, TRANSPORT) == (kind is not None)


def test_an_info_request_failure_reads_as_before() -> None:
    shown, t = "http://127.0.0.1:9/metrics", 5.0
    refused = transport_error(aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "Connection refused")),
                              shown, what="the metrics scrape", doing="scraping", timeout_s=t)
    assert isinstance(refused, E.ConnectError)
    assert str(refused).startswith(f"nothing is listening at {shown} (Connection refused)")
    for slow in (asyncio.TimeoutError(), aiohttp.ConnectionTimeoutError("c")):
        err = transport_error(slow, shown, what="the metrics scrape", doing="scraping", timeout_s=t)
        assert type(err) is E.TargetError and str(err) == f"{shown} did not answer the metrics scrape within 5 s"
    other = transport_error(aiohttp.ServerDisconnectedError(), shown, what="the metrics scrape", doing="scraping",
                            timeout_s=t)
    assert str(other) == f"scraping {shown} failed: Server disconnected"
