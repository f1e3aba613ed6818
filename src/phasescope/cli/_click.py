"""The click that typer uses: typer ≥ 0.25 vendors it as ``typer._click``, older typer uses the
``click`` package. The few pieces the CLI's boundary needs, from whichever is in use."""

from __future__ import annotations

import importlib
from typing import Any


def _mod(sub: str) -> Any:
    for base in ("typer._click", "click"):
        try:
            return importlib.import_module(f"{base}.{sub}")
        except ImportError:
            continue
    raise ImportError(f"no click {sub} module")


def current_context() -> Any:
    return _mod("globals").get_current_context(silent=True)


def parameter_source_given(ctx: Any, name: str) -> bool:
    """Did the user give ``name`` (command line or environment), rather than its default?"""
    if ctx is None:
        return False
    src = ctx.get_parameter_source(name)
    return src is not None and getattr(src, "name", "") in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")
