"""Validation at the boundary, once: one set of typed checks for every option of every command.

:func:`install` walks the click tree the CLI builds from the typer declarations and wraps each
command's callback so that, after click has parsed the flags and before the command runs:

1. every **numeric** option is checked against its rule in :data:`RULES` (finite unless the rule
   allows ``inf``; the range; an integer's bounds), and an option without a rule must at least be
   finite (``inf`` only where it is the default) and, for integers, non-negative;
2. every **text** option and argument must be valid UTF-8 (undecodable bytes in argv arrive as lone
   surrogates) and not empty; a **choice** option (:data:`CHOICES`) must be one of its values;
3. every **URL** argument (and ``--target``) must parse: scheme http(s), a host, a port in 1–65535;
4. **mode-dependent flags** (:data:`CROSS`): a flag that has no effect in the chosen mode, or a
   mode that lacks the flag it needs, is an error naming both flags.

Each failure is an :class:`~phasescope.errors.InputError`: one ``phasescope: error:`` line, exit 2.
The library keeps its own checks (it is called without the CLI too); these come first.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

from phasescope.apis.base import check_url
from phasescope.errors import InputError

#: the longest prompt or output any option may ask for (tokens): above any model's context window,
#: and small enough that a prompt of it can be built and a simulator step costed
MAX_TOKENS = 10_000_000
#: counts of requests: a lazily generated schedule handles any number, but not past int64
MAX_COUNT = 2**62
MAX_SEED = 2**63 - 1
#: no option value is longer (PATH_MAX on Linux; a URL, a label or llama-server flags fit)
MAX_TEXT = 4096


@dataclass(frozen=True)
class Num:
    """``lo``/``hi`` bounds (``*_open``: strict); ``inf``: +inf allowed (e.g. "all at once")."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    inf: bool = False
    what: str = ""

    def check(self, flag: str, v: float) -> None:
        if isinstance(v, float) and math.isnan(v):
            raise InputError(f"{flag} must be a number, not nan")
        if isinstance(v, float) and math.isinf(v):
            if v > 0 and self.inf:
                return
            raise InputError(f"{flag} must be finite, not {v}" + (" (inf is allowed)" if self.inf and v < 0 else ""))
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            raise InputError(f"{flag} must be {'>' if self.lo_open else '≥'} {_g(self.lo)}{self.what} (got {_g(v)})")
        if self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi):
            raise InputError(f"{flag} must be {'<' if self.hi_open else '≤'} {_g(self.hi)}{self.what} (got {_g(v)})")


