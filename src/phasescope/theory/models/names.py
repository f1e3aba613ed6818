"""Model names as servers report them, read as catalog shapes — and the config already on disk.

vLLM reports the repository id it was started with (``meta-llama/Llama-3.1-8B-Instruct``), Ollama a tag
(``qwen2.5:7b-instruct-q4_K_M``), other servers whatever ``--served-model-name`` said. The shapes that a
ceiling needs do not change with instruction tuning, a chat template or a repackaging, so a served name is
read as a catalog shape by dropping, from the end, the suffixes that do not change the shape:

* tuning and packaging: ``-Instruct``, ``-it``, ``-Chat``, ``-hf``, ``-Base``, ``-GGUF``, ``-MLX``, ``-latest``
  and release dates (``-2507``, ``-0528``);
* quantization, which *is* read: ``-AWQ`` → ``awq``, ``-GPTQ``/``-GPTQ-Int4`` → ``gptq``, ``-GPTQ-Int8`` and
  ``-W8A8`` → ``int8``, ``-FP8`` (``-FP8-Dynamic``) → ``fp8``, ``-bnb-4bit`` → ``nf4``, a GGUF type such as
  ``-Q4_K_M`` → ``q4_k_m``; the shape keeps its layers and heads and takes that weight format;

and an organisation prefix (``meta-llama/``) or ``Meta-`` in front. What is left is matched, ignoring case
and separators, against the catalog ids and the catalog's Hugging Face repository names.

:func:`find_cached_config` looks for the served model's own ``config.json`` in the local Hugging Face hub
cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the layout
``models--ORG--NAME/snapshots/<rev>/config.json``, the revision ``refs/main`` names first). Nothing is ever
downloaded. That file is the served model's exact shape, so callers prefer it to a catalog match.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from phasescope.errors import InputError, UnknownModelError, UnknownQuantError
from phasescope.theory.models.catalog import get_catalog_model, list_models
from phasescope.theory.models.spec import ModelSpec
from phasescope.theory.quant import get_quant

#: suffixes that change nothing a ceiling reads (compared case-insensitively, after a - _ . or :)
_SHAPELESS = ("instruct", "it", "chat", "hf", "base", "gguf", "mlx", "latest", "dynamic", "pt")
#: suffix → weight format it names (longest first where one is the start of another)
_QUANT_SUFFIX: tuple[tuple[str, str], ...] = (
    ("gptq-int4", "gptq"), ("gptq-int8", "int8"), ("gptq", "gptq"), ("awq", "awq"),
    ("fp8", "fp8"), ("w8a8", "int8"), ("w4a16", "gptq"), ("int4", "gptq"), ("int8", "int8"),
    ("bnb-4bit", "nf4"), ("4bit", "nf4"), ("nf4", "nf4"), ("bf16", "bf16"), ("fp16", "fp16"), ("f16", "fp16"),
)
_GGUF_TYPE = re.compile(r"^(i?q[1-8](_[0-9a-z]+)*|f32|f16|bf16)$", re.I)
_GGUF_TAIL = re.compile(r"[-_.](i?q[1-8](?:_[0-9a-z]+)*)$", re.I)
_DATE = re.compile(r"^\d{4}$")
_SEP = re.compile(r"[-.:\s]+")


@dataclass(frozen=True)
class NameMatch:
    """How a served name was read: the catalog shape, what was dropped, and the format it names."""

    served: str
    catalog_id: str
    spec: ModelSpec
    dropped: tuple[str, ...]
    quant: str | None

    @property
    def how(self) -> str:
        """One sentence for the card: ``served name 'X' read as catalog llama-3.1-8b (dropped …)``."""
        bits = []
        if self.dropped:
            bits.append("dropped " + ", ".join(repr(d) for d in self.dropped))
        if self.quant:
            bits.append(f"weights {self.quant} from the name")
        tail = f" ({'; '.join(bits)})" if bits else ""
        return f"served name {self.served!r} read as catalog {self.catalog_id}{tail}"


def _key(s: str) -> str:
    """Case and separators ignored, dots kept: ``Llama-3.1-8B`` and ``llama3.1:8b`` → ``llama3.18b``."""
    return re.sub(r"[-_:\s/]+", "", s.strip().lower())


@lru_cache(maxsize=1)
def _candidates() -> dict[str, str]:
    """normalised key → catalog id, for every catalog id and repository base name (the catalog is package
    data: built once)."""
    out: dict[str, str] = {}
    for m in list_models():
        out.setdefault(_key(m.id), m.id)
        base = m.name.split("/")[-1]
        out.setdefault(_key(base), m.id)
        stripped, _, _ = _strip(base)
        out.setdefault(_key(stripped), m.id)
    return out


def _quant_of(token: str) -> str | None:
    t = token.lower()
    for suf, q in _QUANT_SUFFIX:
        if t == suf:
            return q
    if _GGUF_TYPE.match(t):
        try:
            return get_quant(t).name
        except UnknownQuantError:  # an unknown GGUF type names no format we can price
            return None
    return None


def _strip(name: str) -> tuple[str, tuple[str, ...], str | None]:
    """(base name, dropped suffixes in order, weight format the name says or None)."""
    s = name.strip()
    dropped: list[str] = []
    if "/" in s:
        org, s = s.rsplit("/", 1)
        dropped.append(org + "/")
    s = s.replace(":", "-")  # an Ollama tag: qwen2.5:7b-instruct-q4_K_M
    if s.lower().startswith("meta-") and len(s) > 5:
        dropped.append(s[:5])
        s = s[5:]
    quant: str | None = None
    changed = True
    while changed and s:
        changed = False
        low = s.lower()
        # two-part quant suffixes first (GPTQ-Int4, bnb-4bit, FP8-Dynamic)
        for suf, q in _QUANT_SUFFIX:
            if "-" in suf and (low.endswith("-" + suf) or low.endswith("_" + suf.replace("-", "_"))):
                dropped.append(s[-len(suf):])
                s = s[: -len(suf) - 1]
                quant = quant or q
                changed = True
                break
        if changed:
            continue
        g = _GGUF_TAIL.search(s)
        if g and _quant_of(g.group(1)):
            dropped.append(g.group(1))
            quant = quant or _quant_of(g.group(1))
            s = s[: g.start()]
            changed = True
            continue
        parts = _SEP.split(s)
        if len(parts) < 2:
            break
        last = parts[-1]
        q = _quant_of(last)
        if last.lower() in _SHAPELESS or _DATE.match(last) or q:
            # keep a size such as "8b" and a version such as "v0.3": they are part of the shape's name
            cut = len(s) - len(last)
            while cut > 0 and s[cut - 1] in "-_.: ":
                cut -= 1
            dropped.append(s[cut:].lstrip("-_.: "))
            s = s[:cut]
            quant = quant or q
            changed = True
    return s, tuple(dropped), quant


def resolve_served_name(name: str) -> NameMatch | None:
    """The catalog shape for a served name, or None when none matches exactly after normalisation."""
    if not isinstance(name, str) or not name.strip():
        return None
    cands = _candidates()
    full = name.strip()
    for probe in (full, full.split("/")[-1]):
        cid = cands.get(_key(probe))
        if cid is not None:
            spec = get_catalog_model(cid)
            return NameMatch(full, cid, spec, (full.rsplit("/", 1)[0] + "/",) if "/" in full and probe != full else (),
                             None)
    base, dropped, quant = _strip(full)
    cid = cands.get(_key(base))
    if cid is None:  # "Mixtral-8x7B-Instruct-v0.1": a tuning word inside, then a version
        toks = re.split(r"[-:\s]+", base)
        inner = [t for t in toks if t.lower() in _SHAPELESS]
        kept = [t for t in toks if t.lower() not in _SHAPELESS]
        if inner and kept:
            cid = cands.get(_key("-".join(kept)))
            if cid is None and len(kept) > 1 and re.fullmatch(r"v\d+(\.\d+)*", kept[-1], re.I):
                cid = cands.get(_key("-".join(kept[:-1])))
                if cid is not None:
                    inner.append(kept[-1])
            if cid is not None:
                dropped = dropped + tuple(inner)
    if cid is None:
        return None
    spec = get_catalog_model(cid)
    if quant == spec.dtype:
        quant = None  # the name says what the catalog already stores: nothing to change
    if quant:
        spec = replace(spec, dtype=quant, expert_dtype=None, file_weight_bytes=None, file_read_bytes_batch1=None,
                       file_routed_expert_bytes=None,
                       notes=tuple(spec.notes) + (f"weights {quant}, read from the served name {full!r}",))
    return NameMatch(full, cid, spec, dropped, quant)


def near_misses(name: str, n: int = 3) -> list[str]:
    """Catalog ids whose normalised names are close to ``name``'s (for "did you mean")."""
    cands = _candidates()
    base, _, _ = _strip(name)
    close = difflib.get_close_matches(_key(base), list(cands), n=n * 3, cutoff=0.6)
    out: list[str] = []
    for k in close:
        if cands[k] not in out:
            out.append(cands[k])
    return out[:n]


