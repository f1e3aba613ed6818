"""The server's own tokenizer: ``POST /tokenize`` and ``POST /detokenize`` — the one client.

Wire formats (vLLM 0.33 ``vllm/entrypoints/serve/tokenize/protocol.py``; TGI ``router/src/server.rs``;
llama.cpp ``tools/server/README.md`` at 0c1e57098; SGLang serves vLLM's shape):

============  ===================================================  ==========================================
flavor        ``POST /tokenize``                                   ``POST /detokenize``
============  ===================================================  ==========================================
``content``   llama.cpp: ``{"content", "add_special"}`` →          ``{"tokens"}`` → ``{"content"}``
              ``{"tokens": [int | {"id", "piece"}]}``
``prompt``    vLLM, SGLang: ``{"model"?, "prompt",                 ``{"model"?, "tokens"}`` → ``{"prompt"}``
              "add_special_tokens"}`` → ``{"count", "tokens"}``
``inputs``    TGI: ``{"inputs"}`` → ``[{"id", "text", ...}]``       none
============  ===================================================  ==========================================

**The add_special rule** (one, for every caller): a text is tokenized *as the server tokenizes it
when that text is a whole prompt* — special tokens on: llama.cpp ``"add_special": true`` (the
server's own default for ``/tokenize`` is false, while ``/completion`` and ``/v1/completions`` add
the BOS to a text prompt), vLLM/SGLang ``"add_special_tokens": true`` (their completions default),
TGI's own rule (it has no switch). So ``len(await tok.tokenize(text))`` is the ``prompt_tokens`` the
server reports for ``text`` sent as a text prompt, BOS included. A chat template's tokens are not in
it (the prompt builder measures them with one request: :func:`phasescope.prompting.measure_overhead`).
:meth:`Tokenizer.specials` is what the server puts in front of every text (the BOS, or
nothing: what two one-token words share); :meth:`Tokenizer.content` strips it, for a part after a prefix.

Token ids cut from a tokenize answer start with that BOS; llama.cpp and vLLM add nothing to a
token-id prompt (llama.cpp ``tokenize_mixed`` pushes integers as they are), so N ids are N prompt
tokens as the server counts them.

The flavor is found once per target: the engine's own first (llama.cpp → ``content``, vLLM/SGLang →
``prompt``, TGI → ``inputs``), then the others; a 404/405/501, a 4xx or an empty answer for a
non-empty text means "not this flavor". Ollama has no tokenizer endpoint. Transient failures
(5xx, a dropped connection) are retried up to :data:`ATTEMPTS` times. A call that gets no answer at
all within the user's first-token timeout raises :class:`~phasescope.errors.NoAnswerError` (exit 3):
the server takes the connection but does not answer, and every request after it would wait as long.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope.apis import registry
from phasescope.apis._json import try_json
from phasescope.apis.base import Target

FLAVORS = ("content", "prompt", "inputs")
#: sends of one tokenize request when the failures are transient
ATTEMPTS = 3
#: seconds for one tokenize answer (a long prompt takes a while on a busy CPU server)
TIMEOUT_S = 60.0
_PROBE_TEXT = " the world"


def flavor_order(target: Target) -> tuple[str, ...]:
    """The flavors to try for ``target``, the engine's own first; none for Ollama (an API whose spec
    says the server has no tokenizer)."""
    spec = registry.find(target.api)
    if (spec is not None and not spec.tokenizer) or target.engine == "ollama":
        return ()
    first = {"llamacpp": "content", "vllm": "prompt", "sglang": "prompt", "tgi": "inputs"}.get(str(target.engine))
    return ((first,) if first else ()) + tuple(f for f in FLAVORS if f != first)


def tokenize_body(flavor: str, text: str, model: str | None) -> dict[str, Any]:
    """The ``/tokenize`` body of ``flavor`` under the add_special rule (module docstring)."""
    if flavor == "content":
        return {"content": text, "add_special": True}
    if flavor == "prompt":
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": True}
        if model:
            body["model"] = model
        return body
    return {"inputs": text}


def parse_tokens(obj: Any) -> list[int] | None:
    """Token ids from any flavor's answer (``{"tokens": [...]}`` of ints or ``{"id"}`` objects, or
    TGI's list of ``{"id"}``); None when the answer holds no token list."""
    toks = obj.get("tokens") if isinstance(obj, dict) else (obj if isinstance(obj, list) else None)
    if not isinstance(toks, list):
        return None
    try:
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in toks]
    except (KeyError, TypeError, ValueError):
        return None


