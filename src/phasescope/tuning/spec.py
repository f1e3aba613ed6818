"""What a tune runs: ``--param NAME=V1,V2,…`` parsed, expanded into settings, and the tune's id.

Expansion (:func:`expand`): **grid** (default) — every combination, in the order the parameters
were given, the last one varying fastest; **one at a time** — the baseline (each parameter's first
value) and then, for each parameter in turn, each of its other values with the rest at baseline
(``1 + Σ (len(values) − 1)`` settings). Setting 0 is always the baseline the table compares with.

Parameters (:data:`ENGINE_PARAMS`): on the embedded engine only llama-server's own knobs are
accepted (one clear line otherwise); with ``--serve TEMPLATE`` any name is accepted that the
template names as ``{name}`` (and every ``{name}`` but ``{port}`` needs a ``--param``).

The tune id (:func:`tune_id`) is a hash of everything that defines the measurement (workload and
its flags, the engine or template, the parameter lists, the mode): the same command run again is
the same tune and continues where it stopped; ``--fresh`` salts it for a new one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import string
from dataclasses import dataclass, field
from typing import Any, Sequence

from phasescope.errors import InputError

__all__ = ["ENGINE_PARAMS", "EngineParam", "Setting", "TuneSpec", "canonical_name", "check_template", "expand",
           "has_masked_secret", "mask_words", "masked_template", "parse_param", "register_template_secrets",
           "secret_positions", "template_api_key",
           "setting_key", "template_fields", "template_secrets", "tune_id"]


@dataclass(frozen=True)
class EngineParam:
    """One embedded-engine knob: its canonical name, what it does, how a value is checked."""

    name: str
    help: str
    kind: str  # "int" | "choice" | "quant" | "draft"
    minimum: int = 0
    choices: tuple[str, ...] = ()


#: llama-server knobs ``tune`` can vary on the embedded engine (aliases in :data:`ALIASES`)
ENGINE_PARAMS: dict[str, EngineParam] = {p.name: p for p in (
    EngineParam("ub", "-ub/--ubatch-size: the prefill chunk (tokens per forward pass; -b follows it unless b is given)", "int", 1),
    EngineParam("b", "-b/--batch-size: logical batch (tokens submitted per step)", "int", 1),
    EngineParam("parallel", "--parallel/-np: slots decoded together", "int", 1),
    EngineParam("threads", "-t/--threads: CPU threads", "int", 1),
    EngineParam("fa", "-fa/--flash-attn: on | off | auto", "choice", choices=("on", "off", "auto")),
    EngineParam("cache-reuse", "--cache-reuse: min chunk reused from the KV cache by shifting (0 = off)", "int", 0),
    EngineParam("ctx", "-c/--ctx-size: KV cache size in tokens (all slots)", "int", 64),
    EngineParam("cache-ram", "-cram/--cache-ram: MiB of host-memory prompt cache (0 = off, -1 = no limit)", "int", -1),
    EngineParam("ctx-checkpoints", "-ctxcp/--ctx-checkpoints: context checkpoints per slot (0 = none)", "int", 0),
    EngineParam("spec", "--spec-type: speculative decoding without a draft model (none; ngram = ngram-mod)", "choice",
                choices=("none", "ngram", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")),
    EngineParam("draft", "-md/--spec-draft-model: a draft model GGUF sharing the model's vocabulary (none = no draft)",
                "draft"),
    EngineParam("quant", "the model file's quant type, made with `engine quantize` (cached); TYPE-pure: every tensor at TYPE", "quant"),
)}

ALIASES = {
    "ubatch": "ub", "ubatch-size": "ub", "b": "b", "batch": "b", "batch-size": "b", "np": "parallel",
    "n-parallel": "parallel", "t": "threads", "flash-attn": "fa", "c": "ctx", "ctx-size": "ctx",
    "cache_reuse": "cache-reuse", "q": "quant", "quantization": "quant",
    "cram": "cache-ram", "cache_ram": "cache-ram", "ctxcp": "ctx-checkpoints", "ctx_checkpoints": "ctx-checkpoints",
    "swa-checkpoints": "ctx-checkpoints", "spec-type": "spec", "spec_type": "spec",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def canonical_name(name: str) -> str:
    """An engine knob's canonical name (``-ub``, ``ubatch-size`` → ``ub``); InputError if unknown."""
    n = name.strip().lstrip("-").lower()
    n = ALIASES.get(n, n)
    if n not in ENGINE_PARAMS:
        raise InputError(f"--param: unknown parameter {name!r} for the embedded engine; choose from "
                         f"{', '.join(ENGINE_PARAMS)} (any name works with --serve TEMPLATE)")
    return n


