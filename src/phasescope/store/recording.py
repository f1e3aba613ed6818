"""One run being recorded: the store's :class:`~phasescope.measure.records.RecordSink`.

:meth:`phasescope.store.RunStore.recording` opens one; each ``write`` appends a record to the run's
JSONL (credentials removed), and the row's count follows at most every ``COUNT_FLUSH_S``;
``finish`` closes the row with its summary, and leaving the ``with`` block without it marks the run
``partial`` with why — ``failed`` when no measured request had succeeded (an error, not Ctrl-C), the
one rule of ``bench``'s summaries: some success and a stop → partial, none → failed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phasescope.errors import InputError
from phasescope.jsonutil import dumps
from phasescope.measure.records import RecordWriter, RequestRecord
from phasescope.store.scrub import redact_target as _redact
from phasescope.store.scrub import scrub, scrub_name

if TYPE_CHECKING:
    from phasescope.store import RunInfo, RunStore

#: how often (at most) ``run.add`` writes the record count to the database
COUNT_FLUSH_S = 0.5


def _device_in(summary: Any) -> str | None:
    """The device a summary names (``device`` or ``ceilings.device.id``), for runs started without one."""
    if not isinstance(summary, dict):
        return None
    for d in (summary.get("device"), (summary.get("ceilings") or {}).get("device") if isinstance(summary.get("ceilings"), dict) else None):
        if isinstance(d, str) and d:
            return d
        if isinstance(d, dict) and isinstance(d.get("id"), str):
            return d["id"]
    return None


def is_warmup(r: RequestRecord) -> bool:
    """A warm-up, by the one rule every aggregate uses (:func:`phasescope.measure.aggregate.is_measured`)."""
    from phasescope.measure.aggregate import is_measured

    return not is_measured(r)


class Recording:
    """A run being recorded; returned by :meth:`phasescope.store.RunStore.recording`. Thread-safe ``add``."""

    def __init__(self, store: "RunStore", run_id: str, records_path: Path, secrets_: tuple[str, ...]) -> None:
        self.store = store
        self.id = run_id
        self.records_path = records_path
        self._secrets = secrets_
        self._writer: RecordWriter | None = RecordWriter(records_path)
        self._last_flush = 0.0
        self.n_warmup = 0
        #: measured (non-warm-up) records that succeeded: a run left by an error with none is ``failed``
        self.n_ok = 0
        #: how the row was closed (None: still running)
        self.status: str | None = None
        self.finished = False
        self.summary: dict[str, Any] | None = None

    @property
    def count(self) -> int:
        return 0 if self._writer is None else self._writer.count

    def add(self, record: RequestRecord) -> None:
        """Append one record to the JSONL (flushed before returning), credentials removed."""
        if self._writer is None:
            raise RuntimeError(f"run {self.id} is closed")
        self._writer.write(self._clean(record))
        if is_warmup(record):
            self.n_warmup += 1
        elif record.ok:
            self.n_ok += 1
        now = time.monotonic()
        if now - self._last_flush >= COUNT_FLUSH_S:
            self._last_flush = now
            with contextlib.suppress(InputError, sqlite3.Error):
                self.store._update(self.id, n_records=self._writer.count, n_warmup=self.n_warmup)

    write = add  # the RecordSink protocol (phasescope.measure.records)

    def close(self) -> None:
        """RecordSink's ``close``: the record count reaches the database; the run stays open until
        :meth:`finish` (or leaving the ``with`` block) closes it."""
        if self._writer is not None:
            with contextlib.suppress(InputError, sqlite3.Error):
                self.store._update(self.id, n_records=self._writer.count, n_warmup=self.n_warmup)

    def _clean(self, record: RequestRecord) -> RequestRecord:
        t = record.target or ""
        dirty = ("@" in t or "?" in t) or any(s in record.to_json() for s in self._secrets if len(s) >= 3)
        if not dirty:
            return record
        return RequestRecord.from_dict(scrub(record.to_dict(), self._secrets) | {"target": _redact(t) if t else t})

    @property
    def _device_set(self) -> bool:
        return bool(self.store.get(self.id).device)

    def update(self, **fields: Any) -> None:
        """Fill in what was learnt after the start: model, api, engine, engine_version, device,
        target (a URL; redacted) or params (replaces them)."""
        allowed = {"model", "api", "engine", "engine_version", "device", "target", "params"}
        bad = set(fields) - allowed
        if bad:
            raise TypeError(f"unknown run fields: {sorted(bad)}")
        # model, engine, device: names a server supplied (a model id may hold the key, or escapes)
        cols = {k: scrub_name(v) for k, v in fields.items() if k not in ("params", "target")}
        if "params" in fields:
            cols["params"] = dumps(scrub(fields["params"] or {}, self._secrets))
        if fields.get("target"):
            cols["target"] = _redact(str(fields["target"]))
        self.store._update(self.id, **cols)

    def finish(self, summary: dict[str, Any] | None = None, *, status: str = "complete") -> None:
        """Mark the run complete with its summary (JSON-able; NaN → null). ``status="partial"``
        keeps a summary of a run that stopped early (e.g. the server died) as partial; the row's
        ``error`` is then the summary's ``stop_reason`` (``first_error`` for a failed run), so a
        stopped run says why in ``runs`` as one left by an exception does."""
        if status not in ("complete", "partial", "failed"):
            raise ValueError(f"status must be complete, partial or failed, not {status!r}")
        self.summary = summary
        why = None
        if status != "complete" and isinstance(summary, dict):
            why = next((v for v in (summary.get("stop_reason"), summary.get("first_error"))
                        if isinstance(v, str) and v), None)
        self._close(status, summary, why)
        self.status = status
        self.finished = True

    def _close(self, status: str, summary: dict[str, Any] | None, error: str | None = None) -> None:
        n = self.count
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        cols: dict[str, Any] = {"status": status, "ended_at": time.time(), "n_records": n, "owner": None,
                                "n_warmup": self.n_warmup}
        if summary is not None:
            cols["summary"] = dumps(scrub(summary, self._secrets))
            dev = _device_in(summary)
            if dev and not self._device_set:
                cols["device"] = dev
        if error is not None:
            cols["error"] = scrub(error, self._secrets)
        self.store._update(self.id, **cols)

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.finished:
            return
        status = "partial"
        if exc_type is None:
            why = "the run ended without a summary"
        elif issubclass(exc_type, KeyboardInterrupt):
            why = "interrupted"
        else:
            why = f"{exc_type.__name__}: {exc}"[:500]
            if self.n_ok == 0:  # an error before any measured request succeeded: nothing to stand on
                status = "failed"
        self.status = status
        with contextlib.suppress(Exception):
            self._close(status, self.summary, why)

    def info(self) -> "RunInfo":
        return self.store.get(self.id)
