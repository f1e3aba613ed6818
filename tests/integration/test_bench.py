"""bench against real loopback servers: the probe owner's ground-truth fakes and the embedded engine."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import wait_for_records

from phasescope.apis import get_client
from phasescope.apis.base import Target
from phasescope.load.runner import run_load
from phasescope.load.schedule import build_schedule
from phasescope.load.summary import summarize
from phasescope.load.workload import WorkItem
from phasescope.measure.records import read_records
from phasescope.testing.fakeserver import FakeServer

ITEMS = [WorkItem(prompt=" the" * 8, output_len=4, input_len=8)]
PS = [sys.executable, "-m", "phasescope"]


def _target(srv: FakeServer) -> Target:
    return Target(base_url=srv.url, api="openai", model="fake-model", engine="vllm")


def test_rate_honoured_from_send_timestamps() -> None:
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(ttft_s=0.005, itl_s=0.001) as srv:
            sched = build_schedule(60, rate=40.0, shape="constant")
            res = await run_load(sched, ITEMS, _target(srv), send=get_client("openai").send)
            return sched, res, srv

    sched, res, srv = asyncio.run(go())
    assert len(res.records) == 60 and all(r.ok for r in res.records)
    # every request left at its scheduled time (send lag = start − scheduled; loose bound for a shared box)
    lags_ms = np.array([(r.t_start_ns - r.t_scheduled_ns) / 1e6 for r in res.records])
    assert np.median(lags_ms) < 5.0
    starts = np.sort([r.t_start_ns for r in res.records]) / 1e9
    achieved = (len(starts) - 1) / (starts[-1] - starts[0])
    assert achieved == pytest.approx(40.0, rel=0.15)
    # the server saw every request (ground truth keyed by our record ids)
    assert {g.id for g in srv.log} == {r.id for r in res.records}


def test_concurrency_cap_honoured_server_side() -> None:
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(ttft_s=0.03, itl_s=0.002) as srv:
            res = await run_load(build_schedule(24, max_concurrency=3), ITEMS, _target(srv),
                                 send=get_client("openai").send, max_concurrency=3)
            return res, list(srv.log)

    res, log = asyncio.run(go())
    assert len(res.records) == 24
    # overlap of [request received, last event sent] on the server's own clock
    ev = sorted([(g.t_recv_ns, 1) for g in log] + [(g.t_events_ns[-1], -1) for g in log], key=lambda x: (x[0], x[1]))
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    assert peak == 3
    s = summarize(res.records, t0_ns=res.t0_ns)
    assert s["max_concurrent_requests"] == 3
    assert s["mean_client_queue_time_ms"] > 0  # capped requests waited in the client, reported apart


def test_thousand_concurrent_streams_all_accounted(tmp_path: Path) -> None:
    # the fake runs in its own process (as a real server would), logging ground truth per request
    gt = tmp_path / "gt.jsonl"
    fake, url = _start_fake(tmp_path, "--ttft-ms", "300", "--itl-ms", "2", "--log", str(gt))
    try:
        tgt = Target(base_url=url, api="openai", model="fake-model", engine="vllm")
        res = asyncio.run(run_load(build_schedule(1000), ITEMS, tgt, send=get_client("openai").send))
    finally:
        fake.terminate()
        fake.wait(10)
    assert len(res.records) == 1000
    assert len({r.id for r in res.records}) == 1000
    failed = [r for r in res.records if not r.ok]
    assert not failed, failed[:3]
    server_ids = {json.loads(ln)["id"] for ln in gt.read_text().splitlines() if ln.strip()}
    assert server_ids == {r.id for r in res.records}
    s = summarize(res.records, t0_ns=res.t0_ns)
    assert s["completed"] == 1000 and s["total_output_tokens"] == 4000


def test_workers_merge_records_exactly(tmp_path: Path) -> None:
    from phasescope.load.workers import run_workers

    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as srv:
        sched = build_schedule(30, rate=100.0, warmup=2)
        res = run_workers(sched, ITEMS, _target(srv), n_workers=2, records_dir=tmp_path)
        server_ids = {g.id for g in srv.log}
    assert len(res.records) == 30 and len(res.warmup_records) == 2
    assert sorted(r.tags["index"] for r in res.records) == list(range(30))
    assert {r.worker for r in res.records} == {"w0", "w1"}
    assert {r.id for r in res.records + res.warmup_records} == server_ids
    on_disk = read_records(tmp_path / "worker-0.jsonl") + read_records(tmp_path / "worker-1.jsonl")
    assert len(on_disk) == 32
    s = summarize(res.records)
    assert s["completed"] == 30 and s["duration"] > 0


def _bench_cli(args: list[str], env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen(PS + ["bench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _start_fake(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen([sys.executable, "-m", "phasescope.testing.fakeserver", "--flavor", "vllm", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("READY"), line
    return p, line.split()[1]


def test_cli_json_with_server_metrics(tmp_path: Path) -> None:
    fake, url = _start_fake(tmp_path, "--ttft-ms", "20", "--itl-ms", "2")
    try:
        p = _bench_cli([url, "-n", "12", "-c", "4", "--input-len", "8", "--output-len", "5", "--json",
                        "--goodput", "ttft:1000", "--percentiles", "50,99", "--out", str(tmp_path / "o"),
                        "--metrics-interval", "0.2"], {"PHASESCOPE_STORE": str(tmp_path / "store")})
        out, err = p.communicate(timeout=60)
    finally:
        fake.terminate()
        fake.wait(10)
    assert p.returncode == 0, err
    s = json.loads(out)
    assert s["completed"] == 12 and s["failed"] == 0 and not s["partial"]
    for k in ("request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
              "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "request_goodput"):
        assert s[k] is not None, k
    assert s["total_output_tokens"] == 60
    assert s["token_count_source"]["output"] == {"usage": 12}
    sm = s["server_metrics"]
    assert sm["available"] and sm["engine"] == "vllm"
    # warm-ups happen before the scraper starts: the server's generation counter matches ours
    assert sm["summary"]["generation_tokens"] == 60
    assert (tmp_path / "o" / "summary.json").exists()
    assert len(read_records(tmp_path / "o" / "records.jsonl")) == 13  # 12 + 1 warm-up
    assert s["records_path"] and Path(s["records_path"]).exists()


def test_server_killed_mid_run_gives_partial_summary(tmp_path: Path) -> None:
    fake, url = _start_fake(tmp_path, "--ttft-ms", "10", "--itl-ms", "20")
    p = _bench_cli([url, "-n", "400", "--request-rate", "20", "--input-len", "8", "--output-len", "20",
                    "--out", str(tmp_path / "o"), "--no-store", "--no-server-metrics"])
    wait_for_records(tmp_path / "o" / "records.jsonl", 4)
    fake.kill()
    fake.wait(10)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, (out, err)
    assert "Partial run" in err and "requests in a row" in err
    assert "Traceback" not in err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["partial"] and "requests in a row" in s["stop_reason"]
    assert s["completed"] > 0 and s["failed"] >= 8
    recs = [r for r in read_records(tmp_path / "o" / "records.jsonl") if not r.tags.get("warmup")]
    assert len(recs) == s["completed"] + s["failed"]


def test_ctrl_c_leaves_partial_run(tmp_path: Path) -> None:
    fake, url = _start_fake(tmp_path, "--ttft-ms", "10", "--itl-ms", "10")
    try:
        p = _bench_cli([url, "-n", "1000", "--request-rate", "10", "--input-len", "8", "--output-len", "5",
                        "--out", str(tmp_path / "o"), "--no-store", "--no-server-metrics"])
        wait_for_records(tmp_path / "o" / "records.jsonl", 4)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        fake.terminate()
        fake.wait(10)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["partial"] and s["stop_reason"].startswith("interrupted")
    assert 0 < s["completed"] < 1000


def test_bad_input_is_one_line() -> None:
    p = subprocess.run(PS + ["bench", "http://127.0.0.1:1", "--goodput", "itl:5"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("phasescope: error:") and "Traceback" not in p.stderr


@pytest.mark.engine
def test_bench_on_embedded_engine(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Real batching: 8 requests over --parallel slots, server /metrics alongside."""
    from phasescope.load.bench import BenchConfig, run_bench

    cfg = BenchConfig(url=engine.url, num_prompts=8, max_concurrency=4, input_len=16, output_len=8,
                      out_dir=str(tmp_path), store=False, metrics_interval_s=0.25)
    r = run_bench(cfg)
    s = r.summary
    assert s["completed"] == 8 and s["failed"] == 0
    assert s["engine"] == "llamacpp"
    assert s["total_output_tokens"] == 64
    assert sum(s["token_count_source"]["output"].values()) == 8
    assert set(s["token_count_source"]["output"]) <= {"usage", "server"}
    assert 2 <= s["max_concurrent_requests"] <= 4
    # prompts were built to 16 tokens through the server's /tokenize (usage adds at most BOS)
    assert all(16 <= rec.prompt_tokens <= 17 for rec in r.records)
    sm = s["server_metrics"]
    assert sm["available"] and sm["engine"] == "llamacpp"
    assert sm["summary"]["generation_tokens"] == 64
    assert max(row["running"] or 0 for row in sm["timeline"]) >= 1


