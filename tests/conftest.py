"""Shared pytest fixtures. ``engine``: ONE real llama-server for the whole test session.

Integration tests that need the embedded engine take the ``engine`` fixture and are marked
``@pytest.mark.engine``. It is built by ``phasescope engine install`` (``make test`` runs it);
when it is missing the fixture errors with the message saying so — engine tests are never
silently skipped. Set ``PHASESCOPE_TEST_PARALLEL`` / ``PHASESCOPE_TEST_CTX`` to change the slots.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

#: shared fixtures of both tiers (the scratch engine cache of the engine-install tests)
pytest_plugins = ["engine_scripts"]


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    """A running embedded engine (:class:`phasescope.engine.EngineHandle`): ``.url``, ``.model_alias``,
    ``.model_path``, ``.pid``, ``.parallel`` (4), ``.ctx_size`` (16384). Stopped at session end."""
    from phasescope.engine import running_engine

    parallel = int(os.environ.get("PHASESCOPE_TEST_PARALLEL", "4"))
    ctx = int(os.environ.get("PHASESCOPE_TEST_CTX", "16384"))
    with running_engine(parallel=parallel, ctx_size=ctx) as eng:
        yield eng


@pytest.fixture(autouse=True, scope="session")
def _isolated_fallback_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs without the store or --out (``--no-save``, ``--no-store``) write their fallback folder
    (``phasescope.lifecycle``) to a scratch ``$PHASESCOPE_RUNS_DIR``, never the checkout."""
    old = os.environ.get("PHASESCOPE_RUNS_DIR")
    os.environ["PHASESCOPE_RUNS_DIR"] = str(tmp_path_factory.mktemp("fallback-runs"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PHASESCOPE_RUNS_DIR", None)
        else:
            os.environ["PHASESCOPE_RUNS_DIR"] = old


@pytest.fixture(autouse=True, scope="session")
def _isolated_run_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs recorded by tests go to a scratch store, never the user's ``~/.local/share/phasescope``.
    A test that passes its own ``--store``/``PHASESCOPE_STORE`` still wins."""
    old = os.environ.get("PHASESCOPE_STORE")
    os.environ["PHASESCOPE_STORE"] = str(tmp_path_factory.mktemp("store") / "runs.db")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PHASESCOPE_STORE", None)
        else:
            os.environ["PHASESCOPE_STORE"] = old


@pytest.fixture(autouse=True, scope="session")
def _isolated_hf_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Model shapes may come from the local Hugging Face cache (``theory.models.names``): tests read an
    empty scratch one, never the machine's, unless a test sets ``HF_HOME`` itself."""
    keys = ("HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME")
    old = {k: os.environ.get(k) for k in keys}
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def _no_secrets_from_earlier_tests() -> Iterator[None]:
    """The redaction registry is process-wide (a CLI run registers its keys once): a key one in-process test
    registered (``--api-key nan``) must not mask another test's text."""
    from phasescope import redact

    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture(autouse=True, scope="session")
def _interruptible_children() -> Iterator[None]:
    """A suite started in the background by a non-interactive shell (``make test &``, ``nohup``) inherits
    SIGINT ignored, and so does every CLI child a test spawns: the Ctrl-C tests (exit 130, a partial run)
    then see exit 0. Children inherit the default disposition again, as when run from a terminal."""
    import signal

    old = signal.getsignal(signal.SIGINT)
    if old == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if old == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)



class _LongWaitsFirst:
    """``make test``'s part 2 runs four workers with ``--dist worksteal``: each worker is handed a quarter of
    the collection, in order, and an idle one steals the tail half of the longest queue. The tests marked
    ``slow`` (explain's budget-bound runs against fakes, 20-30 s each) mostly wait on their servers, and they
    were collected last: they started in the final minute and left the other workers idle for 20-30 s at
    the end. Here they go to the head of the first two workers' quarters (where nothing steals them): those
    two workers wait through them one after another from the start, beside the other two's CPU work."""

    @pytest.hookimpl(trylast=True)  # after -m has deselected: the quarters are of the tests that run
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
        argv = " ".join(str(a) for a in getattr(config, "workerinput", {}).get("mainargv", ()))
        if workers < 2 or "worksteal" not in argv:
            return
        slow = [it for it in items if it.get_closest_marker("slow")]
        if not slow:
            return
        rest = [it for it in items if not it.get_closest_marker("slow")]
        first, second = slow[0::2], slow[1::2]
        quarter = len(items) // workers - len(first)  # the first worker's share, less the slow tests at its head
        items[:] = first + rest[:quarter] + second + rest[quarter:]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LongWaitsFirst(), "phasescope-long-waits-first")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that takes the ``engine`` fixture is an engine test whether or not its file says so: ``make
    test`` runs engine and ``serial`` tests one at a time on a quiet machine, the others on every core."""
    for item in items:
        # the fixture, not a parametrize argument of the same name (tests/unit has `engine` as one)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "engine" in getattr(item, "fixturenames", ()) and "engine" not in params \
                and not item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.engine)
