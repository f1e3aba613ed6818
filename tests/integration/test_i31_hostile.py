"""Issue 31 against misbehaving servers: every mode ends in one line and exit 3 within the
user's timeouts, on both receive paths (aiohttp's and the raw httptools one).

The servers are :class:`~phasescope.testing.hostile_fake.HostileServer` (raw asyncio streams on
127.0.0.1, for answers aiohttp's server cannot give: an interim ``100 Continue``, a body that never
ends) — real HTTP, no mocks.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phasescope.apis import get_client
from phasescope.apis._session import new_session
from phasescope.apis.base import GenRequest, Target, Timeouts
from phasescope.testing.hostile_fake import HostileServer

RAW = pytest.param(True, id="raw")
AIOHTTP = pytest.param(False, id="aiohttp")


def sub(args: list[str], *, cwd: Path, timeout: float = 60, fast: bool = True) -> tuple[int, str, str, float]:
    env = dict(os.environ, PHASESCOPE_HTTPTOOLS="1" if fast else "0", PHASESCOPE_STORE=str(cwd / "store"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "phasescope", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")]


@pytest.mark.parametrize("fast", [RAW, AIOHTTP])
def test_an_interim_100_continue_before_the_answer_is_skipped(fast: bool) -> None:
    """The raw path failed every request whose answer began with ``HTTP/1.1 100 Continue``."""
    pytest.importorskip("httptools")

    async def go() -> list:
        async with HostileServer(mode="continue") as srv:
            target = Target(srv.url, api="openai", model="hostile-model", timeouts=Timeouts(5, 5, 5))
            session = new_session(fast=fast)
            try:
                client = get_client("openai")
                return [await client.send(session, target, GenRequest(prompt="hi there", max_tokens=4, stream=s))
                        for s in (True, True, False)]
            finally:
                await session.close()

    recs = asyncio.run(go())
    assert [r.ok for r in recs] == [True, True, True], [r.error for r in recs]
    assert [r.http_status for r in recs] == [200, 200, 200]
    assert recs[0].output_tokens == 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["props_stall", "models_deep", "models_endless", "models_stall"])
@pytest.mark.parametrize("command", ["probe", "bench"])
def test_hostile_info_endpoints_end_in_one_line_exit_3(mode: str, command: str, tmp_path: Path) -> None:
    """A stalling /props, a /v1/models 100,000 levels deep, one that never ends or holds a
    5,000-digit integer: TimeoutError / RecursionError / the bug handler before; now one line
    naming the endpoint, exit 3."""
    extra = ["-p", "16", "-n", "4", "-r", "1"] if command == "probe" else ["-n", "2", "--input-len", "8",
                                                                          "--output-len", "4"]
    with HostileServer(mode=mode).running() as srv:
        code, out, err, took = sub([command, srv.url, "--connect-timeout", "2", *extra], cwd=tmp_path)
    assert code == 3, (code, out, err)
    assert "Traceback" not in err and "phasescope bug" not in err
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert ("/props" in lines[0]) if mode == "props_stall" else ("/v1/models" in lines[0]), lines[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fast", [RAW, AIOHTTP])
def test_a_body_that_never_ends_is_cut_at_the_users_timeouts(fast: bool, tmp_path: Path) -> None:
    """A keep-alive server that never sends a token and whose non-stream bodies never end: bench's
    prompt calibration read such a body until the overall deadline and tried again for every
    prompt (33–38 s for 3 requests with 4 s timeouts). Now the body is cut --itl-timeout after its
    headers, and a calibration that ran out of the timeouts ends the command there (every request
    would wait as long): counted on the server, one unstreamed request and no stream after it."""
    with HostileServer(mode="body_endless").running() as srv:
        code, out, err, took = sub(["bench", srv.url, "-n", "3", "--ttft-timeout", "2", "--itl-timeout", "2",
                                    "--connect-timeout", "2", "--input-len", "8", "--output-len", "4",
                                    "--no-store"], cwd=tmp_path, fast=fast)
        gen = [r for r in srv.requests if r[0] == "POST" and r[1].endswith("completions")]
        unstreamed = [r for r in gen if not r[2]]
        streamed = [r for r in gen if r[2]]
    assert code == 3, (code, out, err)
    assert len(error_lines(err)) == 1, err
    assert "Traceback" not in err and "prompt calibration" in err and "2 s" in err, err
    assert len(unstreamed) == 1, unstreamed  # the calibration's first request, cut; no retry per prompt
    assert streamed == [], streamed  # no warm-up, no run: each would have waited the same timeouts


@pytest.mark.timeout(60)
def test_watch_ends_with_exit_3_when_the_server_stays_gone() -> None:
    """Live ``watch`` kept running 37 s after the server died and never said so. Now failed scrapes
    say how long the server has been gone, and after three in a row spanning the bound derived
    from --interval and the scrape timeout the watch ends (:class:`ServerGone`, a TargetError: exit 3)."""
    from phasescope.errors import TargetError
    from phasescope.metrics.watch import watch_loop
    from phasescope.testing.metrics_fake import MetricsFakeServer

    seen: list[str | None] = []

    async def go() -> None:
        srv = MetricsFakeServer()
        await srv.start()
        url = srv.url + "/metrics"

        def on_update(state) -> None:  # type: ignore[no-untyped-def]
            seen.append(state.last_error)
            if state.refreshes == 2:
                asyncio.get_running_loop().create_task(srv.stop())

        await watch_loop(url, interval_s=0.1, window_s=5, count=400, timeout_s=0.3, on_update=on_update)

    with pytest.raises(TargetError, match="stopped answering"):
        asyncio.run(go())
    failed = [e for e in seen if e]
    assert failed and "has not answered for" in failed[-1]
    assert len(seen) < 400


@pytest.mark.timeout(120)
def test_probe_ends_at_a_calibration_that_runs_out_of_the_timeouts(tmp_path: Path) -> None:
    """probe on a server with no tokenizer whose answers never end: the calibration's 1-token
    request ran out of the timeouts, then each measured request waited them again. Now the first
    such calibration ends the command: one line, exit 3, and (counted on the server) no measured
    request sent after it."""
    with HostileServer(mode="body_endless").running() as srv:
        code, out, err, took = sub(["probe", srv.url, "-p", "16", "-n", "4", "-r", "1", "--ttft-timeout", "2",
                                    "--itl-timeout", "2", "--connect-timeout", "2"], cwd=tmp_path)
        posts = [r for r in srv.requests if r[0] == "POST" and r[1].endswith("completions")]
    assert code == 3, (code, out, err)
    lines = error_lines(err)
    assert len(lines) == 1 and "prompt calibration" in lines[0], err
    assert len(posts) == 1, posts


@pytest.mark.timeout(120)
def test_a_server_that_never_answers_costs_one_timeout_not_the_calibration_and_the_run(tmp_path: Path) -> None:
    """A keep-alive server that never sends a first token, ``bench -n 3`` with 4 s timeouts: the
    prompt calibration waited its timeout (its body cut at --itl-timeout), then the warm-up request
    waited it again, then the run (about 13 s; with the warm-up skipped, still calibration + run).
    The calibration that ran out of the timeouts already says the server does not answer, so the
    command ends there: exit 3, one line naming it; counted on the server, one unstreamed request and
    no stream; nothing was sent, so no run is stored and the ``--out`` folder is not made."""
    t = 4.0
    out_dir = tmp_path / "out"
    with HostileServer(mode="body_endless").running() as srv:
        code, out, err, took = sub(["bench", srv.url, "-n", "3", "--ttft-timeout", str(t), "--itl-timeout", str(t),
                                    "--connect-timeout", str(t), "--input-len", "8", "--output-len", "4",
                                    "--out", str(out_dir)], cwd=tmp_path)
        gen = [r for r in srv.requests if r[0] == "POST" and r[1].endswith("completions")]
    assert code == 3, (code, out, err)
    assert "Traceback" not in err and "phasescope bug" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and "prompt calibration" in lines[0], err
    assert [r[2] for r in gen] == [False], gen  # the calibration alone: no warm-up, no run
    assert not out_dir.exists()
    assert not list((tmp_path / "store").glob("records/**/*.jsonl"))
