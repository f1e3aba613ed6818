"""Prompts of an exact token length, without downloading a tokenizer — the one prompt builder.

probe, explain's experiments and bench all build their prompts here (this module sits above
:mod:`phasescope.apis`: the server's tokenizer is :class:`phasescope.apis.tokenize.Tokenizer`, the
calibration requests go through the API clients). Three ways, best first (the one used is
reported as :attr:`Prompt.source`):

1. ``tokenizer`` — the server tokenizes for us (llama.cpp, vLLM, SGLang, TGI ``POST /tokenize``).
   Filler text is tokenized, extended until it is long enough and its ids are cut to exactly N.
   One add_special rule (see :mod:`phasescope.apis.tokenize`): a count is the server's count of the
   text as a whole prompt, BOS included; a part that follows a shared prefix (bench's
   ``--prefix-len``) is counted without it. Where the API accepts token ids (llama.cpp
   ``/completion``; ``/v1/completions`` on vLLM, SGLang and llama.cpp) the ids are sent, so the
   length is exact by construction. Otherwise (chat, TGI) the cut ids are detokenized and the text
   kept when it counts N again, else the word count whose tokenization is N is searched.
2. ``calibrated`` — no tokenizer endpoint (Ollama, unknown OpenAI servers): one short and one long
   calibration prompt with 1 output token, the server's prompt count (``usage.prompt_tokens`` /
   ``prompt_eval_count``), fit tokens = a + b·words and solve for N; one more round corrects the
   residual. The achieved count of every measured request is still read back from the server.
3. ``estimate`` — nothing worked: :data:`TOKENS_PER_WORD_GUESS` tokens per word of :data:`WORDS`.

Probe and explain prompts begin with a unique nonce (``[#39015512]``) so that no prefix-cache hit
from an earlier request flatters TTFT (``nonce=""`` turns it off for experiments that want
sharing); bench prompts are unique through their salted word draw. Chat templates add tokens the
user prompt does not show: bench measures them with one request (:func:`measure_overhead`,
``X-Request-Id`` prefix :data:`OVERHEAD_ID`) and subtracts them, probe reads them from ``usage``.

bench's makers (:func:`prompt_maker_for`) are views of the same builder with bench's names for the
sources (``tokenize`` = token ids sent, ``calibrated`` = a text prompt, ``estimate``), which are JSON
values users read (``token_count_source``, ``input_len_source``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from phasescope.apis import Session, registry
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.tokenize import Tokenizer
from phasescope.errors import NoAnswerError

#: short, common English words (one token each after a space in the Gemma, Llama-3 and GPT-2 vocabularies)
WORDS = (
    "the of and to in is was for on are with as at be by this had not but from or have an they which one "
    "you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three"
).split()

#: tokens per word of :data:`WORDS` (each is one token after its space), for first guesses and estimates
TOKENS_PER_WORD_GUESS = 1.0
#: record error kinds of a calibration request that ran out of the user's timeouts
TIMED_OUT = frozenset({"first_token_timeout", "inter_token_timeout", "deadline", "connect_timeout"})
#: random words tokenized once to check that the learned word ids hold in context
WORD_MAP_CHECK = 512


def pick(n_words: int, rng: random.Random) -> list[str]:
    return [rng.choice(WORDS) for _ in range(max(0, n_words))]


def join(words: list[str]) -> str:
    """``" w1 w2 …"``: every word with its leading space, so parts concatenate without merging words."""
    return "".join(" " + w for w in words)


def filler(n_words: int, rng: random.Random) -> str:
    return join(pick(n_words, rng))


def new_nonce() -> str:
    # decimal digits tokenize to the same count whatever their values in most tokenizers
    return f"[#{random.SystemRandom().randrange(10**7, 10**8)}]"


def accepts_token_ids(target: Target) -> bool:
    """Whether ``target``'s generation endpoint takes a list of token ids as the prompt (its API's spec says)."""
    spec = registry.find(target.api)
    return spec is not None and spec.takes_token_ids(target)


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


class PromptBuilder:
    """Build exact-length prompts for one target (caches the tokenizer flavor and the calibration)."""

    def __init__(self, session: Session, target: Target, *, seed: int | None = None) -> None:
        self.session = session
        self.target = target
        self.rng = random.Random(seed)
        self.tokenizer = Tokenizer(session, target)
        self._calib: tuple[float, float] | None = None  # tokens = a + b * words
        self._calib_failed = False  # tried once and got no usable counts: estimate from then on
        self._word_ids: dict[str, int] | None = None  # WORDS → id (see word_ids)
        self._word_ids_failed = False
        self._specials: list[int] = []
        #: build head-less prompts from the learned word ids (bench); off: one round trip per prompt
        self.local_words = True

    @property
    def last_error(self) -> str | None:
        return self.tokenizer.last_error

    async def count(self, text: str, *, first: bool = True) -> int | None:
        """The server's count of ``text`` as a whole prompt (``first``) or as a part after a prefix."""
        ids = await self.tokenizer.tokenize(text)
        if ids is None:
            return None
        return len(ids if first else await self.tokenizer.content(ids))

    # -- the words' ids, learned once -------------------------------------------------------------
    async def word_ids(self) -> dict[str, int] | None:
        """Each of :data:`WORDS`' token id after its space, when the server's tokenizer is one token
        per such word and context-free across them (checked once on all of WORDS, then on a random
        sample of :data:`WORD_MAP_CHECK` words against the map): then a prompt of only these words
        has known ids without a round trip, so building bench's 4,096-prompt pool costs two requests,
        not thousands. None (and the per-prompt round trips) on any server where that does not hold."""
        if self._word_ids is not None or self._word_ids_failed:
            return self._word_ids
        self._word_ids_failed = True
        tok = self.tokenizer
        ids = await tok.tokenize(join(list(WORDS)))
        if ids is None:
            return None
        content = await tok.content(ids)
        if len(content) != len(WORDS) or len(set(content)) != len(set(WORDS)):
            return None
        table = dict(zip(WORDS, content))
        sample = pick(WORD_MAP_CHECK, random.Random(0x5EED))
        got = await tok.tokenize(join(sample))
        if got is None or await tok.content(got) != [table[w] for w in sample]:
            return None
        self._specials = list(ids[: len(ids) - len(content)])
        self._word_ids, self._word_ids_failed = table, False
        return table

    def _local(self, n: int, rng: random.Random, first: bool) -> tuple[str, list[int] | None, int] | None:
        """:meth:`exact` without a round trip, from :meth:`word_ids` (None: not known here)."""
        table = self._word_ids
        if table is None:
            return None
        sp = self._specials if first else []
        need = n - len(sp)
        if need < 1:
            return None
        words = pick(need, rng)
        if accepts_token_ids(self.target):
            return join(words), sp + [table[w] for w in words], n
        return join(words), None, n

    # -- through the server's tokenizer ----------------------------------------------------------
    async def exact(self, n: int, rng: random.Random, head: str = "", *,
                    first: bool = True) -> tuple[str, list[int] | None, int] | None:
        """(text, token ids to send or None, achieved count) of ``n`` tokens through the tokenizer;
        None when the server does not tokenize. ``first=False``: a part after a prefix (no BOS).
        Without a ``head`` (bench's prompts) the words' ids learned once (:meth:`word_ids`) make
        the prompt locally, with no request."""
        if not head and self.local_words and await self.word_ids() is not None:
            got = self._local(n, rng, first)
            if got is not None:
                return got
        tok = self.tokenizer

        async def ids_of(text: str) -> list[int] | None:
            ids = await tok.tokenize(text)
            return ids if ids is None or first else await tok.content(ids)

        words = pick(int(n / TOKENS_PER_WORD_GUESS) + 8, rng)
        ids = await ids_of(head + join(words))
        if ids is None:
            return None
        for _ in range(20):
            if len(ids) >= n:
                break
            words += pick(int((n - len(ids)) / TOKENS_PER_WORD_GUESS) + 8, rng)
            ids = await ids_of(head + join(words))
            if ids is None:
                return None
        if accepts_token_ids(self.target):
            cut = ids[:n]
            return head + join(words), cut, len(cut)
        # a text prompt: the cut ids' own text when it counts n again (the server adds the BOS itself)
        shown = await tok.detokenize(await tok.content(ids[:n]) if first else ids[:n])
        if shown is not None:
            got = await ids_of(shown)
            if got is not None and len(got) == n:
                return shown, None, n
        return await self._fit_words(head, words, n, ids_of)

    async def _fit_words(self, head: str, words: list[str], n: int, ids_of: Any) -> tuple[str, None, int] | None:
        """The longest word prefix whose count is at most ``n`` (exactly ``n`` when one is; binary search)."""
        lo, hi = 1, len(words)
        best: tuple[str, None, int] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            text = head + join(words[:mid])
            got = await ids_of(text)
            if got is None:
                return None
            k = len(got)
            if k == n:
                return text, None, k
            if k < n:
                best, lo = (text, None, k), mid + 1
            else:
                hi = mid - 1
        if best is None:  # even one word is over n (a long nonce): the shortest there is
            text = head + join(words[:1])
            got = await ids_of(text)
            return (text, None, len(got)) if got is not None else None
        return best

    # -- building -------------------------------------------------------------------------------
    async def build(self, n_tokens: int, *, nonce: str | None = None) -> Prompt:
        """A prompt of exactly ``n_tokens`` where the server lets us make sure of it."""
        if n_tokens < 1:
            raise ValueError("n_tokens must be ≥ 1")
        nonce = new_nonce() if nonce is None else nonce
        got = await self.exact(n_tokens, self.rng, nonce)
        if got is not None:
            text, ids, achieved = got
            return Prompt(text, ids, achieved, n_tokens, "tokenizer", nonce)
        return await self._by_calibration(n_tokens, nonce)

    # -- through the server's usage counts ------------------------------------------------------
    async def _server_count(self, text: str) -> int | None:
        """The server's prompt token count for ``text`` (one request, 1 output token)."""
        from phasescope.apis import get_client

        req = GenRequest(prompt=text, max_tokens=1, stream=False, ignore_eos=False,
                         tags={"calibration": True, "ollama_chat": False})
        rec = await get_client(self.target.api).send(self.session, self.target, req)
        if not rec.ok and rec.error_kind in TIMED_OUT:
            # a 1-token request that ran out of the user's timeouts: every measured request would too,
            # so say so now (exit 3) instead of waiting the same timeouts again for each of them
            raise NoAnswerError(f"prompt calibration: {rec.error_message or rec.error_kind}",
                                hint="the server did not answer a 1-token request within the timeouts given")
        if not rec.ok or rec.prompt_tokens_source not in ("usage", "server"):
            return None
        return rec.prompt_tokens

    async def calibrate(self) -> tuple[float, float] | None:
        """tokens = a + b·words from two requests, once per builder: a calibration that failed is not
        tried again for every prompt (each try waits up to the user's timeouts), and the second
        request is not sent when the first got no count."""
        if self._calib is not None or self._calib_failed:
            return self._calib
        w1, w2 = 20, 220
        t1 = await self._server_count(new_nonce() + filler(w1, self.rng))
        t2 = await self._server_count(new_nonce() + filler(w2, self.rng)) if t1 is not None else None
        if t1 is None or t2 is None or t2 <= t1:
            self._calib_failed = True
            return None
        b = (t2 - t1) / (w2 - w1)
        a = t1 - b * w1
        self._calib = (a, b)
        return self._calib

    async def _by_calibration(self, n: int, nonce: str) -> Prompt:
        cal = await self.calibrate()
        if cal is None:
            words = max(1, round(n / TOKENS_PER_WORD_GUESS))
            return Prompt(nonce + filler(words, self.rng), None, None, n, "estimate", nonce)
        a, b = cal
        words = pick(max(1, round((n - a) / b)), self.rng)
        # measured with a throw-away nonce: the prompt we return must not be in the server's cache
        probe_head = new_nonce() if nonce else ""
        got = await self._server_count(probe_head + join(words))
        if got is not None and got != n:
            # one correction round: add or drop words at the measured rate
            delta = n - got
            if delta > 0:
                words += pick(max(1, math.floor(delta / b)), self.rng)
            else:
                words = words[: max(1, len(words) - max(1, math.ceil(-delta / b)))]
            probe_head = new_nonce() if nonce else ""
            got = await self._server_count(probe_head + join(words))
        # nonces are same-length digit strings, so the fresh one tokenizes like the probe's
        return Prompt(nonce + join(words), None, got, n, "calibrated", nonce)


