"""Prompts of an exact token length, without downloading a tokenizer.

Three ways, best first (the one used is reported as :attr:`Prompt.source`):

1. ``tokenizer`` — the server tokenizes for us: llama.cpp ``POST /tokenize {"content",
   "add_special": true}``, vLLM/SGLang ``POST /tokenize {"prompt", "add_special_tokens": true}``,
   TGI ``POST /tokenize {"inputs"}`` (a list of ``{"id", "text"}``).
   We build filler text, tokenize it, extend until it is long enough and cut the token list to
   exactly N (BOS included, as the server would add it). Where the API accepts token ids
   (llama.cpp ``/completion``; ``/v1/completions`` on vLLM, SGLang and llama.cpp) the ids are
   sent, so the length is exact by construction. Otherwise (chat, Ollama) we search the word
   count whose tokenization is exactly N and send that text.
2. ``calibrated`` — no tokenizer endpoint (Ollama, TGI, unknown OpenAI servers): send one short
   and one long calibration prompt with 1 output token, read the server's prompt count
   (``usage.prompt_tokens`` / ``prompt_eval_count``), fit tokens = a + b·words and solve for N;
   one more round corrects the residual. The achieved count of every measured request is still
   read back from the server and reported.
3. ``estimate`` — nothing worked: 1.3 tokens per word (a typical English BPE rate).

Every prompt begins with a unique nonce (``[#3f9a0c1e]``) so that no prefix-cache hit from an
earlier request flatters TTFT; ``nonce=""`` turns it off for experiments that want sharing.
Chat templates add tokens the user prompt does not show; for ``api=chat`` the achieved length
comes from ``usage``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import aiohttp

from phasescope.apis.base import GenRequest, Target

#: plain English filler: common words only, so every tokenizer splits it the usual way
WORDS = (
    "the of and to in is was for on that with as by at from his her they this which be are have not "
    "had one all were when there can an we their if has been would more will into some could other "
    "than then these two may first like time only new about over such after also many most made before "
    "must through back years where much your way well down should because each just those people how "
    "too little state good very make world still own see men work long here get both between life being "
    "under never day same another know while last might great old year off come since against go came "
    "right used take three place small found part general high city water system house program number "
    "river mountain engine signal paper garden window market summer winter morning evening question answer "
    "simple common early late light heavy quiet strong green yellow silver stone bridge harbor valley "
    "forest island station letter music story picture record measure reason result change order power"
).split()

TOKENS_PER_WORD_GUESS = 1.3


@dataclass
class Prompt:
    text: str
    token_ids: list[int] | None  # send these instead of text where the API accepts token ids
    n_tokens: int | None  # achieved length as far as we know before sending
    target_tokens: int
    source: str  # tokenizer | calibrated | estimate
    nonce: str

    def request(self, max_tokens: int, **kw: Any) -> GenRequest:
        tags = dict(kw.pop("tags", {}) or {})
        tags.setdefault("prompt_source", self.source)
        tags.setdefault("fresh_prompt", bool(self.nonce))
        return GenRequest(prompt=self.text, max_tokens=max_tokens, prompt_token_ids=self.token_ids,
                          prompt_tokens_expected=self.n_tokens if self.n_tokens is not None else self.target_tokens,
                          tags=tags, **kw)


def accepts_token_ids(target: Target) -> bool:
    if target.api == "llamacpp":
        return True
    return target.api == "openai" and target.engine in ("vllm", "sglang", "llamacpp")


def has_tokenizer(target: Target) -> bool:
    return target.engine in ("vllm", "sglang", "llamacpp", "tgi") and target.api != "ollama"


def filler(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(0, n_words)))


def new_nonce() -> str:
    # decimal digits tokenize to the same count whatever their values in most tokenizers
    return f"[#{random.SystemRandom().randrange(10**7, 10**8)}]"


class PromptBuilder:
    """Build exact-length prompts for one target (caches the calibration)."""

    def __init__(self, session: aiohttp.ClientSession, target: Target, *, seed: int | None = None) -> None:
        self.session = session
        self.target = target
        self.rng = random.Random(seed)
        self._calib: tuple[float, float] | None = None  # tokens = a + b * words
        self._tokenizer_ok: bool | None = None if has_tokenizer(target) else False
        self.last_error: str | None = None

    # -- the server's tokenizer ---------------------------------------------------------------
    async def tokenize(self, text: str) -> list[int] | None:
        """Token ids with special tokens (BOS) as the server adds them; None when unavailable."""
        if self._tokenizer_ok is False:
            return None
        t = self.target
        if t.engine == "llamacpp":
            body: dict[str, Any] = {"content": text, "add_special": True}
        elif t.engine == "tgi":  # TGI: POST /tokenize {"inputs"} → [{"id", "text", "start", "stop"}, ...]
            body = {"inputs": text}
        else:
            body = {"prompt": text, "add_special_tokens": True}
            if t.model:
                body["model"] = t.model
        obj: Any = None
        for attempt in range(3):
            try:
                async with self.session.post(t.base_url + "/tokenize", json=body, headers=t.headers(),
                                             timeout=aiohttp.ClientTimeout(total=60)) as r:
                    if r.status in (404, 405, 501):  # no tokenizer endpoint here
                        self._tokenizer_ok = False
                        return None
                    if r.status == 200:
                        obj = await r.json(content_type=None)
                        break
                    self.last_error = f"/tokenize HTTP {r.status}"
            except (aiohttp.ClientError, ValueError, TimeoutError) as exc:
                self.last_error = f"/tokenize {type(exc).__name__}: {exc}"
        if obj is None:
            if self._tokenizer_ok is None:
                self._tokenizer_ok = False
            return None
        toks = obj.get("tokens") if isinstance(obj, dict) else (obj if isinstance(obj, list) else None)
        if not isinstance(toks, list):
            self._tokenizer_ok = False
            return None
        ids = [int(x["id"]) if isinstance(x, dict) else int(x) for x in toks]
        self._tokenizer_ok = True
        return ids

    # -- building -------------------------------------------------------------------------------
    async def build(self, n_tokens: int, *, nonce: str | None = None) -> Prompt:
        """A prompt of exactly ``n_tokens`` where the server lets us make sure of it."""
        if n_tokens < 1:
            raise ValueError("n_tokens must be ≥ 1")
        nonce = new_nonce() if nonce is None else nonce
        head = f"{nonce} " if nonce else ""
        p = await self._by_tokenizer(n_tokens, head, nonce)
        if p is not None:
            return p
        return await self._by_calibration(n_tokens, head, nonce)

    async def _by_tokenizer(self, n: int, head: str, nonce: str) -> Prompt | None:
        words = max(1, int(n / TOKENS_PER_WORD_GUESS) + 8)
        body = filler(words, self.rng)
        ids = await self.tokenize(head + body)
        if ids is None:
            return None
        for _ in range(20):
            if len(ids) >= n:
                break
            more = int((n - len(ids)) / TOKENS_PER_WORD_GUESS) + 8
            body += " " + filler(more, self.rng)
            got = await self.tokenize(head + body)
            if got is None:
                return None
            ids = got
        if accepts_token_ids(self.target):
            return Prompt(head + body, ids[:n], n, n, "tokenizer", nonce)
        # text-only API: find the word count whose tokenization is exactly n
        words_list = body.split(" ")
        lo, hi = 0, len(words_list)
        best: tuple[int, str] | None = None
        for _ in range(24):
            if lo > hi:
                break
            mid = (lo + hi) // 2
            text = head + " ".join(words_list[:mid])
            got = await self.tokenize(text)
            if got is None:
                return None
            if len(got) == n:
                return Prompt(text, None, n, n, "tokenizer", nonce)
            if best is None or abs(len(got) - n) < abs(best[0] - n):
                best = (len(got), text)
            if len(got) < n:
                lo = mid + 1
            else:
                hi = mid - 1
        assert best is not None
        return Prompt(best[1], None, best[0], n, "tokenizer", nonce)

    async def _server_count(self, text: str) -> int | None:
        """The server's prompt token count for ``text`` (one request, 1 output token)."""
        from phasescope.apis import get_client

        req = GenRequest(prompt=text, max_tokens=1, stream=False, ignore_eos=False,
                         tags={"calibration": True, "ollama_chat": False})
        rec = await get_client(self.target.api).send(self.session, self.target, req)
        if not rec.ok or rec.prompt_tokens_source not in ("usage", "server"):
            return None
        return rec.prompt_tokens

    async def calibrate(self) -> tuple[float, float] | None:
        if self._calib is not None:
            return self._calib
        w1, w2 = 20, 220
        t1 = await self._server_count(new_nonce() + " " + filler(w1, self.rng))
        t2 = await self._server_count(new_nonce() + " " + filler(w2, self.rng))
        if t1 is None or t2 is None or t2 <= t1:
            return None
        b = (t2 - t1) / (w2 - w1)
        a = t1 - b * w1
        self._calib = (a, b)
        return self._calib

    async def _by_calibration(self, n: int, head: str, nonce: str) -> Prompt:
        cal = await self.calibrate()
        if cal is None:
            words = max(1, round(n / TOKENS_PER_WORD_GUESS))
            return Prompt(head + filler(words, self.rng), None, None, n, "estimate", nonce)
        a, b = cal
        words = filler(max(1, round((n - a) / b)), self.rng).split(" ")
        # measured with a throw-away nonce: the prompt we return must not be in the server's cache
        probe_head = (new_nonce() + " ") if nonce else ""
        got = await self._server_count(probe_head + " ".join(words))
        if got is not None and got != n:
            # one correction round: add or drop words at the measured rate
            delta = n - got
            if delta > 0:
                words += filler(max(1, math.floor(delta / b)), self.rng).split(" ")
            else:
                words = words[: max(1, len(words) - max(1, math.ceil(-delta / b)))]
            probe_head = (new_nonce() + " ") if nonce else ""
            got = await self._server_count(probe_head + " ".join(words))
        # nonces are same-length digit strings, so the fresh one tokenizes like the probe's
        return Prompt(head + " ".join(words), None, got, n, "calibrated", nonce)


async def build_prompts(session: aiohttp.ClientSession, target: Target, sizes: list[int], *, count: int = 1,
                        nonce: bool = True, seed: int | None = None) -> dict[int, list[Prompt]]:
    """``count`` distinct prompts of each size (each with its own nonce unless ``nonce=False``)."""
    pb = PromptBuilder(session, target, seed=seed)
    out: dict[int, list[Prompt]] = {}
    for n in sizes:
        out[n] = [await pb.build(n, nonce=None if nonce else "") for _ in range(count)]
    return out
