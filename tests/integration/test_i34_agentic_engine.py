"""Issue 34 item 4's done-when on the embedded engine: an agentic replay (the Weka sample trace: a main agent
that forks two sub-agents sharing its first four 64-token blocks) shows the sub-agents' prefix reuse in
llama.cpp's ``timings.cache_n``. Counters only, never timing; a few small calls, bounded by ``--duration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasescope.load.bench import BenchConfig, run_bench

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


@pytest.mark.engine
def test_weka_replay_subagents_reuse_the_shared_prefix_in_cache_n(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = BenchConfig(url=engine.url, dataset="agentic", dataset_path=str(TRACES / "weka_agent.jsonl"), users=1,
                      sessions=1, trace_speed=20.0, duration_s=45.0, store=False, out_dir=str(tmp_path),
                      server_metrics=False, nvml=False)
    r = run_bench(cfg)
    a = r.summary["agentic"]
    assert a["calls_ok"] == a["calls_sent"] == 6, r.summary.get("first_error")
    assert a["kv_reuse"]["source"] == "timings.cache_n" and a["forks"] == 1 and a["subagents"] == 2
    by_id = {x.id: x for x in r.records}
    subs = [x for x in r.records if x.tags.get("fork_parent")]
    assert len(subs) == 2
    parent = by_id[subs[0].tags["fork_parent"]]
    assert parent.tags["call"] == "main.t2"
    cache_n = sorted(int((x.server or {})["cache_n"]) for x in subs)
    shared = 4 * 64  # the four blocks (hash ids 1-4) the sub-agents share with the parent's prompt
    print(f"parent main.t2 prompt {parent.prompt_tokens}, sub-agents' cache_n {cache_n}, "
          f"prompt {[x.prompt_tokens for x in subs]}, subagent_prefix_reuse {a['subagent_prefix_reuse']}")
    # the sub-agent that lands on the parent's slot reuses the whole shared prefix (the template's first
    # tokens + the four blocks; a block boundary may merge a token or two when the texts are joined)
    assert cache_n[-1] >= shared - 8, cache_n
    # and never more than the parent's prompt it shares
    assert cache_n[-1] <= int(parent.prompt_tokens or 0)
    # the main call after the fork reuses the same prefix too (whichever slot it lands on holds it now)
    after = next(x for x in r.records if x.tags.get("call") == "main.t3")
    assert int((after.server or {})["cache_n"]) >= shared - 8
