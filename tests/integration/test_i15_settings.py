"""Issue #15: the server's current settings are read from what it reports (llama.cpp /props,
vLLM /metrics cache_config_info and /v1/models) and from --server-flags, which wins."""

from __future__ import annotations

import asyncio

from phasescope.apis.base import Target
from phasescope.diagnose.settings import discover_settings
from phasescope.experiments.context import experiment_session
from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake


def settings_of(b: Behaviour, engine: str, flags: str | None = None):
    async def go():
        async with BehaviourFake(b) as fake:
            t = Target(base_url=fake.url, api="openai", model=b.model, engine=engine)
            async with experiment_session() as session:
                return await discover_settings(session, t, server_flags=flags)

    return asyncio.run(go())


def test_llamacpp_props_give_slots_and_type_and_defaults_fill_the_batch():
    s = settings_of(Behaviour(flavour="llamacpp", slots=3), "llamacpp")
    assert s.n_parallel == 3 and "total_slots" in s.src("n_parallel")
    assert s.model_file_type == "q4_k_m" and "model_ftype" in s.src("model_file_type")
    assert (s.n_batch, s.n_ubatch) == (2048, 512) and s.src("n_batch") == "llama.cpp default"


def test_server_flags_win_over_what_the_server_reports():
    s = settings_of(Behaviour(flavour="llamacpp", slots=3), "llamacpp", flags="-b 256 -np 8")
    assert (s.n_batch, s.n_parallel) == (256, 8) and s.src("n_parallel") == "--server-flags"
    assert s.n_ubatch == 512  # still the default: not given


def test_vllm_metrics_info_and_models():
    s = settings_of(Behaviour(prefix_cache=False, max_model_len=12345), "vllm")
    assert s.prefix_caching is False and "cache_config_info" in s.src("prefix_caching")
    assert s.max_model_len == 12345 and s.n_batch is None  # no llama.cpp default for vLLM
