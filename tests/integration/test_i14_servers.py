"""Issue 14 against real loopback servers: repeat benches are not cache hits, host contention is
detected (a bounded CPU hog), exact prompt counts on the embedded engine, compare on real records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from phasescope.load.bench import BenchConfig, run_bench
from phasescope.measure.host import BURST_SHARE_LOCAL, BUSY_SHARE_LOCAL
from phasescope.testing.fakeserver import FakeServer

PS = [sys.executable, "-m", "phasescope"]


def _bench(url: str, tmp: Path, name: str, **kw: Any) -> dict[str, Any]:
    cfg = BenchConfig(url=url, num_prompts=kw.pop("n", 12), input_len=kw.pop("input_len", 256),
                      output_len=kw.pop("output_len", 4), store=kw.pop("store", False), out_dir=str(tmp / name),
                      metrics_interval_s=0.2, **kw)
    return run_bench(cfg).summary


def _evaluated(tmp: Path, name: str) -> list[int]:
    """The prompt tokens the server evaluated for each measured request of bench ``name`` (prompt minus the
    cached ones; llama.cpp's ``timings.prompt_n`` where it reported them): a counter, not a duration."""
    from phasescope.measure import derive
    from phasescope.measure.aggregate import is_measured
    from phasescope.measure.records import read_records

    (path,) = list((tmp / name).rglob("records.jsonl"))
    out = []
    for r in read_records(path):
        if not (r.ok and is_measured(r)):
            continue
        n = (r.server or {}).get("prompt_n")
        if n is None and r.prompt_tokens is not None:
            n = r.prompt_tokens - (derive.cached_prompt_tokens(r) or 0)
        assert n is not None, "the server reported no prompt count"
        out.append(int(n))
    return out


def _kinds(d: dict[str, Any]) -> set[str]:
    return {w["kind"] for w in d.get("warnings") or []}


# --- unique prompts per run ---------------------------------------------------------------------
def test_repeat_bench_on_a_prefix_caching_fake(tmp_path: Path) -> None:
    """vLLM-style automatic prefix caching: a repeated default bench is cold again (server counters,
    usage cached_tokens and TTFT agree), --reuse-prompts hits the cache and says so."""
    with FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, prefill_tok_s=4000, itl_s=0.001).running() as srv:
        one = _bench(srv.url, tmp_path, "one", engine_flags="--enable-prefix-caching")
        two = _bench(srv.url, tmp_path, "two")
        gt_two = [g for g in srv.log[-12:]]
        r1 = _bench(srv.url, tmp_path, "r1", reuse_prompts=True)
        r2 = _bench(srv.url, tmp_path, "r2", reuse_prompts=True)
        gt_r2 = [g for g in srv.log[-12:]]
    for d in (one, two):
        assert d["completed"] == 12 and d["total_input_tokens"] == 256 * 12
        assert d["prefix_cache"]["hit_rate_server_metrics"] == 0.0  # vllm:prefix_cache_hits_total did not move
        assert d["prefix_cache"]["hit_rate_requests"] == 0.0
        assert "prefix_cache_hits" not in _kinds(d)
    assert sum(g.cached_tokens for g in gt_two) == 0  # the server's own ground truth
    # TTFT of the repeat is a cold TTFT (256 tokens at 4000 tok/s ≈ 64 ms), not a cached one (≈ 2 ms): the
    # fake sleeps the prefill it computes, so a cold TTFT is never under it, and load only adds to it
    # (comparing the two runs' equal medians was a timing assertion a busy host turned red)
    assert two["median_ttft_ms"] >= 0.95 * 256 / 4000 * 1e3 and one["median_ttft_ms"] >= 0.95 * 256 / 4000 * 1e3
    assert one["prompt_salt"] != two["prompt_salt"] and r1["prompt_salt"] is None
    assert one["server_build"]["user_flags"] == "--enable-prefix-caching" and "user_flags" not in (two["server_build"] or {})
    # --reuse-prompts: the same texts again → the cache answers, TTFT collapses, and the run says so
    assert r2["prefix_cache"]["hit_rate_server_metrics"] > 0.9 and r2["prefix_cache"]["hit_rate_requests"] > 0.9
    assert sum(g.cached_tokens for g in gt_r2) > 0.9 * 256 * 12
    assert r2["median_ttft_ms"] < 0.5 * r1["median_ttft_ms"]
    assert "prefix_cache_hits" in _kinds(r2)
    w = next(x for x in r2["warnings"] if x["kind"] == "prefix_cache_hits")
    assert w["evidence"]["hit_rate"] > 0.9 and "--reuse-prompts" in w["message"]


def test_shared_prefix_hits_are_expected_not_warned(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, itl_s=0.001).running() as srv:
        d = _bench(srv.url, tmp_path, "p", n=16, input_len=32, prefix_len=224, prefix_groups=2)
    pc = d["prefix_cache"]
    assert pc["expected_hit_rate"] == pytest.approx(224 / 256)
    assert pc["hit_rate"] > 0.5 and "prefix_cache_hits" not in _kinds(d)


