"""The run store: every probe, bench, explain and plan run kept with its raw records and environment.

One SQLite database (stdlib ``sqlite3``, WAL journal, 30 s busy timeout, so several processes can
record at once) holds one row per run; each run's raw :class:`~phasescope.measure.records.RequestRecord`
stream lives next to it as JSONL, ``<store dir>/records/<run_id>.jsonl``, appended and flushed (fsync'd every 0.5 s and at the end) as
each request completes (:class:`~phasescope.measure.records.RecordWriter`). A run interrupted by
an exception or Ctrl-C is marked ``partial``; one whose process was killed outright is found
``running`` with a dead owner process and marked ``partial`` the next time the store is read.
Its records are kept either way.

Where: ``open_store(path)``; else ``$PHASESCOPE_STORE``; else ``$XDG_DATA_HOME/phasescope/runs.db``;
else ``~/.local/share/phasescope/runs.db``. A path that is a folder (or a new path without a
``.db``/``.sqlite`` suffix) means ``<folder>/runs.db``.

API (small and stable)::

    from phasescope.store import open_store
    store = open_store(path=None)                       # RunStore
    with store.recording(kind="probe", target=target,  # Target | URL str | None
                         params={...}, model=..., device=..., api=..., engine=...,
                         engine_version=...) as run:
        run.id               # "r20261201-0412-3fa9": UTC start minute + 4 random hex digits
        run.records_path     # Path of the JSONL
        run.add(record)      # append one RequestRecord (flushed at once); updates the count
        run.update(model=..., engine=..., engine_version=..., device=..., api=..., params=...)
        run.finish(summary)  # complete (status="partial" to keep a cut-short run); leaving the block without finish() keeps it as partial
    store.list_runs(kind=None, target=None, model=None, status=None, limit=50) -> list[RunInfo]
    store.get(run_id) -> RunInfo        # exact id, a unique prefix, or "latest"
    store.load_records(run_id) -> list[RequestRecord]
    store.set_baseline(name, run_id); store.get_baseline(name) -> RunInfo | None
    store.baselines() -> dict[name, run_id]

``finish(summary)`` fills in ``device`` from the summary (``device`` or ``ceilings.device.id``)
when the run was started without one.

Credentials never reach disk: the target is stored as :func:`~phasescope.apis.base.redact_url`
(no ``user:password@``, no query string); parameter keys that name secrets (``api_key``, ``token``,
``password``, ``authorization``, ``secret``...) are dropped; URL-valued strings are redacted; and
the Target's ``api_key``, when known, is replaced by ``***`` wherever it would appear in params,
summary or records.

Schema (``schema_version`` table; migrations applied in order under ``BEGIN IMMEDIATE``):
v1 runs(id, kind, target, api, model, device, phasescope_version, params, started_at,
ended_at, status, summary, records_path, n_records); v2 adds engine, engine_version, owner
(host:pid:process start, to find killed runs), error, and the baselines table; v3 adds n_warmup
(records tagged ``warmup``; ``n_records`` counts every record, so measured = n_records − n_warmup).
Times are Unix seconds (UTC); params and summary are JSON text.

One job: the table of runs — its schema, migrations, and the queries ``runs``/``show``/``compare``
read; one run being written is :mod:`phasescope.store.recording`, credential scrubbing
:mod:`phasescope.store.scrub`.

Why a package of its own: the runners (bench, probe, explain, plan) write runs and the report,
``show`` and ``compare`` read them, so the store sits below both. Runners do not open it
themselves: :func:`phasescope.lifecycle.run_output` does, and hands them a
:class:`~phasescope.measure.records.RecordSink` (a :class:`Recording` is one).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from phasescope._version import __version__
from phasescope.errors import InputError, PhasescopeError
from phasescope.jsonutil import dumps
from phasescope.measure.records import RequestRecord, read_records
from phasescope.store.recording import Recording
from phasescope.store.recording import is_warmup as _is_warmup
from phasescope.store.scrub import URL_RE as _URL
from phasescope.store.scrub import redact_target as _redact
from phasescope.store.scrub import scrub
from phasescope.store.scrub import scrub_name as _scrub_name
from phasescope.store.scrub import secrets_of as _secrets_of

__all__ = [
    "RUN_STATUSES",
    "store_db_path",
    "SCHEMA_VERSION",
    "Recording",
    "RunInfo",
    "RunStore",
    "default_store_path",
    "open_store",
    "scrub",
]

SCHEMA_VERSION = 3
#: ``interrupted``: the recording process is gone (killed outright) and never closed the run
RUN_STATUSES = ("running", "complete", "partial", "failed", "interrupted")
BUSY_TIMEOUT_MS = 30_000
# --- schema ----------------------------------------------------------------------------------
_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS runs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            target TEXT,
            api TEXT,
            model TEXT,
            device TEXT,
            phasescope_version TEXT,
            params TEXT NOT NULL DEFAULT '{}',
            started_at REAL NOT NULL,
            ended_at REAL,
            status TEXT NOT NULL DEFAULT 'running',
            summary TEXT,
            records_path TEXT,
            n_records INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at)",
    ],
    2: [
        "ALTER TABLE runs ADD COLUMN engine TEXT",
        "ALTER TABLE runs ADD COLUMN engine_version TEXT",
        "ALTER TABLE runs ADD COLUMN owner TEXT",
        "ALTER TABLE runs ADD COLUMN error TEXT",
        """CREATE TABLE IF NOT EXISTS baselines (
            name TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            set_at REAL NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS runs_kind ON runs(kind, started_at)",
    ],
    # v3: warm-up requests counted apart from measured ones (NULL: a run stored before v3)
    3: ["ALTER TABLE runs ADD COLUMN n_warmup INTEGER"],
}


