"""Issue 31: ``bench -n 1000000000 --duration 2`` spent ~30 s building its 4,097-prompt pool, one
tokenizer round trip (or more) per prompt, before a 2 s run. The words' ids are now learned once
(two requests), so the pool costs a fixed handful of requests whatever its size — counted here on
the requests sent, and every prompt's ids checked against the server's own tokenization."""

from __future__ import annotations

import asyncio

import pytest

from phasescope.apis._session import new_session
from phasescope.apis.base import Target
from phasescope.apis.tokenize import Tokenizer
from phasescope.load.workload import random_workload
from phasescope.prompting import prompt_maker_for
from phasescope.testing.fakeserver import FakeServer


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flavor, api", [("vllm", "openai"), ("llamacpp", "llamacpp"), ("vllm", "chat")])
def test_a_large_prompt_pool_costs_a_few_tokenizer_requests_and_stays_exact(
        flavor: str, api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    posts: list[str] = []
    real = Tokenizer._post

    async def counted(self: Tokenizer, path: str, body: dict) -> tuple:  # type: ignore[type-arg]
        posts.append(path)
        return await real(self, path, body)

    monkeypatch.setattr(Tokenizer, "_post", counted)

    async def go() -> list:
        async with FakeServer(flavor=flavor) as srv:
            target = Target(srv.url, api=api, model="fake-model", engine=flavor)
            async with new_session() as s:
                maker = await prompt_maker_for(s, target)
                before = len(posts)
                items = await random_workload(600, input_len=40, output_len=4, maker=maker, range_ratio=0.5,
                                              seed=3, run_salt="r")
                during = len(posts) - before
                tok = Tokenizer(s, target)  # the server's own answer for each prompt, asked afresh
                checked = [(it, await tok.tokenize(it.prompt)) for it in items[:60]]
                return [items, during, maker.overhead, checked]

    items, during, overhead, checked = asyncio.run(go())
    assert during <= 4, f"{during} tokenizer requests for 600 prompts"
    assert len({it.prompt for it in items}) == len(items)  # unique prompts: no prefix-cache flattery
    for it, server_ids in checked:
        if it.prompt_token_ids is not None:  # ids sent: exactly the server's tokenization of the text
            assert it.prompt_token_ids == server_ids
            assert len(it.prompt_token_ids) == it.input_len
        else:  # a text prompt: the server's count plus the measured template overhead is the drawn length
            assert len(server_ids) + overhead == it.input_len
