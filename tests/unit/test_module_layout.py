"""The package's shape (#16 item 4), read with the stdlib ``ast`` module from the source files (its
import graph — no cycles, no arrow the wrong way — is tests/unit/test_import_graph.py's):

* no module is over :data:`LIMIT` lines unless its docstring says why it is one job (a sentence
  beginning :data:`MARKER`);
* every Sphinx reference in a docstring (``:func:`…```, ``:mod:`…```, …) names something that
  exists, and no docstring cites a file outside the repository (``shared/reference/…``).

:data:`PENDING` and :data:`PENDING_REFS` list what other parts of #16 are splitting or rewriting; each
entry is checked to be still true, so the lists can only shrink.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any, Iterator


SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "phasescope"

LIMIT = 500
MARKER = "One job:"
#: modules over the limit that another part of #16 splits or justifies (the list may only shrink)
PENDING: set[str] = set()
#: (module, reference) pairs in files another part of #16 is rewriting (the list may only shrink)
PENDING_REFS: set[tuple[str, str]] = set()
#: modules whose docstrings still cite the reference notes outside the repository (the list may only shrink)
PENDING_CITES: set[str] = set()
OUTSIDE = re.compile(r"(?:\.\./)?shared/reference/|(?<![\w/.])reference/[\w-]+\.md")
ROLE = re.compile(r":(mod|func|class|data|meth|attr|exc|obj):`~?([^`<>\s]+)`")


def _files() -> Iterator[tuple[str, Path]]:
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, p


def _docstring(p: Path) -> str:
    return ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or ""


def test_long_modules_say_why_they_are_one_job() -> None:
    long = {}
    for _, p in _files():
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > LIMIT and MARKER not in _docstring(p):
            long[p.relative_to(SRC).as_posix()] = n
    unexplained = {k: v for k, v in long.items() if k not in PENDING}
    assert not unexplained, (f"over {LIMIT} lines with no '{MARKER} …' sentence in the docstring: split them, "
                             f"or say why each is one job: {unexplained}")
    done = PENDING - set(long)
    assert not done, f"no longer over {LIMIT} lines without a reason: take them off PENDING: {sorted(done)}"


def _docstrings(tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    """(docstring, names of the enclosing classes) for the module and every function and class."""

    def walk(node: ast.AST, classes: list[str]) -> Iterator[tuple[str, list[str]]]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            inner = classes + [node.name] if isinstance(node, ast.ClassDef) else classes
            if doc:
                yield doc, inner
            for child in ast.iter_child_nodes(node):
                yield from walk(child, inner)
        else:
            for child in ast.iter_child_nodes(node):
                yield from walk(child, classes)

    yield from walk(tree, [])


def _has(obj: Any, attr: str) -> bool:
    return hasattr(obj, attr) or attr in getattr(obj, "__dataclass_fields__", {}) or attr in getattr(
        obj, "__annotations__", {})


def _chain(obj: Any, parts: list[str]) -> bool:
    for i, a in enumerate(parts):
        if not _has(obj, a):
            return False
        if i < len(parts) - 1:
            obj = getattr(obj, a)
    return True


def resolves(target: str, module: Any, classes: list[str]) -> bool:
    """Whether a docstring reference names something: a full ``phasescope.…`` path, a ``.relative``
    module, a name in the module, or an attribute of the class the docstring sits in."""
    name = module.__name__
    if target.startswith("."):
        base = name if module.__file__.endswith("__init__.py") else name.rsplit(".", 1)[0]
        target = base + target
    parts = target.split(".")
    if parts[0] == "phasescope":
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            return _chain(obj, parts[i:]) if parts[i:] else True
        return False
    if _chain(module, parts):
        return True
    scope: Any = module
    for c in classes:  # a method or field of the enclosing class
        scope = getattr(scope, c, None)
        if scope is not None and _chain(scope, parts):
            return True
    return False


def _unresolved() -> set[tuple[str, str]]:
    bad = set()
    for name, p in _files():
        if p.name == "__main__.py":  # running it starts a server
            continue
        module = importlib.import_module(name)
        for doc, classes in _docstrings(ast.parse(p.read_text(encoding="utf-8"))):
            for _, target in ROLE.findall(doc):
                if not resolves(target, module, classes):
                    bad.add((name, target))
    return bad


def test_resolver_tells_a_real_name_from_a_stale_one() -> None:
    import phasescope.planning.sim as sim

    assert resolves("phasescope.theory.models.ModelSpec", sim, [])
    assert resolves("phasescope.planning.replica.Replica.plan_step", sim, [])
    assert resolves(".costmodel", sim, []) and resolves("Simulator", sim, []) and resolves("run", sim, ["Simulator"])
    assert not resolves("phasescope.planning.sim.from_theory", sim, [])
    assert not resolves("phasescope.theory.models.no_such_name", sim, [])
    assert not resolves(".plan", importlib.import_module("phasescope.planning"), [])


def test_docstring_references_name_things_that_exist() -> None:
    bad = _unresolved()
    stale = sorted(bad - PENDING_REFS)
    assert not stale, f"docstrings name things that do not exist: {stale}"
    fixed = sorted(PENDING_REFS - bad)
    assert not fixed, f"these resolve now: take them off PENDING_REFS: {fixed}"


def test_no_docstring_cites_a_file_outside_the_repository() -> None:
    citing = set()
    for name, p in _files():
        for doc, _ in _docstrings(ast.parse(p.read_text(encoding="utf-8"))):
            if OUTSIDE.search(doc):
                citing.add(name)
    assert not citing - PENDING_CITES, f"docstrings cite files outside the repository: {sorted(citing - PENDING_CITES)}"
    assert not PENDING_CITES - citing, f"take them off PENDING_CITES: {sorted(PENDING_CITES - citing)}"


def test_test_file_names_are_unique_across_tiers() -> None:
    """tests/ has no __init__.py: two test files of one basename in two tiers stop pytest's collection
    ('import file mismatch'), so the whole suite runs nothing."""
    from collections import Counter
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in root.rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1]


#: modules a unit test may not import: sockets, processes, and the modules of phasescope.testing that
#: are servers through and through (the fakes' pure parts — wire formats, metric states, schedules — stay)
IMPURE_MODULES = {"socket", "subprocess", "multiprocessing", "aiohttp.web", "phasescope.testing._serve",
                  "phasescope.testing.fakeserver", "phasescope.testing.lean_fake", "phasescope.testing.hostile_fake"}
#: calls that open a socket or start a process whatever module they come from
IMPURE_CALLS = {"start_server", "create_server", "create_unix_server", "open_connection", "create_subprocess_exec",
                "create_subprocess_shell", "Popen", "fork"}


def _is_server(obj: Any) -> bool:
    servers = tuple(getattr(importlib.import_module(f"phasescope.testing.{m}"), n)  # not imported by name: this
                    for m, n in (("_serve", "LoopbackServer"), ("lean_fake", "LeanFake"),  # file is checked too
                                 ("hostile_fake", "HostileServer")))
    if isinstance(obj, type):
        return issubclass(obj, servers)
    return callable(obj) and getattr(obj, "__name__", "").startswith(("running_", "serve_"))


def impure_uses(path: Path) -> list[str]:
    """What in one test file opens a socket or starts a process: an import of :data:`IMPURE_MODULES`,
    a server (or a function that starts one) from ``phasescope.testing``, a call in :data:`IMPURE_CALLS`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in IMPURE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in IMPURE_MODULES:
                found.append(f"from {node.module} import …")
                continue
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in IMPURE_MODULES:
                    found.append(f"from {node.module} import {a.name}")
                elif node.module.startswith("phasescope.testing"):
                    obj = getattr(importlib.import_module(node.module), a.name, None)
                    if _is_server(obj):
                        found.append(f"from {node.module} import {a.name}")
        elif isinstance(node, ast.Attribute) and node.attr in IMPURE_CALLS:
            found.append(f".{node.attr}")
    return found


def test_the_unit_tier_opens_no_socket_and_starts_no_process() -> None:
    """tests/unit is `make check`'s pure tier: a test that needs a server, a socket or a subprocess
    belongs in tests/integration (which `make test` runs)."""
    unit = Path(__file__).resolve().parent
    impure = {p.name: uses for p in sorted(unit.glob("*.py")) if (uses := impure_uses(p))}
    assert not impure, f"move these to tests/integration (or take the server/process out): {impure}"