def _check_value(p: EngineParam, v: str) -> str:
    if p.kind == "int":
        try:
            n = int(v.replace("_", ""))
        except ValueError:
            raise InputError(f"--param {p.name}: {v!r} is not an integer") from None
        if n < p.minimum:
            raise InputError(f"--param {p.name}: {n} must be ≥ {p.minimum}")
        return str(n)
    if p.kind == "choice":
        if v.lower() not in p.choices:
            raise InputError(f"--param {p.name}: {v!r} is not one of {', '.join(p.choices)}")
        return v.lower()
    if p.kind == "draft":  # none, or a GGUF (its absolute path)
        if v.strip().lower() == "none":
            return "none"
        from phasescope.engine.spec import check_engine_draft

        try:
            return str(check_engine_draft(v, None))
        except InputError as exc:
            raise InputError(f"--param draft: {str(exc).removeprefix('--engine-draft-model: ')}") from None
    from phasescope.engine.quantize import normalize_type

    base, pure = split_pure(v)
    try:
        return normalize_type(base) + ("-pure" if pure else "")
    except InputError as exc:
        raise InputError(f"--param quant: {exc}; or TYPE-pure for every tensor at TYPE") from None


PURE_SUFFIX = "-pure"


def split_pure(quant: str) -> tuple[str, bool]:
    """``Q4_0-pure`` → (``Q4_0``, True): every tensor at the type (``engine quantize --pure``), the
    output layer included, where llama-quantize otherwise keeps some (a small model's large
    embedding) at a higher type; ``Q4_0`` → (``Q4_0``, False)."""
    q = quant.strip()
    if q.lower().endswith(PURE_SUFFIX):
        return q[: -len(PURE_SUFFIX)], True
    return q, False


def parse_param(text: str, *, engine: bool) -> tuple[str, list[str]]:
    """``NAME=V1,V2,…`` → (name, values). ``engine``: check the name and values against
    :data:`ENGINE_PARAMS` (the embedded engine); else any ``[A-Za-z_][A-Za-z0-9_-]*`` name."""
    if "=" not in text:
        raise InputError(f"--param {text!r}: expected NAME=V1,V2,… (e.g. ub=32,512)")
    name, _, rest = text.partition("=")
    name = name.strip()
    values = [v.strip() for v in rest.split(",")]
    if not name or any(not v for v in values):
        raise InputError(f"--param {text!r}: expected NAME=V1,V2,… with no empty name or value")
    if engine:
        name = canonical_name(name)
        values = [_check_value(ENGINE_PARAMS[name], v) for v in values]
    elif not _NAME.match(name):
        raise InputError(f"--param {text!r}: the name must be letters, digits, _ or - (it fills {{{name}}})")
    if len(set(values)) != len(values):
        raise InputError(f"--param {name}: a value is repeated ({', '.join(values)})")
    return name, values


@dataclass(frozen=True)
class Setting:
    """One point of the tune: its index (0 = the baseline) and parameter values."""

    index: int
    params: dict[str, str] = field(hash=False)

    @property
    def key(self) -> str:
        return setting_key(self.params)

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


