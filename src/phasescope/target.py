"""Turn what the user typed (a URL or nothing) into a resolved :class:`Target`.

Target resolution sits above both :mod:`phasescope.apis` (detection) and :mod:`phasescope.engine`
(the embedded server started when no URL is given), so neither imports the other for it.

``open_target(url|None, *, api="auto", model=None, api_key=None, timeouts=None)`` is both an async
and a sync context manager yielding a :class:`Target` whose ``api`` is never ``auto`` and whose
``engine``/``model`` are filled from detection (:mod:`phasescope.apis.detect`). With ``url=None``
it starts the embedded llama-server (:func:`phasescope.engine.running_engine`) for the duration
and stops it on exit. The API key comes from the argument, else ``PHASESCOPE_API_KEY``, else
``OPENAI_API_KEY`` (:func:`api_key_from_env`, the one rule every command follows); it lives only in
``Target.api_key`` (``repr=False``) and request headers.

After entering, ``.detected`` holds the :class:`~phasescope.apis.detect.Detected` facts
(``/props``, model meta) and ``.engine`` the embedded engine handle (or ``None``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from phasescope import errors as E
from phasescope.apis import detect as D
from phasescope.apis import registry
from phasescope.apis._session import new_session
from phasescope.apis.base import Target, Timeouts, check_url, redact_url


def api_key_from_env() -> str | None:
    """``$PHASESCOPE_API_KEY``, else ``$OPENAI_API_KEY`` (after ``--api-key``: the one rule)."""
    return os.environ.get("PHASESCOPE_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def _normalise_url(url: str) -> str:
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    u = u.rstrip("/")
    for suffix in registry.url_suffixes():  # an endpoint pasted after the base URL
        if u.endswith(suffix):
            u = u[: -len(suffix)]
            break
    check_url(u)  # a bad port or an unclosed [IPv6 is bad input (exit 2), not a ValueError
    if not u.startswith(("http://", "https://")):
        raise E.InputError(f"not an http(s) URL: {redact_url(u)}")
    return u


class open_target:  # noqa: N801 - used like a function: `async with open_target(url) as target`
    def __init__(self, url: str | None = None, *, api: str = "auto", model: str | None = None,
                 api_key: str | None = None, timeouts: Timeouts | None = None,
                 engine_kwargs: dict[str, Any] | None = None) -> None:
        if api not in registry.names():
            raise E.InputError(f"unknown --api {api!r}; expected one of: {', '.join(registry.names())}")
        self.url = _normalise_url(url) if url else None
        self.api = api
        self.model = model
        self.api_key = api_key if api_key is not None else api_key_from_env()
        self.timeouts = timeouts or Timeouts()
        self.engine_kwargs = dict(engine_kwargs or {})
        self.engine: Any = None
        self._engine_cm: Any = None
        self.detected: D.Detected | None = None
        self.target: Target | None = None

    # -- engine -----------------------------------------------------------------------------
    def _start_engine(self) -> str:
        try:
            from phasescope.engine import running_engine
        except ImportError as exc:  # the engine package is missing or broken
            raise E.EngineError(f"the embedded engine is not available ({exc})", hint="pass a server URL") from None
        self._engine_cm = running_engine(**self.engine_kwargs)
        self.engine = self._engine_cm.__enter__()
        return str(self.engine.url)

    def _stop_engine(self, *exc: Any) -> None:
        cm, self._engine_cm = self._engine_cm, None
        if cm is not None:
            cm.__exit__(*exc) if exc else cm.__exit__(None, None, None)

    # -- detection --------------------------------------------------------------------------
    async def _resolve(self, url: str) -> Target:
        target = Target(base_url=url, api="openai", model=None, api_key=self.api_key, timeouts=self.timeouts)
        async with new_session(connect_timeout_s=self.timeouts.connect_s) as session:
            det = await D.detect(session, url, api_key=self.api_key,
                                 connect_timeout_s=self.timeouts.connect_s or 10.0)
        self.detected = det
        D.apply(det, target, self.api)
        want = self.model or (getattr(self.engine, "model_alias", None) if self.engine is not None else None)
        target.model = D.choose_model(det, want, target.display_url)
        self.target = target
        return target

    async def __aenter__(self) -> Target:
        url = self.url
        if url is None:
            url = await asyncio.to_thread(self._start_engine)
        try:
            return await self._resolve(url)
        except BaseException:
            if self._engine_cm is not None:
                await asyncio.to_thread(self._stop_engine)
            raise

    async def __aexit__(self, *exc: Any) -> None:
        if self._engine_cm is not None:
            await asyncio.to_thread(self._stop_engine)

    def __enter__(self) -> Target:
        url = self.url if self.url is not None else self._start_engine()
        try:
            return _run_sync(self._resolve(url))
        except BaseException:
            self._stop_engine()
            raise

    def __exit__(self, *exc: Any) -> None:
        self._stop_engine()


def _run_sync(coro: Any) -> Any:
    """``asyncio.run`` that also works when the calling thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["v"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out["e"] = e

    th = threading.Thread(target=run)
    th.start()
    th.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


async def resolve(url: str, *, api: str = "auto", model: str | None = None, api_key: str | None = None,
                  timeouts: Timeouts | None = None) -> tuple[Target, D.Detected]:
    """Detect without an engine lifecycle (URL required)."""
    ot = open_target(url, api=api, model=model, api_key=api_key, timeouts=timeouts)
    t = await ot._resolve(ot.url or url)
    assert ot.detected is not None
    return t, ot.detected


__all__ = ["api_key_from_env", "open_target", "resolve"]
