"""explain's queue rule with the server's spans as evidence (diagnose/span_rules.py, issue 35 item 3): the spans'
figures ride on the finding; where the spans and explain's own inference disagree the rule says "cannot tell"
with both figures; where the spans' interval straddles the lines they decide nothing; where explain cannot tell
and the spans can, the spans' figure is the finding."""

from __future__ import annotations

from typing import Any

from phasescope.diagnose import diagnose
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.queue import QueueResult


def _q(queueing: bool | None, reason: str = "waiting > 0 in 80% of /metrics samples (max 3)") -> QueueResult:
    return QueueResult(ExperimentInfo(name="queue"), concurrency=8, metrics_available=True, metrics_source="vllm",
                       waiting_max=3.0 if queueing else 0.0, waiting_share=0.8 if queueing else 0.0, running_max=4.0,
                       ttft_p99_s=2.0, queueing=queueing, reason=reason)


def _spans(queue: tuple[float, float, float], n: int = 12) -> dict[str, Any]:
    v, lo, hi = queue
    rest = 1 - v

    def sh(x: float, a: float, b: float) -> dict[str, Any]:
        return {"value": x, "ci": [a, b], "n": n}

    return {"queue": {"sentence": f"Of p99 TTFT (1 request, mean 2,000.0 ms), {v * 100:.0f} % was queue, … "
                                  f"(queue and prefill from the server's spans)", "spans_joined": n, "spans_missing": 0,
                      "all": {"n": n, "shares": {"queue": sh(v, lo, hi), "prefill": sh(rest / 2, 0, rest),
                                                 "network_client": sh(rest / 2, 0, rest)}}}}


def test_agreeing_spans_ride_on_the_queue_finding_as_the_servers_evidence() -> None:
    d = diagnose({"queue": _q(True)}, engine="vllm", spans=_spans((0.8, 0.72, 0.88)))
    f = d.get("ttft-queueing")
    assert f is not None and not d.undecided
    ev = {e.what: e for e in f.evidence if "the server's own OTLP spans" in e.source}
    assert "where p99 TTFT went" in ev and "from the server's spans" in str(ev["where p99 TTFT went"].value)
    q = next(e for w, e in ev.items() if w.startswith("queue share of all TTFT"))
    assert q.value == 80.0 and "72–88 %" in q.what and "12 of 12 requests joined" in q.source


def test_a_queue_explain_infers_that_the_spans_put_near_zero_is_said_not_claimed() -> None:
    d = diagnose({"queue": _q(True)}, engine="vllm", spans=_spans((0.01, 0.0, 0.03)))
    assert "ttft-queueing" not in d.ids()
    (why,) = [u.reason for u in d.undecided if u.id == "ttft-queueing"]
    assert "disagree" in why and "waiting > 0 in 80% of /metrics samples" in why  # explain's figure
    assert "the queue at 1 % (0–3 %) of all TTFT over 12 requests" in why and "Cannot tell which holds" in why


def test_no_queue_explain_found_where_the_spans_put_most_of_ttft_in_the_queue_is_said() -> None:
    d = diagnose({"queue": _q(False, "waiting stayed at 0 in /metrics")}, engine="vllm",
                 spans=_spans((0.7, 0.6, 0.8)))
    assert "ttft-queueing" not in d.ids()
    (why,) = [u.reason for u in d.undecided if u.id == "ttft-queueing"]
    assert "explain found no queue" in why and "waiting stayed at 0 in /metrics" in why
    assert "the queue at 70 % (60–80 %)" in why and "at or above 50 %" in why


def test_spans_whose_interval_straddles_the_lines_decide_nothing() -> None:
    # 5–60 %: neither wholly below 10 % nor wholly at or above 50 %: no disagreement either way
    for queueing in (True, False):
        d = diagnose({"queue": _q(queueing)}, engine="vllm", spans=_spans((0.3, 0.05, 0.6)))
        assert not [u for u in d.undecided if "disagree" in u.reason]
        assert ("ttft-queueing" in d.ids()) is queueing


def test_where_explain_cannot_tell_the_spans_can() -> None:
    q = _q(None, "no /metrics queue gauge and no server-timed prefill: cannot tell")
    d = diagnose({"queue": q}, engine="vllm", spans=_spans((0.8, 0.7, 0.9)))
    f = d.get("ttft-queueing")
    assert f is not None and "the server's own spans put the queue at 80 % (70–90 %)" in f.cause
    # without spans it stays "cannot tell"
    d = diagnose({"queue": q}, engine="vllm")
    assert "ttft-queueing" not in d.ids() and "ttft-queueing" in d.undecided_ids()


def _ps() -> Any:
    from phasescope.experiments.prompt_scaling import PromptScalingResult, QuadraticFit, ScalingPoint

    a, b = 0.4, 1e-3
    pts = [ScalingPoint(n, 2, a + b * n, None, None, None, 50.0, None) for n in (32, 256, 2048)]
    return PromptScalingResult(ExperimentInfo(name="prompt-scaling"), points=pts, fit=QuadraticFit(a, b, 0.0, 0.99, 3),
                               fixed_overhead_s=a, prefill_tok_s=1000.0, quadratic_share=0.0,
                               ttft_growth_x=pts[-1].ttft_s / pts[0].ttft_s, ttft_grows=True, decode_change_pct=-3.0,
                               decode_flat=True)


def test_prompt_cost_and_fixed_overhead_carry_the_spans_split() -> None:
    spans = {"prompt-scaling": _spans((0.02, 0.0, 0.05))["queue"]}
    d = diagnose({"prompt-scaling": _ps()}, spans=spans)
    for fid in ("prompt-cost", "ttft-fixed-overhead"):
        f = d.get(fid)
        assert f is not None, (fid, d.undecided)
        whats = [e.what for e in f.evidence if "prompt-scaling: the server's own OTLP spans" in e.source]
        assert "where p99 TTFT went" in whats
        assert any(w.startswith("network and client share of all TTFT") for w in whats), whats
    # without spans: the same findings, no span evidence
    d = diagnose({"prompt-scaling": _ps()})
    f = d.get("prompt-cost")
    assert f is not None and not [e for e in f.evidence if "OTLP spans" in e.source]


def test_a_prefill_rate_the_spans_say_was_queue_is_not_claimed() -> None:
    spans = {"prompt-scaling": _spans((0.8, 0.7, 0.9))["queue"]}
    d = diagnose({"prompt-scaling": _ps()}, spans=spans)
    assert "prompt-cost" not in d.ids()
    (why,) = [u.reason for u in d.undecided if u.id == "prompt-cost"]
    assert "disagree" in why and "prefill at 1000 tok/s" in why and "the queue at 80 % (70–90 %)" in why