def test_exact_prompt_lengths_through_server_tokenizer() -> None:
    """Prompts built to N tokens by the server's /tokenize arrive as exactly N prompt tokens."""
    from phasescope.prompting import TokenizePromptMaker, prompt_maker_for
    from phasescope.load.workload import random_workload

    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(ttft_s=0.001, itl_s=0.001) as srv:
            from phasescope.apis import new_session

            tgt = _target(srv)
            async with new_session() as s:
                maker = await prompt_maker_for(s, tgt)
                items = await random_workload(6, input_len=37, output_len=3, maker=maker, range_ratio=0.3, seed=2)
            res = await run_load(build_schedule(6), items, tgt, send=get_client("openai").send)
            return maker, items, res, {g.id: g for g in srv.log}

    maker, items, res, truth = asyncio.run(go())
    assert isinstance(maker, TokenizePromptMaker) and maker.source == "tokenize"
    by_index = {r.tags["index"]: r for r in res.records}
    for i, it in enumerate(items):
        assert it.prompt_token_ids is not None and len(it.prompt_token_ids) == it.input_len
        assert truth[by_index[i].id].prompt_tokens == it.input_len  # what the server counted
    s = summarize(res.records)
    assert not any("Prompt token counts disagree" in w["message"] for w in s["count_warnings"])


