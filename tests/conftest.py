"""Shared pytest fixtures. ``engine``: ONE real llama-server for the whole test session.

Integration tests that need the embedded engine take the ``engine`` fixture and are marked
``@pytest.mark.engine``. It is built by ``phasescope engine install`` (``make test`` runs it);
when it is missing the fixture errors with the message saying so — engine tests are never
silently skipped. Set ``PHASESCOPE_TEST_PARALLEL`` / ``PHASESCOPE_TEST_CTX`` to change the slots.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    """A running embedded engine (:class:`phasescope.engine.EngineHandle`): ``.url``, ``.model_alias``,
    ``.model_path``, ``.pid``, ``.parallel`` (4), ``.ctx_size`` (16384). Stopped at session end."""
    from phasescope.engine import running_engine

    parallel = int(os.environ.get("PHASESCOPE_TEST_PARALLEL", "4"))
    ctx = int(os.environ.get("PHASESCOPE_TEST_CTX", "16384"))
    with running_engine(parallel=parallel, ctx_size=ctx) as eng:
        yield eng
