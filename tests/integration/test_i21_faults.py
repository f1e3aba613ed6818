"""Issue 21 against hostile fake servers: no leaked key, no hang, nothing lost, honest exit codes.

Each test runs the real console script (``phasescope.cli.main``, in this process where the old
code could not hang, else ``python -m phasescope`` with a timeout) against a
:class:`~phasescope.testing.fakeserver.FakeServer` fault mode on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phasescope.testing.fakeserver import FakeServer

from cli_helpers import run as cli

KEY = "sk-i21-leak-0123456789abcdef"
SMALL = ["--input-len", "16", "--output-len", "8"]


def sub(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 90,
        preexec: object = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "phasescope", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec)  # type: ignore[arg-type]


def everything_written(*roots: Path) -> list[tuple[Path, bytes]]:
    out = []
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file():
                out.append((p, p.read_bytes()))
    return out


# --- 4. no secret ever written -------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_key_echoed_in_401_body_appears_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that echoes the Authorization header in its 401 body: grep every file the runs
    wrote (--out folders, the fallback folder, the store) and all stdout/stderr for the key."""
    store = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("PHASESCOPE_STORE", str(store))
    monkeypatch.delenv("PHASESCOPE_RUNS_DIR", raising=False)  # the fallback folder under ./phasescope-runs/
    monkeypatch.chdir(work)
    printed = []
    codes = []
    with FakeServer(fault="echo_key").running() as srv:
        runs = [
            ["probe", srv.url, "--api-key", KEY, "--out", str(work / "probe-out"), "-p", "20", "-n", "8", "-r", "1"],
            ["bench", srv.url, "--api-key", KEY, "--out", str(work / "bench-out"), "-n", "3", *SMALL],
            ["bench", srv.url, "--api-key", KEY, "--no-store", "-n", "3", *SMALL],  # the fallback folder
            ["bench", srv.url, "--api-key", KEY, "--json", "-n", "2", *SMALL],
        ]
        for args in runs:
            code, out, err = cli(args, capsys, monkeypatch)
            codes.append(code)
            printed += [out, err]
        monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the key from the environment, not a flag
        code, out, err = cli(["bench", srv.url, "--out", str(work / "env-out"), "-n", "2", *SMALL], capsys, monkeypatch)
        printed += [out, err]
        codes.append(code)
        code, out, err = cli(["runs"], capsys, monkeypatch)
        printed += [out, err]
        rid = json.loads((work / "bench-out" / "summary.json").read_text())["run_id"]
        code, out, err = cli(["show", rid], capsys, monkeypatch)
        printed += [out, err]
        code, out, err = cli(["report", rid, "--out", str(work / "report.html")], capsys, monkeypatch)
        printed += [out, err]
    files = everything_written(work, store)
    assert any(p.name == "records.jsonl" for p, _ in files) and any(
        p.parent.name.startswith("bench-") and p.parent.parent.name == "phasescope-runs" for p, _ in files)
    assert any(b"unauthorized (401)" in data for _, data in files)  # the error is kept, without the key
    leaks = [str(p) for p, data in files if KEY.encode() in data]
    assert not leaks, leaks
    assert not [t for t in printed if KEY in t]
    assert any("Bearer ***" in t for t in printed)
    assert codes == [3] * 5  # every request failed (auth): a failed run


def test_redaction_covers_quoted_forms_and_bearer_tokens() -> None:
    from urllib.parse import quote

    from phasescope.redact import forget_all, redact, register

    secret = "s3cr3t+/key=="
    try:
        register(secret)
        text = f"body Bearer {secret} url http://h/x?api_key={quote(secret, safe='')} raw {secret}"
        out = redact(text)
        assert secret not in out and quote(secret, safe="") not in out
        assert out.count("***") == 3
    finally:
        forget_all()
    # unknown tokens after Bearer and key-like query values are masked too; prose is left alone
    assert redact("Authorization: Bearer abcd-1234-efgh") == "Authorization: Bearer ***"
    assert redact("see http://h:1/v1?token=zzz123&x=1") == "see http://h:1/v1?token=***&x=1"
    assert redact("Bearer token (never printed)") == "Bearer token (never printed)"