def _g(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


POS = Num(lo=0, lo_open=True)  # > 0, finite
POS_INF = Num(lo=0, lo_open=True, inf=True)
NONNEG = Num(lo=0)
FRACTION = Num(lo=0, hi=1, lo_open=True)  # (0, 1]
AT_LEAST_1 = Num(lo=1, hi=MAX_COUNT)
TOKENS = Num(lo=1, hi=MAX_TOKENS, what=" tokens")
TOKENS0 = Num(lo=0, hi=MAX_TOKENS, what=" tokens")
SECONDS = Num(lo=0, lo_open=True, hi=366 * 86400, what=" s")

#: numeric rules by long flag; ``"<command> <flag>"`` overrides for one command
RULES: dict[str, Num] = {
    # timeouts and intervals: positive, finite
    "--connect-timeout": SECONDS, "--ttft-timeout": SECONDS, "--itl-timeout": SECONDS, "--timeout": SECONDS,
    "--metrics-interval": SECONDS, "--interval": SECONDS, "--window": SECONDS, "--duration": SECONDS,
    # load
    "--request-rate": POS_INF, "--burstiness": POS_INF, "--ramp-start-rate": POS, "--ramp-end-rate": POS,
    "--trace-speed": POS, "--num-prompts": AT_LEAST_1, "--max-concurrency": AT_LEAST_1,
    "--warmup": Num(lo=0, hi=100_000), "--seed": Num(lo=0, hi=MAX_SEED),
    "--input-len": TOKENS, "--output-len": TOKENS, "--prefix-len": TOKENS0, "--prefix-groups": Num(lo=1, hi=1_000_000),
    "--range-ratio": Num(lo=0, hi=1, hi_open=True), "--workers": Num(lo=1, hi=1024), "--sweep-steps": Num(lo=0, hi=1000),
    "--parallel": Num(lo=1, hi=4096), "--ray-workers": Num(lo=1, hi=4096), "--ray-actor-cpus": POS,
    # conversations and traces (issue 17)
    "--fork-width": Num(lo=1, hi=32), "--subagent-turns": Num(lo=1, hi=50),
    "--users": Num(lo=1, hi=10_000), "--sessions": Num(lo=1, hi=100_000), "--system-prompt-len": Num(lo=0, hi=1_000_000, what=" tokens"),
    "--turn-input-len": Num(lo=1, hi=1_000_000, what=" tokens"), "--tool-output-len": Num(lo=0, hi=1_000_000, what=" tokens"),
    "--session-rate": POS, "--block-size": Num(lo=1, hi=1_000_000, what=" tokens"),
    "--trace-start": Num(lo=0, hi=366 * 86400, what=" s"), "--trace-duration": SECONDS,
    # probe
    "--max-tokens": Num(lo=2, hi=MAX_TOKENS, what=" tokens"), "--repeat": Num(lo=1, hi=100_000),
    "--retries": Num(lo=0, hi=1000),
    # watch / runs / compare
    "--count": AT_LEAST_1, "--limit": Num(lo=1, hi=MAX_COUNT),
    "runs --limit": Num(lo=0, hi=MAX_COUNT),  # its help: "0 = all"
    "--confidence": Num(lo=0, hi=1, lo_open=True, hi_open=True),
    "--min-change": NONNEG,
    # plan
    "--gpus": Num(lo=1, hi=1_000_000), "--tp": Num(lo=1, hi=1_000_000), "--rate": POS_INF,
    "--concurrency": Num(lo=1, hi=10_000_000), "--num-requests": Num(lo=1, hi=200_000, what=" simulated requests"),
    "--prefix-share": Num(lo=0, hi=1), "--max-num-batched-tokens": TOKENS, "--max-num-seqs": Num(lo=1, hi=10_000_000),
    "--gpu-memory-utilization": FRACTION, "--kv-pool-tokens": Num(lo=1, hi=2**50), "--bw-eff": FRACTION,
    "--flops-eff": FRACTION, "--step-overhead-ms": Num(lo=0, hi=3_600_000), "--api-overhead-ms": Num(lo=0, hi=3_600_000),
    "--interconnect-gb-s": Num(lo=0, lo_open=True, hi=1e9), "--slo-percentile": Num(lo=0, hi=100, lo_open=True),
    "--records-limit": Num(lo=0, hi=10_000_000),
    # theory
    "--weights-gb": Num(lo=0, lo_open=True, hi=1e7), "--bandwidth-gb-s": Num(lo=0, lo_open=True, hi=1e9),
    "--context": TOKENS0, "--batch": Num(lo=1, hi=10_000_000), "--prompt": TOKENS,
    "--gpu-mem-gb": Num(lo=0, lo_open=True, hi=1e7),
    # hw / serve / engine
    "--size-mb": Num(lo=1, hi=1_048_576), "--repeats": Num(lo=1, hi=10_000), "--threads": Num(lo=1, hi=4096),
    "--matmul-n": Num(lo=1, hi=65_536), "--port": Num(lo=0, hi=65535), "--ctx-size": Num(lo=0, hi=MAX_TOKENS),
}

def _api_names() -> tuple[str, ...]:
    from phasescope.apis import registry

    return registry.names()


#: options whose value must be one of a few words (None: any, checked by the command); a function gives
#: the words of a registry when the command runs (``--api``: every registered protocol)
CHOICES: dict[str, tuple[str, ...] | Callable[[], tuple[str, ...]]] = {
    "--api": _api_names,
    "--load-shape": ("poisson", "constant", "ramp", "trace"),
    "--dataset": ("random", "sharegpt", "jsonl", "conversation", "agentic", "mooncake", "burstgpt"),
    "--system-prompt": ("shared", "per-user"),
    "--route": ("round-robin", "random", "least-outstanding"),
    "--arrival": ("poisson", "gamma", "constant"),
    "devices --kind": ("gpu", "cpu", "apple", "accelerator", "local"),
}

def _budget(text: str) -> None:
    from phasescope.experiments.suite import parse_budget

    parse_budget(text)


def _out_folder(text: str, flag: str = "--out") -> None:
    from pathlib import Path

    p = Path(text)
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag} {p} is a file, not a folder", hint="name a folder (it is created if missing)")