# --- bench's makers: (text, ids) of n tokens per salt ------------------------------------------------
class WordPromptMaker:
    """``n`` random words of :data:`WORDS`; ``source="estimate"``."""

    source = "estimate"
    #: tokens the server adds to every prompt of this maker (BOS, chat template); see :func:`measure_overhead`
    overhead = 0

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        return filler(n_tokens, random.Random(salt)), None

    async def count(self, text: str) -> int | None:
        return None


class TokenizePromptMaker:
    """Exact lengths through the server's ``/tokenize`` (:meth:`PromptBuilder.exact`): ``source``
    ``tokenize`` where token ids are sent, ``calibrated`` for a text prompt (chat, TGI)."""

    def __init__(self, builder: PromptBuilder) -> None:
        self.builder = builder
        self.source = "tokenize" if accepts_token_ids(builder.target) else "calibrated"
        self.overhead = 0  # tokens the server adds beyond what make() counts (measure_overhead)

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        """``n_tokens`` as the server counts them; with ``first`` (the prompt starts here) its
        special tokens (BOS) are among them, a part after a shared prefix (``first=False``) has none."""
        got = await self.builder.exact(n_tokens, random.Random(salt), first=first)
        if got is None:
            raise RuntimeError(f"the server's tokenizer stopped answering: {self.builder.last_error}")
        return got[0], got[1]

    async def count(self, text: str) -> int | None:
        """The server's count of ``text`` sent as a prompt (a dataset's prompt), BOS included."""
        return await self.builder.count(text)

    async def count_part(self, text: str) -> int | None:
        """The server's count of ``text`` inside a longer prompt (a reply a conversation resends):
        no BOS, which only a whole prompt's front carries."""
        return await self.builder.count(text, first=False)


