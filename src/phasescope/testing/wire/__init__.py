"""The fake server's wire formats, one module each, mirroring :mod:`phasescope.apis`.

* :mod:`~phasescope.testing.wire.openai` — vLLM and SGLang: ``/v1/completions``, ``/v1/chat/completions``,
  ``/v1/models``, ``/tokenize``, ``/health``, ``/version`` (llama-server serves the OpenAI endpoints too,
  with its own differences, which live there as well),
* :mod:`~phasescope.testing.wire.llamacpp` — llama-server's native ``/completion``, ``/props``, ``/tokenize``,
* :mod:`~phasescope.testing.wire.ollama` — ``/api/generate``, ``/api/chat``, ``/api/show``, ``/api/tags``,
* :mod:`~phasescope.testing.wire.metrics` — the Prometheus ``/metrics`` text of vLLM, SGLang and llama.cpp,
* :mod:`~phasescope.testing.wire.common` — the ground-truth record, the tokenizer and the words all share.

Each handler is ``async def handler(srv, request)`` over a :class:`~phasescope.testing.FakeServer`, whose
methods hold the steps every format shares (auth, faults, prompt caches, the token schedule, streaming).
"""
