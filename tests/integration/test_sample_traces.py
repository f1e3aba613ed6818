"""Issue 30: the sample traces shipped in ``examples/traces/`` (one per supported format) replay on a fake
server through the CLI, and each run says what it replayed, what it skipped and (Mooncake) why the
server's hit rate differs from the trace's. Assertions on counts and server counters, never on timing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from phasescope.testing.fakeserver import FakeServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import isolated_home, run  # noqa: E402,F401

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def _bench(url, tmp_path, capsys, monkeypatch, *args):
    code, out, err = run(["bench", url, "--no-store", "--out", str(tmp_path / "o"), "--no-nvml", "--json", *args],
                         capsys, monkeypatch)
    assert code == 0, (out, err)
    return json.loads(out), err


def _console(url, tmp_path, capsys, monkeypatch, *args):
    code, out, err = run(["bench", url, "--no-store", "--out", str(tmp_path / "c"), "--no-nvml", *args],
                         capsys, monkeypatch)
    assert code == 0, (out, err)
    return out


def test_every_sample_is_documented():
    readme = (TRACES / "README.md").read_text()
    for f in ("mooncake.jsonl", "burstgpt.csv", "requests.jsonl", "sharegpt.json", "weka_agent.jsonl", "otel_agent.json"):
        assert (TRACES / f).is_file() and f"`{f}`" in readme


def test_mooncake_sample_on_a_prefix_caching_fake(tmp_path, capsys, monkeypatch):
    with FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, itl_s=0.001).running() as srv:
        d, _ = _bench(srv.url, tmp_path, capsys, monkeypatch, "--dataset", "mooncake", "--dataset-path",
                      str(TRACES / "mooncake.jsonl"), "--trace-speed", "20", "--warmup", "0")
    tr = d["trace"]
    assert tr["entries_replayed"] == 10 and tr["skipped"] == {} and d["completed"] == 10
    # a cache that keeps every block (the fake's vLLM-style APC) serves what the trace implies
    assert tr["implied_hit_rate"] == pytest.approx(7168 / 12780)
    assert abs(tr["measured_hit_rate"] - tr["implied_hit_rate"]) <= 0.05 and tr["hit_rate_gap_reason"] is None


def test_mooncake_sample_on_llamacpp_explains_the_gap(tmp_path, capsys, monkeypatch):
    # llama.cpp's fake keeps one prompt: interleaved prefixes overwrite each other, whatever the timing
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.001).running() as srv:
        out = _console(srv.url, tmp_path, capsys, monkeypatch, "--dataset", "mooncake", "--dataset-path",
                       str(TRACES / "mooncake.jsonl"), "--trace-speed", "20", "--warmup", "0")
    assert "Trace rows: 10 of 10 rows replayed; none skipped." in out
    assert "the trace implies a hit rate of 56.1 %" in out
    assert "Why:" in out and "llama.cpp keeps one prompt per slot" in out


def test_burstgpt_sample_says_its_skipped_row(tmp_path, capsys, monkeypatch):
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as srv:
        out = _console(srv.url, tmp_path, capsys, monkeypatch, "--dataset", "burstgpt", "--dataset-path",
                       str(TRACES / "burstgpt.csv"), "--trace-speed", "50", "--warmup", "0")
    assert "burstgpt trace replay of 4 of 5 rows" in out
    assert "4 of 5 rows replayed; 1 skipped: 1 with 0 response tokens" in out


def test_plain_trace_and_sharegpt_samples(tmp_path, capsys, monkeypatch):
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as srv:
        d, _ = _bench(srv.url, tmp_path, capsys, monkeypatch, "--load-shape", "trace", "--trace",
                      str(TRACES / "requests.jsonl"), "--trace-speed", "20", "--warmup", "0")
        assert d["completed"] == 6 and d["total_output_tokens"] == 32 + 16 + 64 + 16 + 32 + 48
        s, _ = _bench(srv.url, tmp_path, capsys, monkeypatch, "--dataset", "sharegpt", "--dataset-path",
                      str(TRACES / "sharegpt.json"), "-n", "4", "--warmup", "0")
        assert s["completed"] == 4


def test_plain_trace_replay_says_what_it_skipped(tmp_path, capsys, monkeypatch):
    """--load-shape trace with a window and -n: the summary and console name the rows left out, by reason."""
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as srv:
        d, _ = _bench(srv.url, tmp_path, capsys, monkeypatch, "--load-shape", "trace", "--trace",
                      str(TRACES / "requests.jsonl"), "--trace-speed", "20", "--warmup", "0",
                      "--trace-start", "0.4", "-n", "3")
        out = _console(srv.url, tmp_path, capsys, monkeypatch, "--load-shape", "trace", "--trace",
                       str(TRACES / "requests.jsonl"), "--trace-speed", "20", "--warmup", "0",
                       "--trace-start", "0.4", "-n", "3")
    tr = d["trace"]
    # 6 rows: the first is before the window (0.0 < 0.4), then 5 left, of which -n 3 replays 3
    assert tr["rows_in_file"] == 6 and tr["entries_replayed"] == 3 == d["completed"] == d["num_prompts"]
    assert tr["skipped"] == {"outside_window": 1, "beyond_num_prompts": 2}
    assert "3 of 6 rows replayed; 3 skipped: 1 outside the --trace-start/--trace-duration window, 2 beyond --num-prompts" \
        in " ".join(out.split())
