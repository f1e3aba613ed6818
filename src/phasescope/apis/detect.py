"""What is at a URL: which server, which API to speak, which model.

Probes, in order (each a short GET; the first that answers decides the family):

1. ``GET /api/version`` → ``{"version": ...}``: **Ollama** (native API ``ollama``; model from
   ``GET /api/tags``).
2. ``GET /props`` → has ``default_generation_settings`` or ``build_info``: **llama.cpp**
   ``llama-server`` (native API ``llamacpp``; model from ``/v1/models`` or ``model_alias``).
3. ``GET /v1/models`` → ``{"data": [...]}``: **OpenAI-compatible** (API ``openai`` =
   ``/v1/completions``); ``owned_by`` (``vllm``, ``sglang``, ``llamacpp``) and ``GET /metrics``
   family prefixes (``vllm:``, ``sglang:``, ``tgi_``, ``llamacpp:``: the one table in
   :mod:`phasescope.metrics.engines`) refine the engine.

Nothing listening → :class:`~phasescope.errors.ConnectError`; something that answers none of the
above → :class:`~phasescope.errors.WrongApiError`; 401/403 on ``/v1/models`` →
:class:`~phasescope.errors.AuthError`. Sources: vLLM 0.33 ``vllm/entrypoints/serve/engine/protocol.py`` (``/v1/models``) and
``vllm/entrypoints/serve/instrumentator/health.py``; llama.cpp ``tools/server/README.md`` at 0c1e57098
(``/health``, ``/props``); Ollama v0.33 ``docs/api.md`` (``/api/version``, ``/api/tags``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import NOT_LISTENING_HINT, error_message_of, nothing_listening
from phasescope.apis._json import auth_headers, fetch_json
from phasescope.apis.base import Target, redact_url


@dataclass
class Detected:
    engine: str  # vllm | sglang | tgi | llamacpp | ollama | openai (unknown OpenAI-compatible)
    api: str  # the API probe should speak by default
    models: list[str] = field(default_factory=list)
    version: str | None = None
    props: dict[str, Any] | None = None  # llama.cpp /props
    model_meta: dict[str, Any] | None = None  # llama.cpp /v1/models meta (n_params, size, ...)
    has_tokenize: bool = False


def engine_from_metrics(text: str) -> str | None:
    """The engine a ``/metrics`` exposition comes from, by the one Prometheus-prefix table
    (:func:`phasescope.metrics.engines.detect_engine`: the prefix most sample names carry)."""
    from phasescope.metrics.engines import detect_engine

    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return detect_engine(names)


async def detect(session: aiohttp.ClientSession, base_url: str, *, api_key: str | None = None,
                 connect_timeout_s: float = 10.0) -> Detected:
    base = base_url.rstrip("/")
    shown = redact_url(base)
    headers = auth_headers(api_key)
    t = max(2.0, connect_timeout_s)

    async def raw_get(path: str) -> tuple[int, Any, str]:
        return await fetch_json(session, base + path, headers=headers, timeout_s=t)

    async def get(path: str) -> tuple[int, Any, str]:
        """A GET after the first answered: a stall (headers or a body that never ends) is the server's
        failure, named with its path (exit 3), not an exception for the bug handler."""
        try:
            return await raw_get(path)
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise E.TargetError(f"{shown}{path} did not answer within {t:g} s (headers and body)",
                                hint="the server stalls; check it, or raise --connect-timeout") from None

    try:
        st, obj, _ = await raw_get("/api/version")
    except aiohttp.ClientConnectorError as exc:
        raise nothing_listening(shown, exc.os_error) from None
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise E.ConnectTimeout(f"{shown} did not answer within {t:g} s", hint="check the URL and raise --connect-timeout") from None
    except aiohttp.ClientError as exc:
        raise E.ConnectError(f"cannot talk HTTP to {shown}: {type(exc).__name__}: {exc}", hint=NOT_LISTENING_HINT) from None
    if st == 200 and isinstance(obj, dict) and "version" in obj:
        models: list[str] = []
        try:
            st2, tags, _ = await get("/api/tags")
            if st2 == 200 and isinstance(tags, dict):
                models = [m.get("name") or m.get("model") for m in tags.get("models", []) if isinstance(m, dict)]
        except (aiohttp.ClientError, E.TargetError):  # optional: a stall here costs t s, never the run
            pass
        return Detected("ollama", "ollama", [m for m in models if m], version=str(obj["version"]))

    props: dict[str, Any] | None = None
    try:
        st, obj, _ = await get("/props")
        if st == 200 and isinstance(obj, dict) and ("default_generation_settings" in obj or "build_info" in obj):
            props = obj
    except aiohttp.ClientError:
        pass

    st, obj, text = await get("/v1/models")
    if st in (401, 403):
        what = "unauthorized (401)" if st == 401 else "forbidden (403)"
        raise E.AuthError(f"{shown}/v1/models: {what}: {error_message_of(obj) or text[:200]}",
                          hint="pass --api-key or set PHASESCOPE_API_KEY (or OPENAI_API_KEY)" if not api_key else "check the API key")
    models = []
    meta = None
    owned = None
    if st == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list):
        for m in obj["data"]:
            if isinstance(m, dict) and m.get("id"):
                models.append(str(m["id"]))
                from phasescope.redact import register_tainted

                register_tainted(models[-1])  # a model id holding the key is masked whole, everywhere
                owned = owned or m.get("owned_by")
                if meta is None and isinstance(m.get("meta"), dict):
                    meta = m["meta"]
    elif props is None:
        raise E.WrongApiError(
            f"{shown} is not an LLM server phasescope knows: no /api/version (Ollama), /props (llama.cpp) or "
            f"/v1/models (OpenAI-compatible) — GET /v1/models gave HTTP {st}",
            hint="check the URL (base URL, without /v1) or force --api",
        )

    if props is not None:
        if not models and props.get("model_alias"):
            models = [str(props["model_alias"])]
        return Detected("llamacpp", "llamacpp", models, version=str(props.get("build_info") or "") or None,
                        props=props, model_meta=meta, has_tokenize=True)

    engine = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}.get(str(owned or "").lower())
    version = None
    try:
        st, mobj, mtext = await get("/metrics")
        if st == 200:
            engine = engine_from_metrics(mtext) or engine
    except (aiohttp.ClientError, E.TargetError):  # optional: a stall here costs t s, never the run
        pass
    if engine in ("vllm", "sglang", None):
        try:
            st, vobj, _ = await get("/version")
            if st == 200 and isinstance(vobj, dict) and vobj.get("version"):
                version = str(vobj["version"])
        except (aiohttp.ClientError, E.TargetError):  # optional: a stall here costs t s, never the run
            pass
    return Detected(engine or "openai", "openai", models, version=version, model_meta=meta,
                    has_tokenize=engine in ("vllm", "sglang", "llamacpp"))


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
    target.engine = det.engine
    target.engine_version = det.version
    target.api = det.api if api == "auto" else api
    if target.api == "ollama" and det.engine != "ollama":
        raise E.WrongApiError(f"{target.display_url} is not Ollama (no /api/version); it looks like {det.engine}", hint="use --api auto")
    if target.api == "llamacpp" and det.engine != "llamacpp":
        raise E.WrongApiError(f"{target.display_url} is not llama.cpp llama-server (no /props); it looks like {det.engine}", hint="use --api auto")
    return target
