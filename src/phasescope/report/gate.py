"""The CI gate: ``compare --fail-on worse`` decides pass, worse or inconclusive.

A gate that passes whenever it cannot tell is no gate: when the runs differ in more than the change
under test (a busy host, a cached run: ``not comparable``), or a metric's trials disagree
(``unstable``), a "pass" would be unproven. So :func:`decide` has three answers, each with its own
exit code (:mod:`phasescope.errors`, the README's table): ``pass`` 0, ``worse`` 5 (a regression
beyond noise and beyond the metric's minimum effect), ``inconclusive`` 6 (why is said).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phasescope.report.comparability import ALL_METRICS
from phasescope.report.compare import Comparison, MetricComparison


def row_name(m: MetricComparison) -> str:
    """``itl_p99_s`` or ``itl_p99_s[concurrency=4]``: how the gate names a row."""
    return m.metric + (f"[{m.group}]" if m.group else "")


@dataclass
class GateResult:
    """What ``compare --fail-on worse`` decided (see :func:`decide`)."""

    verdict: str  # pass | worse | inconclusive
    worse: list[MetricComparison]
    #: (row, why) for every gated row that keeps the gate from passing unproven
    inconclusive: list[tuple[MetricComparison, str]]
    #: gated rows with too few samples to judge (not gated; listed)
    skipped: list[MetricComparison]
    allow_incomparable: bool = False
    reason: str | None = None  # for inconclusive: the sentence the CLI prints

    @property
    def exit_code(self) -> int:
        from phasescope.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION

        return {"pass": EXIT_OK, "worse": EXIT_REGRESSION, "inconclusive": EXIT_INCONCLUSIVE}[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "worse": [row_name(m) for m in self.worse],
                "inconclusive": [{"metric": row_name(m), "why": w} for m, w in self.inconclusive],
                "skipped": [row_name(m) for m in self.skipped], "allow_incomparable": self.allow_incomparable,
                "reason": self.reason, "exit_code": self.exit_code}


def decide(cmp: Comparison, metrics: list[str] | None = None, *, allow_incomparable: bool = False) -> GateResult:
    """The gate over the chosen metrics (all when None):

    * ``worse`` when a gated row is ``worse`` (comparable: the interval of B − A excludes 0 on the worse
      side and the change is at least the metric's minimum effect) — a proven regression fails the gate
      whatever else the other rows say;
    * else ``inconclusive`` when a gated row is ``not comparable`` or ``unstable``, or when no gated row
      could be judged (all too few samples, or none compared): the gate cannot pass what was not shown.
      With ``allow_incomparable`` a not-comparable row is judged by its ``raw_verdict`` and an unstable
      one by its verdict (a ``worse`` among them then fails the gate);
    * else ``pass``.
    """
    keys = set(metrics) if metrics else ALL_METRICS
    rows = [m for m in cmp.metrics if m.metric in keys]
    worse: list[MetricComparison] = []
    open_: list[tuple[MetricComparison, str]] = []
    skipped: list[MetricComparison] = []
    judged = 0
    for m in rows:
        v = m.raw_verdict if (m.verdict == "not comparable" and allow_incomparable) else m.verdict
        if v == "too few samples":
            skipped.append(m)
            continue
        judged += 1
        if m.verdict == "not comparable" and not allow_incomparable:
            open_.append((m, f"not comparable: {m.why or 'the runs differ in more than the change under test'}"))
            continue
        if v == "worse":
            worse.append(m)
        elif m.unstable and not allow_incomparable:
            open_.append((m, f"unstable: {m.unstable_why or 'its measurements disagree'}"))
    if worse:
        return GateResult("worse", worse, open_, skipped, allow_incomparable)
    if open_:
        first = open_[0]
        more = f" (and {len(open_) - 1} more gated row{'s' if len(open_) > 2 else ''})" if len(open_) > 1 else ""
        where = f" [{first[0].group}]" if first[0].group else ""
        reason = (f"cannot pass an unproven result: {first[0].label}{where} is {first[1]}{more}; fix the cause and "
                  "rerun, or pass --allow-incomparable to gate on the numbers")
        return GateResult("inconclusive", [], open_, skipped, allow_incomparable, reason)
    if not judged:
        why = ("no gated metric was measured in both runs" if not rows else
               f"every gated metric has too few samples ({', '.join(dict.fromkeys(m.label for m in skipped))})")
        return GateResult("inconclusive", [], [], skipped, allow_incomparable,
                          f"cannot pass an unproven result: {why}")
    return GateResult("pass", [], [], skipped, allow_incomparable)
