"""Starting and stopping llama-server: :func:`running_engine`, the one way phasescope runs the engine.

The server binds 127.0.0.1 only, on a free port unless one is given, in its own process group
(so a terminal Ctrl-C reaches phasescope, which then stops it in order), with stdout+stderr in a
log file under ``<engine_dir>/logs`` that every error names. :func:`running_engine` always stops
the process — SIGTERM to the group, then SIGKILL after a grace period — on normal exit, on any
exception, on KeyboardInterrupt, on SIGTERM to phasescope (main thread) and at interpreter exit.

Flags (llama-server at the pinned llama.cpp 0c1e57098, ``tools/server/README.md``): ``--metrics`` (else /metrics is 501),
``--parallel N`` slots each with ``ctx_size / N`` tokens of KV (not unified when -np is explicit),
``--alias``, and ``--no-jinja --chat-template gemma`` because the bundled GGUF has no template and
with Jinja on the name would be taken as literal template text.

Speculative decoding: ``spec`` / ``draft_model`` → :func:`phasescope.engine.spec.spec_args`.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phasescope.errors import EngineError
from phasescope.engine.binary import find_llama_server
from phasescope.engine.model import BUNDLED_MODEL_ALIAS, check_gguf_file, ensure_bundled_model
from phasescope.engine.paths import logs_dir
from phasescope.engine.spec import spec_args

HOST = "127.0.0.1"
DEFAULT_PARALLEL = 4
DEFAULT_CTX_SIZE = 16384
STARTUP_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
MAX_LOGS = 100

_live: dict[int, subprocess.Popen[bytes]] = {}
_live_lock = threading.Lock()


def default_threads() -> int:
    """All CPUs this process may run on (``sched_getaffinity``), as llama.cpp's own default would use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    """True when binding 127.0.0.1:port fails with EADDRINUSE (or something already answers there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


_ERRORISH = re.compile(r"error|failed|invalid|cannot|couldn't|unable|abort|illegal|terminate", re.IGNORECASE)


def log_tail(path: Path, n: int = 40) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in data.splitlines() if ln.strip()][-n:]


_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([IWEDT]) ")


def last_error_line(path: Path) -> str | None:
    """The telling part of a server log: its first and last error lines (llama.cpp marks them ``E``;
    the first is usually the cause, the last what the server did), else the last line that reads
    like an error, else the last line. Timestamps are stripped."""
    lines = [ln for ln in log_tail(path, 200) if not ln.startswith("# ")]
    errors = []
    for ln in lines:
        m = _LOG_PREFIX.match(ln)
        if m and m.group(1) == "E":
            errors.append(ln[m.end():].strip())
    if errors:
        return errors[0] if len(errors) == 1 or errors[0] == errors[-1] else f"{errors[0]} ... {errors[-1]}"
    plain = [_LOG_PREFIX.sub("", ln).strip() for ln in lines]
    for ln in reversed(plain):
        if _ERRORISH.search(ln):
            return ln
    return plain[-1] if plain else None


@dataclass
class EngineHandle:
    """A running llama-server. ``url`` is ``http://127.0.0.1:PORT`` (no trailing slash)."""

    url: str
    port: int
    model_alias: str
    model_path: Path
    pid: int
    parallel: int
    ctx_size: int
    threads: int
    binary: Path
    log_path: Path
    args: list[str]
    startup_s: float
    process: subprocess.Popen[bytes] = field(repr=False)
    stopped_by_us: bool = field(default=False, repr=False)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def died_error(self) -> EngineError:
        """The error to raise when the engine went away without us stopping it."""
        line = last_error_line(self.log_path)
        detail = f"; last log line: {line}" if line else ""
        return EngineError(
            f"the embedded engine (llama-server pid {self.pid}, {self.url}) stopped unexpectedly "
            f"({describe_exit(self.process.poll())}){detail}; log: {self.log_path}"
        )

    def check(self) -> None:
        """Raise :class:`EngineError` if the server process is no longer running."""
        if not self.alive and not self.stopped_by_us:
            raise self.died_error()

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Stop the process group: SIGTERM, wait ``grace_s``, then SIGKILL. Returns the exit status."""
        self.stopped_by_us = True
        return stop_process_group(self.process, grace_s)

    def props(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """``GET /props`` as a dict (model path, n_ctx, slots, build info)."""
        from phasescope.apis.llamacpp import props_sync

        return props_sync(self.url, timeout_s)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the server leads its own process group (start_new_session)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> int | None:
    """Stop a server started as the leader of its own process group (``start_new_session``):
    SIGTERM to the group, ``grace_s`` for the leader to exit, SIGKILL if it did not; then SIGKILL to
    the group anyway, since a leader that exited may leave children behind. Returns the exit status.
    The embedded engine and ``tune --serve``'s commands both stop through here."""
    try:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
        # the leader is gone; make sure nothing else of its group lingers
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        with _live_lock:
            _live.pop(proc.pid, None)
    return proc.poll()