class CalibratedPromptMaker:
    """No tokenizer endpoint (Ollama, unknown servers): :meth:`PromptBuilder.build` fits tokens =
    a + b·words from the server's own ``usage`` counts (``source="calibrated"``; ``estimate`` when
    the server reports no counts). The achieved length of every request is still read back from
    ``usage`` and compared in the summary."""

    def __init__(self, session: Session, target: Target, seed: int = 0) -> None:
        self._pb = PromptBuilder(session, target, seed=seed)
        self.source = "calibrated"
        self.overhead = 0  # the calibration fits the server's own count, overhead included

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]:
        p = await self._pb.build(n_tokens, nonce=f"[#{10**7 + salt % (9 * 10**7)}]")
        self.source = p.source
        return p.text, p.token_ids

    async def count(self, text: str) -> int | None:
        return None


async def prompt_maker_for(session: Session, target: Target, *,
                           calibrate: bool = True) -> WordPromptMaker | TokenizePromptMaker | CalibratedPromptMaker:
    """The best maker the server allows: its ``/tokenize`` if it has one, else a usage-based
    calibration (``calibrate``), else words."""
    pb = PromptBuilder(session, target, seed=0)
    if await pb.tokenizer.available():
        m = TokenizePromptMaker(pb)
        await measure_overhead(session, target, m)
        return m
    if calibrate:
        cm = CalibratedPromptMaker(session, target)
        try:
            await cm.make(8, 0)  # runs the calibration once; words if the server gives no counts
            return cm
        except NoAnswerError:  # its 1-token request ran out of the timeouts: so would every request
            raise
        except Exception:  # noqa: BLE001 - no calibration: words
            pass
    return WordPromptMaker()


