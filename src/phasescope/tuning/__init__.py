"""``phasescope tune``: change one server setting at a time and measure both phases on the real server.

:mod:`.spec` parses ``--param`` and expands the settings (grid or one at a time) and names the tune;
:mod:`.launch` starts and always stops the server of one setting (the embedded engine, or any
command through ``--serve TEMPLATE``); :mod:`.run` drives the loop, each setting an ordinary stored
probe / bench / explain run tagged with its parameters, resumable; :mod:`.table` turns the stored
runs into the table, the ratios to the baseline and a finding that never says more than the
repeat spread shows. See ``docs/commands/tune.md``.
"""

from phasescope.tuning.run import run_tune
from phasescope.tuning.spec import TuneSpec, expand, parse_param, tune_id

__all__ = ["TuneSpec", "expand", "parse_param", "run_tune", "tune_id"]
