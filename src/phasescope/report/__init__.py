"""Outputs that outlive a run: the run store (:mod:`.store`), comparisons (:mod:`.compare`) and the
self-contained HTML report (:mod:`.html`)."""