def _stop_all_at_exit() -> None:
    with _live_lock:
        procs = list(_live.values())
    for proc in procs:
        with contextlib.suppress(Exception):
            stop_process_group(proc, 3.0)


atexit.register(_stop_all_at_exit)


def _make_pdeathsig_preexec() -> Any:
    """Linux: a pre-exec hook so the server gets SIGTERM if the thread that started it dies (e.g.
    phasescope itself is SIGKILLed). The libc function is resolved here, in the parent, so the
    child between fork and exec only makes one C call (no imports, no locks)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    PR_SET_PDEATHSIG = 1
    sig = int(signal.SIGTERM)

    def _preexec() -> None:  # pragma: no cover - runs in the child
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return _preexec


PDEATHSIG_PREEXEC = _make_pdeathsig_preexec() if os.name == "posix" and os.uname().sysname == "Linux" else None


def _new_log_path(port: int) -> Path:
    d = logs_dir()
    d.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # keep the newest MAX_LOGS; never touch a log written in the last day
        old = sorted(d.glob("llama-server-*.log"), key=lambda p: p.stat().st_mtime)
        cutoff = time.time() - 86400
        for p in old[: max(0, len(old) - MAX_LOGS + 1)]:
            if p.stat().st_mtime < cutoff:
                p.unlink()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return d / f"llama-server-{stamp}-{port}-{os.getpid()}.log"


def build_args(
    binary: Path,
    model_path: Path,
    port: int,
    *,
    parallel: int,
    ctx_size: int,
    threads: int,
    alias: str,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The llama-server command line phasescope uses (loopback only, metrics on, Gemma chat template)."""
    return [
        str(binary),
        "--model", str(model_path),
        "--host", HOST,
        "--port", str(port),
        "--parallel", str(parallel),
        "--ctx-size", str(ctx_size),
        "--threads", str(threads),
        "--metrics",
        "--alias", alias,
        "--no-jinja",
        "--chat-template", "gemma",
        *extra_args,
    ]


def _bind_failed(log_path: Path) -> bool:
    return any("couldn't bind" in ln or "Address already in use" in ln for ln in log_tail(log_path))


def start_engine(
    *,
    parallel: int = DEFAULT_PARALLEL,
    ctx_size: int = DEFAULT_CTX_SIZE,
    model_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    llama_server: str | os.PathLike[str] | None = None,
    alias: str | None = None,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    spec: str | None = None,
    draft_model: str | os.PathLike[str] | None = None,
) -> EngineHandle:
    """Start llama-server and wait until ``/health`` answers 200. The caller must :meth:`~EngineHandle.stop` it.

    Prefer :func:`running_engine`, which guarantees the stop.
    """
    if parallel < 1:
        raise EngineError(f"--parallel must be at least 1 (got {parallel})")
    extra_args = [*spec_args(spec, draft_model), *extra_args]
    if ctx_size < 0:
        raise EngineError(f"--ctx-size must be >= 0 (got {ctx_size})")
    binary = find_llama_server(llama_server)
    if model_path is None:
        from phasescope.engine.synth import active, alias_of

        syn = active()  # ``--synthetic SHAPE``: the synthetic file instead of the bundled model
        if syn is not None:
            model_path, alias = syn.path, alias or alias_of(syn)
    if model_path is None:
        mpath = ensure_bundled_model()
        alias = alias or BUNDLED_MODEL_ALIAS
    else:
        mpath = check_gguf_file(Path(model_path))
        alias = alias or mpath.name.removesuffix(".gguf")
    nthreads = threads if threads and threads > 0 else default_threads()
    if port is not None:
        if not 1 <= port <= 65535:
            raise EngineError(f"--port must be in 1..65535 (got {port})")
        if port_in_use(port):
            raise EngineError(f"port {port} on {HOST} is already in use; pick another with --port or omit it for a free one")
    attempts = 1 if port is not None else 3
    last_exc: EngineError | None = None
    for _ in range(attempts):
        p = port if port is not None else free_port()
        try:
            return _start_once(binary, mpath, p, parallel, ctx_size, nthreads, alias, extra_args, startup_timeout_s)
        except _BindRace as exc:  # someone took the free port between our check and the server's bind
            last_exc = exc.error
    assert last_exc is not None
    raise last_exc


