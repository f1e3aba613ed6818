"""Prompts of an exact token length for bench workloads, through the *server's* tokenizer.

No hub tokenizer: the server tokenizes for us (llama.cpp ``POST /tokenize {"content"}``, vLLM /
SGLang ``POST /tokenize {"prompt"}``, TGI ``POST /tokenize {"inputs"}``). A random word text a bit
longer than needed is tokenized and its ids truncated to exactly ``n`` (vLLM's random dataset does
the same: random ids → decode → re-encode → truncate). For ``/v1/completions`` the ids themselves
are sent, so the server sees exactly ``n`` prompt tokens (plus BOS where the server adds one);
for chat, the text is sent and the length is calibrated, not exact (chat templates add tokens).

Without a tokenizer endpoint (Ollama, TGI's OpenAI route) :class:`CalibratedPromptMaker` uses the
probe's usage-count calibration (:mod:`phasescope.measure.prompts`); when even that fails,
:class:`WordPromptMaker` builds texts of ``n`` common words — about one token each in most BPE
vocabularies — and says so (``source="estimate"``), so the summary can flag the count as approximate.
"""

from __future__ import annotations

import random
from typing import Any

import aiohttp

from phasescope.apis.base import Target

#: short, common English words (one token each in the Gemma, Llama-3 and GPT-2 vocabularies)
WORDS = (
    "the of and to in is was for on are with as at be by this had not but from or have an they which one "
    "you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three"
).split()


class WordPromptMaker:
    """``n`` random common words with a leading space each; ``source="estimate"``."""

    source = "estimate"
    #: tokens the server adds to every prompt of this maker (BOS, chat template); see :func:`measure_overhead`
    overhead = 0

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        rng = random.Random(salt)
        return "".join(" " + rng.choice(WORDS) for _ in range(n_tokens)), None

    async def count(self, text: str) -> int | None:
        return None