# --- 2. bounded work -----------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_endless_stream_is_cut_with_overrun_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A server streaming past max_tokens without [DONE] used to keep probe and bench running."""
    with FakeServer(fault="endless", itl_s=0.002).running() as srv:
        t0 = time.monotonic()
        code, out, err = cli(["bench", srv.url, "--out", str(tmp_path / "b"), "-n", "3", *SMALL], capsys, monkeypatch)
        assert time.monotonic() - t0 < 60
        assert code == 3 and "overrun 3" in err, err
        recs = [json.loads(x) for x in (tmp_path / "b" / "records.jsonl").read_text().splitlines()]
        measured = [r for r in recs if not r["tags"].get("warmup")]
        assert all(r["error_kind"] == "overrun" and r["overrun"] > 0 for r in measured)
        # stopped within the margin: max_tokens 8 + 8 extra (one read may bring a few more)
        assert all(len([e for e in r["events"] if e[1] == "content"]) <= 8 + 8 + 4 for r in measured)
        code, out, err = cli(["probe", srv.url, "-p", "20", "-n", "8", "-r", "1", "--no-save"], capsys, monkeypatch)
        assert code == 3 and "without ending the stream" in err, err


@pytest.mark.timeout(60)
def test_overall_request_deadline_cuts_a_trickling_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.apis import _http, new_session
    from phasescope.apis.base import GenRequest, Target, Timeouts
    from phasescope.apis.openai import send

    assert _http.request_deadline_s(Timeouts(1, 10, 2), 100) == 1 + 10 + (100 + 10) * 2
    assert _http.request_deadline_s(Timeouts(1, None, 2), 100) is None
    monkeypatch.setattr(_http, "request_deadline_s", lambda to, n: 0.5)

    async def go() -> object:
        async with FakeServer(fault="endless", itl_s=0.01) as srv:
            tgt = Target(srv.url, api="openai", model="fake-model", timeouts=Timeouts(5, 5, 5))
            async with new_session() as s:
                return await send(s, tgt, GenRequest(prompt="a b c", max_tokens=100_000))

    t0 = time.monotonic()
    rec = asyncio.run(go())
    assert time.monotonic() - t0 < 5
    assert rec.error_kind == "deadline" and not rec.ok and rec.token_events()  # type: ignore[attr-defined]


@pytest.mark.timeout(120)
def test_huge_num_prompts_with_duration_bounds_time_and_memory(tmp_path: Path) -> None:
    """`bench -n 1000000000 --duration 2` built a billion-entry schedule up front."""
    lim = 1536 * 1024**2

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))

    with FakeServer(ttft_s=0.002, itl_s=0.001).running() as srv:
        t0 = time.monotonic()
        p = sub(["bench", srv.url, "-n", "1000000000", "--duration", "2", "-c", "4", "--no-store", "--json",
                 "--no-server-metrics", *SMALL], cwd=tmp_path, preexec=cap, timeout=100)
        wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["completed"] > 0 and s["stop_reason"] == "duration reached" and s["duration"] < 4
    assert wall < 90


def test_lazy_schedule_matches_the_planned_one() -> None:
    from phasescope.load.schedule import MATERIALIZE, build_schedule

    big = build_schedule(MATERIALIZE + 5000, rate=1000.0, seed=7)
    assert len(big.requests) == MATERIALIZE and big.total == MATERIALIZE + 5000
    offs = [r.offset_s for r in big.iter_requests()]
    assert len(offs) == MATERIALIZE + 5000 and all(b >= a for a, b in zip(offs, offs[1:]))
    small = build_schedule(2000, rate=1000.0, seed=7)  # the same draws: a prefix of the same offsets
    assert [r.offset_s for r in small.requests] == offs[:2000]
    parts = big.partition(3)
    got = sorted(r.index for p in parts for r in p.iter_requests())
    assert got == list(range(MATERIALIZE + 5000))


# --- 3. nothing lost, nothing mixed --------------------------------------------------------------
@pytest.mark.timeout(180)
def test_two_runs_in_the_same_second_never_share_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import datetime as dt

    import phasescope.load.bench as bench_mod

    frozen = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.timezone.utc)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: object = None) -> dt.datetime:  # type: ignore[override]
            return frozen

    monkeypatch.setattr(bench_mod, "datetime", Frozen)
    try:
        import phasescope.safeio as safeio

        monkeypatch.setattr(safeio, "datetime", Frozen)
    except ImportError:
        pass
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PHASESCOPE_RUNS_DIR", raising=False)  # the default: ./phasescope-runs/
    with FakeServer().running() as srv:
        for _ in range(2):
            code, out, err = cli(["bench", srv.url, "--no-store", "--json", "-n", "2", *SMALL], capsys, monkeypatch)
            assert code == 0, err
    dirs = sorted(p for p in (tmp_path / "phasescope-runs").iterdir() if p.name.startswith("bench-"))
    assert len(dirs) == 2
    ids = {json.loads((d / "summary.json").read_text())["run_id"] for d in dirs}
    assert len(ids) == 2
    for d in dirs:
        assert len((d / "records.jsonl").read_text().splitlines()) == 2 + 1  # its own 2 + 1 warm-up


