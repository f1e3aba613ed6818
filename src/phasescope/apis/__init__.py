"""One module per wire protocol. Each knows its format and nothing about experiments.

Each protocol module declares its ``SPECS`` (:class:`~phasescope.apis.spec.ApiSpec`: name, detection
probe, warm-up path, framing, chat endpoint, token-id prompts, tokenizer, ``send``), and
:mod:`.registry` holds them: ``get_client(api)`` returns the spec whose ``send(session, target, req)``
speaks ``api`` — ``openai`` (/v1/completions) and ``chat`` (/v1/chat/completions) from :mod:`.openai`,
``ollama`` from :mod:`.ollama`, ``llamacpp`` from :mod:`.llamacpp`. Sessions should come from
:func:`new_session` (it carries the trace hook that stamps ``t_conn_ready_ns``), :func:`fresh_session`
(a new connection per request) or :func:`plain_session`; callers outside ``apis/`` type them as
:data:`Session` and never import aiohttp. Transport failures are sorted by one table
(:data:`._errors.TRANSPORT_ERRORS`) and reach other packages as :mod:`phasescope.errors` classes.

Every request phasescope sends to a server is made in this package: generation (the client
modules), the tokenizer (:mod:`.tokenize`), server info (:func:`.llamacpp.get_props`,
:func:`.llamacpp.fetch_slots`, :func:`.openai.list_models`, :func:`.ollama.show_model`), detection
(:mod:`.detect`), health (:func:`.llamacpp.health_status_sync`), the warm-up GETs
(:func:`warm_up`) and ``/metrics`` scrapes (:func:`.prometheus.fetch_text`, for :mod:`phasescope.metrics`
and the dcgm-exporter). The other packages call these functions and name no server path.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from phasescope.apis._session import (LIVE, Session, fresh_session, live_tokens, new_session, plain_session,
                                      raw_path_enabled, trace_config)

if TYPE_CHECKING:
    from phasescope.apis.base import Target
    from phasescope.apis.spec import ApiSpec

__all__ = ["LIVE", "Session", "WARM_PATHS", "fresh_session", "get_client", "live_tokens", "new_session",
           "plain_session", "raw_path_enabled", "trace_config", "warm_up"]


def get_client(api: str) -> ApiSpec:
    """The spec (its ``send``) for a resolved API name (never ``auto``; resolve the target first);
    an unknown name is an :class:`~phasescope.errors.InputError` listing the registered ones."""
    from phasescope.apis import registry

    return registry.get(api)


def __getattr__(name: str) -> Any:
    if name == "WARM_PATHS":
        # the cheap GET per API that opens pooled connections, from the specs: ``GET /v1/models``
        # (OpenAI-compatible), ``GET /api/version`` (Ollama), ``GET /health`` (llama.cpp native)
        from phasescope.apis import registry

        return {s.name: s.warm_path for s in registry.specs()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def warm_up(session: Session, target: Target, n: int, timeout_s: float = 10.0) -> int:
    """Open ``n`` keep-alive connections with concurrent cheap GETs (the spec's ``warm_path``); how
    many answered. On a :class:`~phasescope.apis._fast.FastSession` whose streams take the raw path
    (the spec's ``framing`` is SSE), the raw pool's connections are opened instead (TCP connects, no
    request). Failures are ignored: a warm-up that fails only leaves the connects in the run."""
    from phasescope.apis import registry
    from phasescope.apis._json import try_json

    spec = registry.find(target.api)
    url = target.base_url + (spec.warm_path if spec is not None else "/v1/models")
    pool = getattr(session, "fast_pool", None)  # a FastSession: its streams read on the raw path
    ndjson = spec is not None and spec.framing == "ndjson"
    if pool is not None and not ndjson and url.startswith("http://"):
        # the connections the streams will take are the raw pool's, not aiohttp's (issue 22: warming
        # aiohttp's left a 1,024-stream first wave connecting inside its TTFTs)
        return await pool.warm(url, n, timeout_s)
    headers = target.headers()

    async def one() -> bool:
        status, _, _ = await try_json(session, url, headers=headers, timeout_s=timeout_s)
        return status is not None

    return sum(int(ok) for ok in await asyncio.gather(*(one() for _ in range(n))))
