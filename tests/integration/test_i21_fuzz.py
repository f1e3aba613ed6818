"""Issue 21: a fuzzed CLI. Bad values for every option of every command, generated from the typer
declarations themselves (so a new option is fuzzed without editing this file), plus bad files;
each case runs in this process with a time limit and must end with a documented exit code, no
traceback and never the last-resort guard (exit 1).

Commands that need a server get a dead loopback port; the embedded engine, ``hw``'s measurement and
llama-quantize are replaced by an :class:`EngineError` stub so no case starts real work.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import struct
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

DEAD = "http://127.0.0.1:9"
#: the exit codes the README documents for a bad input or a failed run (1 = a bug: never allowed)
DOCUMENTED = {0, 2, 3, 4, 130}
CASE_LIMIT_S = 20.0
#: a cap on the cases, so the test stays well under a minute on two busy cores. Each run draws a fresh
#: sample of the generated cases (the seed is printed; PHASESCOPE_FUZZ_SEED replays it), so successive
#: CI runs cover all of them; PHASESCOPE_FUZZ_CASES=0 runs every case
MAX_CASES = int(os.environ.get("PHASESCOPE_FUZZ_CASES", "600")) or 10**9
SEED = int(os.environ.get("PHASESCOPE_FUZZ_SEED") or random.SystemRandom().randrange(1 << 31))

NUM_BAD = ["nan", "inf", "-inf", "-1", "0", "1e308", "99999999999999999999", "abc", "", "\udcff"]
TEXT_BAD = ["", " ", "\udcff\udcfe", "nan", "-1", "x" * 5000, "http://[::1", "http://127.0.0.1:99999", "\x00"]

#: enough arguments for each command to get past "missing argument" to its options
BASE: dict[str, list[str]] = {
    "probe": ["probe", DEAD], "explain": ["explain", DEAD], "experiment": ["experiment", "queue", DEAD],
    "bench": ["bench", DEAD, "-n", "2"], "watch": ["watch", DEAD, "--once"],
    "runs": ["runs"], "show": ["show", "r-nope"], "compare": ["compare", "r-a", "r-b"], "report": ["report", "r-nope"],
    "plan": ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "-n", "20", "--no-save"],
    "ceiling": ["ceiling", "--model", "llama-3.1-8b", "--device", "l40s"],
    "kv": ["kv", "--model", "llama-3.1-8b"], "hw": ["hw", "--no-save"], "devices": ["devices"], "models": ["models"],
    "serve": ["serve"], "engine install": ["engine", "install"], "engine status": ["engine", "status"],
    "engine quantize": ["engine", "quantize", "Q8_0"],
    "tune": ["tune", "--serve", "false --port {port} {x}", "--param", "x=1"],  # a server that never starts
    "import": ["import", "no-such-result.json"], "export": ["export", "r-nope"],
    "engine synth": ["engine", "synth", "smollm2-135m", "--dry-run"],  # --dry-run: plans, writes no file
}


class _CaseTimeout(BaseException):
    """Raised in the main thread when a case runs past CASE_LIMIT_S (a hang)."""


def _bad_files(tmp: Path) -> list[Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "trunc.json").write_text('{"hidden_size": 4096, "num_att')
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp / "shape.json").write_text(json.dumps([{"prompt": 1}, "x", None]))
    (tmp / "lines.jsonl").write_text('1\n["a"]\n{"prompt": "p", "output_len": 1e400}\n')
    (tmp / "trunc.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + b"\x10")
    (tmp / "records.jsonl").write_text('{"id": 1}\n[1,2]\n')
    (tmp / "dir").mkdir(exist_ok=True)
    return [tmp / n for n in ("trunc.json", "binary.bin", "deep.json", "shape.json", "lines.jsonl", "trunc.gguf",
                              "records.jsonl", "dir", "missing.json")]


def _walk(cmd: Any, path: str = "") -> list[tuple[str, Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        out = []
        for name, sub in subs.items():
            out += _walk(sub, f"{path} {name}".strip())
        return out
    return [(path, cmd)]


def generate_cases(tmp: Path) -> list[tuple[str, list[str]]]:
    import typer.main

    from phasescope.cli import app

    files = [str(p) for p in _bad_files(tmp)]
    cases: list[tuple[str, list[str]]] = []
    for path, cmd in _walk(typer.main.get_command(app)):
        base = BASE.get(path)
        assert base is not None, f"the fuzz test needs base arguments for the new command `{path}`"
        for p in cmd.params:
            opts = [o for o in p.opts if o.startswith("--")]
            kind = p.bare_type()
            if getattr(p, "param_type_name", "") == "argument":
                vals = TEXT_BAD[:7] + files[:4]
                for v in vals:  # replace the argument of that name in the base, or add one
                    args = list(base)
                    if p.name in ("url", "name", "run_id") and len(args) > 1:
                        idx = {"url": -1, "name": 1, "run_id": 1}[p.name]
                        if p.name == "url" and path == "experiment":
                            idx = 2
                        if path == "bench" and p.name == "url":
                            idx = 1
                        if abs(idx) < len(args):
                            args[idx] = v
                            cases.append((f"{path} <{p.name}>={v[:30]!r}", args))
                continue
            if not opts or opts[0] == "--help" or kind == "bool":
                continue
            flag = opts[0]
            if kind in ("int", "float"):
                vals = NUM_BAD
            elif kind == "Path" or any(w in flag for w in ("path", "trace", "config", "gguf", "calibrate", "csv",
                                                             "out", "store", "png", "llama-server")):
                vals = files + TEXT_BAD[:3]
            else:
                vals = TEXT_BAD + files[:3]
            for v in vals:
                cases.append((f"{path} {flag}={v[:30]!r}", [*base, flag, v]))
    rnd = random.Random(SEED)
    global GENERATED
    GENERATED = len(cases)
    if len(cases) > MAX_CASES:
        cases = rnd.sample(cases, MAX_CASES)
    return cases


GENERATED = 0


def file_cases(tmp: Path, url: str) -> list[tuple[str, list[str]]]:
    """Bad files where a command really parses them (a live fake server, so parsing is reached)."""
    out = []
    for f in map(str, _bad_files(tmp)):
        out += [
            (f"bench trace {f}", ["bench", url, "--load-shape", "trace", "--trace", f, "--no-store"]),
            (f"bench jsonl {f}", ["bench", url, "--dataset", "jsonl", "--dataset-path", f, "-n", "2", "--no-store"]),
            (f"bench sharegpt {f}", ["bench", url, "--dataset", "sharegpt", "--dataset-path", f, "-n", "2",
                                     "--output-len", "4", "--no-store"]),
            (f"plan calibrate {f}", [*BASE["plan"], "--calibrate-from", f]),
            (f"probe model-spec {f}", ["probe", url, "--model-spec", f, "-p", "8", "-n", "4", "-r", "1", "--no-save"]),
            (f"kv config {f}", ["kv", "--config", f]), (f"ceiling gguf {f}", ["ceiling", "--gguf", f, "--device", "l40s"]),
        ]
    return out


def _stub(*a: Any, **k: Any) -> Any:
    from phasescope.errors import EngineError

    raise EngineError("fuzz: no real engine, measurement or quantization in this test")


@pytest.mark.timeout(900)
def test_fuzzed_cli_never_tracebacks_hangs_or_exits_undocumented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import phasescope.engine as eng
    import phasescope.engine.build as build
    import phasescope.engine.quantize as quantize
    import phasescope.engine.server as server
    import phasescope.theory.hw as hw
    from phasescope.testing.fakeserver import FakeServer

    try:
        from phasescope.cli import run
    except ImportError:  # before issue 21: the console script, exit code from SystemExit
        from phasescope.cli import main

        def run(argv: list[str]) -> int:  # type: ignore[misc]
            sys.argv = ["phasescope", *argv]
            try:
                main()
            except SystemExit as exc:
                return int(exc.code or 0) if not isinstance(exc.code, str) else 1
            return 0

    for mod, name in ((eng, "running_engine"), (server, "running_engine"), (eng, "start_engine"),
                      (server, "start_engine"), (build, "install"), (quantize, "quantize"), (hw, "measure")):
        monkeypatch.setattr(mod, name, _stub)
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PHASESCOPE_CRASH_DIR", str(tmp_path / "crash"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cases = generate_cases(tmp_path / "files")
    srv_cm = FakeServer(ttft_s=0.001, itl_s=0.001).running()
    srv = srv_cm.__enter__()
    cases += file_cases(tmp_path / "files", srv.url)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _CaseTimeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    failures: list[str] = []
    codes: dict[int, int] = {}
    t_start = time.monotonic()
    try:
        for name, args in cases:
            out, err = io.StringIO(), io.StringIO()
            t0 = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT_S)
            try:
                with redirect_stdout(out), redirect_stderr(err):
                    code = run(args)
            except _CaseTimeout:
                failures.append(f"HANG (> {CASE_LIMIT_S:g} s): {name}")
                continue
            except BaseException as exc:  # noqa: BLE001 - anything escaping run() is a finding
                failures.append(f"ESCAPED {type(exc).__name__}: {name}: {exc}")
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            codes[code] = codes.get(code, 0) + 1
            text = out.getvalue() + err.getvalue()
            if code not in DOCUMENTED:
                failures.append(f"exit {code}: {name}: {err.getvalue().strip()[-300:]}")
            elif "Traceback (most recent call last)" in text:
                failures.append(f"traceback: {name}")
            elif time.monotonic() - t0 > CASE_LIMIT_S:
                failures.append(f"slow: {name}")
    finally:
        signal.signal(signal.SIGALRM, old)
        srv_cm.__exit__(None, None, None)
    with capsys.disabled():
        print(f"\nfuzzed CLI: {len(cases)} cases ({GENERATED} generated from the declarations, capped at "
              f"{MAX_CASES}, seed {SEED}, + bad files parsed against a fake server) in {time.monotonic() - t_start:.0f} s, exit codes "
              f"{dict(sorted(codes.items()))}, {len(failures)} failures", file=sys.stderr)
    assert not failures, f"PHASESCOPE_FUZZ_SEED={SEED}\n" + "\n".join(failures[:60])
    assert codes.get(2, 0) > len(cases) // 3  # most bad values are refused as bad input
