"""explain's calibration behind a slow network (issue 30 held-out matrix): its share of the budget
counts its requests, not the tokenizer round-trips that build their prompts. A TGI server whose every
answer starts 150 ms late spent 3.4 s of a 2.2 s share on /tokenize, its calibration requests were cut
at the share's end, and explain stopped with "the server failed the calibration request" — the server
had failed nothing."""

from __future__ import annotations

import pytest

from phasescope.experiments.suite import run_explain
from phasescope.testing.behaviour_fake import Behaviour, running_behaviour_fake


@pytest.mark.slow
def test_calibration_share_is_not_spent_on_building_its_prompts():
    b = Behaviour(flavour="tgi", slots=8, decode_step_s=0.005, prefill_s_per_token=0.0001, chunked_prefill_tokens=16,
                  network_rtt_s=0.15, report_cached_tokens=False, max_model_len=16384)
    with running_behaviour_fake(b) as fake:
        rep = run_explain(fake.url, budget_s=22.0, names=["prompt-scaling"], save=False)
        seen = fake.requests_seen
    doc = rep.to_json()
    assert seen >= 3 + 6  # the calibration's three requests and the experiment's
    assert doc["experiments"]["prompt-scaling"]["points"], doc["experiments"]["prompt-scaling"]
