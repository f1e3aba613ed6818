"""Starting the server for one setting, and always stopping it.

Two launchers, one shape — a context manager yielding a :class:`Launched` (URL, log path, what
was started):

* :func:`embedded` — the embedded llama-server through :func:`phasescope.engine.running_engine`
  (the one way phasescope runs it: 127.0.0.1, own process group, health-checked, stopped on any
  exit). The setting's knobs become its arguments: ``ub``/``b``/``fa``/``cache-reuse`` extra flags
  (``ub`` alone sets ``-b`` too: the step's token budget, :func:`engine_kwargs`),
  ``parallel``/``threads``/``ctx`` its own parameters, ``quant`` a model file made with
  :func:`phasescope.engine.quantize.quantize` (cached, so only the first tune pays for it).
* :func:`from_template` — ``--serve TEMPLATE``: the fields filled (``{port}`` with a free port on
  127.0.0.1), leading ``NAME=value`` words taken as environment variables (``OLLAMA_NUM_PARALLEL={n}
  ollama serve``), started as a subprocess in its own process group with stdout+stderr in a log
  file, polled with :func:`phasescope.apis.ready.ready_sync` until ready or ``startup_timeout_s``,
  and the whole group stopped afterwards (SIGTERM, then SIGKILL) whatever happens; on Linux the
  command also gets SIGTERM if phasescope itself is killed outright (as the embedded engine does). A command that
  exits or never gets ready raises :class:`SettingFailed` with the log's last lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from phasescope.engine.server import (
    PDEATHSIG_PREEXEC,
    free_port,
    last_error_line,
    log_tail,
    stop_process_group,
)
from phasescope.errors import EngineError, InputError

__all__ = ["Launched", "SettingFailed", "embedded", "engine_kwargs", "from_template"]

HOST = "127.0.0.1"
STOP_GRACE_S = 10.0
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class SettingFailed(Exception):
    """This setting's server did not start (the tune records it and goes on)."""

    def __init__(self, reason: str, log_path: Path | None = None, tail: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_path = log_path
        self.tail = tail or []


@dataclass
class Launched:
    url: str
    log_path: Path | None
    command: list[str]
    startup_s: float
    model_path: str | None = None
    #: environment variables the template set (``OLLAMA_NUM_PARALLEL=4``)
    env: dict[str, str] = field(default_factory=dict)


def engine_kwargs(params: dict[str, str]) -> dict[str, Any]:
    """The :func:`~phasescope.engine.running_engine` arguments of one embedded setting."""
    from phasescope.engine.server import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL

    kw: dict[str, Any] = {"parallel": DEFAULT_PARALLEL, "ctx_size": DEFAULT_CTX_SIZE, "extra_args": []}
    extra: list[str] = kw["extra_args"]
    for name, v in params.items():
        if name == "ub":
            extra += ["--ubatch-size", v]
        elif name == "b":
            extra += ["--batch-size", v]
        elif name == "fa":
            extra += ["--flash-attn", v]
        elif name == "cache-reuse":
            extra += ["--cache-reuse", v]
        elif name == "cache-ram":
            extra += ["--cache-ram", v]
        elif name == "ctx-checkpoints":
            extra += ["--ctx-checkpoints", v]
        elif name == "parallel":
            kw["parallel"] = int(v)
        elif name == "threads":
            kw["threads"] = int(v)
        elif name == "ctx":
            kw["ctx_size"] = int(v)
        elif name == "quant":
            kw["quant"] = v
        elif name == "spec":  # llama-server --spec-type (phasescope.engine.spec); none = off
            kw["spec"] = None if v == "none" else v
        elif name == "draft":  # llama-server -md (phasescope.engine.spec); none = no draft model
            kw["draft_model"] = None if v == "none" else v
        else:  # parse_param already refused it; a programming error if it gets here
            raise InputError(f"unknown embedded-engine parameter {name!r}")
    # ``ub`` is the prefill chunk: llama-server puts at most -b tokens into one step (server-context.cpp
    # update_slots fills the batch "while batch.size() < n_batch"), and the decoding streams wait for the
    # whole step, while -ub only splits that step into forward passes. So -ub alone (with -b at its 2048)
    # changes neither the pause nor the chunking; -b follows -ub when only -ub is given (-ub ≤ -b holds).
    if "ub" in params and "b" not in params:
        extra += ["--batch-size", params["ub"]]
    return kw


def _model_for(qtype: str | None, say: Any) -> tuple[str | None, str | None]:
    """(model path, alias) for a quant type: None for the bundled file's own type."""
    if qtype is None:
        return None, None
    from phasescope.engine.synth import active, alias_of, synthesize
    from phasescope.tuning.spec import split_pure

    syn = active()
    if syn is not None:  # ``--synthetic SHAPE``: the same shape at the setting's type
        base, pure = split_pure(qtype)
        if pure:
            raise SettingFailed(f"--synthetic makes {base} files with llama-quantize's own mix; TYPE-pure is not offered")
        try:
            res = synthesize(syn.plan.spec, base, vocab=syn.vocab, say=say)
        except (EngineError, InputError) as exc:
            raise SettingFailed(f"engine synth {syn.shape_id} {qtype} failed: {exc}") from None
        return str(res.path), alias_of(res)
    from phasescope.engine.model import BUNDLED_MODEL_ALIAS, ensure_bundled_model
    from phasescope.engine.quantize import output_path, quantize

    from phasescope.tuning.spec import split_pure

    bundled = ensure_bundled_model()
    base, pure = split_pure(qtype)
    if not pure and qtype.upper() in bundled.name.upper():
        return None, None
    cached = output_path(bundled, base.upper(), pure).exists()
    if not cached:
        say(f"making the {qtype} model file with `engine quantize{' --pure' if pure else ''}` (once; cached)")
    try:
        res = quantize(base, allow_requantize=True, pure=pure)
    except (EngineError, InputError) as exc:
        raise SettingFailed(f"engine quantize {qtype} failed: {exc}") from None
    return str(res.path), BUNDLED_MODEL_ALIAS


@contextlib.contextmanager
def embedded(params: dict[str, str], *, say: Any = None, startup_timeout_s: float = 120.0) -> Iterator[Launched]:
    from phasescope.engine import running_engine

    tell = say or (lambda _m: None)
    kw = engine_kwargs(params)
    model_path, alias = _model_for(kw.pop("quant", None), tell)
    t0 = time.monotonic()
    started: list[Any] = []
    try:
        with running_engine(model_path=model_path, alias=alias, startup_timeout_s=startup_timeout_s, **kw) as eng:
            started.append(eng)
            yield Launched(url=eng.url, log_path=eng.log_path, command=list(eng.args),
                           startup_s=time.monotonic() - t0, model_path=str(eng.model_path))
    except EngineError as exc:
        if not started:
            raise SettingFailed(f"the embedded engine did not start: {exc}") from None
        eng = started[0]  # died under the workload: the run keeps what it got
        line = last_error_line(eng.log_path)
        raise SettingFailed(f"the engine died during the run: {line or exc}", eng.log_path,
                            log_tail(eng.log_path, 10)) from None


def render(template: str, params: dict[str, str], port: int) -> tuple[list[str], dict[str, str]]:
    """The template filled: (argv, environment additions).

    The template is split into arguments *first* and each placeholder filled inside its own argument,
    so no value can add an argument (``--param "x=1 --die"``) or a program: a leading ``NAME=value``
    argument is an environment assignment by the template's own text, and a value lands in it as the
    variable's value only (``OLLAMA_NUM_PARALLEL={n}`` with ``n=1 sh -c …`` sets the variable to that text)."""
    from phasescope.tuning.spec import _template_words

    words = _template_words(template)
    values = {**params, "port": str(port)}

    def fill(word: str) -> str:
        try:
            return word.format_map(values)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise InputError(f"--serve: cannot fill the argument {word!r} ({type(exc).__name__}: {exc})") from None

    env: dict[str, str] = {}
    i = 0
    while i < len(words) and _ENV_WORD.match(words[i]):
        k, _, v = words[i].partition("=")
        env[k] = fill(v)
        i += 1
    argv = [fill(w) for w in words[i:]]
    if not argv:
        raise InputError("--serve: the template names no command")
    bad = next((a for a in [*argv, *env.values()] if "\x00" in a), None)
    if bad is not None:
        raise InputError("--serve: a --param value holds a NUL character")
    return argv, env


def shown(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command as logs and the store get it: secret arguments' values masked (tune.spec)."""
    from phasescope.tuning.spec import mask_words

    words = mask_words([f"{k}={v}" for k, v in env.items()] + list(argv))
    env_shown = dict(w.partition("=")[::2] for w in words[:len(env)])
    return words[len(env):], env_shown


def _log_path(logs: Path, port: int) -> Path:
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"serve-{time.strftime('%Y%m%d-%H%M%S')}-{port}-{os.getpid()}.log"


@contextlib.contextmanager
def from_template(template: str, params: dict[str, str], *, logs: Path, startup_timeout_s: float = 120.0,
                  say: Any = None) -> Iterator[Launched]:
    from phasescope.apis.ready import ready_sync

    import threading

    from phasescope.redact import secrets
    from phasescope.tuning.spec import register_template_secrets

    register_template_secrets(template)  # the server's own output may print its key: masked in the log
    port = free_port()
    argv, env = render(template, params, port)
    argv_shown, env_shown = shown(argv, env)
    log_path = _log_path(logs, port)
    t0 = time.monotonic()
    # with a secret known, the server's output goes through a redacting pump instead of straight to the file
    pump = bool(secrets())
    with log_path.open("ab") as log:
        log.write(("# " + shlex.join([f"{k}={v}" for k, v in env_shown.items()] + argv_shown) + "\n").encode())
        log.flush()
        in_main = threading.current_thread() is threading.main_thread()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if pump else log,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                    env={**os.environ, **env},
                                    preexec_fn=PDEATHSIG_PREEXEC if in_main else None)  # noqa: PLW1509
        except OSError as exc:
            raise SettingFailed(f"could not start {argv_shown[0]}: {exc.strerror or exc}", log_path) from None
        except ValueError as exc:  # an argument Popen refuses
            raise SettingFailed(f"could not start {argv_shown[0]}: {exc}", log_path) from None
    pumper = _start_pump(proc, log_path) if pump else None
    try:
        url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + startup_timeout_s
        delay = 0.05
        while True:
            rc = proc.poll()
            if rc is not None:
                from phasescope.engine.server import describe_exit

                if pumper is not None:
                    pumper.join(timeout=2.0)  # the log's last lines are in the file before it is read
                tail = log_tail(log_path, 10)
                raise SettingFailed(f"the server exited during startup ({describe_exit(rc)})"
                                    + (f": {tail[-1]}" if tail else ""), log_path, tail)
            if ready_sync(url, timeout_s=2.0) is not None:
                break
            if time.monotonic() > deadline:
                raise SettingFailed(f"the server did not answer on {url} within {startup_timeout_s:.0f} s",
                                    log_path, log_tail(log_path, 10))
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        yield Launched(url=url, log_path=log_path, command=argv_shown, startup_s=time.monotonic() - t0,
                       env=env_shown)
        if proc.poll() is not None:
            from phasescope.engine.server import describe_exit

            if pumper is not None:
                pumper.join(timeout=2.0)
            raise SettingFailed(f"the server died during the run ({describe_exit(proc.returncode)})", log_path,
                                log_tail(log_path, 10))
    finally:
        stop_process_group(proc, STOP_GRACE_S)
        if pumper is not None:
            pumper.join(timeout=5.0)


def _start_pump(proc: subprocess.Popen[bytes], log_path: Path) -> Any:
    """A thread copying the server's output into its log line by line, every known secret masked
    (:func:`phasescope.redact.redact_field`); bytes that are not UTF-8 are kept as they came."""
    import threading

    from phasescope.redact import redact_field

    def run() -> None:
        out = proc.stdout
        if out is None:
            return
        try:
            with out, log_path.open("ab") as log:
                for line in iter(lambda: out.readline(1 << 16), b""):
                    text = line.decode("utf-8", "surrogateescape")
                    log.write(redact_field(text).encode("utf-8", "surrogateescape"))
                    log.flush()
        except (OSError, ValueError):
            return

    t = threading.Thread(target=run, name="serve-log", daemon=True)
    t.start()
    return t
