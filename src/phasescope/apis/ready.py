"""Is a server up? One GET per protocol's cheap endpoint, without an event loop.

``tune --serve`` starts an arbitrary server and must know when it answers: llama.cpp, vLLM,
SGLang and TGI answer ``GET /health`` 200 once the model is loaded; Ollama answers
``GET /api/version``; an OpenAI-compatible server answers ``GET /v1/models``. The first 200 wins.
"""

from __future__ import annotations

from phasescope.apis._json import fetch_json_sync

__all__ = ["READY_PATHS", "ready_sync"]

#: tried in order; the first that answers 200 means ready
READY_PATHS = ("/health", "/v1/models", "/api/version")


def ready_sync(base_url: str, timeout_s: float = 2.0) -> str | None:
    """The path that answered 200, or None (nothing listening, or still loading: 503)."""
    base = base_url.rstrip("/")
    for path in READY_PATHS:
        try:
            status, _ = fetch_json_sync(base + path, timeout_s=timeout_s)
        except (OSError, ValueError):
            return None  # nothing listens yet: no point trying the other paths
        if status == 200:
            return path
    return None
