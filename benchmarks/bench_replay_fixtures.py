"""Write tests/data/bench_replay/: small real bench runs on the ground-truth fake, their records and the
summary :func:`tests.bench_replay.replay` gives them, frozen as the numbers a refactor of ``load/`` must
reproduce key for key (tests/unit/test_bench_summary_replay.py).

Run it only with the code whose numbers are to be frozen (it was run once, before the workload × driver
refactor of issue 32 item 3)::

    .venv/bin/python benchmarks/bench_replay_fixtures.py [CASE ...]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bench_replay import DATA, load_case, replay  # noqa: E402

from phasescope.load.bench import BenchConfig, run_bench  # noqa: E402
from phasescope.testing.fakeserver import FakeServer  # noqa: E402

TRACES = ROOT / "examples" / "traces"
COMMON: dict[str, Any] = dict(store=False, server_metrics=False, nvml=False, prewarm=False)

CASES: dict[str, dict[str, Any]] = {
    "random": dict(num_prompts=16, max_concurrency=3, input_len=48, output_len=6, range_ratio=0.25, seed=3,
                   goodput={"ttft": 500.0, "tpot": 50.0}, percentiles=(50.0, 90.0, 99.0)),
    "random_steady": dict(num_prompts=20, max_concurrency=2, input_len=32, output_len=5, steady_state=True),
    "random_rate_prefix": dict(num_prompts=12, request_rate=200.0, input_len=40, output_len=4, prefix_len=16,
                               prefix_groups=2),
    "workers": dict(num_prompts=12, max_concurrency=4, input_len=32, output_len=4, workers=2),
    "sharegpt": dict(dataset="sharegpt", dataset_path=str(TRACES / "sharegpt.json"), num_prompts=6, output_len=5),
    "jsonl": dict(dataset="jsonl", dataset_path=str(DATA / "_inputs" / "prompts.jsonl"), num_prompts=5, max_concurrency=2),
    "trace": dict(shape="trace", trace_path=str(TRACES / "requests.jsonl"), trace_speed=20.0, num_prompts=4),
    "mooncake": dict(dataset="mooncake", dataset_path=str(TRACES / "mooncake.jsonl"), trace_speed=20.0,
                     output_len=4, warmup=0),
    "burstgpt": dict(dataset="burstgpt", dataset_path=str(TRACES / "burstgpt.csv"), trace_speed=50.0,
                     output_len=4, trace_duration=30.0),
    "conversation": dict(dataset="conversation", users=2, sessions=3, turns="3", turn_input_len=24,
                         system_prompt_len=32, output_len=4, think_time_s="0.01"),
    "trials": dict(num_prompts=8, max_concurrency=2, input_len=32, output_len=4, trials=3),
}


def make(name: str, kw: dict[str, Any]) -> None:
    out = DATA / name
    with tempfile.TemporaryDirectory() as tmp, \
            FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, prefill_tok_s=20000, itl_s=0.001).running() as srv:
        cfg = BenchConfig(url=srv.url, out_dir=str(Path(tmp) / "o"), **{**COMMON, **kw})
        res = run_bench(cfg)
        recs = [*res.run.records, *res.run.warmup_records]
        s = res.summary
    trials = s.get("trials")
    facts = []
    for i in range(len(trials) if trials else 1):
        t = trials[i] if trials else s
        facts.append({"t0_ns": 0, "sent": t["sent"], "cancelled": t["cancelled"],
                      "health": t["runner_health"]})
    if not trials:  # the run's own clock start, which the records alone do not hold
        facts[0]["t0_ns"] = res.run.t0_ns
        facts[0]["wall_t0_ns"] = res.run.wall_t0_ns
    else:
        facts = _trial_t0s(recs, facts)
    params = cfg.params()
    params.update(url=None, out_dir=None)
    for k in ("dataset_path", "trace_path"):  # the case reads its inputs from any checkout
        if params.get(k):
            params[k] = "{ROOT}/" + str(Path(params[k]).resolve().relative_to(ROOT))
    if out.exists():
        shutil.rmtree(out)  # (the shared inputs live in _inputs/)
    out.mkdir(parents=True)
    case = {"name": name, "params": params,
            "target": {"url": "http://127.0.0.1:1", "api": s["backend"], "model": s["model_id"], "engine": s["engine"]},
            "trials": facts}
    (out / "case.json").write_text(json.dumps(case, indent=1, default=str) + "\n")
    (out / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in recs))
    case, recs = load_case(out)
    got = replay(case, recs)
    (out / "expected.json").write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    for k in ("completed", "median_ttft_ms", "total_output_tokens", "p99_itl_ms"):  # the replay is the run's own
        if k in s and not s.get("trials"):
            assert got[k] == json.loads(json.dumps(s[k])), (name, k, got[k], s[k])
    print(f"{name}: {len(recs)} records, {len(got)} keys")


def _trial_t0s(recs: list[Any], facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials: the earliest scheduled time of each trial's records stands for its t0 (the runner's own
    t0 is not in the summary); the replay only needs one fixed value."""
    for i, f in enumerate(facts, start=1):
        mine = [r for r in recs if r.tags.get("trial") == i and not r.tags.get("warmup")]
        f["t0_ns"] = min((r.t_scheduled_ns or r.t_start_ns) for r in mine) if mine else 0
    return facts


if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    for n in names:
        make(n, CASES[n])
