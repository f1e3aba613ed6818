"""The probe's verdict on a real HTTP fake (moved from tests/unit/test_probe_summary.py: it starts a server)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("prefill_tok_s", [None, 20000.0])
def test_probe_verdict_on_a_fake(prefill_tok_s, tmp_path, monkeypatch):
    from phasescope.probing import probe
    from phasescope.testing import FakeServer

    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    with FakeServer(flavor="vllm", ttft_s=0.03, itl_s=0.003, prefill_tok_s=prefill_tok_s).running() as srv:
        res = probe(srv.url, api="openai", sizes=[100, 400], max_tokens=8, repeat=3, warmup=True, save=False,
                    out_dir=tmp_path / "out")
    v = res["verdict"]
    t = " ".join(v["text"])
    assert ("separate phase" in t) == v["phases_separate"], t
    # the sentence follows the intervals: a loaded machine may leave a TTFT unstable, and then it says so
    ttft_unstable = any(u["figure"] == "ttft_s" for u in v["unstable"])
    assert ttft_unstable == t.startswith("cannot tell how TTFT scales"), (v["unstable"], t)
    if prefill_tok_s is None:  # TTFT does not grow with the prompt: no rate to report
        assert v["marginal_prefill_tok_s"] is None and v["phases_separate"] is False
        assert ttft_unstable or "barely grew" in t, t
    elif not ttft_unstable:  # +300 tokens at 20,000 tok/s = +15 ms, well above noise: the rate is the fake's
        assert v["marginal_prefill_tok_s"] == pytest.approx(prefill_tok_s, rel=0.35)
