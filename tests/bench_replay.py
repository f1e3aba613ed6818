"""Replay a stored bench run's records through the summary, without a server: the frozen-numbers check
that refactoring ``load/`` leaves every summary key as it was (tests/unit/test_bench_summary_replay.py;
the fixtures in tests/data/bench_replay/ were written by benchmarks/bench_replay_fixtures.py with the
code before the workload × driver refactor).

A case is a folder with ``case.json`` (the run's config params, its target's api/model/url, and each
trial's runner facts: t0, sent, cancelled, health...), ``records.jsonl`` (measured and warm-up
records, as the run stored them) and ``expected.json`` (what :func:`replay` gave then). The replay is
the part of a bench run after the load: the summary (:func:`phasescope.load.bench.assemble_summary`),
the workload's sections (turns, conversation, trace), the prompt rate, and ``--trials``' run-level
summary; the host sampler, /metrics, GPU telemetry and ceilings are left out (they read the machine,
not the records)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from phasescope.apis.base import Target, Timeouts
from phasescope.load.bench import BenchConfig
from phasescope.load.health import RunnerHealth
from phasescope.load.runner import RunResult
from phasescope.measure.records import RequestRecord

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "bench_replay"

#: keys that depend on the day or the machine, not on the records
VOLATILE = ("date",)


def config_from_params(p: dict[str, Any]) -> BenchConfig:
    p = dict(p)
    p["timeouts"] = Timeouts(**p["timeouts"])
    for k in ("dataset_path", "trace_path"):
        if isinstance(p.get(k), str):
            p[k] = p[k].replace("{ROOT}", str(ROOT))
    p["percentiles"] = tuple(p["percentiles"])
    p["request_rate"] = math.inf if p["request_rate"] == "inf" else p["request_rate"]
    return BenchConfig(**p)


def load_case(folder: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    case = json.loads((folder / "case.json").read_text())
    recs = [RequestRecord.from_dict(json.loads(line)) for line in (folder / "records.jsonl").read_text().splitlines()
            if line.strip()]
    return case, recs


def _result(facts: dict[str, Any], recs: list[RequestRecord]) -> RunResult:
    res = RunResult(records=[r for r in recs if not r.tags.get("warmup")],
                    warmup_records=[r for r in recs if r.tags.get("warmup")])
    for k, v in facts.items():
        if k == "health":
            res.health = RunnerHealth(**v)
        else:
            setattr(res, k, v)
    return res


def _clean(d: Any) -> Any:
    # JSON as stored, with this checkout's path written as {ROOT} (trace paths)
    return json.loads(json.dumps(d, default=str).replace(str(ROOT), "{ROOT}"))


def replay(case: dict[str, Any], recs: list[RequestRecord]) -> dict[str, Any]:
    """The summary the records give under the case's config (see the module docstring)."""
    from phasescope.load import bench as B
    from phasescope.load.bench_ceilings import prompt_tok_per_ttft_s

    cfg = config_from_params(case["params"])
    t = case["target"]
    target = Target(base_url=t["url"], api=t["api"], model=t["model"], engine=t.get("engine"))
    wl = _workload(cfg)
    sched = wl["schedule"]()
    trials = case["trials"]
    summaries = []
    for i, facts in enumerate(trials, start=1):
        mine = [r for r in recs if r.tags.get("trial") == i] if len(trials) > 1 else recs
        res = _result(facts, mine)
        wl["before_summary"](res)
        s = wl["assemble"](cfg, target, res, None, sched, host=None)
        wl["sections"](s, res)
        s["prompt_tok_per_ttft_s"] = prompt_tok_per_ttft_s(res.records)
        if len(trials) > 1:
            s["trial"] = i
            s["status"] = B.run_status(s, res)
        summaries.append(s)
    if len(trials) == 1:
        out = summaries[0]
    else:
        from phasescope.load.trials import combine_trials

        out = combine_trials(cfg.trials, summaries)
    out = _clean(out)
    for k in VOLATILE:
        out.pop(k, None)
    for tr in out.get("trials") or []:
        for k in VOLATILE:
            tr.pop(k, None)
    return out


def _workload(cfg: BenchConfig) -> dict[str, Any]:
    """The schedule and the workload's summary steps, through whatever API ``load`` has for them."""
    from phasescope.load import bench as B

    if hasattr(B, "workload_for"):  # the workload × driver shape
        wl = B.workload_for(cfg)
        wl.check()

        def assemble(cfg: Any, target: Any, res: Any, server: Any, sched: Any, host: Any = None) -> Any:
            return B.assemble_summary(cfg, target, res, server, sched, host=host, workload=wl)

        return {"schedule": wl.schedule, "before_summary": wl.after_run, "sections": wl.add_sections,
                "assemble": assemble}
    # the shape before: dataset branches in bench.py and traffic.py
    from phasescope.load import traffic

    if cfg.dataset in ("conversation", "mooncake", "burstgpt"):
        traffic.check_workload(cfg)

    def before(res: RunResult) -> None:
        if cfg.dataset == "conversation":
            from phasescope.load.conversation_stats import expected_cache_share

            cfg.implied_hit_rate = expected_cache_share(res.records)

    def sections(s: dict[str, Any], res: RunResult) -> None:
        if cfg.dataset in ("conversation", "mooncake", "burstgpt"):
            traffic.add_workload_sections(cfg, s, res)
        elif sched_box[0].trace_facts is not None:
            s["trace"] = dict(sched_box[0].trace_facts)

    sched_box: list[Any] = []

    def schedule() -> Any:
        sched_box.append(B.make_schedule(cfg))
        return sched_box[0]

    return {"schedule": schedule, "before_summary": before, "sections": sections, "assemble": B.assemble_summary}


def diff(expected: Any, got: Any, path: str = "") -> list[str]:
    """Every key path where ``got`` differs from ``expected`` (floats compared exactly)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(got, dict):
        for k in sorted(set(expected) | set(got)):
            if k not in got:
                out.append(f"{path}.{k}: missing")
            elif k not in expected:
                out.append(f"{path}.{k}: new key (added; allowed only where the test says so)")
            else:
                out += diff(expected[k], got[k], f"{path}.{k}")
    elif isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for i, (a, b) in enumerate(zip(expected, got)):
            out += diff(a, b, f"{path}[{i}]")
    elif expected != got and not (isinstance(expected, float) and isinstance(got, float)
                                  and math.isnan(expected) and math.isnan(got)):
        out.append(f"{path}: {expected!r} → {got!r}")
    return out
