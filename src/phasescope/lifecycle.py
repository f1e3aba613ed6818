"""One run's output from start to finish, the same for every kind of run, and Ctrl-C in one place.

``bench``, ``probe``, ``explain`` and ``plan`` — and through bench the ``--workers`` processes and
Ray actors, whose records come back to the parent — all go through :func:`run_output`::

    with run_output("bench", target, params, out_dir=cfg.out_dir, store=cfg.store, say=status) as run:
        ...runner(sink=run.sink)...      # every record written as its request completes
        run.finish(summary, status=...)  # summary.json + the store's row, both tried

1. **Open.** The run store's :class:`~phasescope.store.Recording` (unless ``store`` is false; a
   store that cannot be opened is said once through ``say`` and skipped — a run is never lost over
   it) and the user's ``--out`` folder (``records.jsonl`` + ``summary.json``; a file in its place
   is bad input, before anything is started; a folder on a full disk is one
   :class:`~phasescope.errors.OutputError` naming its ``records.jsonl``, before the store's row is
   made or anything is sent, :func:`phasescope.safeio.check_space`). When neither takes the records they go to the
   **fallback folder**, one rule for every kind: ``$PHASESCOPE_RUNS_DIR`` (default
   ``./phasescope-runs``) ``/<kind>-<UTC second>-<8 hex>/``, created exclusively
   (:func:`phasescope.safeio.new_run_dir`), so two runs started in the same second never share one.
2. **Write.** ``run.sink`` is a :class:`~phasescope.measure.records.RecordSink` (the folder's JSONL
   and the store's copy, fanned out); the runner hands it each record and never knows where it
   lands. Redaction happens at the write boundary (``RequestRecord.to_json``, the store's scrub,
   :func:`phasescope.safeio.write_text`), so no file gets an API key.
3. **Finish.** ``run.finish(summary, status)`` writes ``summary.json`` into the folder and closes the
   store's row with ``complete``, ``partial`` (stopped early: Ctrl-C, a dead server, a killed worker
   or Ray actor, a full disk) or ``failed`` (no request succeeded; the CLI exits 3). Both copies are
   tried; the first failure is one :class:`~phasescope.errors.OutputError` raised after both.
4. **Leaving without finish** (an exception; Ctrl-C or SIGTERM arriving as KeyboardInterrupt) closes
   the files with what reached the disk and marks the stored run ``partial`` with why it stopped
   (``failed`` when no measured request had succeeded and it was not Ctrl-C).

Signals (Ctrl-C, SIGTERM) are :mod:`phasescope.signals`' job; the names are re-exported here for
callers of the old home.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from phasescope.errors import OutputError
from phasescope.measure.records import FanoutSink, RecordSink, RecordWriter, RequestRecord
from phasescope.signals import children_start_deaf, ignore_sigint, on_sigint, sigterm_as_interrupt

__all__ = ["RunOutput", "children_start_deaf", "fallback_parent", "ignore_sigint", "on_sigint", "run_output",
           "run_tags", "sigterm_as_interrupt"]

#: where fallback folders go when set (default ``./phasescope-runs``)
RUNS_DIR_ENV = "PHASESCOPE_RUNS_DIR"


#: extra params every run opened inside :func:`run_tags` carries (``tune`` tags its settings' runs)
_TAGS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("phasescope_run_tags", default=None)


@contextlib.contextmanager
def run_tags(**tags: Any) -> Iterator[None]:
    """Runs opened by :func:`run_output` inside the block get ``tags`` merged into their params
    (e.g. ``tune={"id": …, "setting": {…}}``), so a caller that drives an ordinary probe, bench or
    explain can find its runs in the store without a second copy of the lifecycle."""
    token = _TAGS.set({**(_TAGS.get() or {}), **tags})
    try:
        yield
    finally:
        _TAGS.reset(token)


@contextlib.contextmanager
def use_synthetic(res: Any) -> Iterator[dict[str, Any]]:
    """Inside the block the embedded engine serves the synthetic model ``res``
    (:func:`phasescope.engine.synth.serving`) and every run opened (:func:`run_output`) carries
    ``params.synthetic`` (:func:`phasescope.engine.synth.tag_of`)."""
    from phasescope.engine.synth import serving

    with serving(res) as tag, run_tags(synthetic=tag):
        yield tag


def fallback_parent() -> Path:
    """The folder fallback run folders are created in (module docstring, step 1)."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "phasescope-runs").expanduser()


