"""Which two runs ``phasescope compare`` compares: ``A B``, a run against a named baseline, or the
latest other run of the baseline's kind (and ``--set`` to mark one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phasescope.store import RunInfo


@dataclass
class Pair:
    """What ``phasescope compare`` resolved: two runs to compare, or only a message (a baseline
    was just marked)."""

    a: RunInfo | None
    b: RunInfo | None
    message: str | None = None


def resolve_pair(store: Any, ids: list[str], baseline: str | None = None, set_baseline: bool = False) -> Pair:
    """``compare A B`` → (A, B). ``compare RUN --baseline NAME`` → (baseline, RUN); when NAME is not
    set yet RUN becomes baseline NAME. ``compare --baseline NAME`` → (baseline, the latest other run
    of its kind). ``--set`` marks RUN as baseline NAME (replacing it)."""
    from phasescope.errors import InputError

    if set_baseline:
        if not baseline or len(ids) != 1:
            raise InputError("--set needs --baseline NAME and exactly one run id")
        info = store.set_baseline(baseline, ids[0])
        return Pair(None, None, f"marked {info.id} as baseline {baseline!r}")
    if baseline is None:
        if len(ids) != 2:
            raise InputError("compare needs two run ids (A B), or one run and --baseline NAME")
        return Pair(store.get(ids[0]), store.get(ids[1]))
    if len(ids) > 1:
        raise InputError("with --baseline NAME give at most one run id (the run to compare against the baseline)")
    base = store.get_baseline(baseline)
    if base is None:
        if not ids:
            known = ", ".join(store.baselines()) or "none"
            raise InputError(f"no baseline named {baseline!r} (known: {known}); mark one with `compare RUN --baseline {baseline}`")
        info = store.set_baseline(baseline, ids[0])
        return Pair(None, None, f"marked {info.id} as baseline {baseline!r}; later runs compare against it with --baseline {baseline}")
    if ids:
        return Pair(base, store.get(ids[0]))
    later = [r for r in store.list_runs(kind=base.kind, limit=2) if r.id != base.id]
    if not later:
        raise InputError(f"no {base.kind} run other than baseline {baseline!r} ({base.id}) to compare")
    return Pair(base, later[0])
