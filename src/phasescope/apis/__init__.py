"""One module per wire protocol. Each knows its format and nothing about experiments.

``get_client(api)`` returns the module whose ``send(session, target, req)`` speaks ``api``:
``openai`` (/v1/completions) and ``chat`` (/v1/chat/completions) → :mod:`.openai`, ``ollama`` →
:mod:`.ollama`, ``llamacpp`` → :mod:`.llamacpp`. Sessions should come from :func:`new_session`
(it carries the trace hook that stamps ``t_conn_ready_ns``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from phasescope.apis._http import new_session, trace_config
from phasescope.errors import InputError

_MODULES = {"openai": "openai", "chat": "openai", "ollama": "ollama", "llamacpp": "llamacpp"}

__all__ = ["get_client", "new_session", "trace_config"]


def get_client(api: str) -> ModuleType:
    """The client module for a resolved API name (never ``auto``; resolve the target first)."""
    name = _MODULES.get(api)
    if name is None:
        raise InputError(f"unknown API {api!r}; expected one of: openai, chat, ollama, llamacpp")
    return importlib.import_module(f"phasescope.apis.{name}")
