"""One module per wire protocol. Each knows its format and nothing about experiments.

``get_client(api)`` returns the module whose ``send(session, target, req)`` speaks ``api``:
``openai`` (/v1/completions) and ``chat`` (/v1/chat/completions) → :mod:`.openai`, ``ollama`` →
:mod:`.ollama`, ``llamacpp`` → :mod:`.llamacpp`. Sessions should come from :func:`new_session`
(it carries the trace hook that stamps ``t_conn_ready_ns``).

Every request phasescope sends to a server is made in this package: generation (the client
modules), the tokenizer (:mod:`.tokenize`), server info (:func:`.llamacpp.get_props`,
:func:`.llamacpp.fetch_slots`, :func:`.openai.list_models`, :func:`.ollama.show_model`), detection
(:mod:`.detect`), health (:func:`.llamacpp.health_status_sync`) and the warm-up GETs
(:func:`warm_up`). The other packages call these functions and name no server path.
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from phasescope.apis._session import new_session, trace_config
from phasescope.errors import InputError

if TYPE_CHECKING:
    import aiohttp

    from phasescope.apis.base import Target

_MODULES = {"openai": "openai", "chat": "openai", "ollama": "ollama", "llamacpp": "llamacpp"}

__all__ = ["WARM_PATHS", "get_client", "new_session", "trace_config", "warm_up"]


def get_client(api: str) -> ModuleType:
    """The client module for a resolved API name (never ``auto``; resolve the target first)."""
    name = _MODULES.get(api)
    if name is None:
        raise InputError(f"unknown API {api!r}; expected one of: openai, chat, ollama, llamacpp")
    return importlib.import_module(f"phasescope.apis.{name}")


#: the cheap GET per API that opens pooled connections: ``GET /v1/models`` (OpenAI-compatible),
#: ``GET /api/version`` (Ollama), ``GET /health`` (llama.cpp native)
WARM_PATHS = {"openai": "/v1/models", "chat": "/v1/models", "ollama": "/api/version", "llamacpp": "/health"}
#: APIs whose streams are NDJSON (aiohttp's path), not SSE (the raw path when httptools is installed)
NDJSON_APIS = frozenset({"ollama"})


async def warm_up(session: aiohttp.ClientSession, target: Target, n: int, timeout_s: float = 10.0) -> int:
    """Open ``n`` keep-alive connections with concurrent cheap GETs (:data:`WARM_PATHS`); how many
    answered. On a :class:`~phasescope.apis._fast.FastSession` whose streams take the raw path, the
    raw pool's connections are opened instead (TCP connects, no request). Failures are ignored: a
    warm-up that fails only leaves the connects in the run."""
    from phasescope.apis._json import try_json

    url = target.base_url + WARM_PATHS.get(target.api, "/v1/models")
    pool = getattr(session, "fast_pool", None)  # a FastSession: its streams read on the raw path
    if pool is not None and target.api not in NDJSON_APIS and url.startswith("http://"):
        # the connections the streams will take are the raw pool's, not aiohttp's (issue 22: warming
        # aiohttp's left a 1,024-stream first wave connecting inside its TTFTs)
        return await pool.warm(url, n, timeout_s)
    headers = target.headers()

    async def one() -> bool:
        status, _, _ = await try_json(session, url, headers=headers, timeout_s=timeout_s)
        return status is not None

    return sum(int(ok) for ok in await asyncio.gather(*(one() for _ in range(n))))
