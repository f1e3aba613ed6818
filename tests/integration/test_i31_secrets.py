"""Issue 31 against real servers on 127.0.0.1: a key in a ``tune --serve`` template, a key in a server's
model id, a word-like key, terminal escapes in a server's text — grep everything written, find no key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phasescope.testing.fakeserver import FakeServer

PS = [sys.executable, "-m", "phasescope"]
SMALL = ["--input-len", "8", "--output-len", "4", "--no-server-metrics"]


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    e = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "store"), PHASESCOPE_RUNS_DIR=str(tmp_path / "runs"),
             PHASESCOPE_HOME=str(tmp_path / "home"))
    for k in ("PHASESCOPE_API_KEY", "OPENAI_API_KEY"):
        e.pop(k, None)
    e.update(more)
    return e


def _ps(tmp_path: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(PS + list(args), capture_output=True, text=True, env=_env(tmp_path, **env),
                          timeout=timeout, cwd=tmp_path)


def _leaks(root: Path, key: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


@pytest.mark.timeout(300)
def test_a_key_in_the_serve_template_reaches_no_store_log_or_report(tmp_path: Path) -> None:
    key = "sk-tune-template-0123456789"
    short = "4321"  # a weak one too: masked by position, whatever its length
    tpl = (f"HF_TOKEN={short} {sys.executable} -m phasescope.testing.fakeserver --port {{port}} --api-key {key} "
           f"--echo-args --ttft-ms 5 --itl-ms {{itl}}")
    p = _ps(tmp_path, "tune", "--serve", tpl, "--param", "itl=2,3", "-p", "16", "-n", "6", "-r", "1", "--json",
            "--startup-timeout", "30")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["n_ok"] == 2  # the workload asked the server with the template's own key
    assert key not in p.stdout + p.stderr and "--api-key ***" in d["serve"] and "HF_TOKEN=***" in d["serve"]
    logs = list((tmp_path / "store").rglob("serve-*.log"))
    assert logs and all("fake-llm: args" in lg.read_text() for lg in logs)  # the server printed its args
    r = _ps(tmp_path, "report", d["run_id"], "-o", str(tmp_path / "report.html"))
    assert r.returncode == 0, r.stderr
    for k in (key, f"HF_TOKEN={short}"):
        assert _leaks(tmp_path, k) == []
    s = _ps(tmp_path, "runs")
    assert s.returncode == 0 and key not in s.stdout
    # the stored spec cannot be relaunched (its key is not kept): one line, and the same command continues it
    res = _ps(tmp_path, "tune", "--resume", d["tune_id"])
    assert res.returncode == 2 and "run the original `tune` command again" in res.stderr
    again = _ps(tmp_path, "tune", "--serve", tpl, "--param", "itl=2,3", "-p", "16", "-n", "6", "-r", "1", "--json",
                "--startup-timeout", "30")
    assert again.returncode == 0 and all(r["resumed"] for r in json.loads(again.stdout)["settings"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", ["1", "0"])
def test_a_key_in_the_servers_model_id_reaches_no_store_column(tmp_path: Path, path: str) -> None:
    key = "sk-model-id-0123456789abc"
    with FakeServer(model=f"llama{key}x", api_key=key, ttft_s=0.002, itl_s=0.001).running() as srv:
        b = _ps(tmp_path, "bench", srv.url, "--api-key", key, "-n", "3", "--out", str(tmp_path / "b"), *SMALL,
                PHASESCOPE_HTTPTOOLS=path)
        pr = _ps(tmp_path, "probe", srv.url, "--api-key", key, "-p", "8", "-n", "4", "-r", "1",
                 "--out", str(tmp_path / "p"), PHASESCOPE_HTTPTOOLS=path)
    assert b.returncode == 0, b.stderr
    assert pr.returncode == 0, pr.stderr
    import sqlite3

    con = sqlite3.connect(tmp_path / "store" / "runs.db")
    rows = con.execute("SELECT model, params, summary FROM runs").fetchall()
    assert rows and all(key not in json.dumps(r) for r in rows)
    rid = json.loads((tmp_path / "b" / "summary.json").read_text())["run_id"]
    shows = [_ps(tmp_path, "show", rid), _ps(tmp_path, "runs"),
             _ps(tmp_path, "report", rid, "-o", str(tmp_path / "r.html"))]
    assert all(x.returncode == 0 for x in shows), [x.stderr for x in shows]
    assert not [x for x in [b, pr, *shows] if key in x.stdout + x.stderr]
    assert _leaks(tmp_path, key) == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("key", ["mean", "1234"])
def test_a_word_like_key_leaves_bench_json_whole(tmp_path: Path, key: str) -> None:
    with FakeServer(api_key=key, ttft_s=0.002, itl_s=0.001).running() as srv:
        b = _ps(tmp_path, "bench", srv.url, "--api-key", key, "-n", "3", "--json", "--no-store", *SMALL)
    assert b.returncode == 0, b.stderr
    d = json.loads(b.stdout)
    assert "mean_ttft_ms" in d and d["total_input_tokens"] == 3 * 8 + (0 if d.get("warmup") is None else 0)
    assert "too short to redact safely" in b.stderr and "***" not in b.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["1", "0"])
def test_terminal_escapes_in_a_servers_error_body_and_model_id_never_reach_the_terminal(tmp_path: Path,
                                                                                          path: str) -> None:
    evil = "\x1b]0;pwned\x07\x1b[2J"
    with FakeServer(model=f"m{evil}x", fault="http500", error_text=f"boom{evil}", ttft_s=0.002).running() as srv:
        b = _ps(tmp_path, "bench", srv.url, "-n", "2", "--no-store", *SMALL, PHASESCOPE_HTTPTOOLS=path)
        pr = _ps(tmp_path, "probe", srv.url, "-p", "8", "-n", "4", "-r", "1", "--no-save", PHASESCOPE_HTTPTOOLS=path)
    assert b.returncode == 3 and pr.returncode == 3, (b.stderr, pr.stderr)
    for x in (b, pr):
        out = x.stdout + x.stderr
        assert "\x1b" not in out and "\x07" not in out, out
    assert "boom" in b.stderr and "mx" in pr.stderr