# --- host contention ----------------------------------------------------------------------------
@pytest.fixture()
def fake_process() -> Iterator[str]:
    """A fake vLLM in its own process (so the client, the server and the hog are three trees)."""
    p = subprocess.Popen([sys.executable, "-m", "phasescope.testing", "--flavor", "vllm", "--ttft-ms", "30",
                          "--itl-ms", "15"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if p.stdout else ""
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        p.terminate()
        p.wait(timeout=10)


def _hog(seconds: float) -> list[subprocess.Popen[bytes]]:
    code = f"import time\nt = time.monotonic() + {seconds}\nwhile time.monotonic() < t:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)]


COMMANDS = {
    "probe": ["probe", "{url}", "-p", "40,80", "-n", "24", "--no-save", "--json"],
    "bench": ["bench", "{url}", "-n", "16", "--request-rate", "8", "--input-len", "32", "--output-len", "16",
              "--no-store", "--json"],
    "explain": ["experiment", "prefix-cache", "{url}", "--budget", "12s", "--no-save", "--json"],
}


def _run(cmd: list[str], url: str, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp / "store"))
    out = subprocess.run(PS + [c.format(url=url) for c in cmd], capture_output=True, text=True, timeout=240,
                         env=env, cwd=tmp)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.serial  # it loads both cores itself: beside other tests it would be their busy host
@pytest.mark.parametrize("name", list(COMMANDS))
def test_host_busy_iff_other_work_took_the_cores(name: str, fake_process: str, tmp_path: Path) -> None:
    # quiet side: whatever else this shared machine runs, the warning fires exactly when the
    # measured share of other work exceeds the stated threshold
    quiet = _run(COMMANDS[name], fake_process, tmp_path)
    h = quiet["host"]
    # the fake runs on this machine and its pid is found: the stricter pair of thresholds applies (issue 29)
    assert h["available"] and h["server_found"] and h["server_local"]
    assert h["threshold"] == BUSY_SHARE_LOCAL and h["burst_threshold"] == BURST_SHARE_LOCAL
    assert ("host_busy" in _kinds(quiet)) == (h["during"]["other_cpu_share"] > h["threshold"]
                                              or h["worst_1s_other_cpu_share"] > h["burst_threshold"])
    # busy side: one busy-looping process per core, bounded (it stops by itself; killed in finally)
    hogs = _hog(90)
    try:
        time.sleep(0.5)
        busy = _run(COMMANDS[name], fake_process, tmp_path)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    hb = busy["host"]["during"]
    assert hb["other_cpu_share"] > BUSY_SHARE_LOCAL, busy["host"]
    assert "host_busy" in _kinds(busy)
    w = next(x for x in busy["warnings"] if x["kind"] == "host_busy")
    assert w["evidence"]["threshold"] == BUSY_SHARE_LOCAL and f"{BUSY_SHARE_LOCAL * 100:.0f} %" in w["message"]
    assert w["evidence"]["worst_1s_other_cpu_share"] is not None
    assert hb["top_other"] and all(t["pid"] not in busy["host"]["server_pids"] for t in hb["top_other"])


# --- compare on real records -----------------------------------------------------------------
def test_compare_real_cold_vs_cached_and_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from phasescope.cli import app

    store = tmp_path / "store"
    monkeypatch.setenv("PHASESCOPE_STORE", str(store))
    # 20 ms per token: the loop wake-up jitter of a shared 2-core host (client and fake on the same
    # cores, ~0.5 ms between runs) is then far below the 5 % gate, so "the same server twice" tests the
    # verdict, not the host; at 4 ms that jitter alone was 13 % and failed CI
    with FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, prefill_tok_s=4000, itl_s=0.02).running() as srv:
        kw = {"store": True, "n": 20, "output_len": 12}
        cold = _bench(srv.url, tmp_path, "c", reuse_prompts=True, **kw)["run_id"]
        warm = _bench(srv.url, tmp_path, "w", reuse_prompts=True, **kw)["run_id"]
        again = _bench(srv.url, tmp_path, "a", **kw)["run_id"]
    with FakeServer(flavor="vllm", ttft_s=0.002, prefill_tok_s=4000, itl_s=0.06).running() as slow:
        slower = _bench(slow.url, tmp_path, "s", **kw)["run_id"]
    runner = CliRunner()

    def cmp(*args: str) -> tuple[int, dict[str, Any]]:
        r = runner.invoke(app, ["compare", *args, "--store", str(store), "--json"])
        return r.exit_code, json.loads(r.stdout)

    _, d = cmp(cold, warm)
    v = {m["metric"]: m["verdict"] for m in d["metrics"]}
    assert v["ttft_s"] == "not comparable" and v["prefill_tok_s"] == "not comparable"
    assert d["warnings"][0]["kind"] == "runs_not_comparable" and "prefix-cache hit rate" in d["warnings"][0]["message"]
    # a real regression (ITL 20 → 60 ms) fails the gate; the same server run twice does not
    # (--allow-incomparable: the host's load may differ between two runs on a shared machine, which makes the
    # gate inconclusive, exit 6 — tested on synthetic runs in tests/unit/test_gate.py; here the numbers count)
    code, d = cmp(again, slower, "--fail-on", "worse", "--allow-incomparable", "--metrics", "itl_p50,decode")
    assert code == 5 and d["gate"]["failed"] and d["gate"]["verdict"] == "worse", d["gate"]
    code, d = cmp(cold, again, "--fail-on", "worse", "--allow-incomparable", "--metrics", "itl_p50,decode",
                  "--min-change", "0.05")
    assert code == 0 and not d["gate"]["failed"], [(m["metric"], m["verdict"], m["change"]) for m in d["metrics"]]


