"""Old home of bench's conversation and trace glue, kept for its callers (``tune``'s flag check):
each dataset is now one :class:`~phasescope.load.datasets.Workload` and conversations run on
:class:`~phasescope.load.drivers.Conversations`."""

from __future__ import annotations

from phasescope.load.datasets import check_workload

__all__ = ["check_workload"]
