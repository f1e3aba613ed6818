"""``--sweep``: find where the server saturates, GuideLLM style, and the knee under an SLO.

Steps (``guidellm`` ``sweep`` profile): (1) **synchronous** — one request at a time
(``--max-concurrency 1``), the unloaded baseline rate r_sync; (2) **throughput** — everything at
once (rate = inf, the user's ``--max-concurrency`` cap if any), the maximum rate r_max the server
completes; (3) ``steps`` **constant rates** evenly spaced strictly between r_sync and r_max.
Every step sends the same workload size (``--num-prompts`` / ``--duration``).

The **knee** is the highest tested rate whose p99 of every ``--slo`` metric stays within its
limit (``ttft``, ``itl``, ``tpot``, ``e2el`` in ms; p99 per-token ITL, as the table shows). The
**saturation rate** is the first constant rate whose achieved request throughput falls below 90 %
of the requested rate (the server can no longer keep up; queues grow).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from phasescope.apis.base import Target
from phasescope.errors import InputError
from phasescope.jsonutil import dumps
from phasescope.load.bench import BenchConfig, BenchResult, run_bench
from phasescope.load.summary import parse_ms_pairs

SLO_KEYS = ("ttft", "ttfo", "itl", "tpot", "e2el")
TABLE_COLUMNS = ("profile", "requested_rate", "achieved_rate", "request_throughput", "output_throughput",
                 "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "mean_tpot_ms", "completed",
                 "failed", "within_slo")


def parse_slo(specs: Any) -> dict[str, float]:
    """``"ttft:500 itl:50"`` (or a list of such) → {"ttft": 500.0, "itl": 50.0} (ms, compared with p99)."""
    return parse_ms_pairs(specs, allowed=SLO_KEYS, usage="--slo takes ttft:MS ttfo:MS itl:MS tpot:MS e2el:MS")


def within_slo(summary: dict[str, Any], slo: dict[str, float]) -> bool | None:
    if not slo:
        return None
    for k, limit in slo.items():
        v = summary.get(f"p99_{k}_ms")
        if v is None or v > limit:
            return False
    return True


def sweep_rates(r_sync: float, r_max: float, steps: int) -> list[float]:
    """``steps`` rates strictly between the baseline and the maximum (evenly spaced)."""
    if steps <= 0 or not (r_max > r_sync > 0):
        return []
    width = (r_max - r_sync) / (steps + 1)
    return [r_sync + width * (i + 1) for i in range(steps)]


def table_row(profile: str, requested: float | None, s: dict[str, Any], slo: dict[str, float]) -> dict[str, Any]:
    row = {"profile": profile, "requested_rate": requested}
    for c in TABLE_COLUMNS[2:-1]:
        row[c] = s.get(c)
    row["within_slo"] = within_slo(s, slo)
    row["warnings"] = list(s.get("warnings") or [])
    return row


@dataclass
class SweepResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    knee: dict[str, Any] | None = None
    saturation_rate: float | None = None
    slo: dict[str, float] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        from phasescope.measure.warnings import coerce, to_json

        ws = []  # every step's warnings, each saying which step it is from
        for r in self.rows:
            for w in r.get("warnings") or []:
                ws.append(coerce(w).prefixed(f"{r['profile']} step: "))
        return {"schema": "phasescope.bench.sweep/1", "slo_ms": self.slo, "knee": self.knee,
                "saturation_rate": self.saturation_rate, "rows": self.rows, "runs": self.runs,
                "partial": self.partial, "warnings": to_json(ws)}


def find_knee(rows: list[dict[str, Any]], slo: dict[str, float]) -> dict[str, Any] | None:
    """Highest-rate row within the SLO (synchronous counts at its achieved rate)."""
    if not slo:
        return None
    best = None
    best_rate = -1.0
    for r in rows:
        if r["profile"] == "throughput" or not r.get("within_slo"):
            continue
        rate = r["requested_rate"] if r["requested_rate"] is not None else (r.get("request_throughput") or 0.0)
        if rate > best_rate:
            best, best_rate = r, rate
    return best


def saturation(rows: list[dict[str, Any]]) -> float | None:
    for r in rows:
        if r["profile"] == "rate" and r.get("request_throughput") is not None and r["requested_rate"]:
            if r["request_throughput"] < 0.9 * r["requested_rate"]:
                return float(r["requested_rate"])
    return None


def run_sweep(cfg: BenchConfig, *, slo: dict[str, float], steps: int = 4,
              on_step: Callable[[str, BenchResult], None] | None = None,
              on_status: Callable[[str], None] | None = None,
              on_record: Any = None, stop: threading.Event | None = None,
              target: Target | None = None) -> SweepResult:
    """Run the sweep (see module docstring) on one resolved target."""
    from phasescope.target import open_target

    if steps < 0:
        raise InputError("--sweep-steps must be ≥ 0")
    if target is None:
        ekw: dict[str, Any] | None = {"parallel": cfg.engine_parallel} if cfg.url is None else None
        if ekw is not None and getattr(cfg, "engine_spec", None):
            ekw["spec"] = cfg.engine_spec
        if ekw is not None and getattr(cfg, "engine_draft_model", None):
            ekw["draft_model"] = cfg.engine_draft_model
        with open_target(cfg.url, api=cfg.api, model=cfg.model, api_key=cfg.api_key, timeouts=cfg.timeouts,
                         engine_kwargs=ekw) as tgt:
            return run_sweep(cfg, slo=slo, steps=steps, on_step=on_step, on_status=on_status, on_record=on_record,
                             stop=stop, target=tgt)
    stop = stop or threading.Event()
    status = on_status or (lambda s: None)
    res = SweepResult(slo=dict(slo))
    base_out = Path(cfg.out_dir) if cfg.out_dir else None

    def step(name: str, requested: float | None, **changes: Any) -> dict[str, Any] | None:
        if stop.is_set():
            res.partial = True
            return None
        sub_out = str(base_out / name) if base_out is not None else None
        scfg = dataclasses.replace(cfg, out_dir=sub_out, label=f"{cfg.label or 'sweep'}:{name}", **changes)
        status(f"sweep step {name}")
        br = run_bench(scfg, target=target, on_record=on_record, stop=stop, on_status=on_status)
        if br.summary.get("partial"):
            res.partial = True
        res.runs.append(str(br.summary.get("run_id")))
        row = table_row(name.split("-")[0] if name.startswith("rate") else name, requested, br.summary, slo)
        res.rows.append(row)
        if on_step is not None:
            on_step(name, br)
        return br.summary

    s_sync = step("synchronous", None, max_concurrency=1, request_rate=math.inf, shape="poisson", workers=1)
    s_max = step("throughput", None, request_rate=math.inf, shape="poisson")
    if s_sync and s_max:
        r_sync = s_sync.get("request_throughput") or 0.0
        r_max = s_max.get("request_throughput") or 0.0
        for i, rate in enumerate(sweep_rates(r_sync, r_max, steps)):
            if step(f"rate-{i + 1}", rate, request_rate=rate, shape="constant", max_concurrency=None) is None:
                break
    res.knee = find_knee(res.rows, slo)
    res.saturation_rate = saturation(res.rows)
    if base_out is not None:
        from phasescope.safeio import prepare_out_dir, write_text

        prepare_out_dir(base_out)
        write_text(base_out / "sweep.json", dumps(res.to_dict(), indent=2) + "\n", what="sweep result")
        lines = [",".join(TABLE_COLUMNS)]
        for r in res.rows:
            lines.append(",".join("" if r.get(c) is None else str(r.get(c)) for c in TABLE_COLUMNS))
        write_text(base_out / "sweep.csv", "\n".join(lines) + "\n", what="sweep table")
    return res
