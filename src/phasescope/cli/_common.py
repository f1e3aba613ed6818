"""Small helpers shared by the command modules (output only; no logic)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from phasescope.jsonutil import dumps

#: human output goes to stdout; progress and warnings to stderr so ``--json`` stays parseable
console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Print one JSON document to stdout (the ``--json`` contract)."""
    sys.stdout.write(dumps(obj, indent=2) + "\n")
    sys.stdout.flush()
