"""Run the probe: one discarded warm-up, then rounds over the prompt sizes, one request at a time
(sizes interleaved within a round so drift hits every size alike).

``repeat`` fixed (``--repeat N``): N rounds of every size. ``auto`` (``--repeat auto``, the default):
after each round from the second on, a size whose TTFT and decode rate both have a 95 % interval of
the median within ±10 % (:func:`phasescope.probing.summary.is_stable`) is done; the rounds go on over
the sizes still unsettled until none is left or each has had ``repeat`` (``--max-repeat``) rounds. A
size still unsettled then is what the ``unstable`` warning names.

Every request leaves a :class:`RequestRecord` written as it completes (``on_record``), failed ones
and the warm-up included (tagged ``warmup``/``attempt``). A failed request stops the probe with
its error (one line); 429/503 are retried only when ``retries > 0``, waiting ``Retry-After``
when the server gave one (else 1, 2, 4 … s, capped at 30 s).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

from phasescope import errors as E
from phasescope.apis import Session, get_client, new_session
from phasescope.apis.base import Target
from phasescope.prompting import Prompt, PromptBuilder
from phasescope.measure.records import RequestRecord

_KIND_TO_ERROR: dict[str, type[E.TargetError]] = {
    "connect": E.ConnectError,
    "connect_timeout": E.ConnectTimeout,
    "first_token_timeout": E.FirstTokenTimeout,
    "inter_token_timeout": E.InterTokenTimeout,
    "auth": E.AuthError,
    "model_not_found": E.ModelNotFoundError,
    "wrong_api": E.WrongApiError,
    "stream_broken": E.StreamBrokenError,
    "malformed_event": E.MalformedEventError,
    "server_error_event": E.ServerStreamError,
}


def error_from_record(rec: RequestRecord) -> E.TargetError:
    """The exception a failed record stands for (its message is already user-facing)."""
    msg = rec.error_message or f"request failed ({rec.error_kind})"
    if rec.error_kind == "overloaded":  # the last attempt: its tag counts the retries made before it
        return E.OverloadedError(msg, retry_after_s=rec.retry_after_s,
                                 hint=E.overloaded_hint(int(rec.tags.get("attempt") or 0)))
    if rec.error_kind == "http":
        return E.HttpError(msg, status=rec.http_status or 0)
    return _KIND_TO_ERROR.get(rec.error_kind or "", E.TargetError)(msg)


@dataclass
class ProbePlan:
    sizes: list[int]
    max_tokens: int = 128
    #: the rounds per size: exactly this many, or (``auto``) at most this many
    repeat: int = 3
    warmup: bool = True
    retries: int = 0
    warmup_max_tokens: int = 16
    #: repeat each size until its figures are stable (``--repeat auto``), ``repeat`` being the most rounds
    auto: bool = False
    #: the fewest rounds ``auto`` stops after (two samples can already show a ±10 % interval, if they agree
    #: within about 1.5 %; the log-t interval of two samples is that wide)
    min_repeat: int = 2


@dataclass
class ProbeRun:
    target: Target
    plan: ProbePlan
    records: list[RequestRecord] = field(default_factory=list)  # measured (warm-up excluded)
    warmup: RequestRecord | None = None
    prompts: dict[int, list[Prompt]] = field(default_factory=dict)


async def send_with_retries(session: Session, target: Target, req: Any, retries: int,
                            on_record: Callable[[RequestRecord], None] | None = None,
                            sleep: Callable[[float], Any] = asyncio.sleep) -> RequestRecord:
    """Send; on 429/503 retry up to ``retries`` times honouring Retry-After. Every attempt is recorded."""
    client = get_client(target.api)
    attempt = 0
    while True:
        req.tags["attempt"] = attempt
        rec = await client.send(session, target, req)
        if on_record is not None:
            on_record(rec)
        if rec.ok or rec.error_kind != "overloaded" or attempt >= retries:
            return rec
        wait = rec.retry_after_s if rec.retry_after_s is not None else min(30.0, 2.0 ** attempt)
        await sleep(min(wait, 120.0))
        attempt += 1
        req.id = None


async def run_probe(target: Target, plan: ProbePlan, *, on_record: Callable[[RequestRecord], None] | None = None,
                    progress: Callable[[str], None] | None = None, session: Session | None = None,
                    seed: int | None = None) -> ProbeRun:
    own = session is None
    sess = session or new_session(connect_timeout_s=target.timeouts.connect_s)
    run = ProbeRun(target, plan)
    say = progress or (lambda s: None)
    try:
        pb = PromptBuilder(sess, target, seed=seed)
        say(f"building prompts of {', '.join(map(str, plan.sizes))} tokens")
        n_each = min(plan.repeat, max(plan.min_repeat, 1)) if plan.auto else plan.repeat
        for n in plan.sizes:  # built before the warm-up; auto builds more between rounds as it needs them
            run.prompts[n] = [await pb.build(n) for _ in range(n_each)]
        if plan.warmup:
            wp = await pb.build(plan.sizes[0])
            say("warm-up request (discarded)")
            req = wp.request(min(plan.warmup_max_tokens, plan.max_tokens), tags={"warmup": True, "prompt_tokens_target": plan.sizes[0]})
            rec = await send_with_retries(sess, target, req, plan.retries, on_record)
            run.warmup = rec
            if not rec.ok:
                raise error_from_record(rec)
        todo = list(plan.sizes)
        r = 0
        while todo and r < plan.repeat:
            for n in todo:
                if r >= len(run.prompts[n]):
                    run.prompts[n].append(await pb.build(n))
                p = run.prompts[n][r]
                of = f"{r + 1}/{plan.repeat}" if not plan.auto else f"{r + 1} (auto, at most {plan.repeat})"
                say(f"round {of}: {n}-token prompt → {plan.max_tokens} tokens")
                req = p.request(plan.max_tokens, tags={"round": r, "prompt_tokens_target": n})
                rec = await send_with_retries(sess, target, req, plan.retries, on_record)
                if not rec.ok:
                    raise error_from_record(rec)
                run.records.append(rec)
            r += 1
            if plan.auto and r >= plan.min_repeat:
                from phasescope.probing.summary import is_stable

                settled = [n for n in todo if is_stable([x for x in run.records
                                                         if x.tags.get("prompt_tokens_target") == n])]
                if settled and r < plan.repeat:
                    say(f"stable after {r} rounds: {', '.join(f'{n}-token' for n in settled)} "
                        "(TTFT and decode within ±10 %)")
                todo = [n for n in todo if n not in settled]
    finally:
        if own:
            await sess.close()
    return run
