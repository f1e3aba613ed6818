"""Issue 31 against misbehaving servers on 127.0.0.1, on both receive paths (raw httptools and aiohttp):
success means tokens, a frozen server ends the run, a negative count is not trusted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import wait_for_records

from phasescope.testing.fakeserver import FakeServer

PS = [sys.executable, "-m", "phasescope"]
SMALL = ["--input-len", "8", "--output-len", "6", "--no-server-metrics", "--no-store"]


def _bench(url: str, path: str, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = dict(os.environ, PHASESCOPE_HTTPTOOLS=path)
    p = subprocess.run(PS + ["bench", url, "--json", *SMALL, *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    try:
        d = json.loads(p.stdout)
    except ValueError:
        d = {}
    return p, d


@pytest.mark.timeout(200)
@pytest.mark.parametrize("path", ["1", "0"])
@pytest.mark.parametrize("fault", ["done_only", "empty_text"])
def test_a_stream_without_a_token_is_a_failed_request(fault: str, path: str) -> None:
    with FakeServer(fault=fault, ttft_s=0.002, itl_s=0.001).running() as srv:
        p, d = _bench(srv.url, path, "-n", "3", "--max-concurrency", "1")
    assert p.returncode == 3, p.stderr
    assert d["status"] == "failed" and d["completed"] == 0 and d["errors_by_kind"] == {"no_token": 3}
    err = p.stderr.strip().splitlines()
    assert err[-1].startswith("phasescope: error: no request succeeded (3 failed: no_token 3)")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("path", ["1", "0"])
def test_eight_stream_failures_in_a_row_then_success_is_partial(path: str) -> None:
    # the warm-up and the prompt calibration take the first two faults: then 8 measured malformed streams
    with FakeServer(fault="malformed", fault_count=10, ttft_s=0.002, itl_s=0.001).running() as srv:
        p, d = _bench(srv.url, path, "-n", "12", "--max-concurrency", "1")
    assert d["errors_by_kind"] == {"malformed_event": 8}, p.stderr
    assert d["status"] == "partial" and d["partial"] and "8 requests in a row" in d["stop_reason"]
    assert p.returncode == 3


@pytest.mark.timeout(200)
@pytest.mark.parametrize("path", ["1", "0"])
def test_a_negative_usage_count_is_not_trusted(path: str) -> None:
    with FakeServer(fault="neg_usage", ttft_s=0.002, itl_s=0.001).running() as srv:
        p, d = _bench(srv.url, path, "-n", "3", "--max-concurrency", "1")
    assert p.returncode == 0, p.stderr
    assert d["total_output_tokens"] == 18 and d["total_input_tokens"] > 0
    assert d["output_throughput"] > 0 and d["total_token_throughput"] > 0
    assert any("negative token counts" in w["message"] for w in d["warnings"]), d["warnings"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("path", ["1", "0"])
def test_a_server_frozen_mid_run_ends_it_after_timeouts_in_a_row(path: str, tmp_path: Path) -> None:
    """SIGSTOP the server after its first requests: every later request times out waiting for its first
    token; the run gives up after 8 in a row (as after connection errors), exit 3, and says so."""
    srv = subprocess.Popen([sys.executable, "-m", "phasescope.testing", "--port", "0", "--ttft-ms", "2",
                            "--itl-ms", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        t_end = time.monotonic() + 30
        while url is None and time.monotonic() < t_end:
            line = srv.stdout.readline()  # type: ignore[union-attr]
            if "http://127.0.0.1:" in line:
                url = "http://127.0.0.1:" + line.split("http://127.0.0.1:")[1].split()[0].rstrip("/,")
        assert url, "the fake did not say its URL"
        env = dict(os.environ, PHASESCOPE_HTTPTOOLS=path)
        b = subprocess.Popen(PS + ["bench", url, "--json", *SMALL, "-n", "400", "--max-concurrency", "2",
                                   "--request-rate", "40", "--ttft-timeout", "1", "--out", str(tmp_path / "o")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_for_records(tmp_path / "o" / "records.jsonl", 4)  # target resolved, prompts built, some requests done
        os.kill(srv.pid, signal.SIGSTOP)
        out, err = b.communicate(timeout=120)
    finally:
        os.kill(srv.pid, signal.SIGCONT)
        srv.kill()
        srv.wait()
    d = json.loads(out)
    assert b.returncode == 3, err
    assert d["status"] == "partial" and "requests in a row timed out" in d["stop_reason"], d["stop_reason"]
    assert d["errors_by_kind"].get("first_token_timeout", 0) >= 8 and d["completed"] > 0
