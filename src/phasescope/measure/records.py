"""One :class:`RequestRecord` per request: raw monotonic-ns timestamps, counts with their source,
server-side timings and the error, if any. Every metric is derived from records afterwards
(:mod:`phasescope.measure.derive`), so a saved run can be re-analysed without re-running it.

Records are appended to a JSONL file as each request completes (:class:`RecordWriter`), so Ctrl-C
or a dying server still leaves a usable partial result.

Every producer of records (the bench runner, probe, the experiments, the ``--workers`` processes,
Ray actors, plan's simulator) hands each record to one :class:`RecordSink` — ``write(record)`` as the
request completes, ``close()`` when no more will come — and never knows where it lands. The sinks:

* :class:`RecordWriter` — a JSONL file (``--out DIR/records.jsonl``, a worker's own file);
* :class:`phasescope.store.Recording` — the run store's copy of one run;
* :class:`FanoutSink` — several sinks at once (every one gets each record even when another fails);
* :class:`ThreadedSink` — another sink on a thread of its own, so a disk flush never stalls an event
  loop that is timestamping tokens; the first failure is kept in ``error`` and reported once;
* :class:`QueueSink` — a queue to another process or thread (a Ray actor's poll, a worker's pipe).

Which sinks a run gets, and what happens to them at the end, is decided in one place:
:func:`phasescope.lifecycle.run_output`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

SCHEMA_VERSION = 1

#: kinds of streamed events; only ``content`` and ``reasoning`` carry output tokens
EVENT_CONTENT = "content"
EVENT_REASONING = "reasoning"
EVENT_ROLE = "role"  # role-only opening delta (chat); never the first token
EVENT_EMPTY = "empty"  # an event with no text and no tokens
EVENT_USAGE = "usage"  # the final usage-only chunk
TOKEN_EVENTS = (EVENT_CONTENT, EVENT_REASONING)

#: where a token count came from, best first
COUNT_SOURCES = ("usage", "server", "tokenizer", "events", "requested", "estimate")


@dataclass
class Event:
    """One streamed event as the client saw it.

    ``t_ns``: ``now_ns()`` right after the event was parsed out of the socket read.
    ``n_tokens``: tokens this event carries when known (usage deltas, token ids, llama.cpp
    ``tokens``); ``None`` when unknown (then derived metrics spread counts over events).
    """

    t_ns: int
    kind: str = EVENT_CONTENT
    n_tokens: int | None = None
    n_chars: int = 0

    def to_list(self) -> list[Any]:
        return [self.t_ns, self.kind, self.n_tokens, self.n_chars]

    @classmethod
    def from_list(cls, row: list[Any]) -> "Event":
        return cls(int(row[0]), str(row[1]), None if row[2] is None else int(row[2]), int(row[3]))


@dataclass
class RequestRecord:
    """Everything known about one request. Timestamps are ``perf_counter_ns`` of one process.

    t_scheduled_ns  when the load generator intended to send it (bench; ``None`` otherwise)
    t_start_ns      just before the request was handed to the HTTP stack (TTFT starts here, as in
                    ``vllm bench serve``)
    t_conn_ready_ns connection ready to send (pre-transfer: after connect, or at reuse of a pooled
                    connection) — curl's ``time_pretransfer``; TTFT net of connection starts here
    t_headers_ns    response status line and headers received
    events          every streamed event (see :class:`Event`)
    t_done_ns       stream finished ([DONE], done:true, or the body of a non-streamed response)
    """

    id: str
    api: str
    target: str
    model: str | None = None
    stream: bool = True
    # what was asked
    prompt_tokens_requested: int | None = None
    max_tokens: int | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    # raw clock readings
    wall_start_ns: int = 0
    t_scheduled_ns: int | None = None
    t_start_ns: int = 0
    t_conn_ready_ns: int | None = None
    t_headers_ns: int | None = None
    events: list[Event] = field(default_factory=list)
    t_done_ns: int | None = None
    # counts and where they came from (see COUNT_SOURCES)
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    reasoning_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    # server-side timings normalised to seconds where the API reports them:
    # prefill_s, decode_s, prompt_n, predicted_n, cache_n, load_s, total_s, queue_s, raw:{...}
    server: dict[str, Any] | None = None
    #: the server's own span of this request, joined from OTLP (engine-neutral names:
    #: queue_s, ttft_s, prefill_s, decode_s, e2e_s, request_id, engine, trace_id; phasescope.apis.otlp)
    server_span: dict[str, Any] | None = None
    finish_reason: str | None = None
    stopped_early: bool | None = None  # fewer tokens than max_tokens with fixed-length intent
    # outcome
    ok: bool = False
    http_status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None  # 429/503 Retry-After, when the server said
    #: output tokens received past ``max_tokens`` when phasescope stopped reading a stream that did
    #: not end (error_kind ``overrun``); None when the stream ended by itself
    overrun: int | None = None
    # who sent it (bench workers / Ray actors)
    worker: str | None = None

    # -- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON data (a deep copy; events as lists). Hot: it runs once per
        request on the record writer's thread, which shares the client's GIL, so plain values are
        copied by hand — ``dataclasses.asdict``, ~5× slower, only serves values it cannot copy."""
        d: dict[str, Any] = {}
        for name in _RECORD_FIELDS:
            v = getattr(self, name)
            if name == "events":
                v = [e.to_list() for e in v]
            elif v is not None and type(v) not in _SCALARS:
                v = _plain_copy(v)
                if v is _NOT_PLAIN:
                    return self._to_dict_asdict()
            d[name] = v
        d["schema"] = SCHEMA_VERSION
        return d

    def _to_dict_asdict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["events"] = [e.to_list() for e in self.events]
        d["schema"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestRecord":
        d = dict(d)
        d.pop("schema", None)
        events = [Event.from_list(e) if isinstance(e, list) else Event(**e) for e in d.pop("events", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        rec = cls(**{k: v for k, v in d.items() if k in known})
        rec.events = events
        return rec

    def to_json(self) -> str:
        """One JSONL line; encodable and with every secret masked (the records' write boundary).

        Redacted value by value (:func:`phasescope.redact.redact_field`: the strings here are server-
        supplied names and error bodies, where a key can appear); keys and numbers are never rewritten."""
        from phasescope.redact import encodable, redact_field, redact_obj

        d = self.to_dict()
        for name in _TEXT_FIELDS:
            v = d.get(name)
            if isinstance(v, str) and v:
                d[name] = redact_field(v)
        for name in ("tags", "server", "server_span"):
            if d.get(name):
                d[name] = redact_obj(d[name], field=True)
        return encodable(json.dumps(d, ensure_ascii=False, separators=(",", ":")))

    # -- convenience views (raw only; metrics live in measure.derive) ------------------------
    def token_events(self) -> list[Event]:
        return [e for e in self.events if e.kind in TOKEN_EVENTS]


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
#: the record's free-text fields (server-supplied names and messages among them)
_TEXT_FIELDS = ("id", "api", "target", "model", "prompt_tokens_source", "output_tokens_source", "finish_reason",
                "error_kind", "error_message", "worker")
_SCALARS = (str, int, float, bool)
_NOT_PLAIN = object()


def _plain_copy(v: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts with str keys, lists, scalars), or ``_NOT_PLAIN``."""
    t = type(v)
    if v is None or t in _SCALARS:
        return v
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                return _NOT_PLAIN
            c = _plain_copy(x)
            if c is _NOT_PLAIN:
                return _NOT_PLAIN
            out[k] = c
        return out
    if t is list:
        out_l = []
        for x in v:
            c = _plain_copy(x)
            if c is _NOT_PLAIN:
                return _NOT_PLAIN
            out_l.append(c)
        return out_l
    return _NOT_PLAIN


@runtime_checkable
class RecordSink(Protocol):
    """Where a run's records go, one at a time, as each request completes (module docstring).

    ``write`` may raise (a full disk: :class:`~phasescope.errors.OutputError` naming the file);
    ``close`` says no more records will come (idempotent)."""

    def write(self, record: RequestRecord) -> None: ...

    def close(self) -> None: ...


class RecordWriter:
    """Append records to a JSONL file, one line each, written out as they complete.

    Each record is flushed to the OS at once, so a killed or interrupted process leaves every
    completed record on disk (at worst a final partial line, which :func:`read_records` skips).
    ``fsync`` (to survive a machine crash too) runs at most every ``fsync_interval_s`` and at
    close: one fsync per record capped a 1,000-stream run at a few hundred records/s on this disk.
    Thread-safe; usable as a context manager.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = True, fsync_interval_s: float = 0.5
    ) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _O_CLOEXEC, 0o644)
            #: bytes of whole records in the file: a write that fails is cut back to here
            self._size = _whole_lines_size(self._fd)
        except OSError as exc:
            from phasescope.errors import OutputError
            from phasescope.safeio import os_cause

            raise OutputError(f"cannot write records to {self.path}: {os_cause(exc)}") from None
        self._lock = threading.Lock()
        self._fsync = fsync
        self._fsync_interval_ns = int(fsync_interval_s * 1e9)
        self._last_fsync_ns = time.monotonic_ns()
        self.count = 0
        self.error: OSError | None = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def write(self, record: RequestRecord) -> None:
        """Append one record, whole or not at all: the line and its newline go out in one ``write``
        and a write that fails part-way (disk full, a size limit) is cut back off the file, so the file
        never ends in half a record. The failure is an :class:`~phasescope.errors.OutputError` naming
        the file and how many records it kept; every later write fails fast."""
        data = (record.to_json() + "\n").encode("utf-8")
        with self._lock:
            if self.error is not None:
                raise self._output_error(self.error)
            fd = self._fd
            if fd is None:
                raise ValueError(f"{self.path} is closed")
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if self._fsync:
                    now = time.monotonic_ns()
                    if now - self._last_fsync_ns >= self._fsync_interval_ns:
                        os.fsync(fd)
                        self._last_fsync_ns = now
            except OSError as exc:
                self.error = exc
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)  # no torn tail: the record is not in the file at all
                raise self._output_error(exc) from None
            self._size += len(data)
            self.count += 1

    def _output_error(self, exc: OSError) -> Exception:
        from phasescope.errors import OutputError
        from phasescope.safeio import os_cause

        return OutputError(f"cannot write records to {self.path}: {os_cause(exc)} "
                           f"({self.count} records written before it are kept)")

    def close(self) -> None:
        """Sync and close. After a write failure this only releases the file (what reached the
        disk stays, whole records only)."""
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                if self.error is None:
                    self.error = exc
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _whole_lines_size(fd: int) -> int:
    """The size of ``fd``'s file up to its last newline; a torn tail (half a record, left by a crash
    or a full disk under an older writer) is cut off, so the next record starts on a line of its own."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    back = min(size, 1 << 20)
    tail = os.pread(fd, back, size - back)
    if tail.endswith(b"\n"):
        return size
    cut = tail.rfind(b"\n")
    keep = (size - back + cut + 1) if cut >= 0 else (0 if back == size else size)
    if keep != size:
        os.ftruncate(fd, keep)
    return keep


def sink_path(sink: Any) -> str | None:
    """The file a sink writes to, for error messages (``None``: not a file)."""
    p = getattr(sink, "path", None) or getattr(sink, "records_path", None)
    return None if p is None else str(p)


class FanoutSink:
    """Writes each record to every sink in ``sinks`` (the ``--out`` JSONL and the run store). A
    failing sink does not starve the others — disk full under ``--out`` never empties the store's
    copy: the failed sink is left out from then on and the others keep every record. A sink's first
    failure is re-raised after all were tried, with ``ps_path`` naming the file that failed."""

    def __init__(self, sinks: Sequence[RecordSink]) -> None:
        self.sinks = list(sinks)
        self.failed: list[RecordSink] = []

    def write(self, record: RequestRecord) -> None:
        first: BaseException | None = None
        for s in self.sinks:
            if any(s is f for f in self.failed):
                continue
            try:
                s.write(record)
            except Exception as exc:  # noqa: BLE001 - re-raised below with the failing path
                self.failed.append(s)
                if first is None:
                    first = exc
                    exc.ps_path = sink_path(s)  # type: ignore[attr-defined]
        if first is not None:
            raise first

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class ThreadedSink:
    """Hands records to ``sink`` on a thread of its own, so disk I/O never blocks an event loop.

    ``write`` only enqueues. The first failure is kept in ``error`` (one line: "cannot write records
    to PATH: cause") and passed to ``on_error`` (the runner stops sending there); later records still
    reach a fan-out's healthy sinks (the store's copy when ``--out`` is full), and are dropped otherwise.
    ``close`` waits until every record handed in was written; it does not close
    ``sink``, which belongs to whoever opened it (the run's :func:`~phasescope.lifecycle.run_output`)."""

    def __init__(self, sink: RecordSink | None, on_error: Callable[[str], object] | None = None,
                 name: str = "phasescope-records") -> None:
        import queue

        self._sink = sink
        self._q: "queue.SimpleQueue[RequestRecord | None]" = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self._on_error = on_error
        if sink is not None:
            self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        assert self._sink is not None
        while True:
            rec = self._q.get()
            if rec is None:
                return
            if self.error is not None and not isinstance(self._sink, FanoutSink):
                continue  # the one sink failed: later records are dropped, not retried
            try:
                self._sink.write(rec)  # a fan-out keeps writing to the sinks that still work
            except Exception as exc:  # noqa: BLE001 - a full disk must stop the run, not kill this thread
                if self.error is not None:
                    continue
                from phasescope.errors import PhasescopeError
                from phasescope.safeio import os_cause

                path = getattr(exc, "ps_path", None) or sink_path(self._sink) or "the records file"
                self.error = str(exc) if isinstance(exc, PhasescopeError) else \
                    f"cannot write records to {path}: {os_cause(exc)}"
                if self._on_error is not None:
                    self._on_error(self.error)

    def write(self, record: RequestRecord) -> None:
        if self._thread is not None:
            self._q.put(record)

    put = write

    def close(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None


class QueueSink:
    """Puts each record on a queue (``queue.SimpleQueue`` in a Ray actor, a ``multiprocessing``
    queue from a ``--workers`` process): whoever reads it writes the record to the run's sink."""

    def __init__(self, q: Any) -> None:
        self.q = q

    def write(self, record: RequestRecord) -> None:
        self.q.put(record)

    def close(self) -> None:
        pass


def iter_records(path: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    """Yield records from a JSONL file, skipping a truncated last line (interrupted writer) and
    undecodable bytes. A line that is JSON but not a request record is an
    :class:`~phasescope.errors.InputError` naming the file and line (exit 2)."""
    from phasescope.errors import InputError
    from phasescope.safeio import Refused, loads_bounded  # the one bounded JSON reader

    with open(path, encoding="utf-8", errors="replace") as fh:
        for ln, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = loads_bounded(line)
            except Refused as exc:  # a huge integer, Infinity, nesting past the limit: bad input, not a bug
                raise InputError(f"{path}:{ln}: {exc.reason}") from None
            except (json.JSONDecodeError, RecursionError):
                continue
            if not isinstance(d, dict) or not isinstance(d.get("id"), str) or "api" not in d:
                raise InputError(f"{path}:{ln}: not a request record (expected an object with id, api, target, ...)")
            try:
                yield RequestRecord.from_dict(d)
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                raise InputError(f"{path}:{ln}: malformed request record ({type(exc).__name__}: {exc})") from None


def read_records(path: str | os.PathLike[str]) -> list[RequestRecord]:
    return list(iter_records(path))


def write_records(path: str | os.PathLike[str], records: Iterable[RequestRecord]) -> None:
    with RecordWriter(path, fsync=False) as w:
        for r in records:
            w.write(r)