#: the id prefix (``X-Request-Id``) of the one request :func:`measure_overhead` sends before a run
OVERHEAD_ID = "overhead-check"


async def measure_overhead(session: Session, target: Target, maker: TokenizePromptMaker) -> int:
    """Tokens the server counts beyond what ``maker`` counted (a chat template's role tokens; the BOS
    is already in the count), from one 1-token request: ``usage.prompt_tokens − count``. Stored as
    ``maker.overhead`` and subtracted from every prompt, so ``--input-len L`` is L tokens as the
    server counts them. 0 when the server reports no count (nothing to correct by)."""
    from phasescope.apis import get_client

    n = 16
    try:
        text, ids = await maker.make(n, salt=random.SystemRandom().randrange(1 << 30))
        built = len(ids) if ids is not None else await maker.count(text)
        if built is None:
            return 0
        req = GenRequest(prompt=text, max_tokens=1, prompt_token_ids=ids, stream=False, ignore_eos=False,
                         id=f"{OVERHEAD_ID}-{random.SystemRandom().randrange(1 << 32):08x}", tags={"calibration": True})
        rec = await get_client(target.api).send(session, target, req)
    except NoAnswerError:
        raise
    except Exception:  # noqa: BLE001 - a failed check leaves the lengths as built
        return 0
    if not rec.ok and rec.error_kind in TIMED_OUT:  # a 1-token request that ran out of the timeouts
        raise NoAnswerError(f"prompt length check: {rec.error_message or rec.error_kind}",
                            hint="the server did not answer a 1-token request within the timeouts given")
    if not rec.ok or rec.prompt_tokens is None or rec.prompt_tokens_source not in ("usage", "server"):
        return 0
    extra = int(rec.prompt_tokens) - built
    maker.overhead = extra if 0 <= extra <= 64 else 0
    return maker.overhead


__all__ = ["OVERHEAD_ID", "WORDS", "CalibratedPromptMaker", "Prompt", "PromptBuilder", "TokenizePromptMaker",
           "WordPromptMaker", "accepts_token_ids", "measure_overhead", "new_nonce", "prompt_maker_for"]