def test_calibrated_prompts_without_tokenizer() -> None:
    """Ollama has no /tokenize: the probe's usage calibration gives lengths close to the target."""
    from phasescope.prompting import CalibratedPromptMaker, prompt_maker_for

    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(flavor="ollama", ttft_s=0.001, itl_s=0.001) as srv:
            from phasescope.apis import new_session

            tgt = Target(base_url=srv.url, api="ollama", model="fake-model", engine="ollama")
            async with new_session() as s:
                maker = await prompt_maker_for(s, tgt)
                text, ids = await maker.make(40, 1)
            return maker, text, ids

    maker, text, ids = asyncio.run(go())
    assert isinstance(maker, CalibratedPromptMaker) and maker.source == "calibrated"
    assert ids is None and abs(len(text.split()) - 40) <= 2  # the fake counts one token per word


def test_sweep_on_fake_writes_table(tmp_path: Path) -> None:
    from phasescope.load.bench import BenchConfig
    from phasescope.load.sweep import run_sweep

    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as srv:
        tgt = _target(srv)
        cfg = BenchConfig(url=srv.url, num_prompts=6, input_len=8, output_len=4, store=False,
                          out_dir=str(tmp_path), server_metrics=False, warmup=0)
        res = run_sweep(cfg, slo={"ttft": 5000.0, "itl": 5000.0}, steps=2, target=tgt)
    assert [r["profile"] for r in res.rows] == ["synchronous", "throughput", "rate", "rate"]
    rates = [r["requested_rate"] for r in res.rows[2:]]
    assert rates[0] < rates[1]
    assert all(r["completed"] == 6 for r in res.rows)
    assert res.knee is not None and res.knee["requested_rate"] == rates[1]  # generous SLO: highest rate
    assert (tmp_path / "sweep.csv").read_text().count("\n") == 5
    assert json.loads((tmp_path / "sweep.json").read_text())["knee"]["requested_rate"] == rates[1]
    assert (tmp_path / "synchronous" / "records.jsonl").exists()