def default_store_path() -> Path:
    env = os.environ.get("PHASESCOPE_STORE")
    if env:
        return _db_path(Path(env).expanduser())
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "phasescope" / "runs.db"


def _db_path(p: Path) -> Path:
    """A folder (existing, or a new path without a .db/.sqlite suffix) holds ``runs.db``."""
    if p.is_dir() or str(p).endswith(os.sep):
        return p / "runs.db"
    if not p.exists() and p.suffix.lower() not in (".db", ".sqlite", ".sqlite3"):
        return p / "runs.db"
    return p


def store_db_path(path: str | os.PathLike[str]) -> Path:
    """The database file a ``--store`` path names (a folder holds ``runs.db``)."""
    return _db_path(Path(path).expanduser())


def open_store(path: str | os.PathLike[str] | None = None) -> "RunStore":
    """Open (creating and migrating as needed) the store at ``path`` or the default location."""
    p = store_db_path(path) if path else default_store_path()
    return RunStore(p)


# --- owner processes (to tell a killed run from a running one) --------------------------------
def _proc_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid)}"


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _owner_words(owner: str | None) -> str:
    """``pid 4242 on host, started at boot + 12,345.6 s`` from an owner string, for the run's error."""
    try:
        host, pid_s, start = (owner or "").rsplit(":", 2)
        int(pid_s)
    except ValueError:
        return "owner unknown"
    try:
        ticks = int(start) / os.sysconf("SC_CLK_TCK")
        when = f", started {ticks:,.1f} s after boot"
    except (ValueError, OSError):
        when = ""
    return f"pid {pid_s} on {host}{when}"


def _regular_file(path: Path) -> bool:
    """A plain file (never a FIFO or a device a hostile row names: reading one would block)."""
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _owner_alive(owner: str | None) -> bool:
    if not owner:
        return False
    try:
        host, pid_s, start = owner.rsplit(":", 2)
        pid = int(pid_s)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True  # cannot tell from here; leave it as running
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _proc_state(pid) in ("Z", "X", "x"):  # killed, not yet reaped by its parent: gone all the same
        return False
    return start == "?" or _proc_start(pid) in (start, "?")


