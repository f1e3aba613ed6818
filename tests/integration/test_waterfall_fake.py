"""The run-level waterfall on the behaviour fake answering as llama-server (its ``timings`` per response):
a server that queues requests behind one slot puts most of p99 TTFT in the queue; long prompts on an idle
server put it in prefill. Designed differences ≥ 3× between the phases; assertions on the fake's designed
truth and on the server's own timings, never on a ratio of wall times."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from phasescope.cli import app
from phasescope.testing.behaviour_fake import Behaviour, running_behaviour_fake

BASE = dict(flavour="llamacpp", prefix_cache=False, overhead_s=0.001, decode_step_s=0.008, metrics=False)


def _bench(url: str, *args: str) -> dict[str, Any]:
    r = CliRunner().invoke(app, ["bench", url, "--api", "llamacpp", "--no-server-metrics", "--json", *args],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _records(run_id: str) -> list[Any]:
    from phasescope.store import open_store

    return open_store(None).load_records(run_id)


def test_one_slot_under_load_puts_p99_ttft_in_the_queue(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "runs.db"))
    # designed: prefill 64 × 50 µs ≈ 3 ms; each request holds the one slot for 16 decode steps ≈ 130 ms, so
    # with 8 in flight the late ones wait ~7 × 130 ms: queue ≥ 100× prefill at the tail
    with running_behaviour_fake(Behaviour(slots=1, prefill_s_per_token=5e-5, **BASE)) as fake:
        out = _bench(fake.url, "-n", "24", "--max-concurrency", "8", "--input-len", "64", "--output-len", "16")
    wf = out["waterfall"]
    assert wf["spans_joined"] == 0 and wf["unattributed"] == 0 and wf["derived"] is True
    p99 = wf["bands"]["p99"]
    assert p99["shares"]["queue"]["value"] > 0.5
    assert p99["queue_s"] >= 3 * p99["prefill_s"]
    assert {"queue_s", "prefill_s", "decode_s", "network_client_s"} <= set(p99)
    assert wf["sentence"].startswith("Of p99 TTFT")
    # each request's prefill is the server's own prompt time, and queue is never negative
    from phasescope.measure.waterfall import request_waterfall

    for r in _records(out["run_id"]):
        w = request_waterfall(r)
        if w is None:
            continue
        assert w["queue_s"] >= 0
        assert w["prefill_s"] == pytest.approx(r.server["prefill_s"], abs=1e-9) or w["clamped"]
        assert w["computed_tokens"] == r.server["prompt_n"]


def test_long_prompts_on_an_idle_server_put_p99_ttft_in_prefill(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "runs.db"))
    # designed: 2,000 prompt tokens × 100 µs = 200 ms of prefill, one request at a time: no queue to wait in
    with running_behaviour_fake(Behaviour(slots=4, prefill_s_per_token=1e-4, **BASE)) as fake:
        out = _bench(fake.url, "-n", "6", "--max-concurrency", "1", "--input-len", "2000", "--output-len", "4")
    p99 = out["waterfall"]["bands"]["p99"]
    assert p99["shares"]["prefill"]["value"] > 0.6
    assert p99["prefill_s"] >= 3 * p99["queue_s"]
    assert p99["prefill_s"] >= 0.19  # the server's prompt_ms: the designed 200 ms (a busy host only lengthens it)