class Tokenizer:
    """``target``'s tokenizer through ``session``; ``last_error`` says why the latest call gave None."""

    def __init__(self, session: aiohttp.ClientSession, target: Target) -> None:
        self.session = session
        self.target = target
        self.flavor: str | None = None
        self._order = flavor_order(target)
        self._probed = not self._order  # nothing to try: known to be unavailable
        self._specials: list[int] | None = None
        self._detok_ok = True
        self.last_error: str | None = None if self._order else "no tokenizer endpoint for this API"

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[int | None, Any]:
        """One POST with retries of transient failures: (status or None, parsed body)."""
        status: int | None = None
        obj: Any = None
        # bounded by the user's first-token timeout (a tokenization is cheaper than the prefill it
        # precedes), and a timeout is not retried: prompt building never waits past the user's bounds
        ttft = self.target.timeouts.first_token_s
        timeout_s = min(TIMEOUT_S, ttft) if ttft else TIMEOUT_S
        for _ in range(ATTEMPTS):
            status, obj, why = await try_json(self.session, self.target.base_url + path, method="POST", body=body,
                                              headers=self.target.headers(), timeout_s=timeout_s)
            if status is not None and status < 500 or status == 501:
                break
            self.last_error = f"{path}: " + (f"HTTP {status}" if status is not None else why)
            if status is None and why.startswith("no answer within"):
                # not a byte back within the user's first-token timeout: the generation requests that
                # tokenization precedes would wait it too, so the command ends here (issue 31)
                from phasescope.errors import NoAnswerError

                raise NoAnswerError(f"{self.target.display_url}{path}: {why}",
                                    hint="the server took the connection but did not answer; raise --ttft-timeout "
                                         "if it is only slow")
        return status, obj

    async def _find_flavor(self) -> None:
        self._probed = True
        for flavor in self._order:
            status, obj = await self._post("/tokenize", tokenize_body(flavor, _PROBE_TEXT, self.target.model))
            if status == 200 and parse_tokens(obj):
                self.flavor = flavor
                self.last_error = None
                return
            if status is not None:
                self.last_error = f"/tokenize ({flavor}): HTTP {status}" + ("" if status != 200 else " without tokens")
        self.last_error = self.last_error or "no /tokenize here"

    async def available(self) -> bool:
        """Whether the server tokenizes for us (finds the flavor on the first call)."""
        if not self._probed:
            await self._find_flavor()
        return self.flavor is not None

    async def tokenize(self, text: str) -> list[int] | None:
        """``text``'s ids as the server counts it as a whole prompt (specials included: the
        add_special rule); None when the server has no tokenizer or it failed (``last_error``)."""
        if not await self.available():
            return None
        assert self.flavor is not None
        status, obj = await self._post("/tokenize", tokenize_body(self.flavor, text, self.target.model))
        ids = parse_tokens(obj) if status == 200 else None
        if ids is None and status is not None:
            self.last_error = f"/tokenize HTTP {status}" + ("" if status != 200 else " without tokens")
        return ids

    async def count(self, text: str) -> int | None:
        """The server's prompt token count for ``text`` sent as a text prompt (no chat template)."""
        ids = await self.tokenize(text)
        return len(ids) if ids is not None else None

    async def specials(self) -> list[int]:
        """The tokens the server puts in front of every text prompt (the BOS, or none)."""
        if self._specials is None:
            # what two one-token words share at their front (an empty text is refused by some servers)
            a, b = await self.tokenize(" the"), await self.tokenize(" of")
            k = 0
            while a is not None and b is not None and k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            self._specials = list(a[:k]) if a is not None and k <= 4 else []
        return self._specials

    async def content(self, ids: list[int]) -> list[int]:
        """``ids`` without the leading :meth:`specials` (a part that follows a prefix carries none)."""
        sp = await self.specials()
        return ids[len(sp):] if sp and ids[: len(sp)] == sp else ids

    async def detokenize(self, ids: list[int]) -> str | None:
        """The text of ``ids``; None where the server has no ``/detokenize`` (TGI, the fakes)."""
        if not self._detok_ok or not await self.available() or self.flavor == "inputs":
            return None
        body: dict[str, Any] = {"tokens": list(ids)}
        if self.flavor == "prompt" and self.target.model:
            body["model"] = self.target.model
        status, obj = await self._post("/detokenize", body)
        if status in (404, 405, 501):
            self._detok_ok = False
        if status != 200 or not isinstance(obj, dict):
            return None
        v = obj.get("content", obj.get("prompt"))
        return str(v) if v is not None else None
