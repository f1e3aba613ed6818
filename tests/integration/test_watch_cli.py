"""`phasescope watch` end to end against the fake vLLM /metrics server (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import csv
import json
import os
import pty
import socket
import subprocess
import sys
import time

import pytest

from phasescope.metrics.timeline import SUMMARY_KEYS
from phasescope.testing.metrics_fake import MetricsFakeServer, VllmMetricsState, restart_at, saturated, steady

CMD = [sys.executable, "-m", "phasescope", "watch"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120")
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_once_json_keys_and_values():
    with MetricsFakeServer(scenario=steady(ttft_s=0.045, itl_s=0.018)).running() as srv:
        r = run(srv.url, "--once", "--json", "--interval", "0.3")
        accepts = list(srv.accept_headers)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in ("running", "waiting", "kv_usage", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
              "prompt_tok_s", "generation_tok_s", "prefix_cache_hit_rate"):
        assert k in d
    assert set(SUMMARY_KEYS) <= set(d)
    assert d["engine"] == "vllm" and d["scrapes"] == 2
    assert d["running"] == 3 and d["waiting"] == 0 and d["kv_usage"] == pytest.approx(0.31)
    # the second scrape adds 4 TTFT obs of 0.045 s: all in (0.04, 0.06] → p50 = 0.04 + 0.02·2/4
    assert d["ttft_p50_s"] == pytest.approx(0.05)
    # 252 ITL obs of 0.018 s in (0.01, 0.025] → p50 = 0.01 + 0.015·126/252
    assert d["itl_p50_s"] == pytest.approx(0.0175)
    assert d["prefix_cache_hit_rate"] == pytest.approx(0.5)
    assert d["generation_tok_s"] == pytest.approx(256 / d["window_s"], rel=0.05)
    assert d["alerts"] == []
    # classic text format requested, never OpenMetrics
    assert accepts and all("text/plain" in a and "openmetrics" not in a for a in accepts)


def test_dashboard_plain_output_counts_refreshes_and_alerts():
    with MetricsFakeServer(scenario=saturated()).running() as srv:
        r = run(srv.url, "--count", "3", "--interval", "0.2")
        n = srv.scrapes
    assert r.returncode == 0, r.stderr
    assert n == 3
    assert "refresh #3" in r.stdout and "refresh #4" not in r.stdout
    assert "capacity-bound" in r.stdout and "preemptions" in r.stdout
    assert "TTFT" in r.stdout and "KV cache usage" in r.stdout


def test_live_dashboard_on_a_terminal_stops_by_itself():
    with MetricsFakeServer(scenario=steady()).running() as srv:
        master, slave = pty.openpty()
        env = dict(os.environ, COLUMNS="120", LINES="60", TERM="xterm")
        p = subprocess.Popen([*CMD, srv.url, "--duration", "1.0", "--interval", "0.25"], stdin=slave, stdout=slave,
                             stderr=slave, env=env, close_fds=True)
        os.close(slave)
        out = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        rc = p.wait(timeout=30)
        os.close(master)
        n = srv.scrapes
    text = out.decode(errors="replace")
    assert rc == 0, text[-2000:]
    assert 3 <= n <= 6
    assert "phasescope watch" in text and "\x1b[" in text  # redrawn with terminal control codes
    assert "ITL" in text and "generation tok/s" in text


def test_json_lines_and_csv_log_every_sample(tmp_path):
    out = tmp_path / "watch.csv"
    with MetricsFakeServer(scenario=restart_at(2)).running() as srv:
        r = run(srv.url, "--count", "4", "--interval", "0.2", "--json", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(lines) == 4
    # a restart before the 3rd scrape: rates stay non-negative
    for d in lines[1:]:
        assert d["generation_tok_s"] is not None and d["generation_tok_s"] >= 0
        assert d["prompt_tok_s"] >= 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    assert list(rows[0].keys()) == ["time", "t_s", "engine", *SUMMARY_KEYS]
    assert rows[0]["generation_tok_s"] == ""  # first sample: no rate yet
    assert float(rows[-1]["generation_tok_s"]) > 0 and float(rows[-1]["running"]) == 3


def test_by_label_and_model_filter():
    st = VllmMetricsState(models=("a", "b"))

    def tick(s: VllmMetricsState, n: int) -> None:
        s.set_load(1, 0, 0.2, model="a")
        s.set_load(4, 2, 0.7, model="b")
        s.finish_requests([0.05] * 2, [0.02] * 20, gen_tokens=40, model="a")
        s.finish_requests([0.05] * 2, [0.02] * 20, gen_tokens=120, model="b")

    with MetricsFakeServer(st, scenario=tick).running() as srv:
        r = run(srv.url, "--once", "--json", "--interval", "0.3", "--by", "model_name")
        r2 = run(srv.url, "--once", "--json", "--interval", "0.3", "--model", "b")
    d = json.loads(r.stdout)
    assert d["running"] == 5 and set(d["groups"]) == {"a", "b"}
    assert d["groups"]["b"]["generation_tok_s"] == pytest.approx(3 * d["groups"]["a"]["generation_tok_s"], rel=1e-6)
    d2 = json.loads(r2.stdout)
    assert d2["running"] == 4 and d2["waiting"] == 2


@pytest.mark.parametrize(
    "mode,words,code",
    [
        ("404", "no Prometheus metrics", 3),
        ("501", "--metrics", 3),
        ("html", "HTML, not the Prometheus text format", 3),
        ("json", "JSON, not the Prometheus text format", 3),
        ("unknown", "no engine phasescope knows", 3),
    ],
)
def test_bad_endpoints_one_clear_line(mode, words, code):
    with MetricsFakeServer(mode=mode).running() as srv:
        r = run(srv.url, "--once", "--json", "--interval", "0.1")
    assert r.returncode == code
    assert r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("phasescope: error:") and words in err[0], r.stderr
    assert "Traceback" not in r.stderr


def test_quoted_exposition_bug_is_tolerated():
    with MetricsFakeServer(mode="quoted", scenario=steady()).running() as srv:
        r = run(srv.url, "--once", "--json", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["running"] == 3


def test_nothing_listening_and_bad_flags():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = run(f"http://127.0.0.1:{port}", "--once", "--json")
    assert r.returncode == 3 and "nothing is listening" in r.stderr and "Traceback" not in r.stderr
    r = run("http://127.0.0.1:1", "--interval", "0", "--count", "1")
    assert r.returncode == 2 and "--interval" in r.stderr
    r = run("http://127.0.0.1:1", "--engine", "triton", "--once")
    assert r.returncode == 2 and "unknown engine" in r.stderr


def test_background_sampler_for_bench():
    import asyncio

    from phasescope.metrics.sampler import MetricsSampler

    async def go(url: str) -> MetricsSampler:
        async with MetricsSampler(url, interval_s=0.1) as s:
            await asyncio.sleep(0.5)
        return s

    with MetricsFakeServer(scenario=steady()).running() as srv:
        s = asyncio.run(go(srv.url))
    assert s.available and s.error is None
    assert len(s.rows) >= 4 and s.rows[-1]["t_s"] > s.rows[0]["t_s"]
    summ = s.summary()
    assert summ["engine"] == "vllm" and summ["generation_tok_s"] > 0 and summ["ttft_p50_s"] == pytest.approx(0.05)

    with MetricsFakeServer(mode="501").running() as srv:
        s = asyncio.run(go(srv.url))
    assert not s.available and "--metrics" in (s.error or "") and s.summary() is None
