"""Ctrl-C and SIGTERM in one place, for every run.

:func:`on_sigint` is the one place SIGINT is caught — a load run turns Ctrl-C into its stop event, so
in-flight requests are cancelled and the summary of what finished is still written;
:func:`ignore_sigint` is for child processes, whose parent owns Ctrl-C, and :func:`children_start_deaf`
starts them with SIGINT blocked, so a Ctrl-C while they boot cannot kill one half-started (the parent
would wait forever writing its arguments to a pipe nobody reads); :func:`sigterm_as_interrupt` makes
SIGTERM take the Ctrl-C path in the CLI (context managers stop the engine, the run output keeps the
run as ``partial``, :mod:`phasescope.lifecycle` step 4).

Standard library only, so the runners (``load``) and the command layer can both use it; it knows
nothing about runs, stores or records.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

__all__ = ["children_start_deaf", "ignore_sigint", "on_sigint", "sigterm_as_interrupt"]


@contextlib.contextmanager
def on_sigint(handler: Callable[[], Any]) -> Iterator[None]:
    """While the block runs, Ctrl-C calls ``handler()`` (a load run's stop) instead of raising
    KeyboardInterrupt. Only the main thread can own signals; elsewhere nothing changes."""
    prev = None
    if threading.current_thread() is threading.main_thread():
        try:
            prev = signal.signal(signal.SIGINT, lambda *_: handler())
        except ValueError:
            prev = None
    try:
        yield
    finally:
        if prev is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, prev)


@contextlib.contextmanager
def children_start_deaf() -> Iterator[None]:
    """Processes started inside the block begin life with SIGINT blocked (the signal mask is inherited
    across fork and exec), until they ignore it themselves (:func:`ignore_sigint`). A terminal's Ctrl-C
    reaches the whole process group; a ``spawn`` child that dies of it while importing would leave the
    parent blocked in ``Process.start()`` writing the child's arguments into a full pipe. Here, the
    parent's own Ctrl-C is only deferred until the block ends (then ``on_sigint``'s handler runs)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_sigint() -> None:
    """In a child process (a ``--workers`` process): Ctrl-C reaches the whole process group, and the
    parent owns it — it tells the children to stop through their stop event."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def sigterm_as_interrupt() -> None:
    """SIGTERM (kill, a timeout, a CI runner) takes the same path as Ctrl-C: context managers stop the
    embedded engine and partial results are kept, instead of dying mid-write. Main thread only."""
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread (embedded use): leave signals alone
        pass