def setting_key(params: dict[str, Any]) -> str:
    """A stable text key of one setting (resume matches stored runs on it)."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def expand(params: Sequence[tuple[str, Sequence[str]]], *, one_at_a_time: bool = False) -> list[Setting]:
    """The settings of a tune (module docstring). ``params``: (name, values) in the user's order."""
    names = [n for n, _ in params]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(f"--param {dup} is given twice; list all its values in one --param {dup}=V1,V2")
    if not params:
        raise InputError("tune needs at least one --param NAME=V1,V2,…")
    if not one_at_a_time:
        combos = itertools.product(*[list(v) for _, v in params])
        return [Setting(i, dict(zip(names, c))) for i, c in enumerate(combos)]
    base = {n: v[0] for n, v in params}
    out = [Setting(0, dict(base))]
    for n, vs in params:
        for v in vs[1:]:
            out.append(Setting(len(out), {**base, n: v}))
    return out


def template_fields(template: str) -> list[str]:
    """The ``{name}`` fields of a ``--serve`` template (``{{`` escapes a brace)."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InputError(f"--serve: malformed template ({exc})") from None


def check_template(template: str, names: Sequence[str]) -> None:
    """Every --param fills a field, every field but ``{port}`` has a --param, and ``{port}`` is there."""
    fields = template_fields(template)
    bad = [f for f in fields if not _NAME.match(f)]
    if bad:
        raise InputError(f"--serve: {{{bad[0]}}} is not a placeholder name (use {{name}}, or {{{{ for a brace)")
    if "port" not in fields:
        raise InputError("--serve: the template must contain {port} (tune picks a free port on 127.0.0.1 for each setting)")
    missing = [n for n in names if n not in fields]
    if missing:
        raise InputError(f"--serve: the template has no placeholder {{{missing[0]}}} for --param {missing[0]}")
    unfilled = [f for f in fields if f != "port" and f not in names]
    if unfilled:
        raise InputError(f"--serve: the template's {{{unfilled[0]}}} has no --param {unfilled[0]}=…")


#: a template argument whose value is a secret: ``--api-key K``/``--api-key=K``, ``--hf-token``, ``--password``…
_SECRET_FLAG = re.compile(r"^--?[A-Za-z0-9_-]*(api[_-]?key|token|passw(or)?d|secret)([_-][A-Za-z0-9_-]*)?$", re.I)
#: an environment assignment whose value is a secret: ``HF_TOKEN=…``, ``OPENAI_API_KEY=…``, ``DB_PASSWORD=…``
_SECRET_ENV = re.compile(r"^(?:[A-Za-z0-9]+_)*(KEY|APIKEY|TOKEN|PASSWORD|PASSWD|SECRET)(?:_[A-Za-z0-9]+)*=", re.I)
MASK = "***"


def _template_words(template: str) -> list[str]:
    import shlex

    try:
        return shlex.split(template)
    except ValueError as exc:
        raise InputError(f"--serve: cannot split the command ({exc})") from None


def secret_positions(words: Sequence[str]) -> list[tuple[int, int]]:
    """``(word index, offset of the value in that word)`` of every secret argument of a split template:
    the word after ``--api-key`` (offset 0), the value of ``--api-key=K`` or of ``HF_TOKEN=K``."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        w = words[i]
        flag, eq, _ = w.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out.append((i, len(flag) + 1))
            elif i + 1 < len(words):
                out.append((i + 1, 0))
                i += 1
        elif _SECRET_ENV.match(w):
            out.append((i, len(flag) + 1))
        i += 1
    return out


def template_secrets(template: str | None) -> list[str]:
    """The secret values a ``--serve`` template holds (placeholders are no secret)."""
    if not template:
        return []
    words = _template_words(template)
    vals = [words[i][off:] for i, off in secret_positions(words)]
    return [v for v in vals if v and v != MASK and not re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_-]*\}", v)]


def mask_words(words: Sequence[str]) -> list[str]:
    """A split command with its secret arguments' values as ``***`` (what logs and the store get)."""
    out = list(words)
    for i, off in secret_positions(out):
        if out[i][off:]:
            out[i] = out[i][:off] + MASK
    return out


