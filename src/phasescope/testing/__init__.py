"""Test and benchmark helpers: faithful fake LLM servers with ground-truth logging.

See :mod:`phasescope.testing.fakeserver` for the constructor and the fault modes.
"""

from __future__ import annotations

from phasescope.testing.fakeserver import FAULTS, FLAVORS, FakeServer, GroundTruth, fake_tokenize

__all__ = ["FAULTS", "FLAVORS", "FakeServer", "GroundTruth", "fake_tokenize"]
