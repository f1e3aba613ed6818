"""Old home of the run store, kept only for users' scripts: ``from phasescope.report.store import open_store``
still works. The store lives in :mod:`phasescope.store` (the runners write to it, the report reads it,
so it sits below both); phasescope itself imports it from there."""

from phasescope.store import *  # noqa: F401,F403
from phasescope.store import __all__  # noqa: F401