class TokenizePromptMaker:
    """Exact lengths through the server's ``/tokenize`` (see module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, target: Target, flavor: str, *, send_ids: bool) -> None:
        self.session = session
        self.target = target
        self.flavor = flavor  # "content" | "prompt" | "inputs"
        self.send_ids = send_ids
        self.source = "tokenize" if send_ids else "calibrated"
        self.overhead = 0  # tokens the server adds beyond what make() returns (measure_overhead)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(self.target.base_url + path, json=body, headers=self.target.headers(),
                                     timeout=aiohttp.ClientTimeout(total=30)) as resp:
            if resp.status >= 400:
                raise RuntimeError(f"{path} answered HTTP {resp.status}")
            return await resp.json(content_type=None)

    async def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        body: dict[str, Any] = {self.flavor: text}
        if self.flavor == "content":
            body["add_special"] = special
        elif self.flavor == "prompt":
            body["add_special_tokens"] = special
            if self.target.model:
                body["model"] = self.target.model
        d = await self._post("/tokenize", body)
        if isinstance(d, dict) and isinstance(d.get("tokens"), list):
            return [int(t if not isinstance(t, dict) else t["id"]) for t in d["tokens"]]
        if isinstance(d, list):  # TGI: [{"id", "text", ...}]
            return [int(t["id"]) for t in d]
        raise RuntimeError("unexpected /tokenize answer")

    async def detokenize(self, ids: list[int]) -> str | None:
        try:
            d = await self._post("/detokenize", {"tokens": ids})
        except Exception:
            return None
        if isinstance(d, dict):
            v = d.get("content", d.get("prompt"))
            return str(v) if v is not None else None
        return None

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        """``n_tokens`` ids; with ``first`` (the prompt starts here) the server's special tokens
        (BOS) are included, as the server counts them (``usage.prompt_tokens``); a part appended
        after a shared prefix (``first=False``) has none."""
        rng = random.Random(salt)
        words = max(8, int(n_tokens * 1.3) + 4)
        special = first and self.send_ids
        while True:
            text = "".join(" " + rng.choice(WORDS) for _ in range(words))
            ids = await self.tokenize(text, special=special)
            if len(ids) >= n_tokens:
                break
            words *= 2
        ids = ids[:n_tokens]
        if self.send_ids:
            shown = await self.detokenize(ids)
            return (shown if shown is not None else text), ids
        shown = await self.detokenize(ids)
        if shown is None:  # no /detokenize: cut the text itself, by words, to n tokens
            shown = await self._fit_words(text, n_tokens)
        return shown, None

    async def _fit_words(self, text: str, n_tokens: int) -> str:
        """The longest word prefix of ``text`` that tokenizes to at most ``n_tokens`` (binary search)."""
        words = text.split(" ")[1:]  # text is " w1 w2 ..."
        lo, hi, best = 1, len(words), " " + words[0]
        while lo <= hi:
            mid = (lo + hi) // 2
            cand = "".join(" " + w for w in words[:mid])
            k = len(await self.tokenize(cand))
            if k <= n_tokens:
                best, lo = cand, mid + 1
            else:
                hi = mid - 1
            if k == n_tokens:
                break
        return best

    async def count(self, text: str) -> int | None:
        try:
            return len(await self.tokenize(text))
        except Exception:
            return None


class CalibratedPromptMaker:
    """No tokenizer endpoint (Ollama, TGI's OpenAI route, unknown servers): the probe's
    :class:`phasescope.measure.prompts.PromptBuilder` fits tokens = a + b·words from the server's own
    ``usage`` counts of two calibration requests and solves for N (``source="calibrated"``; falls
    back to ``estimate`` when the server reports no counts). The achieved length of every request
    is still read back from ``usage`` and compared in the summary."""

    def __init__(self, session: aiohttp.ClientSession, target: Target, seed: int = 0) -> None:
        from phasescope.measure.prompts import PromptBuilder

        self._pb = PromptBuilder(session, target, seed=seed)
        self.source = "calibrated"
        self.overhead = 0  # the calibration fits the server's own count, overhead included

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        p = await self._pb.build(n_tokens, nonce=f"[#{10**7 + salt % (9 * 10**7)}]")
        self.source = p.source
        return p.text, p.token_ids

    async def count(self, text: str) -> int | None:
        return None


async def prompt_maker_for(session: aiohttp.ClientSession, target: Target, *,
                           calibrate: bool = True) -> WordPromptMaker | TokenizePromptMaker | CalibratedPromptMaker:
    """The best maker the server allows: its ``/tokenize`` if any flavor answers, else a usage-based
    calibration (``calibrate``), else words."""
    send_ids = target.api == "openai"  # /v1/completions accepts token-id prompts (vLLM, SGLang, llama.cpp)
    order = ("content", "prompt", "inputs")
    if target.engine in ("vllm", "sglang"):
        order = ("prompt", "content", "inputs")
    elif target.engine == "tgi":
        order = ("inputs", "prompt", "content")
        send_ids = False  # TGI's /v1/completions takes text
    if target.api not in ("ollama",):
        for flavor in order:
            m = TokenizePromptMaker(session, target, flavor, send_ids=send_ids)
            try:
                ids = await m.tokenize(" the world")
            except Exception:
                continue
            if ids:
                await measure_overhead(session, target, m)
                return m
    if calibrate:
        try:
            cm = CalibratedPromptMaker(session, target)
            await cm.make(8, 0)  # runs the calibration once; words if the server gives no counts
            return cm
        except Exception:
            pass
    return WordPromptMaker()


#: the id prefix (``X-Request-Id``) of the one request :func:`measure_overhead` sends before a run
OVERHEAD_ID = "overhead-check"


async def measure_overhead(session: aiohttp.ClientSession, target: Target, maker: TokenizePromptMaker) -> int:
    """Tokens the server counts beyond the prompt ``maker`` builds (BOS on a text prompt, a chat
    template's role tokens), from one 1-token request: ``usage.prompt_tokens − len(built)``.
    Stored as ``maker.overhead`` and subtracted from every prompt, so ``--input-len L`` is L tokens
    as the server counts them. 0 when the server reports no count (nothing to correct by)."""
    from phasescope.apis import get_client
    from phasescope.apis.base import GenRequest

    n = 16
    try:
        text, ids = await maker.make(n, salt=random.SystemRandom().randrange(1 << 30))
        built = len(ids) if ids is not None else len(await maker.tokenize(text, special=False))
        req = GenRequest(prompt=text, max_tokens=1, prompt_token_ids=ids, stream=False, ignore_eos=False,
                         id=f"{OVERHEAD_ID}-{random.SystemRandom().randrange(1 << 32):08x}", tags={"calibration": True})
        rec = await get_client(target.api).send(session, target, req)
    except Exception:  # noqa: BLE001 - a failed check leaves the lengths as built
        return 0
    if not rec.ok or rec.prompt_tokens is None or rec.prompt_tokens_source not in ("usage", "server"):
        return 0
    extra = int(rec.prompt_tokens) - built
    maker.overhead = extra if 0 <= extra <= 64 else 0
    return maker.overhead
