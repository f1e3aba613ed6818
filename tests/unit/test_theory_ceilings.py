"""theory/ceilings: the model spec a run is set beside, asked of no server itself (probe hands it
Ollama's /api/show; bench has none to hand), and probe's names for it."""

from __future__ import annotations

import asyncio
from typing import Any

from phasescope.apis.base import Target
from phasescope.theory import ceilings as T

SHOW = {"details": {"quantization_level": "Q4_K_M"}, "model_info": {
    "general.architecture": "llama", "general.parameter_count": 8030261248, "llama.block_count": 32,
    "llama.embedding_length": 4096, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
    "llama.feed_forward_length": 14336, "llama.context_length": 131072, "llama.vocab_size": 128256}}


def test_an_ollama_model_is_read_from_the_show_the_caller_hands() -> None:
    tgt = Target("http://127.0.0.1:11434", api="ollama", model="my-private-model:q4", engine="ollama")
    asked: list[int] = []

    async def show() -> Any:
        asked.append(1)
        return SHOW

    spec, why = asyncio.run(T.discover_spec(tgt, None, None, show_ollama=show))
    assert why is None and asked == [1] and spec.total_params == 8_030_261_248 and spec.dtype == "q4_k_m"
    # without one, nothing is asked: the reason names --model-spec
    spec, why = asyncio.run(T.discover_spec(tgt, None, None))
    assert spec is None and why is not None and "--model-spec" in why


def test_probe_keeps_its_names() -> None:
    from phasescope.probing import ceilings as C

    assert (C.ceilings, C.get_device, C.is_loopback) == (T.ceilings, T.get_device, T.is_loopback)
