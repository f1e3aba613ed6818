"""Moved: target resolution is :mod:`phasescope.target` (above both ``apis`` and ``engine``).

Kept for the import path only — load/ still imports ``open_target`` from here (issue 32 lane
bench32 moves it); nothing else in the package does. Delete with those imports.
"""

from __future__ import annotations

from phasescope.target import api_key_from_env, open_target, resolve

__all__ = ["api_key_from_env", "open_target", "resolve"]
