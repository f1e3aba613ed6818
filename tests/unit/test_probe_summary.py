"""Probe metrics and the one-minute-test verdict on synthetic records."""

from __future__ import annotations

import pytest

from phasescope.measure.records import Event, RequestRecord
from phasescope.probing.runner import error_from_record
from phasescope.probing.summary import size_summary, verdict, warmup_summary
from phasescope import errors as E

MS = 1_000_000


def rec(ttft_ms: float, n_out: int, gap_ms: float, *, prompt: int, per_event: int = 1, conn_ms: float = 1.0,
        server=None, tag=None) -> RequestRecord:
    r = RequestRecord(id="x", api="openai", target="t", t_start_ns=0, t_conn_ready_ns=int(conn_ms * MS),
                      prompt_tokens=prompt, prompt_tokens_source="usage", output_tokens=n_out, output_tokens_source="usage",
                      ok=True, server=server, tags={"prompt_tokens_target": tag or prompt})
    t = int(ttft_ms * MS)
    r.events.append(Event(t // 2, "role"))
    r.events.append(Event(t, "content", 1))
    left = n_out - 1
    while left > 0:
        k = min(per_event, left)
        t += int(gap_ms * k * MS)
        r.events.append(Event(t, "content", k))
        left -= k
    r.events.append(Event(t + MS, "usage"))
    r.t_done_ns = t + 2 * MS
    return r


def test_size_summary_medians_and_per_token_itl_unaffected_by_coalescing():
    one = size_summary(200, [rec(100, 33, 20, prompt=200), rec(120, 33, 20, prompt=200), rec(110, 33, 20, prompt=200)])
    four = size_summary(200, [rec(110, 33, 20, prompt=200, per_event=4)])
    assert one["ttft_s"] == pytest.approx(0.110)
    assert one["ttft_net_s"] == pytest.approx(0.109)
    assert one["prefill_tok_s"] == pytest.approx(200 / 0.110)
    for s in (one, four):
        assert s["decode_tok_s"] == pytest.approx(50.0)
        assert s["itl_p50_s"] == pytest.approx(0.020)
    assert four["event_gap_p50_s"] == pytest.approx(0.080)  # what vLLM calls ITL
    assert one["server"] is None and one["ok"] == 3


def test_failed_records_are_counted_not_measured():
    bad = RequestRecord(id="b", api="openai", target="t", ok=False, error_kind="stream_broken", tags={"prompt_tokens_target": 200})
    s = size_summary(200, [rec(100, 9, 10, prompt=200), bad])
    assert s["requests"] == 2 and s["ok"] == 1 and s["ttft_s"] == pytest.approx(0.1)


def test_server_side_timings_are_summarised():
    srv = {"source": "llamacpp_timings", "prefill_s": 0.4, "ttft_s": 0.4, "decode_s": 1.0, "prompt_n": 200, "predicted_n": 51, "cache_n": 0}
    s = size_summary(200, [rec(420, 51, 20, prompt=200, server=srv)])
    assert s["server"]["prefill_tok_s"] == pytest.approx(500.0)
    assert s["server"]["decode_tok_s"] == pytest.approx(50.0)
    assert s["server"]["ttft_s"] == pytest.approx(0.4)


def test_verdict_prefill_scales_decode_flat():
    # three repeats each that agree (within 1 %): every claim rests on tight intervals
    small = size_summary(200, [rec(t, 65, 20, prompt=200) for t in (450, 452, 448)])
    big = size_summary(2000, [rec(t, 65, 21, prompt=2000) for t in (4500, 4520, 4490)])
    v = verdict([small, big])
    assert v["prompt_ratio"] == pytest.approx(10)
    assert v["ttft_ratio"] == pytest.approx(10)
    assert v["decode_change_pct"] == pytest.approx((20 / 21 - 1) * 100)
    assert v["phases_separate"] is True
    assert v["marginal_prefill_tok_s"] == pytest.approx(1800 / 4.05)


def test_verdict_flags_fixed_overhead_and_decode_drop():
    small = size_summary(200, [rec(t, 65, 20, prompt=200) for t in (100, 101, 99)])
    big = size_summary(2000, [rec(t, 65, 40, prompt=2000) for t in (120, 121, 119)])
    v = verdict([small, big])
    assert v["phases_separate"] is False
    assert "barely grew" in v["text"][0]
    assert "fell 50%" in v["text"][1]
    assert verdict([small]) is None


def test_warmup_cold_start_and_error_from_record():
    sizes = [size_summary(200, [rec(100, 9, 10, prompt=200)])]
    w = rec(900, 9, 10, prompt=200, server={"load_s": 0.7})
    w.tags["warmup"] = True
    ws = warmup_summary(w, sizes)
    assert ws["cold_start_s"] == pytest.approx(0.8) and ws["load_s"] == 0.7
    r = RequestRecord(id="e", api="openai", target="t", ok=False, error_kind="overloaded", error_message="busy", retry_after_s=3.0)
    exc = error_from_record(r)
    assert isinstance(exc, E.OverloadedError) and exc.retry_after_s == 3.0 and exc.exit_code == 3
    assert isinstance(error_from_record(RequestRecord(id="e", api="a", target="t", error_kind="auth")), E.AuthError)


def test_local_device_only_describes_servers_on_this_machine(tmp_path, monkeypatch) -> None:
    from phasescope.probing import ceilings as C

    assert C.is_loopback("http://127.0.0.1:8000") and C.is_loopback("http://localhost:1/v1")
    assert C.is_loopback("http://[::1]:8080")
    assert not C.is_loopback("http://10.0.0.5:8000") and not C.is_loopback("https://llm.example.com")
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path))  # no local device saved here
    dev, why = C.get_device(None, same_machine=False)
    assert dev is None and "remote server" in (why or "")
    dev, why = C.get_device("h100-sxm", same_machine=False)
    assert dev is not None and why is None
    dev, why = C.get_device(None, same_machine=True)
    assert dev is None and "phasescope hw" in (why or "")


