"""Diagnosis: experiment results + ceilings + server metrics → findings with evidence and advice."""

from phasescope.diagnose.findings import Advice, Diagnosis, Evidence, Finding, Rule, Undecided
from phasescope.diagnose.rules import Ceilings, diagnose

__all__ = ["Advice", "Ceilings", "Diagnosis", "Evidence", "Finding", "Rule", "Undecided", "diagnose"]
