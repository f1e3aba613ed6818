"""Which process listens on a loopback port, read from /proc for a real socket (moved from
tests/unit/test_i14_host.py: it binds one)."""

from __future__ import annotations

import os

import pytest

from phasescope.measure import host as H


def test_listening_pid_of_a_real_socket() -> None:
    import socket

    if not os.path.isdir("/proc/net"):
        pytest.skip("no /proc")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        port = srv.getsockname()[1]
        assert os.getpid() in H.listening_pids(port)
        assert H.loopback_port(f"http://127.0.0.1:{port}") == port
        assert H.loopback_port("http://example.com:8000") is None
    finally:
        srv.close()
