"""What is at a URL: which server, which API to speak, which model.

Each protocol's spec (:mod:`phasescope.apis.registry`) brings its own probe; they are asked in their
``probe_rank`` order through one :class:`~phasescope.apis.spec.Prober` (each a short GET, each path
sent once), and the first that recognises the server decides the family. The built-in order:

1. ``GET /api/version`` → ``{"version": ...}``: **Ollama** (native API ``ollama``; model from
   ``GET /api/tags``).
2. ``GET /props`` → has ``default_generation_settings`` or ``build_info``: **llama.cpp**
   ``llama-server`` (native API ``llamacpp``; model from ``/v1/models`` or ``model_alias``).
3. ``GET /v1/models`` → ``{"data": [...]}``: **OpenAI-compatible** (API ``openai`` =
   ``/v1/completions``); ``owned_by`` (``vllm``, ``sglang``, ``llamacpp``) and ``GET /metrics``
   family prefixes (``vllm:``, ``sglang:``, ``tgi_``, ``llamacpp:``: the one table in
   :mod:`phasescope.apis.engines`) refine the engine.

Nothing listening → :class:`~phasescope.errors.ConnectError`; something that answers none of the
probes → :class:`~phasescope.errors.WrongApiError`; 401/403 on ``/v1/models`` →
:class:`~phasescope.errors.AuthError`. Sources: vLLM 0.33 ``vllm/entrypoints/serve/engine/protocol.py`` (``/v1/models``) and
``vllm/entrypoints/serve/instrumentator/health.py``; llama.cpp ``tools/server/README.md`` at 0c1e57098
(``/health``, ``/props``); Ollama v0.33 ``docs/api.md`` (``/api/version``, ``/api/tags``).
"""

from __future__ import annotations

import aiohttp

from phasescope import errors as E
from phasescope.apis import registry
from phasescope.apis.base import Target
from phasescope.apis.spec import Detected, Prober, engine_from_metrics

__all__ = ["Detected", "apply", "choose_model", "detect", "engine_from_metrics"]


def _either(labels: list[str]) -> str:
    return labels[0] if len(labels) < 2 else f"{', '.join(labels[:-1])} or {labels[-1]}"


async def detect(session: aiohttp.ClientSession, base_url: str, *, api_key: str | None = None,
                 connect_timeout_s: float = 10.0) -> Detected:
    p = Prober(session, base_url, api_key=api_key, connect_timeout_s=connect_timeout_s)
    asked = registry.probes()
    for spec in asked:
        assert spec.probe is not None
        det = await spec.probe(p)
        if det is not None:
            return det
    said = f"GET {p.last[0]} gave HTTP {p.last[1]}" if p.last else "no probe was answered"
    raise E.WrongApiError(
        f"{p.shown} is not an LLM server phasescope knows: no {_either([s.probe_label for s in asked])} — {said}",
        hint="check the URL (base URL, without /v1) or force --api",
    )


def choose_model(det: Detected, wanted: str | None, shown: str) -> str | None:
    """The model to ask for: the user's if the server serves it, else the server's first."""
    if wanted:
        if det.models and wanted not in det.models and det.engine not in ("llamacpp",):
            # Ollama accepts "name" for "name:latest"
            if not (det.engine == "ollama" and f"{wanted}:latest" in det.models):
                raise E.ModelNotFoundError(f"{shown} does not serve model {wanted!r}; it serves: {', '.join(det.models[:10])}",
                                           hint="pass one of these with --model")
        return wanted
    if det.models:
        return det.models[0]
    if det.engine == "ollama":
        raise E.ModelNotFoundError(f"{shown} (Ollama) has no models", hint="`ollama pull <model>` first, then pass --model")
    return None


def apply(det: Detected, target: Target, api: str) -> Target:
    """Fill ``target`` from detection; a forced API whose spec needs another engine is a WrongApiError."""
    target.engine = det.engine
    target.engine_version = det.version
    target.api = det.api if api == registry.AUTO else api
    spec = registry.get(target.api)
    if spec.engine is not None and det.engine != spec.engine:
        raise E.WrongApiError(f"{target.display_url} is not {spec.engine_label}; it looks like {det.engine}",
                              hint="use --api auto")
    return target
