"""Issue 34 item 4's done-when on the embedded engine: an agentic replay (the OpenTelemetry sample trace: a
first call, then two sub-agent calls that overlap in time and start with its messages) shows the sub-agents'
prefix reuse in llama.cpp's ``timings.cache_n``. Counters only, never timing; a few small calls, bounded by
``--duration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasescope.load.bench import BenchConfig, run_bench

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


@pytest.mark.engine
def test_otel_replay_subagents_reuse_the_parents_prompt_in_cache_n(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = BenchConfig(url=engine.url, dataset="agentic", dataset_path=str(TRACES / "otel_agent.json"), users=1,
                      sessions=1, trace_speed=20.0, duration_s=45.0, store=False, out_dir=str(tmp_path),
                      server_metrics=False, nvml=False)
    r = run_bench(cfg)
    a = r.summary["agentic"]
    assert a["calls_ok"] == a["calls_sent"] == 4, r.summary.get("first_error")
    assert a["kv_reuse"]["source"] == "timings.cache_n" and a["forks"] == 1 and a["subagents"] == 2
    by_id = {x.id: x for x in r.records}
    subs = [x for x in r.records if x.tags.get("fork_parent")]
    assert len(subs) == 2
    parent = by_id[subs[0].tags["fork_parent"]]
    assert parent.tags["call"] == "span1"
    cache_n = sorted(int((x.server or {})["cache_n"]) for x in subs)
    p = int(parent.prompt_tokens or 0)
    print(f"parent span1 prompt {p}, sub-agents' cache_n {cache_n}, prompts {[x.prompt_tokens for x in subs]}, "
          f"span4 cache_n {[(x.server or {}).get('cache_n') for x in r.records if x.tags.get('call') == 'span4']}, "
          f"subagent_prefix_reuse {a['subagent_prefix_reuse']}")
    # the sub-agent that lands on the parent's slot finds the parent's prompt there: all of it but the few
    # tokens llama.cpp re-evaluates after its last context checkpoint (Gemma 3 is a sliding-window model)
    assert p - 16 <= cache_n[-1] <= p, (p, cache_n)
    assert a["subagent_prefix_reuse"]["reused"] >= 1