class _BindRace(Exception):
    def __init__(self, error: EngineError) -> None:
        self.error = error


def _start_once(
    binary: Path,
    mpath: Path,
    port: int,
    parallel: int,
    ctx_size: int,
    threads: int,
    alias: str,
    extra_args: Sequence[str],
    startup_timeout_s: float,
) -> EngineHandle:
    args = build_args(binary, mpath, port, parallel=parallel, ctx_size=ctx_size, threads=threads,
                      alias=alias, extra_args=extra_args)
    log_path = _new_log_path(port)
    t0 = time.monotonic()
    in_main = threading.current_thread() is threading.main_thread()
    with log_path.open("ab") as log:
        log.write(("# " + " ".join(args) + "\n").encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: we stop it, not the terminal
                preexec_fn=PDEATHSIG_PREEXEC if in_main else None,  # noqa: PLW1509 - only in the main thread
                close_fds=True,
            )
        except OSError as exc:
            raise EngineError(f"could not start {binary}: {exc.strerror}") from exc
    with _live_lock:
        _live[proc.pid] = proc
    url = f"http://{HOST}:{port}"
    handle = EngineHandle(
        url=url, port=port, model_alias=alias, model_path=mpath, pid=proc.pid, parallel=parallel,
        ctx_size=ctx_size, threads=threads, binary=binary, log_path=log_path, args=args,
        startup_s=0.0, process=proc,
    )
    try:
        _wait_healthy(handle, startup_timeout_s)
    except BaseException:
        handle.stop(grace_s=3.0)
        raise
    handle.startup_s = time.monotonic() - t0
    return handle


def _wait_healthy(handle: EngineHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        rc = handle.process.poll()
        if rc is not None:
            line = last_error_line(handle.log_path)
            if _bind_failed(handle.log_path):
                raise _BindRace(EngineError(
                    f"port {handle.port} on {HOST} is already in use (llama-server could not bind it); log: {handle.log_path}"
                ))
            detail = f": {line}" if line else ""
            raise EngineError(
                f"llama-server exited during startup ({describe_exit(rc)}) with model {handle.model_path}"
                f"{detail}; log: {handle.log_path}"
            )
        from phasescope.apis.llamacpp import health_status_sync, props_sync

        try:
            # 503 while the model loads, None while nothing listens yet
            if health_status_sync(handle.url, timeout_s=2.0) == 200:
                # make sure the server answering is ours (not another one that won a port race)
                props = props_sync(handle.url, 5.0)
                if props.get("model_path") == str(handle.model_path) and handle.process.poll() is None:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise EngineError(
                f"llama-server did not become healthy within {timeout_s:.0f} s at {handle.url}; log: {handle.log_path}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """In the main thread, turn SIGTERM (if unhandled) into SystemExit so the engine gets stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:
        yield
        return
    if previous not in (signal.SIG_DFL, None):
        yield
        return

    def _handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _handler)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def running_engine(
    parallel: int = DEFAULT_PARALLEL,
    ctx_size: int = DEFAULT_CTX_SIZE,
    model_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    *,
    llama_server: str | os.PathLike[str] | None = None,
    alias: str | None = None,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    spec: str | None = None,
    draft_model: str | os.PathLike[str] | None = None,
) -> Iterator[EngineHandle]:
    """Run llama-server for the duration of a ``with`` block and always stop it afterwards.

    ``model_path`` None = the bundled Gemma 3 270M Q4_K_M (alias ``gemma-3-270m``); ``port`` None =
    a free port; ``threads`` None = all CPUs available. If the engine died under the block (killed,
    crashed), leaving the block raises an :class:`EngineError` that says so (chained to the block's own
    exception if it raised one); :meth:`EngineHandle.check` raises it on demand.
    """
    with _sigterm_as_exit():
        handle = start_engine(
            parallel=parallel, ctx_size=ctx_size, model_path=model_path, port=port, threads=threads,
            extra_args=extra_args, llama_server=llama_server, alias=alias, startup_timeout_s=startup_timeout_s,
            spec=spec, draft_model=draft_model,
        )
        try:
            yield handle
        except Exception as exc:
            if not handle.alive and not handle.stopped_by_us and not isinstance(exc, EngineError):
                raise handle.died_error() from exc
            raise
        else:
            # the block finished, but the engine had died under it (clients record failures rather
            # than raise): say so, so a run against a dead engine is never reported as a success
            handle.check()
        finally:
            handle.stop()
