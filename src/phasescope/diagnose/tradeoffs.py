"""What a change costs, and one voice per run: the trade-offs behind :mod:`phasescope.diagnose.knobs`' advice.

* :class:`TunedAdvice` — advice that moves a known server setting (``moves``: setting → raise/lower, value);
* :class:`PrefillCost` / :func:`prefill_cost` / :func:`split_cost` — what a smaller prefill piece costs,
  from the run's own prefill rate and token gap: it shortens each stall but lengthens a long prefill;
* :func:`reconcile` — two pieces of advice in one run never pull one setting opposite ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from phasescope.diagnose.findings import SEVERITIES, Advice

A = Advice


@dataclass
class TunedAdvice(Advice):
    """Advice that sets a known server parameter: ``moves`` maps it (a ``ServerSettings`` field such as
    ``n_batch``) to ``("raise" | "lower", new value)``, so :func:`reconcile` can see two pieces of
    advice pulling one parameter opposite ways."""

    moves: dict[str, tuple[str, int]] = field(default_factory=dict)


@dataclass
class PrefillCost:
    """What changing the prefill piece size costs, from this run's measurements.

    ``rate_tok_s``: the prefill rate (prompt-scaling's fit, or the injected prompt's own); ``itl_s``: the
    running streams' usual token gap (a step's decode work); ``stall_s``: the stall measured now;
    ``long_prompt``: the prompt length to price the change on. A piece of ``b`` tokens is one step that
    also carries the streams' decode, so it stalls them ``b / rate + itl`` and a ``P``-token prompt takes
    ``P / rate + ceil(P / b) · itl`` while streams run — a lower bound for small pieces, whose kernels
    run below the measured rate."""

    rate_tok_s: float | None = None
    rate_source: str = ""
    itl_s: float | None = None
    stall_s: float | None = None
    long_prompt: int | None = None

    @property
    def known(self) -> bool:
        return bool(self.rate_tok_s and self.rate_tok_s > 0 and self.itl_s is not None and self.itl_s >= 0)

    def piece_s(self, b: int) -> float:
        assert self.rate_tok_s
        return b / self.rate_tok_s + float(self.itl_s or 0.0)

    def prefill_s(self, prompt: int, b: int | None) -> float:
        assert self.rate_tok_s
        pieces = 1 if b is None or b >= prompt else math.ceil(prompt / b)
        return prompt / self.rate_tok_s + pieces * float(self.itl_s or 0.0)


def prefill_cost(results: dict[str, Any], pi: Any) -> PrefillCost:
    """:class:`PrefillCost` from an explain run: the rate from prompt-scaling's fit (prompts alone) when it
    explains its points, else the injected prompt's own (tokens ÷ its prefill); the long prompt priced is
    the longest prompt-scaling sent when longer than the injected one, else 2,048 (llama.cpp's default -b)."""
    from phasescope.diagnose.thresholds import FIT_R2_FOR_SHAPE

    ps = results.get("prompt-scaling")
    rate, src = None, ""
    if ps is not None and getattr(ps, "prefill_tok_s", None) and getattr(ps, "fit", None) is not None \
            and ps.fit.r2 >= FIT_R2_FOR_SHAPE:
        rate, src = float(ps.prefill_tok_s), "prompt-scaling's fit"
    tok, pre = getattr(pi, "injected_prompt_tokens", None), getattr(pi, "injected_prefill_s", None)
    if rate is None and tok and pre and pre > 0:
        rate, src = tok / pre, f"the injected {tok}-token prompt's prefill"
    lens = [p.prompt_tokens for p in getattr(ps, "points", []) or [] if getattr(p, "prompt_tokens", None)]
    long = max(lens) if lens and max(lens) > (tok or 0) else 2048
    return PrefillCost(rate_tok_s=rate, rate_source=src, itl_s=getattr(pi, "itl_baseline_s", None),
                       stall_s=getattr(pi, "stall_s", None), long_prompt=long)


def _t(x: float) -> str:
    return f"{x * 1e3:,.0f} ms" if x < 10 else f"{x:,.1f} s"


def split_cost(cost: PrefillCost | None, new: int, cur: int | None, small_kernels: bool) -> tuple[str, bool]:
    """(the sentence on what a piece of ``new`` tokens costs, whether it still helps). It does not help
    when its estimated stall is not clearly below the one measured (≥ 0.8 of it)."""
    if cost is None or not cost.known:
        return "", True
    st = cost.piece_s(new)
    helps = cost.stall_s is None or st < 0.8 * cost.stall_s
    now = f" (now {_t(cost.stall_s)}, measured)" if cost.stall_s is not None else ""
    p = int(cost.long_prompt or 2048)
    a, b = cost.prefill_s(p, cur), cost.prefill_s(p, new)
    floor = "; more, since kernels on so few tokens run below that rate" if small_kernels else ""
    long = (f" but lengthens a {p:,}-token prefill while streams run from ~{_t(a)} to ~{_t(b)} "
            f"({math.ceil(p / new)} pieces, each also carrying the streams' decode{floor})") if b > a * 1.02 else \
        f"; a {p:,}-token prompt is hardly slower (~{_t(a)} → ~{_t(b)})"
    return (f"Cost: shortens each stall to ~{_t(st)}{now}{long}. Estimated from the {cost.rate_tok_s:,.0f} tok/s "
            f"prefill rate ({cost.rate_source}) and the streams' usual {_t(cost.itl_s or 0.0)} gap."), helps


# -- one run, one voice ---------------------------------------------------------------------------------------
def _clash(moves: dict[str, tuple[str, int]], claimed: dict[str, tuple[str, str, int, str]]) -> tuple[str, str] | None:
    """(finding id, change) of claimed advice that ``moves`` contradicts: the same parameter moved the
    other way, or llama.cpp's -ub raised above a -b that other advice lowers (-ub must not exceed -b)."""
    for k, (d, _v) in moves.items():
        c = claimed.get(k)
        if c is not None and c[1] != d:
            return c[0], c[3]
    ub, nb = moves.get("n_ubatch"), claimed.get("n_batch")
    if ub and nb and ub[0] == "raise" and nb[1] == "lower" and nb[2] < ub[1]:
        return nb[0], nb[3]
    b, cu = moves.get("n_batch"), claimed.get("n_ubatch")
    if b and cu and b[0] == "lower" and cu[1] == "raise" and b[1] < cu[2]:
        return cu[0], cu[3]
    return None


#: the settings advice moves, in words (a ``TunedAdvice.moves`` key → what the user knows it as)
_LABELS = {"n_batch": "the batch size (-b)", "n_ubatch": "the micro-batch size (-ub)",
           "n_parallel": "the number of slots", "max_num_seqs": "the running-sequence limit",
           "max_num_batched_tokens": "the per-step token budget"}


def _sev(findings: list[Any], fid: str) -> str:
    f = next((x for x in findings if x.id == fid), None)
    return {"problem": "problem", "limit": "limit"}.get(getattr(f, "severity", ""), "finding")


def reconcile(findings: list[Any]) -> None:
    """Two pieces of advice in one run never contradict: walking the findings by severity (a problem
    before information), advice that moves a setting against advice already given is replaced by a
    line that names the other finding and the trade-off (in place)."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    claimed: dict[str, tuple[str, str, int, str]] = {}
    for f in sorted(findings, key=lambda f: rank.get(f.severity, len(rank))):
        kept: list[Advice] = []
        for a in f.advice:
            moves = getattr(a, "moves", None) or {}
            clash = _clash(moves, claimed)
            if clash is None:
                for k, (d, v) in moves.items():
                    claimed.setdefault(k, (f.id, d, v, a.change))
                kept.append(a)
                continue
            fid, change = clash
            mine = a.change.split(" (now")[0]
            what = " and ".join(_LABELS.get(k, k) for k in moves)
            kept.append(A(a.engine, f"keep {what} as it is: {fid} in this run advises {change}",
                          f"this finding alone would say {mine} ({a.why}), which pulls the same setting the other way; "
                          f"{fid} is the {_sev(findings, fid)} this run measured, so change that first and measure again"))
        f.advice = kept
