"""Many endpoints at once (``--target`` repeatable, ``--route``) in one process and with ``--workers``,
against loopback ground-truth fakes: each fake logs the requests it really received."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phasescope.load.bench import BenchConfig, run_bench
from phasescope.load.summary import summarize
from phasescope.testing.behaviour_fake import Behaviour, running_behaviour_fake
from phasescope.prompting import OVERHEAD_ID
from phasescope.testing.fakeserver import FakeServer

PS = [sys.executable, "-m", "phasescope"]


def _cfg(urls: list[str], out: Path, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(url=urls[0], targets=urls[1:], api="openai", num_prompts=24, request_rate=60.0,
                                warmup=0, input_len=6, output_len=4, store=False, out_dir=str(out),
                                server_metrics=False, seed=5)
    base.update(kw)
    return BenchConfig(**base)


def _routing(br: Any) -> dict[int, str]:
    return {r.tags["index"]: r.tags["endpoint"] for r in br.records}


def test_round_robin_one_process_each_server_gets_its_share(tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as a, FakeServer(ttft_s=0.01, itl_s=0.002).running() as b, \
            FakeServer(ttft_s=0.01, itl_s=0.002).running() as c:
        urls = [a.url, b.url, c.url]
        br = run_bench(_cfg(urls, tmp_path))
        logs = [{g.id for g in s.log if not g.id.startswith(OVERHEAD_ID)} for s in (a, b, c)]
    assert sorted(_routing(br)) == list(range(24))
    for r in br.records:
        j = r.tags["index"] % 3
        assert r.tags["endpoint"] == urls[j] and r.target == urls[j] and r.id in logs[j]
    assert [len(x) for x in logs] == [8, 8, 8]
    s = br.summary
    assert s["target"] == ", ".join(urls) and s["server_metrics"] is None
    assert [e["endpoint"] for e in s["endpoints"]] == urls
    for e in s["endpoints"]:
        mine = [r for r in br.records if r.tags["endpoint"] == e["endpoint"]]
        want = summarize(mine)
        assert e["completed"] == want["completed"] == 8
        assert e["mean_ttft_ms"] == pytest.approx(want["mean_ttft_ms"])
        assert e["p99_itl_ms"] == pytest.approx(want["p99_itl_ms"])


def test_random_route_is_the_same_in_one_process_and_with_workers(tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as a, FakeServer(ttft_s=0.01, itl_s=0.002).running() as b:
        one = run_bench(_cfg([a.url, b.url], tmp_path / "one", route="random"))
        two = run_bench(_cfg([a.url, b.url], tmp_path / "two", route="random", workers=2))
        n_a = len([g for g in a.log if not g.id.startswith(OVERHEAD_ID)])  # not bench's one prompt-length check
    assert _routing(one) == _routing(two)  # seeded by (seed, index): independent of which process sends
    assert {r.worker for r in two.records} == {"w0", "w1"}
    picks = list(_routing(one).values())
    assert 0 < picks.count(a.url) < 24  # both endpoints drawn
    assert n_a == 2 * picks.count(a.url)


def test_least_outstanding_sends_more_to_the_faster_endpoint(tmp_path: Path) -> None:
    # a slow replica (first token after 400 ms) and a fast one (10 ms); requests arrive every ~17 ms
    with FakeServer(ttft_s=0.4, itl_s=0.002).running() as slow, FakeServer(ttft_s=0.01, itl_s=0.002).running() as fast:
        br = run_bench(_cfg([slow.url, fast.url], tmp_path, route="least-outstanding", num_prompts=30))
    picks = list(_routing(br).values())
    assert len(picks) == 30 and all(r.ok for r in br.records)
    assert picks.count(fast.url) > 2 * picks.count(slow.url)
    eps = {e["endpoint"]: e for e in br.summary["endpoints"]}
    assert eps[fast.url]["share"] > 0.66 and eps[slow.url]["median_ttft_ms"] > eps[fast.url]["median_ttft_ms"]


def test_cli_two_targets_json_breakdown(tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as a, FakeServer(ttft_s=0.02, itl_s=0.002).running() as b:
        p = subprocess.run(PS + ["bench", a.url, "--target", b.url, "-n", "10", "--request-rate", "50",
                                 "--input-len", "6", "--output-len", "4", "--warmup", "0", "--json", "--no-store",
                                 "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["completed"] == 10
    assert [(e["endpoint"], e["completed"]) for e in s["endpoints"]] == [(a.url, 5), (b.url, 5)]


def test_cli_bad_route_and_duplicate_target_are_one_line_errors(tmp_path: Path) -> None:
    with FakeServer().running() as a:
        for args, needle in (([a.url, "--target", a.url], "given twice"),
                             ([a.url, "--target", "http://127.0.0.1:9", "--route", "fastest"], "unknown --route"),
                             ([a.url, "127.0.0.1:6379"], "needs --ray")):
            p = subprocess.run(PS + ["bench", *args, "-n", "2", "--json", "--no-store", "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (args, p.stderr)
            assert needle in p.stderr and "Traceback" not in p.stderr
            assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_each_endpoint_is_scraped_and_one_without_metrics_does_not_fail_the_run(tmp_path: Path) -> None:
    # a vLLM-style fake with /metrics (counters it really served) and a server answering 501 on /metrics
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as a, \
            running_behaviour_fake(Behaviour(model="fake-model", metrics=False)) as b:
        br = run_bench(_cfg([a.url, b.url], tmp_path, num_prompts=12, server_metrics=True, metrics_interval_s=0.2))
        served_a = sum(1 for g in a.log if g.path.endswith("completions") and not g.id.startswith(OVERHEAD_ID))
    assert all(r.ok for r in br.records) and br.summary["completed"] == 12
    eps = {e["endpoint"]: e for e in br.summary["endpoints"]}
    sa, sb = eps[a.url]["server_metrics"], eps[b.url]["server_metrics"]
    assert served_a == 6
    assert sa["available"] and sa["engine"] == "vllm" and sa["summary"]["scrapes"] >= 2
    # the server's own generation counter over the run = the tokens the client got from that endpoint
    assert sa["summary"]["generation_tokens"] == eps[a.url]["total_output_tokens"] == 6 * 4
    assert sa["timeline"] and sa["timeline"][-1]["generation_tokens"] == 24
    assert sb["available"] is False and sb["reason"] and sb["summary"] == {}
    assert eps[b.url]["ttft_client_vs_server"] is None
    agg = br.summary["server_metrics"]
    assert agg["available"] and agg["summary"]["endpoints"] == 2 and agg["summary"]["endpoints_with_metrics"] == 1
    assert agg["summary"]["generation_tokens"] == 24
    assert any(b.url in n for n in agg["notes"])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["endpoints"][0]["server_metrics"]["summary"]["generation_tokens"] == 24


def test_cli_prints_per_endpoint_server_metrics(tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as a, FakeServer(ttft_s=0.01, itl_s=0.002).running() as b:
        p = subprocess.run(PS + ["bench", a.url, "--target", b.url, "-n", "8", "--request-rate", "50",
                                 "--input-len", "6", "--output-len", "4", "--warmup", "0", "--no-store",
                                 "--metrics-interval", "0.2", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                            "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "per endpoint: server /metrics" in p.stdout, p.stdout[-3000:]
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith((a.url, b.url)) and " vllm " in ln]
    assert len(rows) == 2, p.stdout[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [e["server_metrics"]["summary"]["generation_tokens"] for e in s["endpoints"]] == [16, 16]
