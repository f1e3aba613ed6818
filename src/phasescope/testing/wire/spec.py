"""The fake's speculative decoding: a designed acceptance, step by step (``FakeServer(spec_draft=…,
spec_accepted=…)``). After the first token, verified step j drafts ``min(spec_draft, tokens left − 1)``
tokens (llama.cpp leaves room for the step's own token) and keeps ``min(spec_accepted[j mod len],
drafted)`` of them, so it emits one event of ``accepted + 1`` tokens; reasoning and content never share an
event. The wire modules export the truth as each server does (:mod:`.metrics`, llama.cpp ``timings``).
"""

from __future__ import annotations

from collections.abc import Sequence


def check(draft: int, accepted: Sequence[int] | None) -> tuple[int, tuple[int, ...]]:
    """(draft tokens per step, accepted per step cycled; default all of them), or ValueError."""
    d = max(0, int(draft))
    acc = tuple(int(a) for a in (accepted if accepted is not None else (d,)))
    if d and (not acc or any(a < 0 or a > d for a in acc)):
        raise ValueError("spec_accepted: each step accepts 0 … spec_draft tokens")
    return d, acc


def steps(n_out: int, draft: int, accepted: Sequence[int], reasoning_tokens: int = 0) -> list[tuple[int, int, int]]:
    """(first token index, tokens, drafted) per event: the first token alone, then one per verified step."""
    out: list[tuple[int, int, int]] = [(0, 1, 0)] if n_out > 0 else []
    i, j = 1, 0
    while i < n_out:
        drafted = min(draft, n_out - i - 1)
        k = min(accepted[j % len(accepted)], drafted) + 1
        if i < reasoning_tokens < i + k:
            k = reasoning_tokens - i
        out.append((i, k, drafted))
        i += k
        j += 1
    return out


def counts(n_out: int, draft: int, accepted: Sequence[int], reasoning_tokens: int = 0) -> tuple[int, int, int]:
    """(drafted, accepted, steps that drafted) of ``n_out`` tokens; zeros when the fake does not speculate."""
    if not draft:
        return 0, 0, 0
    st = steps(n_out, draft, accepted, reasoning_tokens)[1:]
    return sum(d for _, _, d in st), sum(k - 1 for _, k, _ in st), sum(1 for _, _, d in st if d > 0)
