"""``bench --ray``: a local Ray cluster on 127.0.0.1, two actors, loopback ground-truth fakes.

Checks what the Ray layer promises: every scheduled request appears exactly once in the merged
records (and on disk as it arrives), the summary is :func:`summarize` of those records, the actors
keep the one schedule's send offsets, two endpoints at once are routed and broken down, and an
actor killed mid-run leaves a partial result with each of its requests accounted for.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

# a loopback cluster: Ray rewrites 127.0.0.1 to a routable address unless this is set before import
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'phasescope[ray]')")

from phasescope.prompting import OVERHEAD_ID  # noqa: E402
from phasescope.load.bench import BenchConfig, run_bench  # noqa: E402
from phasescope.load.schedule import build_schedule  # noqa: E402
from phasescope.load.summary import summarize  # noqa: E402
from phasescope.measure.records import RequestRecord, read_records  # noqa: E402
from phasescope.testing.fakeserver import FakeServer  # noqa: E402

PS = [sys.executable, "-m", "phasescope"]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    ctx = ray.init(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
                   logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield str(ctx.address_info["address"])
    finally:
        ray.shutdown()


def _cfg(url: str, out: Path, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(url=url, api="openai", num_prompts=40, request_rate=40.0, warmup=2, input_len=8,
                                output_len=6, ray=True, ray_workers=2, store=False, out_dir=str(out),
                                server_metrics=False, seed=3)
    base.update(kw)
    return BenchConfig(**base)


def _same_summary(got: dict[str, Any], records: list[RequestRecord], **kw: Any) -> None:
    want = summarize(records, requested_rate=got.get("requested_rate"), **kw)
    for k, v in want.items():
        if isinstance(v, float) and math.isfinite(v):
            assert got[k] == pytest.approx(v, rel=1e-9), k
        else:
            assert got[k] == v, k


def test_two_actors_every_request_once_summary_of_merged_records(ray_address: str, tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.02, itl_s=0.004).running() as srv:
        br = run_bench(_cfg(srv.url, tmp_path / "ray"))
        server_ids = {g.id for g in srv.log if not g.id.startswith(OVERHEAD_ID)}  # not bench's prompt-length check
        single = run_bench(_cfg(srv.url, tmp_path / "one", ray=False))
    s = br.summary
    # every scheduled request exactly once, split i mod 2 over the actors
    assert sorted(r.tags["index"] for r in br.records) == list(range(40))
    assert {r.worker for r in br.records} == {"a0", "a1"}
    assert all(r.tags["index"] % 2 == int(r.worker[1]) for r in br.records)
    assert all(r.ok for r in br.records) and len(br.run.warmup_records) == 2
    # the server saw exactly these requests (ground truth keyed by our record ids)
    assert {r.id for r in br.records + br.run.warmup_records} == server_ids
    # written to the run's JSONL as they arrived: same records on disk
    on_disk = read_records(tmp_path / "ray" / "records.jsonl")
    assert sorted(r.id for r in on_disk) == sorted(r.id for r in br.records + br.run.warmup_records)
    # the summary is summarize() of the merged records, computed again here in one process
    _same_summary(s, [r for r in on_disk if not r.tags.get("warmup")])
    assert s["completed"] == 40 and s["workers"] == 2 and not s["partial"]
    # the same schedule as a single-process run: same requests, same send offsets per actor clock
    sched = build_schedule(40, rate=40.0, warmup=2, seed=3)
    off = {r.index: int(r.offset_s * 1e9) for r in sched.requests}
    for recs in ([r for r in br.records if r.worker == w] for w in ("a0", "a1")):
        assert len({r.t_scheduled_ns - off[r.tags["index"]] for r in recs}) == 1  # one t0 per actor clock
    assert len({r.t_scheduled_ns - off[r.tags["index"]] for r in single.records}) == 1
    key = lambda r: (r.tags["index"], r.tags["item"], r.prompt_tokens_requested, r.max_tokens)  # noqa: E731
    assert sorted(map(key, br.records)) == sorted(map(key, single.records))
    # each actor reports its health and a measured clock offset; one machine = one CLOCK_MONOTONIC,
    # so the true offset is 0 and the estimate must lie within its stated uncertainty (+ slack)
    actors = s["ray"]["actors"]
    assert [a["name"] for a in actors] == ["a0", "a1"]
    for a in actors:
        assert a["status"] == "ok" and a["records_returned"] == 20 and a["lost"] == 0
        assert a["node_ip"] == "127.0.0.1"
        assert a["health"]["loop_samples"] > 0 and a["health"]["cpu_percent"] is not None
        c = a["clock"]
        assert abs(c["offset_ns"]) <= c["uncertainty_ns"] + 2_000_000


def test_two_endpoints_at_once_over_ray(ray_address: str, tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.003).running() as a, FakeServer(ttft_s=0.03, itl_s=0.003).running() as b:
        br = run_bench(_cfg(a.url, tmp_path, targets=[b.url], num_prompts=30, warmup=0))
        seen = {a.url: {g.id for g in a.log}, b.url: {g.id for g in b.log}}
    assert sorted(r.tags["index"] for r in br.records) == list(range(30))
    for r in br.records:  # round-robin over the schedule index, whichever actor sent it
        assert r.tags["endpoint"] == (a.url if r.tags["index"] % 2 == 0 else b.url)
        assert r.id in seen[r.tags["endpoint"]]
    eps = br.summary["endpoints"]
    assert [e["endpoint"] for e in eps] == [a.url, b.url]
    for e in eps:
        mine = [r for r in br.records if r.tags["endpoint"] == e["endpoint"]]
        assert e["completed"] == 15 and e["share"] == pytest.approx(0.5)
        _same_summary({k: v for k, v in e.items()}, mine, percentiles=br.summary["percentiles"])
    # each endpoint's breakdown is bounded below by its own server's designed TTFT (10 and 30 ms): load only
    # adds time (on a loaded host the two medians read 46 and 48 ms, so "b above a" was the load's to decide)
    assert eps[0]["median_ttft_ms"] >= 10.0 and eps[1]["median_ttft_ms"] >= 30.0, eps


def test_killed_actor_leaves_partial_result_with_its_requests_marked(ray_address: str, tmp_path: Path) -> None:
    killed: list[str] = []
    seen: list[Any] = []

    def on_record(rec: Any) -> None:  # the driver's progress hook: kill actor a1 after 4 records
        seen.append(rec)
        if killed or len(seen) < 4:
            return
        for info in ray.util.list_named_actors(all_namespaces=True):
            if "-a1-" in info["name"]:
                ray.kill(ray.get_actor(info["name"], namespace=info["namespace"]))
                killed.append(info["name"])

    with FakeServer(ttft_s=0.02, itl_s=0.03).running() as srv:
        br = run_bench(_cfg(srv.url, tmp_path, num_prompts=40, request_rate=20.0, output_len=10, warmup=0),
                       on_record=on_record)
    assert killed, "no actor was killed"
    s = br.summary
    # every scheduled request is accounted for exactly once
    assert sorted(r.tags["index"] for r in br.records) == list(range(40))
    lost = [r for r in br.records if r.error_kind == "worker_lost"]
    assert lost and all(r.worker == "a1" and not r.ok and r.tags["lost"] in ("in_flight", "unsent") for r in lost)
    assert all(r.ok for r in br.records if r.worker == "a0")  # the other actor carried on
    assert s["partial"] and "a1" in s["stop_reason"] and "worker_lost" in s["stop_reason"]
    assert s["errors_by_kind"].get("worker_lost") == len(lost) == s["failed"]
    a1 = next(a for a in s["ray"]["actors"] if a["name"] == "a1")
    assert a1["status"] == "died" and a1["lost"] == len(lost) and a1["records_returned"] + a1["lost"] == 20
    # the lost requests are on disk too, never silently dropped
    on_disk = read_records(tmp_path / "records.jsonl")
    assert sum(1 for r in on_disk if r.error_kind == "worker_lost") == len(lost)
    _same_summary(s, on_disk)


def test_cli_ray_address_json(ray_address: str, tmp_path: Path) -> None:
    with FakeServer(ttft_s=0.01, itl_s=0.002).running() as srv:
        p = subprocess.run(PS + ["bench", srv.url, ray_address, "--ray", "--ray-workers", "2", "-n", "12",
                                 "--request-rate", "30", "--input-len", "8", "--output-len", "4", "--json",
                                 "--no-store", "--no-server-metrics", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    assert s["completed"] == 12 and s["workers"] == 2 and s["endpoints"] is None
    assert s["ray"]["cluster"] == ray_address and not s["ray"]["cluster_started_here"]
    assert [a["records_returned"] for a in s["ray"]["actors"]] == [6, 6]


def test_ctrl_c_stops_every_actor_and_leaves_partial_run(ray_address: str, tmp_path: Path) -> None:
    import signal
    import time

    with FakeServer(ttft_s=0.01, itl_s=0.005).running() as srv:
        p = subprocess.Popen(PS + ["bench", srv.url, ray_address, "--ray", "-n", "1000", "--request-rate", "10",
                                   "--input-len", "8", "--output-len", "5", "--no-store", "--no-server-metrics",
                                   "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jsonl = tmp_path / "records.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not jsonl.exists() or len(jsonl.read_text().splitlines()) < 6):
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "Partial run" in err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["partial"] and s["stop_reason"].startswith("interrupted")
    assert 0 < s["completed"] < 1000 and s["failed"] == 0  # stopped, not lost: nothing marked worker_lost
    recs = [r for r in read_records(jsonl) if not r.tags.get("warmup")]
    assert len(recs) == s["completed"] + s["failed"]
    assert all(a["status"] == "ok" for a in s["ray"]["actors"])
    assert not [a for a in ray.util.list_named_actors() if a.startswith("phasescope-")]


@pytest.mark.engine
def test_ray_actors_against_the_embedded_engine(engine, ray_address: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The real llama-server: two actors, a capped closed loop split 2 + 2, server /metrics on the driver's clock."""
    br = run_bench(BenchConfig(url=engine.url, num_prompts=8, max_concurrency=4, input_len=16, output_len=6,
                               ray=True, ray_workers=2, warmup=1, out_dir=str(tmp_path), store=False,
                               metrics_interval_s=0.25))
    s = br.summary
    assert s["completed"] == 8 and s["failed"] == 0 and s["engine"] == "llamacpp"
    assert sorted(r.tags["index"] for r in br.records) == list(range(8))
    assert s["total_output_tokens"] == 48 and all(16 <= r.prompt_tokens <= 17 for r in br.records)
    assert 2 <= s["max_concurrent_requests"] <= 4  # the cap C=4 split 2 + 2 over the actors
    sm = s["server_metrics"]
    assert sm is not None and sm["available"] and sm["timeline"]
    assert min(row["t_s"] for row in sm["timeline"]) >= -0.5  # timeline starts at the shared t0
    _same_summary(s, br.records)