def _input_file(what: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        from phasescope.safeio import user_file

        user_file(text, what)
    return check


def parse_token_list(values: Any, flag: str = "--prompt-tokens") -> list[int]:
    """``-p 200,2000`` (comma- or space-separated, or repeated) → token counts, each a whole number
    from 1 to :data:`MAX_TOKENS`; an empty item (``200,,300``), a non-integer (``1e14``, ``2.5``) or a
    count past the limit is one :class:`InputError` line (exit 2) before any prompt is built."""
    import re

    out: list[int] = []
    for v in [values] if isinstance(values, str) else list(values):
        text = str(v)
        for part in re.split(r"\s*,\s*|\s+", text.strip()):
            if not part:
                raise InputError(f"{flag}: empty item in {text!r}", hint="give sizes as 200,2000")
            digits = part.replace("_", "")
            if not (digits.isascii() and digits.isdigit()):
                raise InputError(f"{flag}: {part[:40]!r} is not a whole number of tokens")
            if len(digits) > 12 or not 1 <= int(digits) <= MAX_TOKENS:
                shown = f"{int(digits):,}" if len(digits) <= 40 else f"a {len(digits):,}-digit number"
                raise InputError(f"{flag}: {shown} must be from 1 to {MAX_TOKENS:,} tokens")
            out.append(int(digits))
    return out


def _token_list(text: str) -> None:
    parse_token_list([text])


def _sweep(text: str) -> None:
    """``plan --sweep PARAM=v1,v2``: every value finite and within the rule of the flag it sweeps."""
    name, _, vals = text.partition("=")
    items = [v.strip() for v in vals.split(",")]
    if "=" in text and any(not v for v in items):
        raise InputError(f"--sweep: empty value in {text!r}", hint="e.g. max_num_batched_tokens=512,2048,8192")
    flag = "--" + name.strip().lstrip("-").replace("_", "-").lower()
    rule = RULES.get(f"plan {flag}", RULES.get(flag, POS))
    for v in items:
        try:
            x = float(v)
        except ValueError:
            continue  # the planner names a value that is not a number
        rule.check(f"--sweep {name.strip()}", x)


def _hw_size(value: float) -> None:
    """``hw --size-mb``: the array must fit in the memory there is (1 TiB was a MemoryError)."""
    avail = _available_bytes()
    need = float(value) * 1024 * 1024  # the read kernel holds one array of that size (touched, so really allocated)
    if avail and need > avail:
        raise InputError(f"--size-mb {value:,}: the bandwidth array needs {need / 2**30:,.1f} GiB, more than the "
                         f"{avail / 2**30:,.1f} GiB of memory available",
                         hint="the default 1024 MiB is far above any cache")


def _available_bytes() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


#: numeric options with a check beyond their static rule (``"<command> <flag>"``)
NUM_CHECKS: dict[str, Callable[[float], None]] = {"hw --size-mb": _hw_size}

#: text options checked by a parser before the command runs (``"<command> <flag>"`` or ``<flag>``)
TEXT_RULES: dict[str, Callable[[str], None]] = {
    "--budget": _budget,
    "bench --out": _out_folder, "probe --out": _out_folder,
    "--trace": _input_file("trace file"), "--dataset-path": _input_file("dataset file"),
    "serve --model": _input_file("model file"), "serve --llama-server": _input_file("llama-server binary"),
    "quantize --model": _input_file("model file"),
    "--prompt-tokens": _token_list, "plan --sweep": _sweep,
}

#: text options that may be empty
EMPTY_OK = frozenset({"--label", "--server-args", "--api-key"})
#: positional arguments and options that name a server URL
URL_PARAMS = frozenset({"url", "--target", "--gpu-metrics"})


def check_text(flag: str, value: str, *, empty_ok: bool = False) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{flag}: not valid UTF-8 text") from None
    if "\x00" in value:
        raise InputError(f"{flag}: contains a NUL character")
    if len(value) > MAX_TEXT:
        raise InputError(f"{flag}: {len(value):,} characters is too long (at most {MAX_TEXT:,})")
    if not empty_ok and not value.strip():
        raise InputError(f"{flag}: empty value")


# --- mode-dependent flags ----------------------------------------------------------------------
Given = Callable[[str], bool]


def _bench_cross(p: dict[str, Any], given: Given) -> None:
    shape = p.get("load_shape")
    if shape == "trace" and not p.get("trace"):
        raise InputError("--load-shape trace needs --trace FILE")
    if p.get("trace") and shape != "trace":
        raise InputError("--trace is only read with --load-shape trace")
    ds = p.get("dataset")
    traced = shape == "trace" or ds in ("mooncake", "burstgpt")
    agent_replay = ds == "agentic" and bool(p.get("dataset_path"))
    if given("trace_speed") and not (traced or agent_replay):
        raise InputError("--trace-speed has no effect without --load-shape trace, --dataset mooncake|burstgpt "
                         "or an agent trace (--dataset agentic --dataset-path)")
    for name, flag in (("trace_start", "--trace-start"), ("trace_duration", "--trace-duration")):
        if given(name) and not traced:
            raise InputError(f"{flag} has no effect without --load-shape trace or --dataset mooncake|burstgpt")
    if given("block_size") and ds != "mooncake":
        raise InputError("--block-size is only read with --dataset mooncake")
    if ds == "agentic" and p.get("dataset_path"):  # a replay: the trace brings its turns, lengths and forks
        for name in ("turns", "system_prompt_len", "system_prompt", "turn_input_len", "think_time_s", "tool_output_len",
                     "fork_at", "fork_width", "subagent_turns"):
            if given(name):
                raise InputError(f"--{name.replace('_', '-')} has no effect on an agent trace replay "
                                 "(--dataset-path): the trace brings its own calls")
    if ds != "agentic":
        for name in ("fork_at", "fork_width", "subagent_turns"):
            if given(name):
                raise InputError(f"--{name.replace('_', '-')} is only read with --dataset agentic")
    if ds not in ("conversation", "agentic"):
        for name in ("users", "sessions", "turns", "system_prompt_len", "system_prompt", "turn_input_len",
                     "think_time_s", "tool_output_len", "session_rate"):
            if given(name):
                raise InputError(f"--{name.replace('_', '-')} is only read with --dataset conversation or agentic")
    elif given("users") and given("session_rate"):
        raise InputError("--users (closed loop) and --session-rate (open loop) do not combine", hint="drop one of them")
    if ds in ("conversation", "agentic") and given("input_len"):
        raise InputError(f"--input-len has no effect with --dataset {ds} (use --turn-input-len)")
    if ds in ("mooncake", "burstgpt") and not p.get("dataset_path"):
        raise InputError(f"--dataset {ds} needs --dataset-path FILE")
    if (given("ramp_start_rate") or given("ramp_end_rate")) and shape != "ramp":
        raise InputError("--ramp-start-rate/--ramp-end-rate have no effect without --load-shape ramp")
    if shape == "ramp" and (p.get("ramp_start_rate") is None or p.get("ramp_end_rate") is None):
        raise InputError("--load-shape ramp needs --ramp-start-rate and --ramp-end-rate")
    if p.get("dataset") in ("sharegpt", "jsonl") and not p.get("dataset_path"):
        raise InputError(f"--dataset {p.get('dataset')} needs --dataset-path FILE")
    if given("dataset_path") and p.get("dataset") in ("random", "conversation"):
        raise InputError("--dataset-path is only read with --dataset sharegpt, jsonl, mooncake, burstgpt or agentic")
    if p.get("sweep"):
        for name, flag in (("request_rate", "--request-rate"), ("load_shape", "--load-shape"),
                           ("burstiness", "--burstiness")):
            if given(name):
                raise InputError(f"{flag} has no effect with --sweep (the sweep chooses its own rates)",
                                 hint="drop one of them")
    else:
        for name, flag in (("sweep_steps", "--sweep-steps"), ("slo", "--slo")):
            if given(name):
                raise InputError(f"{flag} has no effect without --sweep")
    if not p.get("ray"):
        for name, flag in (("ray_workers", "--ray-workers"), ("ray_actor_cpus", "--ray-actor-cpus")):
            if given(name):
                raise InputError(f"{flag} has no effect without --ray")
    if given("parallel") and p.get("url"):
        raise InputError("--parallel sizes the embedded engine only; it has no effect with a URL")
    pl, il = p.get("prefix_len") or 0, p.get("input_len") or 0
    if pl and p.get("dataset") == "random" and pl > il:
        raise InputError(f"--prefix-len {pl} is longer than --input-len {il}")


def _plan_cross(p: dict[str, Any], given: Given) -> None:
    if given("burstiness") and p.get("arrival") != "gamma":
        raise InputError("--burstiness has no effect without --arrival gamma")


def _serve_cross(p: dict[str, Any], given: Given) -> None:
    import shlex

    try:
        shlex.split(p.get("server_args") or "")
    except ValueError as exc:
        raise InputError(f"--server-args: {exc} (quote it as a shell would)") from None


CROSS: dict[str, Callable[[dict[str, Any], Given], None]] = {
    "bench": _bench_cross,
    "plan": _plan_cross,
    "serve": _serve_cross,
}


# --- applying the rules ------------------------------------------------------------------------
def _long(p: Any) -> str:
    opts = [o for o in getattr(p, "opts", []) if o.startswith("--")]
    return opts[0] if opts else (p.name or "?")


def _rule_for(command: str, flag: str) -> Num | None:
    return RULES.get(f"{command} {flag}", RULES.get(flag))


def check_params(command: str, params: list[Any], values: dict[str, Any], given: Given) -> None:
    """Check every parsed value of ``command`` (``params``: click parameters; ``values``: ctx.params)."""
    for p in params:
        name = p.name
        if name not in values:
            continue
        v = values[name]
        if v is None:
            continue
        flag = _long(p)
        kind = p.bare_type() if callable(getattr(p, "bare_type", None)) else type(v).__name__
        items = list(v) if isinstance(v, (list, tuple)) else [v]
        for one in items:
            if isinstance(one, bool):
                continue
            if isinstance(one, (int, float)):
                rule = _rule_for(command, flag)
                if rule is None:
                    default = getattr(p, "default", None)
                    rule = Num(inf=isinstance(default, float) and math.isinf(default),
                               lo=0 if isinstance(one, int) else None, hi=MAX_COUNT if isinstance(one, int) else None)
                rule.check(flag, one)
                extra = NUM_CHECKS.get(f"{command} {flag}")
                if extra is not None:
                    extra(one)
            elif isinstance(one, str) or kind in ("str", "Path") or hasattr(one, "__fspath__"):
                text = str(one)
                if flag == "--api-key":
                    from phasescope.redact import register, weak_key_warning

                    if register(text):  # masked in everything printed or written from here on
                        warn = weak_key_warning(text, "--api-key")  # too short to mask in free text
                        if warn:
                            print(warn, file=sys.stderr)
                explicit = given(name)
                if explicit or text:
                    check_text(flag, text, empty_ok=flag in EMPTY_OK or not explicit)
                rule_t = TEXT_RULES.get(f"{command} {flag}", TEXT_RULES.get(flag))
                if rule_t is not None and text:
                    rule_t(text)
                choices = CHOICES.get(f"{command} {flag}", CHOICES.get(flag))
                if callable(choices):
                    choices = choices()
                if choices is not None and text not in choices:
                    raise InputError(f"unknown {flag} {text!r}; expected one of: {', '.join(choices)}")
                if (name in URL_PARAMS or flag in URL_PARAMS) and text:
                    check_url(text, flag if flag.startswith("--") else "URL")
    cross = CROSS.get(command)
    if cross is not None:
        cross(values, given)


def install(group: Any) -> Any:
    """Wrap every command under ``group`` (a click Group) so its flags are checked first."""
    import functools

    def walk(cmd: Any, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, name if not path else f"{path} {name}")
            return
        cb = getattr(cmd, "callback", None)
        if cb is None or getattr(cb, "_ps_validated", False):
            return
        params = list(cmd.params)
        name = path.split(" ")[-1] if path else cmd.name

        @functools.wraps(cb)
        def checked(*args: Any, **kwargs: Any) -> Any:
            from phasescope.cli._click import current_context, parameter_source_given

            ctx = current_context()

            def given(n: str) -> bool:
                return parameter_source_given(ctx, n)

            check_params(name, params, dict(kwargs), given)
            return cb(*args, **kwargs)

        checked._ps_validated = True  # type: ignore[attr-defined]
        cmd.callback = checked

    walk(group, "")
    return group
