"""Fault fakes for every error a user meets: each request leaves a failed record with the right
kind; the CLI prints one line and exits 3; the API key never appears in output or files."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis._fast import available as raw_path_available
from phasescope.apis.base import GenRequest, Target, Timeouts
from phasescope.measure.records import read_records
from phasescope.probing.runner import send_with_retries
from phasescope.testing import FakeServer

KEY = "sk-test-5ecret-DO-NOT-LEAK"


def run(coro):
    return asyncio.run(coro)


async def one(flavor: str, api: str, *, key=None, timeouts=None, model="fake-model", req=None, fast=False, **fake):
    async with FakeServer(flavor=flavor, ttft_s=0.005, itl_s=0.002, **fake) as srv:
        t = Target(srv.url, api=api, model=model, engine=flavor, api_key=key, timeouts=timeouts or Timeouts())
        async with new_session(fast=fast) as s:
            return await get_client(api).send(s, t, req or GenRequest(prompt="a b c", max_tokens=8))


#: both receive paths: aiohttp's, and the raw one (phasescope.apis._fast, httptools) load runs use when installed
PATHS = pytest.mark.parametrize("fast", [False, pytest.param(True, marks=pytest.mark.skipif(
    not raw_path_available(), reason="httptools not installed"))], ids=["aiohttp", "raw"])


FAULT_KINDS = [
    ("forbidden", "auth", 403), ("overloaded", "overloaded", 429), ("unavailable", "overloaded", 503),
    ("http500", "http", 500), ("cut", "stream_broken", 200), ("malformed", "malformed_event", 200),
    ("error_event", "server_error_event", 200), ("no_done", "stream_broken", 200),
]


@pytest.mark.parametrize("flavor,api", [("vllm", "openai"), ("vllm", "chat"), ("llamacpp", "llamacpp"), ("ollama", "ollama")])
@pytest.mark.parametrize("fault,kind,status", FAULT_KINDS)
@PATHS
def test_fault_becomes_a_failed_record(flavor, api, fault, kind, status, fast):
    r = run(one(flavor, api, fault=fault, fast=fast))
    assert not r.ok
    assert r.error_kind == kind, r.error_message
    assert r.http_status == status
    assert r.error_message and "\n" not in r.error_message
    assert r.t_done_ns is not None and r.t_done_ns >= r.t_start_ns
    if fault in ("cut", "malformed", "error_event"):
        assert len(r.token_events()) == 2  # what arrived before the fault is kept
    if fault in ("overloaded", "unavailable"):
        assert r.retry_after_s == 1.0


@PATHS
def test_first_token_and_between_token_timeouts(fast):
    r = run(one("vllm", "openai", fault="stall", fault_after=0, timeouts=Timeouts(first_token_s=0.3), fast=fast))
    assert r.error_kind == "first_token_timeout" and "0.3 s" in r.error_message
    r = run(one("vllm", "chat", fault="stall", fault_after=3, timeouts=Timeouts(between_tokens_s=0.3), fast=fast))
    assert r.error_kind == "inter_token_timeout" and len(r.token_events()) == 3
    r = run(one("ollama", "ollama", fault="stall", fault_after=2, timeouts=Timeouts(between_tokens_s=0.3), fast=fast))
    assert r.error_kind == "inter_token_timeout"
    # keep-alive comments during the stall do not count as tokens (llama.cpp sse_ping_interval)
    r = run(one("llamacpp", "llamacpp", fault="stall", fault_after=2, ping_s=0.05, timeouts=Timeouts(between_tokens_s=0.3),
                fast=fast))
    assert r.error_kind == "inter_token_timeout"
    r = run(one("vllm", "chat", fault="stall", fault_after=0, ping_s=0.05, timeouts=Timeouts(first_token_s=0.3), fast=fast))
    assert r.error_kind == "first_token_timeout" and [e.kind for e in r.events] == ["role"]


def test_timeouts_do_not_cancel_the_callers_other_work():
    async def go():
        other = asyncio.create_task(asyncio.sleep(0.6, result="fine"))
        r = await one("vllm", "openai", fault="stall", fault_after=0, timeouts=Timeouts(first_token_s=0.2))
        return r, await other
    r, other = run(go())
    assert r.error_kind == "first_token_timeout" and other == "fine"


@PATHS
def test_a_host_that_does_not_resolve_is_named_as_such_not_as_a_closed_port(fast, monkeypatch):
    """A typo in the host name is a name-resolution failure: "nothing is listening" would send the user
    looking for a server that was never asked. (The resolver is stubbed: no lookup leaves this machine.)"""
    real = socket.getaddrinfo

    def resolve(host, *a, **kw):  # type: ignore[no-untyped-def]
        if host == "no-such-host.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)

    async def go():
        t = Target("http://no-such-host.invalid:8000", api="openai", timeouts=Timeouts())
        async with new_session(fast=fast) as sess:
            return await get_client("openai").send(sess, t, GenRequest(prompt="x", max_tokens=2))
    r = run(go())
    assert r.error_kind == "connect"
    assert "cannot resolve host 'no-such-host.invalid'" in r.error_message and "listening" not in r.error_message
    if not fast:  # server detection and the metrics scrape say the same (they run on aiohttp only)
        from phasescope.apis.detect import detect
        from phasescope.errors import ConnectError
        from phasescope.metrics.scrape import Scraper

        async def detect_it():
            async with new_session() as sess:
                return await detect(sess, "http://no-such-host.invalid:8000")
        with pytest.raises(ConnectError, match="cannot resolve host 'no-such-host.invalid'"):
            run(detect_it())

        async def scrape_it():
            async with Scraper("http://no-such-host.invalid:8000") as sc:
                return await sc.scrape()
        with pytest.raises(ConnectError, match="cannot resolve host 'no-such-host.invalid'"):
            run(scrape_it())


@PATHS
def test_nothing_listening_and_connect_timeout(fast):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def go(url, to):
        t = Target(url, api="openai", timeouts=to)
        async with new_session(fast=fast) as sess:
            return await get_client("openai").send(sess, t, GenRequest(prompt="x", max_tokens=2))
    r = run(go(f"http://127.0.0.1:{port}", Timeouts()))
    assert r.error_kind == "connect" and "phasescope serve" in r.error_message
    # a listener whose accept queue is full: the SYN is dropped and connect hangs → connect timeout
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    fillers = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(lst.getsockname())
            fillers.append(c)
        r = run(go(f"http://127.0.0.1:{lst.getsockname()[1]}", Timeouts(connect_s=0.3)))
        if r.error_kind == "connect":  # pragma: no cover - kernels that reset instead of dropping
            pytest.skip("this kernel refuses instead of dropping SYNs on a full backlog")
        assert r.error_kind in ("connect_timeout", "first_token_timeout")
    finally:
        for c in fillers:
            c.close()
        lst.close()


def test_auth_401_without_and_with_wrong_key_and_ok_with_key():
    assert run(one("vllm", "openai", api_key=KEY)).error_kind == "auth"
    r = run(one("vllm", "openai", key="wrong", api_key=KEY))
    assert r.error_kind == "auth" and r.http_status == 401 and "wrong" not in r.error_message
    assert run(one("vllm", "openai", key=KEY, api_key=KEY)).ok


def test_model_not_found_404():
    r = run(one("vllm", "openai", model="nope"))
    assert r.error_kind == "model_not_found" and "nope" in r.error_message
    assert run(one("ollama", "ollama", model="nope")).error_kind == "model_not_found"


def test_retry_after_honoured_only_with_retries():
    async def go(retries):
        async with FakeServer(flavor="vllm", ttft_s=0.001, itl_s=0.001, fault="unavailable", fault_count=1, retry_after=0.2) as srv:
            t = Target(srv.url, api="openai", model="fake-model", engine="vllm")
            seen, waits = [], []

            async def fake_sleep(s):
                waits.append(s)
            async with new_session() as sess:
                r = await send_with_retries(sess, t, GenRequest(prompt="x", max_tokens=3), retries, seen.append, sleep=fake_sleep)
            return r, seen, waits
    r, seen, waits = run(go(0))
    assert not r.ok and len(seen) == 1 and waits == []
    r, seen, waits = run(go(2))
    assert r.ok and len(seen) == 2 and waits == [0.2]
    assert [x.tags["attempt"] for x in seen] == [0, 1] and seen[0].id != seen[1].id


# --- the CLI: one line, exit code, records for every request, no key anywhere ----------------
def cli(*args: str, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("OPENAI_API_KEY", None)
    e.pop("PHASESCOPE_API_KEY", None)
    e.update(env or {})
    # run in a scratch folder: with --no-save and no --out, probe writes $PHASESCOPE_RUNS_DIR or ./phasescope-runs/
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run([sys.executable, "-m", "phasescope", "probe", *args], capture_output=True, text=True,
                              env=e, timeout=120, cwd=cwd)


def _one_line_error(p: subprocess.CompletedProcess, code: int = 3) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("phasescope: error:")]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


SMALL = ("--prompt-tokens", "20,40", "--max-tokens", "4", "--repeat", "1", "--no-save")


@pytest.mark.parametrize("fault,words", [
    ("forbidden", "forbidden (403)"), ("overloaded", "overloaded (429)"), ("unavailable", "Retry-After 1 s"),
    ("cut", "connection cut"), ("malformed", "malformed event"), ("error_event", "mid-stream"), ("http500", "HTTP 500"),
])
def test_cli_fault_one_line_and_records_kept(tmp_path, fault, words):
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, fault=fault, fault_count=1).running() as srv:
        p = cli(srv.url, *SMALL, "--out", str(tmp_path))
    assert words in _one_line_error(p)
    recs = read_records(tmp_path / "records.jsonl")
    assert len(recs) == 1 and recs[0].tags.get("warmup") and not recs[0].ok


def test_cli_nothing_listening_model_not_found_wrong_api_and_timeouts(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    line = _one_line_error(cli(f"http://127.0.0.1:{port}", *SMALL))
    assert "nothing is listening" in line and "phasescope serve" in line and "omit the URL" in line
    with FakeServer(flavor="vllm").running() as srv:
        assert "does not serve model 'gpt-x'" in _one_line_error(cli(srv.url, "--model", "gpt-x", *SMALL))
        assert "is not Ollama" in _one_line_error(cli(srv.url, "--api", "ollama", *SMALL))
        assert "unknown --api" in _one_line_error(cli(srv.url, "--api", "grpc", *SMALL), code=2)
        assert "must be" in _one_line_error(cli(srv.url, "--prompt-tokens", "0", *SMALL[2:]), code=2)
    with FakeServer(flavor="vllm", fault="stall", fault_after=0).running() as srv:
        assert "no first token within 0.5 s" in _one_line_error(cli(srv.url, *SMALL, "--ttft-timeout", "0.5"))
    with FakeServer(flavor="ollama", fault="stall", fault_after=1).running() as srv:
        assert "silent for more than 0.5 s" in _one_line_error(cli(srv.url, *SMALL, "--itl-timeout", "0.5"))


def test_cli_retries_then_succeeds(tmp_path):
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, fault="overloaded", fault_count=1, retry_after=0.1).running() as srv:
        p = cli(srv.url, *SMALL, "--retries", "1", "--json", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    recs = read_records(tmp_path / "records.jsonl")
    assert [r.ok for r in recs] == [False, True, True, True]  # the 429, the retried warm-up, 2 sizes


def test_api_key_never_printed_or_saved(tmp_path):
    store = tmp_path / "store"
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, api_key=KEY).running() as srv:
        bad = cli(srv.url, *SMALL, env={"PHASESCOPE_STORE": str(store)})
        assert "--api-key" in _one_line_error(bad)
        ok = cli(srv.url, *SMALL[:-1], "--json", "--out", str(tmp_path / "out"),
                 env={"OPENAI_API_KEY": KEY, "PHASESCOPE_STORE": str(store)})
        flag = cli(srv.url, *SMALL, "--api-key", KEY, "--out", str(tmp_path / "out2"))
    assert ok.returncode == 0, ok.stderr
    assert flag.returncode == 0, flag.stderr
    for p in (bad, ok, flag):
        assert KEY not in p.stdout and KEY not in p.stderr
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert any(f.name == "records.jsonl" for f in files) and any(f.suffix == ".db" for f in files)
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f
    assert json.loads(ok.stdout)["run_id"]


def test_ctrl_c_leaves_partial_run_and_records(tmp_path):
    import signal
    import time

    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "store"))
    env.pop("OPENAI_API_KEY", None)
    out = tmp_path / "out"
    with FakeServer(flavor="vllm", ttft_s=0.02, itl_s=0.03).running() as srv:
        p = subprocess.Popen([sys.executable, "-m", "phasescope", "probe", srv.url, "-n", "30", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            f = out / "records.jsonl"
            if f.exists() and len(f.read_text().splitlines()) >= 2:
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err
    assert len(read_records(out / "records.jsonl")) >= 2
    runs = subprocess.run([sys.executable, "-m", "phasescope", "runs", "--store", str(tmp_path / "store"), "--json"],
                          capture_output=True, text=True, env=env)
    info = json.loads(runs.stdout)["runs"][0]
    assert info["status"] == "partial" and info["n_records"] >= 2