def test_metrics_recorder_on_saturated_vllm() -> None:
    """The background recorder over a live vLLM /metrics (queue growing, KV full, preemptions)."""
    from phasescope.load.server_metrics import ServerMetricsRecorder, compare_ttft
    from phasescope.testing.metrics_fake import MetricsFakeServer, saturated

    with MetricsFakeServer(scenario=saturated()).running() as srv:
        rec = ServerMetricsRecorder(srv.url, interval_s=0.1)
        rec.start()
        time.sleep(0.55)
        res = rec.stop()
    assert res.available and res.engine == "vllm"
    s = res.summary
    assert s["scrapes"] >= 4
    assert s["max_waiting"] >= 8 and s["time_with_queue_s"] > 0
    assert s["kv_usage_peak"] == pytest.approx(0.985)
    assert s["preemptions"] >= 2
    assert s["server_ttft_mean_ms"] is not None and s["server_ttft_mean_ms"] > 50
    waiting = [r["waiting"] for r in res.timeline]
    assert waiting == sorted(waiting)  # the queue grows scrape after scrape
    cmp = compare_ttft({"mean_ttft_ms": s["server_ttft_mean_ms"] + 5.0}, s)
    assert cmp is not None and cmp["client_minus_server_mean_ms"] == pytest.approx(5.0)


def test_metrics_unavailable_is_reported() -> None:
    from phasescope.load.server_metrics import ServerMetricsRecorder
    from phasescope.testing.metrics_fake import MetricsFakeServer

    with MetricsFakeServer(mode="501").running() as srv:
        rec = ServerMetricsRecorder(srv.url, interval_s=0.05)
        rec.start()
        time.sleep(0.2)
        res = rec.stop()
    assert not res.available and res.reason


def test_sharegpt_output_lengths_from_replies(tmp_path: Path) -> None:
    """ShareGPT without --output-len asks for each reply's length in server tokens (vLLM's rule)."""
    from phasescope.load.bench import BenchConfig, run_bench

    convs = [{"conversations": [{"from": "human", "value": "the quick brown fox " * (2 + i)},
                                {"from": "gpt", "value": "lazy dog " * (3 + i)}]} for i in range(5)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    with FakeServer(ttft_s=0.002, itl_s=0.001).running() as srv:
        cfg = BenchConfig(url=srv.url, num_prompts=5, dataset="sharegpt", dataset_path=str(path), store=False,
                          out_dir=str(tmp_path / "o"), server_metrics=False, warmup=0)
        r = run_bench(cfg, target=_target(srv))
    assert r.summary["completed"] == 5 and r.summary["output_len"] is None
    got = sorted((rec.prompt_tokens, rec.output_tokens) for rec in r.records)
    assert got == [(4 * (2 + i), 2 * (3 + i)) for i in range(5)]  # the fake counts one token per word
