"""Many endpoints at once: ``--target URL`` (repeatable) with a routing policy, and per-endpoint summaries.

A :class:`MultiTarget` is a :class:`~phasescope.apis.base.Target` (the first endpoint's URL, API and
model, so everything that needs one target — prompt building through ``/tokenize``, the run store
header — keeps working) that also carries every endpoint and the policy. The runner does not know
about endpoints: :func:`send` is an ordinary ``SendFn`` that picks the endpoint per request, calls
that endpoint's API client and tags the record. Because it is a plain module-level function and a
picklable target, the same routing works in one process, in ``--workers`` processes
(``send_ref="phasescope.load.routing:send"``) and in Ray actors.

Policies (``--route``):

* ``round-robin`` — request ``i`` (its schedule index) goes to endpoint ``i mod E``. A property of
  the schedule, so every mode (single process, workers, Ray actors) routes identically.
* ``random`` — endpoint drawn uniformly with a generator seeded by ``(seed, i)``: reproducible and,
  again, independent of which process sends the request.
* ``least-outstanding`` — the endpoint with the fewest requests in flight *from this process*
  (ties broken round-robin). With several processes/actors each balances its own share; with a
  uniform split the totals stay balanced within ±(processes − 1) requests per endpoint.

Each record gets ``tags["endpoint"]`` = the endpoint's redacted URL (its ``target`` field is the
same URL, as the API client writes it). :func:`endpoint_breakdown` runs the full
:func:`~phasescope.load.summary.summarize` on each endpoint's records.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from phasescope.apis import Session
from phasescope.apis.base import GenRequest, Target
from phasescope.errors import InputError
from phasescope.measure.aggregate import measured
from phasescope.measure.records import RequestRecord

ROUTES = ("round-robin", "random", "least-outstanding")
SEND_REF = "phasescope.load.routing:send"


@dataclass
class MultiTarget(Target):
    """Several endpoints behind one :class:`Target` face (the first endpoint's fields)."""

    endpoints: list[Target] = field(default_factory=list)
    route: str = "round-robin"
    route_seed: int = 0

    @property
    def display_url(self) -> str:
        return ", ".join(e.display_url for e in self.endpoints) if self.endpoints else super().display_url


def make_multi_target(endpoints: Sequence[Target], route: str = "round-robin", seed: int = 0) -> Target:
    """One endpoint → that target unchanged; several → a :class:`MultiTarget`."""
    if route not in ROUTES:
        raise InputError(f"unknown --route {route!r} (choose from {', '.join(ROUTES)})")
    eps = list(endpoints)
    if not eps:
        raise InputError("no target given")
    urls = [e.display_url for e in eps]
    dup = {u for u in urls if urls.count(u) > 1}
    if dup:
        raise InputError(f"--target given twice: {sorted(dup)[0]}")
    if len(eps) == 1:
        return eps[0]
    f = eps[0]
    return MultiTarget(base_url=f.base_url, api=f.api, model=f.model, api_key=f.api_key, timeouts=f.timeouts,
                       engine=f.engine, engine_version=f.engine_version, endpoints=eps, route=route, route_seed=seed)


def target_urls(url: str | None, targets: Sequence[str]) -> list[str]:
    """The endpoints of a run: the positional URL (if any) then every ``--target``."""
    return ([url] if url else []) + [t for t in targets if t]


@contextlib.contextmanager
def open_targets(cfg: Any, status: Callable[[str], None] | None = None) -> Iterator[Target]:
    """Resolve every endpoint of ``cfg`` (``url`` + ``targets``; same ``--api``/``--model``/key for
    all) and yield one routed target. Several endpoints are assumed to serve the same model: the
    workload is built once, through the first endpoint's tokenizer."""
    from phasescope.target import open_target

    urls = target_urls(cfg.url, cfg.targets)
    if not urls:
        raise InputError("no target given")
    with contextlib.ExitStack() as stack:
        eps = []
        for u in urls:
            if status is not None:
                status(f"resolving target {u}")
            eps.append(stack.enter_context(open_target(u, api=cfg.api, model=cfg.model, api_key=cfg.api_key,
                                                       timeouts=cfg.timeouts)))
        yield make_multi_target(eps, cfg.route, cfg.seed)


def is_multi(target: Target) -> bool:
    return isinstance(target, MultiTarget) and len(target.endpoints) > 1


class Router:
    """Per-process routing state for one :class:`MultiTarget` (outstanding counts)."""

    def __init__(self, target: MultiTarget) -> None:
        self.endpoints = list(target.endpoints)
        self.route = target.route
        self.seed = target.route_seed
        self.outstanding = [0] * len(self.endpoints)
        self._rr = 0

    def pick(self, index: int | None) -> int:
        n = len(self.endpoints)
        if self.route == "round-robin":
            if index is None:
                self._rr += 1
                return self._rr % n
            return index % n
        if self.route == "random":
            return random.Random(self.seed * 1_000_003 + (index if index is not None else self._next())).randrange(n)
        # least outstanding in this process; ties → rotate the starting point
        start = self._next() % n
        order = [(start + k) % n for k in range(n)]
        return min(order, key=lambda j: self.outstanding[j])

    def _next(self) -> int:
        self._rr += 1
        return self._rr


_ROUTERS: dict[int, tuple[MultiTarget, Router]] = {}


def router_for(target: MultiTarget) -> Router:
    """The process-local router of ``target`` (created on first use; keyed by object identity)."""
    hit = _ROUTERS.get(id(target))
    if hit is None or hit[0] is not target:
        hit = (target, Router(target))
        _ROUTERS[id(target)] = hit
    return hit[1]


async def send(session: Session, target: Target, req: GenRequest) -> RequestRecord:
    """A ``SendFn``: route ``req`` to one endpoint of ``target`` and tag the record with it.
    A plain :class:`Target` passes straight to its API client."""
    from phasescope.apis import get_client

    if not is_multi(target):
        rec = await get_client(target.api).send(session, target, req)
        return rec
    assert isinstance(target, MultiTarget)
    router = router_for(target)
    idx = (req.tags or {}).get("index")
    j = router.pick(int(idx) if idx is not None else None)
    ep = target.endpoints[j]
    router.outstanding[j] += 1
    try:
        rec = await get_client(ep.api).send(session, ep, req)
    finally:
        router.outstanding[j] -= 1
    rec.tags = {**(rec.tags or {}), "endpoint": ep.display_url}
    return rec


def send_for(target: Target) -> Any:
    """The ``SendFn`` for ``target`` (the API client itself for one endpoint)."""
    from phasescope.apis import get_client

    return send if is_multi(target) else get_client(target.api).send


def send_ref_for(target: Target) -> str | None:
    """``--workers``' import path for the routed send (None = the target's own client)."""
    return SEND_REF if is_multi(target) else None


def endpoint_of(rec: RequestRecord) -> str:
    return str((rec.tags or {}).get("endpoint") or rec.target or "?")


def endpoint_breakdown(records: Sequence[RequestRecord], target: Target, **summarize_kw: Any) -> list[dict[str, Any]]:
    """Per endpoint (in ``--target`` order): ``endpoint``, ``share`` (fraction of the measured
    requests routed there) and every key of :func:`~phasescope.load.summary.summarize` over that
    endpoint's records alone. Empty list for a single endpoint."""
    from phasescope.load.summary import summarize

    if not is_multi(target):
        return []
    assert isinstance(target, MultiTarget)
    recs = measured(records)
    out = []
    for ep in target.endpoints:
        mine = [r for r in recs if endpoint_of(r) == ep.display_url]
        s = summarize(mine, **summarize_kw)
        out.append({"endpoint": ep.display_url, "engine": ep.engine, "model_id": ep.model,
                    "share": len(mine) / len(recs) if recs else None, **s})
    return out
