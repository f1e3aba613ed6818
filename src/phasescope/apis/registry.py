"""The wire protocols phasescope speaks: every :class:`~phasescope.apis.spec.ApiSpec`, by ``--api`` name.

Everything that lists or picks an API reads it here — the ``--api`` choices and help (:func:`names`,
:func:`help_text`), detection's probes (:func:`probes`), the client lookup
(:func:`phasescope.apis.get_client`), the URL suffixes a user may paste (:func:`url_suffixes`) — so a
new protocol is one module declaring ``SPECS`` and its name in :data:`MODULES`; :func:`register` adds
one at run time (a plugin, a test).
"""

from __future__ import annotations

from phasescope.apis import anthropic, llamacpp, ollama, openai, responses
from phasescope.apis.spec import ApiSpec
from phasescope.errors import InputError

#: the protocol modules, in the order ``--api`` lists their specs (a new protocol: its name here)
MODULES = (openai, ollama, llamacpp, anthropic, responses)

#: what ``--api`` takes besides the specs' names: detect the server's own API
AUTO = "auto"

_SPECS: dict[str, ApiSpec] = {}


def register(*specs: ApiSpec) -> None:
    """Add ``specs`` (after those already here); a name already taken is a ``ValueError``."""
    for spec in specs:
        if spec.name in _SPECS or spec.name == AUTO:
            raise ValueError(f"API {spec.name!r} is already registered")
        _SPECS[spec.name] = spec


def unregister(name: str) -> None:
    """Remove the spec named ``name`` (a test's throw-away protocol); unknown names are ignored."""
    _SPECS.pop(name, None)


def specs() -> tuple[ApiSpec, ...]:
    return tuple(_SPECS.values())


def names() -> tuple[str, ...]:
    """What ``--api`` accepts: ``auto`` and every spec's name."""
    return (AUTO, *_SPECS)


def find(name: str) -> ApiSpec | None:
    return _SPECS.get(name)


def get(name: str) -> ApiSpec:
    """The spec of a resolved API name (never ``auto``); an unknown name is an :class:`InputError`."""
    spec = _SPECS.get(name)
    if spec is None:
        raise InputError(f"unknown API {name!r}; expected one of: {', '.join(_SPECS)}")
    return spec


def chat_of(name: str) -> ApiSpec:
    """The spec that speaks the chat endpoint of a server reached through ``name``."""
    spec = get(name)
    return get(spec.chat_api) if spec.chat_api else spec


def probes() -> list[ApiSpec]:
    """The specs detection asks, in the order it asks them."""
    return sorted((s for s in _SPECS.values() if s.probe is not None), key=lambda s: s.probe_rank)


def help_text() -> str:
    """``--api`` help: ``auto | openai (/v1/completions) | chat (/v1/chat/completions) | …``."""
    return " | ".join((AUTO, *(s.help for s in _SPECS.values()))) + "."


def url_suffixes() -> list[str]:
    """Endpoint paths cut off a pasted URL, longest first (so ``/v1/chat/completions`` wins over ``/v1``)."""
    return sorted({x for s in _SPECS.values() for x in s.url_suffixes}, key=len, reverse=True)


for _module in MODULES:
    register(*_module.SPECS)