def test_one_minute_sentence_never_contradicts_its_own_decode_change():
    # a measured fall of 11 % is not "independent of prompt length": the sentence names the KV reads;
    # "independent" only where the change is within a few percent
    from phasescope.probing.summary import verdict

    def text(d_hi: float) -> str:
        sizes = [_size(200, 0.27, 80.0), _size(2000, 2.7, d_hi)]
        return " ".join(verdict(sizes)["text"])

    for d_hi in (70.0, 72.0, 68.5):  # −12.5 %, −10 %, −14 %
        t = text(d_hi)
        assert "independent" not in t and "KV" in t, t
        assert f"fell {abs(d_hi / 80 - 1) * 100:.0f}%" in t, t
    assert "independent of prompt length" in text(79.0)
    assert "noise" in text(88.0) and "independent" not in text(88.0)


def test_one_minute_sentence_has_no_minus_zero_percent():
    # 125.0 → 124.9 tok/s rounds to "-0%", which reads as a measured fall; say it did not change
    from phasescope.probing.summary import verdict

    for d_hi in (79.9, 80.0, 80.3):
        sizes = [_size(200, 0.27, 80.0), _size(2000, 2.7, d_hi)]
        t = " ".join(verdict(sizes)["text"])
        assert "-0%" not in t and "+0%" not in t, t
        assert "independent of prompt length" in t, t


def _two(ttft_lo: float, ttft_hi: float, d_lo: float = 80.0, d_hi: float = 80.0, **extra) -> list[dict]:
    lo, hi = _size(200, ttft_lo, d_lo), _size(2000, ttft_hi, d_hi)
    lo.update(extra.get("lo", {}))
    hi.update(extra.get("hi", {}))
    return [lo, hi]


def _size(p: int, ttft: float, decode: float, rel: float = 0.02, n: int = 3) -> dict:
    """A size row as probe stores it, with a tight (±2 %) interval of 3 repeats around each figure."""
    return {"prompt_tokens": p, "ttft_s": ttft, "decode_tok_s": decode, "n": n,
            "ttft_s_ci": [ttft * (1 - rel), ttft * (1 + rel)],
            "decode_tok_s_ci": [decode * (1 - rel), decode * (1 + rel)]}


def test_verdict_text_says_separate_phases_only_when_the_flag_does():
    # a flat TTFT with a flat decode used to print "decode is a separate phase" beside phases_separate false:
    # the flag needs both halves of the test (TTFT tracks the prompt, decode does not), and so does the text
    seen = set()
    for ttft_hi in (0.27, 0.26, 0.6, 2.7, 3.5):      # flat, a fall, fixed overhead, scaling, steeper
        for d_hi in (80.0, 79.0, 72.0, 88.0, 60.0, 100.0):
            v = verdict(_two(0.27, ttft_hi, d_hi=d_hi))
            t = " ".join(v["text"])
            says = "separate phase" in t
            assert says == v["phases_separate"], (ttft_hi, d_hi, v["phases_separate"], t)
            if not v["phases_separate"] and v["decode_change_pct"] is not None and abs(v["decode_change_pct"]) <= 5:
                assert "independent of prompt length" in t, t  # the decode half still says what it saw
            seen.add(v["phases_separate"])
    assert seen == {True, False}


def test_marginal_prefill_rate_is_null_when_ttft_did_not_clearly_grow():
    dp = 2000 - 200
    # within a few percent, or lower: noise, not a rate
    for ttft_hi in (0.1, 0.1003, 0.101, 0.09):
        v = verdict(_two(0.1, ttft_hi))
        assert v["marginal_prefill_tok_s"] is None, (ttft_hi, v["marginal_prefill_tok_s"])
    # clearly above noise: Δprompt ÷ ΔTTFT
    for ttft_hi in (0.2, 1.0):
        assert verdict(_two(0.1, ttft_hi))["marginal_prefill_tok_s"] == pytest.approx(dp / (ttft_hi - 0.1))
    # a growth well past the relative band but inside the intervals (they overlap) is noise too
    wide = {"lo": {"ttft_s_ci": [0.09, 0.125]}}
    assert verdict(_two(0.1, 0.13, **wide))["marginal_prefill_tok_s"] is None
    v = verdict(_two(0.1, 0.13))
    assert v["marginal_prefill_tok_s"] == pytest.approx(dp / 0.03)
    lo_r, hi_r = v["marginal_prefill_tok_s_ci"]  # Δprompt over the ends of ΔTTFT's interval
    assert lo_r == pytest.approx(dp / (0.13 * 1.02 - 0.1 * 0.98)) and hi_r == pytest.approx(dp / (0.13 * 0.98 - 0.102))
    # a size whose repeats disagree (its interval wider than ±10 %) carries no rate, however far apart
    assert verdict(_two(0.1, 0.4, lo={"ttft_s_ci": [0.05, 0.2]}))["marginal_prefill_tok_s"] is None