class RunOutput:
    """Where one run's records and summary go (see :func:`run_output`)."""

    def __init__(self, kind: str, recording: Any, out_dir: Path | None, fallback: bool) -> None:
        self.kind = kind
        self.recording = recording
        #: the folder holding records.jsonl and summary.json: ``--out`` or the fallback folder (None: store only)
        self.out_dir = out_dir
        #: True when ``out_dir`` is the fallback folder (no store, no ``--out``)
        self.fallback = fallback
        self._writer = RecordWriter(out_dir / "records.jsonl") if out_dir is not None else None
        self.sink: RecordSink = FanoutSink([s for s in (self._writer, recording) if s is not None])
        self.finished = False
        self.status: str | None = None

    @property
    def store_id(self) -> str | None:
        """The run store's id (None when the run is not in the store)."""
        return self.recording.id if self.recording is not None else None

    @property
    def id(self) -> str:
        """The store's id, else the folder's name: what request ids and ``run_id`` are made of."""
        return self.store_id or (self.out_dir.name if self.out_dir is not None else "run")

    @property
    def records_path(self) -> str | None:
        """The JSONL every record went to: the store's copy when there is one, else the folder's."""
        if self.recording is not None:
            return str(self.recording.records_path)
        return str(self.out_dir / "records.jsonl") if self.out_dir is not None else None

    def write(self, record: RequestRecord) -> None:
        self.sink.write(record)

    def update(self, **fields: Any) -> None:
        """What was learnt after the start (model, engine, device...) for the store's row."""
        if self.recording is not None:
            self.recording.update(**fields)

    def finish(self, summary: dict[str, Any], *, status: str = "complete") -> None:
        """Write ``summary.json`` (into the folder, if any) and finish the store's row with ``status``.
        Both are tried; the first failure is raised after both (an :class:`OutputError`)."""
        from phasescope.jsonutil import dumps
        from phasescope.safeio import write_text

        # a records file that failed is the news (which file, how many records it kept), before
        # whatever the same full disk then did to the summary
        errors: list[BaseException] = self.record_errors()
        self._close_writer()
        if self.out_dir is not None:
            try:
                write_text(self.out_dir / "summary.json", dumps(summary, indent=2) + "\n", what="summary",
                           json_doc=True)
            except OutputError as exc:  # keep the store's copy; report the failure after it
                errors.append(exc)
        if self.recording is not None:
            try:
                self.recording.finish(summary, status=status)
            except Exception as exc:  # noqa: BLE001 - a full disk under the store: the folder's copy still stands
                errors.append(OutputError(
                    f"cannot finish the run store's copy ({self.recording.records_path}): {exc}"))
        self.finished = True
        self.status = status
        if errors:
            first = errors[0]
            if len(errors) > 1:
                rest = "; ".join(str(e) for e in errors[1:])
                raise OutputError(f"{first}; then: {rest}") from None
            raise first

    def record_errors(self) -> list[BaseException]:
        """One :class:`OutputError` per records file that failed (its path and the records it kept)."""
        out: list[BaseException] = []
        for w in (self._writer, getattr(self.recording, "_writer", None)):
            if isinstance(w, RecordWriter) and w.error is not None:
                out.append(w._output_error(w.error))
        return out

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def close(self, exc_type: Any = None, exc: Any = None, tb: Any = None) -> None:
        """Close the files; a run not finished is kept as ``partial`` with why, ``failed`` when an
        error came before any measured request succeeded (module docstring, step 4)."""
        self._close_writer()
        if self.recording is not None and not self.finished:
            self.recording.__exit__(exc_type, exc, tb)
            self.status = getattr(self.recording, "status", None) or "partial"

    def __enter__(self) -> "RunOutput":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(exc_type, exc, tb)


def run_output(kind: str, target: Any, params: dict[str, Any] | None, out_dir: str | os.PathLike[str] | None = None,
               store: bool | str | os.PathLike[str] | None = True, *, say: Callable[[str], None] | None = None,
               **row: Any) -> RunOutput:
    """Open one run's output (module docstring). ``kind``: bench, probe, explain, plan; ``target``:
    a Target, a URL or ``None``; ``params``: the run's parameters (secrets dropped by the store);
    ``out_dir``: the user's ``--out``; ``store``: True (the default store), a store path, or False;
    ``row``: model, api, engine, engine_version, device for the store's row. Use it as a context manager."""
    from phasescope.safeio import check_space, new_run_dir, prepare_out_dir

    tell = say or (lambda _m: None)
    if _TAGS.get():
        params = {**(params or {}), **(_TAGS.get() or {})}
    folder = prepare_out_dir(out_dir) if out_dir is not None else None
    if folder is not None:  # a full disk is found here, before the store's row exists or a request is sent
        check_space(folder)
    recording = None
    why_not: str | None = None
    if store:
        try:
            from phasescope.store import open_store

            db = open_store(None if store is True else store)  # type: ignore[arg-type]
            recording = db.recording(kind, target, params or {}, **row)
        except Exception as exc:  # noqa: BLE001 - the store is a convenience; never lose a run over it
            why_not = str(exc) or type(exc).__name__
    fallback = recording is None and folder is None
    if fallback:
        folder = new_run_dir(fallback_parent(), f"{kind}-")
        check_space(folder)
    if why_not is not None:
        tell(f"run store unavailable ({why_not}); records go to {folder}")
    try:
        return RunOutput(kind, recording, folder, fallback)
    except BaseException as exc:  # the folder's JSONL cannot be opened: do not leave a "running" row
        if recording is not None:
            recording.__exit__(type(exc), exc, exc.__traceback__)
        raise