def masked_template(template: str | None) -> str | None:
    """The template as it may be stored or printed: each secret argument's value replaced by ``***``
    (structurally, whatever its length); a template without one comes back unchanged."""
    if not template or not template_secrets(template):
        return template
    import shlex

    return " ".join(w if w == MASK or w.endswith("=" + MASK) or re.fullmatch(r"[\w@%+=:,./{}-]+", w)
                    else shlex.quote(w) for w in mask_words(_template_words(template)))


def template_api_key(template: str | None) -> str | None:
    """The ``--api-key`` a template starts its server with: the key the workload must send."""
    if not template:
        return None
    words = _template_words(template)
    for i, off in secret_positions(words):
        flag = words[i][:off - 1] if off else words[i - 1]
        v = words[i][off:]
        if flag.lstrip("-").lower().replace("_", "-") == "api-key" and v and v != MASK and "{" not in v:
            return v
    return None


def has_masked_secret(template: str | None) -> bool:
    """A stored template whose secret arguments were masked: it cannot be launched again as it is."""
    if not template:
        return False
    words = _template_words(template)
    return any(words[i][off:] == MASK for i, off in secret_positions(words))


def register_template_secrets(template: str | None) -> None:
    """Register the template's secrets for redaction (the server's own output may print them)."""
    from phasescope.redact import register

    for v in template_secrets(template):
        register(v)


@dataclass
class TuneSpec:
    """Everything that defines a tune (what its id is a hash of)."""

    params: list[tuple[str, list[str]]]
    workload: str = "probe"
    workload_args: dict[str, Any] = field(default_factory=dict)
    serve: str | None = None
    one_at_a_time: bool = False
    salt: str | None = None
    #: ``--synthetic``: the synthetic model the embedded engine runs ({"shape", "quant", "vocab"}); by default
    #: the one active when the spec is made (:func:`phasescope.lifecycle.use_synthetic`), so the tune's id
    #: and its ``--resume`` keep it
    synthetic: dict[str, Any] | None = field(default_factory=lambda: _active_synthetic())

    def settings(self) -> list[Setting]:
        return expand(self.params, one_at_a_time=self.one_at_a_time)

    def to_dict(self) -> dict[str, Any]:
        return {"params": [[n, list(v)] for n, v in self.params], "workload": self.workload,
                "workload_args": self.workload_args, "serve": self.serve, "one_at_a_time": self.one_at_a_time,
                "salt": self.salt, **({"synthetic": self.synthetic} if self.synthetic else {})}

    def stored_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` as the store keeps it: the ``--serve`` template's secrets masked."""
        return {**self.to_dict(), "serve": masked_template(self.serve)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TuneSpec":
        return cls(params=[(str(n), [str(x) for x in v]) for n, v in d.get("params") or []],
                   workload=d.get("workload") or "probe", workload_args=dict(d.get("workload_args") or {}),
                   serve=d.get("serve"), one_at_a_time=bool(d.get("one_at_a_time")), salt=d.get("salt"),
                   synthetic=d.get("synthetic") if isinstance(d.get("synthetic"), dict) else None)


def _active_synthetic() -> dict[str, Any] | None:
    from phasescope.engine.synth import active

    res = active()
    return None if res is None else {"shape": res.shape_id, "quant": res.qtype, "vocab": res.vocab}


def tune_id(spec: TuneSpec) -> str:
    """``tune-`` + 10 hex digits of the spec's hash (module docstring)."""
    d = spec.to_dict()
    names = {n for n, _ in spec.params}
    if spec.serve is None and "ub" in names and "b" not in names:
        # since 2026-12-02 ``ub`` alone also sets -b (launch.engine_kwargs): runs stored before measured
        # -ub under -b 2048, another setting, so such a tune gets a new id instead of reusing them
        d["ub_sets_b"] = True
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return "tune-" + hashlib.sha256(text.encode()).hexdigest()[:10]