# --- rows ------------------------------------------------------------------------------------
@dataclass
class RunInfo:
    """One stored run. Times are Unix seconds (UTC)."""

    id: str
    kind: str
    status: str
    started_at: float
    ended_at: float | None = None
    target: str | None = None
    api: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    device: str | None = None
    phasescope_version: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    records_path: Path | None = None
    n_records: int = 0
    error: str | None = None
    n_warmup: int | None = None  # None: stored before warm-ups were counted apart

    @property
    def n_measured(self) -> int:
        """Records that are not warm-ups (all records for a run stored before v3)."""
        return self.n_records - (self.n_warmup or 0)

    @property
    def warnings(self) -> list[dict[str, Any]]:
        """The run's measurement warnings as dicts; old runs' plain strings become kind ``note``."""
        from phasescope.measure.warnings import to_json

        s = self.summary if isinstance(self.summary, dict) else {}
        return to_json(s.get("warnings") or [])

    @property
    def host(self) -> dict[str, Any] | None:
        s = self.summary if isinstance(self.summary, dict) else {}
        h = s.get("host")
        return h if isinstance(h, dict) else None

    @property
    def duration_s(self) -> float | None:
        if self.kind == "import":  # the benchmark's duration as its file states it, not the seconds the import took
            d = self.summary.get("duration_s") if isinstance(self.summary, dict) else None
            return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None
        return None if self.ended_at is None else self.ended_at - self.started_at

    @property
    def started_iso(self) -> str:
        return datetime.fromtimestamp(self.started_at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "started_at": self.started_iso,
            "ended_at": None
            if self.ended_at is None
            else datetime.fromtimestamp(self.ended_at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "duration_s": self.duration_s,
            "target": self.target,
            "api": self.api,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": self.model,
            "device": self.device,
            "phasescope_version": self.phasescope_version,
            "params": self.params,
            "summary": self.summary,
            "records_path": None if self.records_path is None else str(self.records_path),
            "n_records": self.n_records,
            "requests": {"measured": self.n_measured, "warmup": self.n_warmup},
            "host": self.host,
            "warnings": self.warnings,
            "error": self.error,
        }


_COLS = (
    "id, kind, status, started_at, ended_at, target, api, engine, engine_version, model, device, "
    "phasescope_version, params, summary, records_path, n_records, error, owner, n_warmup"
)


class RunStore:
    """The SQLite run history at ``db_path`` (see the module docstring). Thread- and process-safe:
    every operation opens its own short-lived connection."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = Path(db_path)
        self.dir = self.db_path.parent
        self.records_dir = self.dir / "records"
        #: why this store cannot be written (a read-only file system), or None; reads work either way
        self.read_only: str | None = None
        try:
            self.records_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self.db_path.is_file():  # an existing store on a read-only file system is still read
                raise InputError(f"cannot create the run store at {self.dir}: {exc.strerror or exc}") from None
        self._migrate()

    # -- connections / schema ---------------------------------------------------------------
    @contextlib.contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        try:
            con = sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as exc:
            raise InputError(f"cannot open the run store {self.db_path}: {exc}") from None
        try:
            con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            yield con
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.IntegrityError):
                raise
            raise InputError(f"run store {self.db_path} is unreadable: {exc}") from None
        finally:
            con.close()

    def _read(self, fn: Any) -> Any:
        """``fn(connection)`` for a read. A store on a full disk cannot make the shared-memory file a
        WAL reader needs ("disk I/O error"): it is then read as an immutable file, so ``runs``/``show``
        still work until space is freed (what the last writer could not commit is not there)."""
        try:
            with self._conn() as con:
                return fn(con)
        except InputError as exc:
            if "disk I/O error" not in str(exc) and not _read_only_error(exc):
                raise
            try:
                return self._immutable(fn)
            except sqlite3.DatabaseError:
                raise exc from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._conn() as con:
                con.execute("BEGIN IMMEDIATE")
                try:
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
        except InputError as exc:
            if not _read_only_error(exc):
                raise
            # a store on a read-only file system (or a file this user may not write): a result could
            # not be written — one line naming the store, exit 3; reading it still works (_read)
            from phasescope.errors import OutputError

            raise OutputError(f"run store {self.db_path} is read-only: cannot write to it "
                              f"({self.read_only or str(exc).rsplit(': ', 1)[-1]})") from None

    def schema_version(self) -> int:
        return int(self._read(_read_version))

    def _migrate(self) -> None:
        try:
            self._migrate_now()
        except InputError as exc:  # a full disk or a read-only one: readable as it is when it needs no migration
            read_only = _read_only_error(exc)
            if "disk I/O error" not in str(exc) and not read_only:
                raise
            try:
                current = self._immutable(_read_version)
            except sqlite3.DatabaseError:
                raise exc from None
            if current != SCHEMA_VERSION:
                raise
            if read_only:
                self.read_only = str(exc).rsplit(": ", 1)[-1]

    def _immutable(self, fn: Any) -> Any:
        from urllib.parse import quote

        con = sqlite3.connect(f"file:{quote(str(self.db_path))}?immutable=1", uri=True, isolation_level=None)
        try:
            return fn(con)
        finally:
            con.close()

    def _migrate_now(self) -> None:
        with self._conn() as con:
            # Switching a fresh database to WAL takes an exclusive lock and SQLite answers "database
            # is locked" at once (no busy handler) when another writer races us: retry briefly.
            for attempt in range(50):
                try:
                    con.execute("PRAGMA journal_mode=WAL").fetchone()  # not WAL on e.g. NFS: still works
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 49:
                        raise
                    time.sleep(0.1)
            if _read_version(con) == SCHEMA_VERSION:
                return
        with self._tx() as con:
            con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            current = _read_version(con)  # re-read under the write lock: another process may have won
            if current > SCHEMA_VERSION:
                raise InputError(
                    f"run store {self.db_path} has schema v{current}, newer than this phasescope (v{SCHEMA_VERSION})"
                )
            for v in range(current + 1, SCHEMA_VERSION + 1):
                for stmt in _MIGRATIONS[v]:
                    con.execute(stmt)
            con.execute("DELETE FROM schema_version")
            con.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))

    # -- writing ------------------------------------------------------------------------------
    def recording(
        self,
        kind: str,
        target: Any = None,
        params: dict[str, Any] | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        api: str | None = None,
        engine: str | None = None,
        engine_version: str | None = None,
    ) -> "Recording":
        """Start a run now; use as a context manager (see the module docstring)."""
        if isinstance(target, str) or target is None:
            url = target
        else:
            url = getattr(target, "base_url", None)
            api = api or getattr(target, "api", None)
            model = model or getattr(target, "model", None)
            engine = engine or getattr(target, "engine", None)
            engine_version = engine_version or getattr(target, "engine_version", None)
        sec = _secrets_of(target)
        row = {
            "kind": kind,
            "target": _redact(url) if url else None,
            "api": api,
            "engine": engine,
            "engine_version": engine_version,
            "model": _scrub_name(model),
            "device": _scrub_name(device),
            "phasescope_version": __version__,
            "params": dumps(scrub(params or {}, sec)),
            "started_at": time.time(),
            "status": "running",
            "owner": _owner(),
            "n_records": 0,
            "n_warmup": 0,
        }
        for _ in range(20):
            run_id = _new_id(row["started_at"])
            rel = f"records/{run_id}.jsonl"
            try:
                with self._tx() as con:
                    cols = ", ".join(["id", "records_path", *row])
                    qs = ", ".join("?" * (len(row) + 2))
                    con.execute(f"INSERT INTO runs ({cols}) VALUES ({qs})", (run_id, rel, *row.values()))
                break
            except sqlite3.IntegrityError:
                continue
        else:  # pragma: no cover - 20 collisions of 16 random bits in one minute
            raise InputError("could not allocate a run id")
        return Recording(self, run_id, self.dir / rel, sec)

    def _update(self, run_id: str, **cols: Any) -> None:
        if not cols:
            return
        sets = ", ".join(f"{k} = ?" for k in cols)
        with self._tx() as con:
            con.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*cols.values(), run_id))

    def set_baseline(self, name: str, run_id: str) -> RunInfo:
        """Name a run as baseline ``name`` (replacing an earlier one of that name)."""
        if not name or not name.strip():
            raise InputError("a baseline needs a name")
        info = self.get(run_id)
        with self._tx() as con:
            con.execute(
                "INSERT INTO baselines(name, run_id, set_at) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET run_id = excluded.run_id, set_at = excluded.set_at",
                (name, info.id, time.time()),
            )
        return info

    def delete(self, run_id: str) -> None:
        """Remove a run, its records file and any baseline naming it."""
        info = self.get(run_id)
        with self._tx() as con:
            con.execute("DELETE FROM runs WHERE id = ?", (info.id,))
            con.execute("DELETE FROM baselines WHERE run_id = ?", (info.id,))
        if info.records_path is not None:
            with contextlib.suppress(FileNotFoundError):
                info.records_path.unlink()

    # -- reading ------------------------------------------------------------------------------
    def get_baseline(self, name: str) -> RunInfo | None:
        row = self._read(lambda con: con.execute("SELECT run_id FROM baselines WHERE name = ?", (name,)).fetchone())
        if row is None:
            return None
        try:
            return self.get(row[0])
        except InputError:
            return None

    def baselines(self) -> dict[str, str]:
        return dict(self._read(lambda con: con.execute("SELECT name, run_id FROM baselines ORDER BY name").fetchall()))

    def list_runs(
        self,
        kind: str | None = None,
        target: str | None = None,
        model: str | None = None,
        status: str | None = None,
        limit: int | None = 50,
    ) -> list[RunInfo]:
        """Newest first. ``target`` and ``model`` match substrings (the target after redaction)."""
        where, args = [], []
        if kind:
            where.append("kind = ?")
            args.append(kind)
        if target:
            where.append("instr(target, ?) > 0")
            args.append(_redact(target) if _URL.match(target) else target)
        if model:
            where.append("instr(model, ?) > 0")
            args.append(model)
        if status:
            where.append("status = ?")
            args.append(status)
        sql = f"SELECT {_COLS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, id DESC"
        if limit is not None and limit > 0:
            sql += f" LIMIT {int(limit)}"
        rows = self._read(lambda con: con.execute(sql, args).fetchall())
        out: list[RunInfo] = []
        self.malformed: list[str] = []  # rows left out of the list, each with why (``runs`` says so)
        for r in rows:
            try:
                out.append(self._info(r))
            except MalformedRow as exc:
                self.malformed.append(str(exc))
        return out

    def get(self, run_id: str) -> RunInfo:
        """The run with id ``run_id``, a unique id prefix, or ``latest``; InputError otherwise."""
        run_id = (run_id or "").strip()

        def find(con: sqlite3.Connection) -> list[Any]:
            if run_id in ("latest", "last"):
                return con.execute(f"SELECT {_COLS} FROM runs ORDER BY started_at DESC, id DESC LIMIT 1").fetchall()
            rows = con.execute(f"SELECT {_COLS} FROM runs WHERE id = ?", (run_id,)).fetchall()
            if not rows and run_id:
                rows = con.execute(
                    f"SELECT {_COLS} FROM runs WHERE substr(id, 1, ?) = ? LIMIT 3", (len(run_id), run_id)
                ).fetchall()
            return rows

        rows = self._read(find)
        if not rows:
            raise InputError(f"no run {run_id!r} in {self.db_path} (see `phasescope runs`)")
        if len(rows) > 1:
            raise InputError(f"run id prefix {run_id!r} is ambiguous: {', '.join(r[0] for r in rows)}...")
        return self._info(rows[0])

    def load_records(self, run_id: str) -> list[RequestRecord]:
        info = run_id if isinstance(run_id, RunInfo) else self.get(run_id)
        if info.records_path is None or not info.records_path.exists():
            return []
        if not _regular_file(info.records_path):  # a FIFO or device in a hostile row would block
            raise InputError(f"run {info.id}: its records path {info.records_path} is not a regular file")
        try:
            return read_records(info.records_path)
        except OSError as exc:
            raise InputError(f"run {info.id}: cannot read its records {info.records_path}: "
                             f"{exc.strerror or exc}") from None

    def _info(self, r: tuple[Any, ...]) -> RunInfo:
        (rid, kind, status, started, ended, target, api, engine, ev, model, device, ver, params, summary, rpath,
         n, error, owner, n_warm) = r  # fmt: skip
        started_f, ended_f = _time_or_none(started), _time_or_none(ended)
        if started_f is None or (ended is not None and ended_f is None):
            bad = started if started_f is None else ended
            raise MalformedRow(f"run {rid} in {self.db_path} is malformed: its "
                               f"{'started_at' if started_f is None else 'ended_at'} {str(bad)[:40]!r} is not a time")
        started, ended = started_f, ended_f
        if not isinstance(rpath, (str, type(None))):
            rpath = None
        path = None if not rpath else (Path(rpath) if os.path.isabs(rpath) else self.dir / rpath)
        if status == "running" and not _owner_alive(owner):
            status, n, ended, error, n_warm = self._mark_orphan(rid, path, owner)
        return RunInfo(
            id=rid,
            kind=kind,
            status=status,
            started_at=float(started),
            ended_at=None if ended is None else float(ended),
            target=target,
            api=api,
            engine=engine,
            engine_version=ev,
            model=model,
            device=device,
            phasescope_version=ver,
            params=p if isinstance(p := _loads(params), dict) else {},
            summary=sm if isinstance(sm := _loads(summary), dict) else None,
            records_path=path,
            n_records=_count(n),
            error=None if error is None else str(error),
            n_warmup=None if n_warm is None else _count(n_warm),
        )

    def _mark_orphan(self, run_id: str, path: Path | None, owner: str | None = None
                     ) -> tuple[str, int, float | None, str, int]:
        """A run whose process is gone without closing it (killed outright): ``interrupted``, with the
        records that reached disk and which process it was (the owner's PID and start time)."""
        n = n_warm = 0
        ended = None
        error = f"the recording process is gone ({_owner_words(owner)})"
        if path is not None and _regular_file(path):
            with contextlib.suppress(InputError, OSError):
                recs = read_records(path)
                n = len(recs)
                n_warm = sum(1 for r in recs if _is_warmup(r))
                ended = path.stat().st_mtime
        with contextlib.suppress(PhasescopeError, sqlite3.Error):  # a read-only store: said, not stored
            self._update(run_id, status="interrupted", n_records=n, ended_at=ended, error=error, owner=None,
                         n_warmup=n_warm)
        return "interrupted", n, ended, error, n_warm


def _read_only_error(exc: BaseException) -> bool:
    """Whether SQLite refused because the store cannot be written (a read-only file system or file)."""
    return any(w in str(exc) for w in ("unable to open", "readonly", "read-only"))


def _read_version(con: sqlite3.Connection) -> int:
    try:
        row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0]) if row and row[0] is not None else 0


class MalformedRow(InputError):
    """A stored row whose values have the wrong types (edited, or written by something else)."""


def _time_or_none(v: Any) -> float | None:
    """A stored time as Unix seconds, or None when it is none (``'yesterday'``, NaN, out of range)."""
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and -1e11 < f < 1e11 else None


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _loads(s: str | None) -> Any:
    if not s or not isinstance(s, str):
        return None
    try:
        return json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        return None


def _new_id(t: float) -> str:
    stamp = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y%m%d-%H%M")
    return f"r{stamp}-{secrets.token_hex(2)}"
