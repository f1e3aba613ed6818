"""Issue 30 item 8: bench names prompt ÷ TTFT for what it is under load, and sets the run beside its
ceilings where the model and device are known — computed with probe's own functions."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from phasescope.apis.base import Target
from phasescope.load.bench_ceilings import add_bench_ceilings, console_lines
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000


def _rec(i, start_ms, ttft_ms, n_out=11, gap_ms=10, prompt=512):
    t = (start_ms + ttft_ms) * MS
    ev = [Event(t + k * gap_ms * MS, "content", 1, 1) for k in range(n_out)]
    return RequestRecord(id=f"r{i}", api="openai", target="t", model="m", prompt_tokens=prompt, output_tokens=n_out,
                         t_start_ns=start_ms * MS, events=ev, t_done_ns=ev[-1].t_ns + MS, ok=True, tags={"index": i})


RECS = [_rec(0, 0, 100), _rec(1, 0, 200), _rec(2, 0, 400), _rec(3, 0, 800)]  # 4 at once, TTFT grows by queueing


@pytest.fixture
def local_l40s(tmp_path, monkeypatch):
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    from phasescope.theory.devices import get_device, save_local_device

    save_local_device(dataclasses.replace(get_device("l40s"), id="local"))


def test_prompt_rate_under_load_is_named_honestly():
    s = {"output_throughput": 100.0}
    add_bench_ceilings(SimpleNamespace(url="http://10.0.0.1:8000"), Target("http://10.0.0.1:8000", model="x"), RECS, s)
    # median of 512/0.1, 512/0.2, 512/0.4, 512/0.8 = (2560 + 1280) / 2
    assert s["prompt_tok_per_ttft_s"] == pytest.approx(1920.0)
    text = "\n".join(console_lines(s))
    assert "Prompt tokens per TTFT second, under load" in text and "not the prefill speed" in text
    assert "prefill tok/s" not in text


def test_no_device_guessed_for_a_remote_server(local_l40s):
    s = {"output_throughput": 100.0}
    add_bench_ceilings(SimpleNamespace(url="http://10.0.0.1:8000"), Target("http://10.0.0.1:8000", model="llama-3.1-8b"),
                       RECS, s)
    assert s["ceilings"]["available"] is False and "remote" in s["ceilings"]["reason"]


def test_ceilings_for_a_catalog_model_on_this_machine(local_l40s):
    from phasescope.probing.ceilings import ceilings
    from phasescope.theory.devices import get_device
    from phasescope.theory.models import load_model_spec

    s = {"output_throughput": 300.0}
    add_bench_ceilings(SimpleNamespace(url="http://127.0.0.1:8000"), Target("http://127.0.0.1:8000", model="llama-3.1-8b"),
                       RECS, s)
    c = s["ceilings"]
    assert c["available"] is True
    # the same numbers probe computes for that prompt (one function, not a copy)
    ref = ceilings(load_model_spec("llama-3.1-8b"), get_device("local"), [{"prompt_tokens": 512}])["sizes"][0]
    row = c["sizes"][0]
    assert row["prompt_tokens"] == 512
    assert row["decode_ceiling_tok_s"] == pytest.approx(ref["decode_ceiling_tok_s"])
    assert row["prefill_floor_s"] == pytest.approx(ref["prefill_floor_s"])
    # 4 requests of 200 ms each... in flight together: the mean in flight is Σ spans ÷ run span
    spans = [r.t_done_ns - r.t_start_ns for r in RECS]
    assert c["batch"] == pytest.approx(sum(spans) / max(r.t_done_ns for r in RECS))
    assert c["aggregate_decode_efficiency"] == pytest.approx(300.0 / c["aggregate_decode_ceiling_tok_s"])
    line = [x for x in console_lines(s) if x.startswith("Ceilings")][0]
    assert "one stream decodes ≤" in line and "a 512-token prefill needs ≥" in line


def test_report_card_shows_the_stored_ceilings(local_l40s):
    from phasescope.report.sections import _bench_card

    s = {"output_throughput": 300.0}
    add_bench_ceilings(SimpleNamespace(url="http://127.0.0.1:8000"), Target("http://127.0.0.1:8000", model="llama-3.1-8b"),
                       RECS, s)
    html = _bench_card(s)
    assert "bench stores none" not in html and "512-token prefill ≥" in html
    s2 = {}
    add_bench_ceilings(SimpleNamespace(url="http://10.0.0.1:8000"), Target("http://10.0.0.1:8000", model="x"), RECS, s2)
    assert "no shape for x: pass --model-spec" in _bench_card(s2)


def test_bench_waterfall_attributes_ttft_with_each_prefill_beside_its_floor(local_l40s):
    recs = []
    for r in RECS:  # the server's own prompt time: 50 ms of each TTFT, the rest waited in its queue
        r = dataclasses.replace(r, server={"prefill_s": 0.05, "prompt_n": 512, "cache_n": 0, "decode_s": 0.1,
                                           "predicted_n": 11})
        recs.append(r)
    s = {"output_throughput": 300.0}
    add_bench_ceilings(SimpleNamespace(url="http://127.0.0.1:8000"), Target("http://127.0.0.1:8000", model="llama-3.1-8b"),
                       recs, s)
    wf = s["waterfall"]
    assert wf["spans_joined"] == 0 and wf["unattributed"] == 0 and wf["derived"] is True
    p99 = wf["bands"]["p99"]  # the 800 ms request: 750 ms queue, 50 ms prefill
    assert p99["queue_s"] == pytest.approx(0.75) and p99["prefill_s"] == pytest.approx(0.05)
    assert p99["decode_s"] == pytest.approx(0.1) and p99["network_client_s"] == 0
    assert p99["prefill_vs_floor"] is not None and p99["prefill_vs_floor"] > 1
    assert "Of p99 TTFT" in "\n".join(console_lines(s))


def test_bench_waterfall_without_server_timings_counts_them_missing():
    s = {"output_throughput": 100.0}
    add_bench_ceilings(SimpleNamespace(url="http://10.0.0.1:8000"), Target("http://10.0.0.1:8000", model="x"), RECS, s)
    assert s["waterfall"]["unattributed"] == 4 and s["waterfall"]["bands"] == {}
