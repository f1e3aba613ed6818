"""prefill-interference's stall is a gap the injected prompt's *prefill* held: a gap that starts after
that prompt's first token is decode next to a longer context, not prefill. The held-out matrix's TGI
server with chunked prefill (16-token pieces, 0.2 of a step) and decode +1/300 of a step per context
token got "froze running streams … (3×)": the streams slowed once the 600-token prompt joined the batch."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from explain_synth import rec  # noqa: E402

from phasescope.experiments import prefill_interference  # noqa: E402

PI = prefill_interference.NAME


def _streams(after_first: float) -> list:
    """3 streams at 20 ms a token; the injection sent at 1.0 s prefills in chunks until its first token at
    1.49 s (the streams' gaps 24 ms meanwhile); from 1.5 s every gap is ``after_first``."""
    rs = []
    for i in range(3):
        gaps, t = [], 0.05
        while t < 1.0:
            gaps.append(0.02)
            t += 0.02
        while t < 1.5:
            gaps.append(0.024)
            t += 0.024
        gaps += [after_first] * 30
        rs.append(rec(PI, "stream", ttft=0.05, gaps=gaps, prompt=32, stream=i))
    rs.append(rec(PI, "inject", t0=1.0, ttft=0.49, n_out=4, prompt=600))
    return rs


def test_slower_decode_after_the_prompt_joined_is_no_prefill_stall():
    r = prefill_interference.analyze(_streams(after_first=0.07))
    assert r.interference is False, r.reason
    assert r.spike_x is not None and r.spike_x < 1.5


def test_a_gap_the_prefill_held_still_counts():
    # the same streams, but one 0.5 s gap from 1.0 s (no chunking): the stall starts before the first token
    rs = []
    for i in range(3):
        gaps, t = [], 0.05
        while t < 1.0:
            gaps.append(0.02)
            t += 0.02
        gaps += [0.52] + [0.02] * 30
        rs.append(rec(PI, "stream", ttft=0.05, gaps=gaps, prompt=32, stream=i))
    rs.append(rec(PI, "inject", t0=1.0, ttft=0.5, n_out=4, prompt=2000))
    r = prefill_interference.analyze(rs)
    assert r.interference is True and r.chunked_prefill_likely is False


def test_one_hiccup_during_a_chunked_prefill_is_no_stall():
    # the held-out matrix's SGLang server, 0.2-step chunks, on a busy host: during a 0.85 s prefill the
    # streams kept receiving tokens (59 each) at 1.2x their usual gap, and one step of the server came
    # 3.5x late for all three at once; explain said the prompt "froze running streams (3.5x)". A chunked
    # prefill stalls the streams once per chunk, so the claim needs a second long gap in each stream.
    rs = []
    for i in range(3):
        gaps, t = [], 0.05
        while t < 1.0:
            gaps.append(0.0144)
            t += 0.0144
        n = 0
        while t < 1.85:
            g = 0.05 if n == 30 else 0.017
            gaps.append(g)
            t += g
            n += 1
        gaps += [0.0144] * 30
        rs.append(rec(PI, "stream", ttft=0.05, gaps=gaps, prompt=32, stream=i))
    rs.append(rec(PI, "inject", t0=1.0, ttft=0.85, n_out=4, prompt=1300))
    r = prefill_interference.analyze(rs)
    assert r.spike_x is not None and r.spike_x > 3  # the hiccup is seen ...
    assert r.interference is not True, r.reason  # ... and not called a stall