@pytest.mark.timeout(120)
def test_label_with_invalid_utf8_leaves_a_readable_summary(tmp_path: Path) -> None:
    from phasescope.load.bench import BenchConfig, run_bench

    label = b"lab\xff\xfeel".decode("utf-8", "surrogateescape")
    with FakeServer().running() as srv:
        res = run_bench(BenchConfig(url=srv.url, num_prompts=2, input_len=16, output_len=4, out_dir=str(tmp_path),
                                    label=label, server_metrics=False))
    text = (tmp_path / "summary.json").read_text(encoding="utf-8")
    assert json.loads(text)["label"].startswith("lab") and res.summary["completed"] == 2


def _fsize_limit(n: int):  # type: ignore[no-untyped-def]
    def f() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG, like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return f


@pytest.mark.timeout(240)
def test_write_failure_stops_sending_keeps_records_and_names_the_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with FakeServer(ttft_s=0.003, itl_s=0.001).running() as srv:
        p = sub(["bench", srv.url, "-n", "300", "-c", "4", "--input-len", "16", "--output-len", "32",
                 "--out", str(tmp_path / "out"), "--no-server-metrics"], cwd=tmp_path,
                env={"PHASESCOPE_STORE": str(store)}, preexec=_fsize_limit(150_000), timeout=200)
        sent = srv.requests
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("phasescope:")]
    assert p.returncode == 3, p.stderr[-3000:]
    assert len(lines) == 1 and "cannot write records to" in lines[0] and "records.jsonl" in lines[0], lines
    assert "Traceback" not in p.stderr and "unexpected failure" not in p.stderr
    assert sent < 300  # sending stopped at the failure (plus what was in flight)
    kept = (tmp_path / "out" / "records.jsonl").read_text().splitlines()
    assert 10 < len(kept) < 300
    # the store stays readable and the run is there, marked partial
    r = sub(["runs", "--json"], cwd=tmp_path, env={"PHASESCOPE_STORE": str(store)})
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)
    runs = runs["runs"] if isinstance(runs, dict) else runs
    assert runs and runs[0]["status"] == "partial"


# --- 5. honest exit codes ------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("fault", "extra", "kind"), [("http500", [], "http"),
                                                       ("silent", ["--ttft-timeout", "0.5"], "first_token_timeout")])
def test_no_success_exits_3_with_kinds_counted(fault: str, extra: list[str], kind: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # "silent" from the prompt length check on would end bench there, before its run (test_i31_no_answer):
    # the check is answered, then every request of the run times out
    with FakeServer(fault=fault, stall_s=30, fault_skip=1 if fault == "silent" else 0).running() as srv:
        code, out, err = cli(["bench", srv.url, "--out", str(tmp_path), "-n", "3", "-c", "3", *extra, *SMALL],
                             capsys, monkeypatch)
    assert code == 3, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["status"] == "failed" and s["completed"] == 0 and s["errors_by_kind"] == {kind: 3}
    assert f"{kind} 3" in err and "no request succeeded" in err
    code, out, err = cli(["runs", "--json"], capsys, monkeypatch)
    assert '"failed"' in out


# --- 6. the last-resort guard --------------------------------------------------------------------
def test_unanticipated_exception_is_one_line_exit_1_and_a_saved_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import phasescope.cli.validate as validate  # looked up per call: the patch leaves nothing behind

    def boom(*a: object, **k: object) -> object:
        raise RuntimeError(f"synthetic bug, Bearer {KEY}")

    monkeypatch.setattr(validate, "check_params", boom)
    monkeypatch.setenv("PHASESCOPE_CRASH_DIR", str(tmp_path))
    code, out, err = cli(["devices"], capsys, monkeypatch)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1 and "unexpected failure in `phasescope devices`" in lines[0], err
    saved = list(tmp_path.glob("phasescope-crash-*.txt"))
    assert len(saved) == 1 and str(saved[0]) in lines[0]
    text = saved[0].read_text()
    assert "Traceback" in text and "synthetic bug" in text and KEY not in text and KEY not in err