def no_shape_error(name: str) -> InputError:
    """``no shape for X: pass --model-spec config.json|.gguf|catalog-id``, with near misses."""
    near = near_misses(name)
    hint = ("did you mean " + ", ".join(near) + "?") if near else "see `phasescope models` for the catalog ids"
    return UnknownModelError(f"no shape for {name}: pass --model-spec config.json|.gguf|catalog-id", hint=hint)


# --- the Hugging Face hub cache on this machine ------------------------------------------------------

def hub_cache_dirs() -> list[Path]:
    """Where the hub cache may be, in the order huggingface_hub itself resolves it."""
    dirs: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]).expanduser())
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    xdg = os.environ.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def find_cached_config(name: str) -> Path | None:
    """The served model's ``config.json`` in the local hub cache, or None (nothing is downloaded).

    ``org/name`` matches ``models--org--name`` (case-insensitive); a bare name matches any organisation's
    repository of that name when exactly one does. The snapshot ``refs/main`` points to wins, else the
    newest snapshot that holds a ``config.json``.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 300:
        return None
    want = name.strip()
    if want.startswith((".", "/", "~")):
        return None
    parts = want.split("/")
    if len(parts) > 2 or any(not p or p in (".", "..") for p in parts):
        return None
    for hub in hub_cache_dirs():
        try:
            if not hub.is_dir():
                continue
            entries = [e for e in hub.iterdir() if e.name.startswith("models--") and e.is_dir()]
        except OSError:
            continue
        if len(parts) == 2:
            target = ("models--" + "--".join(parts)).lower()
            hits = [e for e in entries if e.name.lower() == target]
        else:
            hits = [e for e in entries if e.name.lower().split("--")[-1] == parts[0].lower()]
            if len(hits) != 1:
                hits = []
        for repo in hits:
            cfg = _snapshot_config(repo)
            if cfg is not None:
                return cfg
    return None


def _snapshot_config(repo: Path) -> Path | None:
    snaps = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text(encoding="utf-8").strip() if (repo / "refs" / "main").is_file() else ""
    except OSError:
        ref = ""
    if ref and re.fullmatch(r"[0-9a-fA-F]{6,64}", ref):
        cfg = snaps / ref / "config.json"
        if cfg.is_file():
            return cfg
    try:
        found = [p / "config.json" for p in snaps.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


def spec_from_cache(name: str) -> ModelSpec | None:
    """A ModelSpec from the served model's cached ``config.json``, its ``source`` naming the file."""
    path = find_cached_config(name)
    if path is None:
        return None
    from phasescope.theory.models.hf_config import spec_from_config_file

    spec = spec_from_config_file(path)
    return replace(spec, id=name.strip(), name=name.strip(), source=f"Hugging Face cache: {path}",
                   chosen_by=f"config.json of {name.strip()} from the local Hugging Face cache ({path})")


def spec_for_served_name(name: str) -> ModelSpec | None:
    """The shape for a name a server reports, best first: the served model's own ``config.json`` in the
    local hub cache, else the catalog shape the normalised name matches; None when neither."""
    spec = spec_from_cache(name)
    if spec is not None:
        return spec
    m = resolve_served_name(name)
    if m is None:
        return None
    return replace(m.spec, chosen_by=m.how) if (m.dropped or m.quant) else m.spec