# --- the embedded engine ---------------------------------------------------------------------------
@pytest.mark.engine
def test_embedded_engine_exact_counts_and_no_repeat_cache_hits(engine: Any, tmp_path: Path) -> None:
    url = engine.url  # type: ignore[attr-defined]
    # 128-token prompts: the counts are exact at any length, and a repeat that reuses only the BOS stays far
    # under 5 % of its prompt (1/128); 256 tokens cost 4 s more prefill on 2 cores for the same assertions
    kw = {"n": 4, "output_len": 4, "input_len": 128}
    one = _bench(url, tmp_path, "one", **kw)
    two = _bench(url, tmp_path, "two", **kw)
    r1 = _bench(url, tmp_path, "r1", reuse_prompts=True, **kw)
    r2 = _bench(url, tmp_path, "r2", reuse_prompts=True, **kw)
    for d in (one, two, r1, r2):
        # --input-len 128 means 128 prompt tokens as llama-server counts them (BOS included)
        assert d["completed"] == 4 and d["total_input_tokens"] == 128 * d["completed"], d["token_count_source"]
        assert "token_count_mismatch" not in _kinds(d)
    # llama.cpp timings.cache_n: the repeat reuses at most the BOS, the --reuse-prompts repeat most of it
    assert two["prefix_cache"]["hit_rate_requests"] < 0.05 and "prefix_cache_hits" not in _kinds(two)
    assert r2["prefix_cache"]["hit_rate_requests"] > 0.5 and "prefix_cache_hits" in _kinds(r2)
    # the hits spare prefill work: the server evaluated fewer prompt tokens per request (its own counts,
    # llama.cpp timings.prompt_n / cache_n), not "a shorter median TTFT", which load on this host can reverse
    assert max(_evaluated(tmp_path, "r2")) < 0.5 * min(_evaluated(tmp_path, "two"))


# --- one API-key rule, end to end ------------------------------------------------------------------
def test_api_key_rule_phasescope_then_openai(tmp_path: Path) -> None:
    # (that watch, bench and explain declare the same rule is checked in tests/unit/test_i14_hygiene.py)
    cmd = ["probe", "{url}", "-p", "8", "-n", "4", "-r", "1", "--no-save", "--json"]
    with FakeServer(flavor="vllm", api_key="k-right-123").running() as srv:
        def run(**env: str) -> subprocess.CompletedProcess[str]:
            e = {k: v for k, v in os.environ.items() if k not in ("PHASESCOPE_API_KEY", "OPENAI_API_KEY")}
            e.update(env, PHASESCOPE_STORE=str(tmp_path / "store"))
            return subprocess.run(PS + [c.format(url=srv.url) for c in cmd], capture_output=True, text=True,
                                  timeout=120, env=e, cwd=tmp_path)

        assert run(OPENAI_API_KEY="k-wrong-456").returncode != 0  # generation needs the key
        assert run(OPENAI_API_KEY="k-right-123").returncode == 0
        # PHASESCOPE_API_KEY wins over OPENAI_API_KEY, in every command
        ok = run(PHASESCOPE_API_KEY="k-right-123", OPENAI_API_KEY="k-wrong-456")
        assert ok.returncode == 0, ok.stderr[-1500:]
        assert run(PHASESCOPE_API_KEY="k-wrong-456", OPENAI_API_KEY="k-right-123").returncode != 0
        assert "k-right-123" not in ok.stdout + ok.stderr


# --- exact counts for every API (fakes follow each server's tokenizer and BOS rules) ---------------
@pytest.mark.parametrize("flavor,api", [("vllm", "openai"), ("vllm", "chat"), ("sglang", "openai"),
                                        ("llamacpp", "openai"), ("llamacpp", "llamacpp"), ("llamacpp", "chat"),
                                        ("ollama", "ollama")])
def test_input_len_is_what_the_server_counts(flavor: str, api: str, tmp_path: Path) -> None:
    with FakeServer(flavor=flavor, ttft_s=0.001, itl_s=0.001).running() as srv:
        d = _bench(srv.url, tmp_path, "x", api=api, n=5, input_len=100)
        truth = [g.prompt_tokens for g in srv.log[-5:]]
    assert d["completed"] == 5 and d["total_input_tokens"] == 100 * 5, (d["token_count_source"], truth)
    assert truth == [100] * 5  # the server's own count (BOS, chat template included)
    assert "token_count_mismatch" not in _kinds(d)
