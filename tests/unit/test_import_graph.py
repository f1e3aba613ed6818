"""The package's data flows one way, checked on the import graph (stdlib ``ast``, nothing imported).

Five rules (docs/api.md, issue #16, issue #32):

* **No cycles**, lazy imports included: an import inside a function is the package's way to load a
  heavy part on first use, but it is a dependency all the same, and a cycle through it is a flow that
  doubles back. ``if TYPE_CHECKING:`` imports are ignored (types only, never run). At module level the
  parent packages a module's import runs first count too (``import a.b.c`` runs ``a/__init__``).
* **The facade is on top**: ``phasescope/__init__`` and ``phasescope.api`` (the public API) import the
  rest; nothing in the package imports them back (the version lives in ``phasescope._version``).
* **Forbidden arrows**: the runners (``load``, ``probing``, ``experiments``, ``planning``, ``tuning``) never import
  ``report`` (they hand records to a sink; report reads the store); ``measure`` and ``theory`` never
  import ``apis`` (derivation and physics do not talk to servers).
* **Layers**: every package sits in one layer of :data:`LAYERS` (bottom first); a module imports only
  its own package and packages of lower layers — at module level and inside functions alike (a lazy
  import is an arrow all the same). Two packages of one layer do not import each other.
* **aiohttp only in apis/**: every HTTP call and every aiohttp error lives in ``apis/`` (and the fakes
  under ``testing/``); the other packages call ``apis`` functions and see :mod:`phasescope.errors`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "phasescope"

FORBIDDEN = {
    "load": ("report",),
    "probing": ("report",),
    "experiments": ("report",),
    "planning": ("report",),
    "tuning": ("report",),
    "measure": ("apis",),
    "theory": ("apis",),
}


#: the flow of data, bottom layer first (docs/ARCHITECTURE.md: Target → Workload → Runner → records →
#: Analysis → Findings → Outputs). Each entry: the packages (or top-level modules) of one layer.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(x.split()) for x in (
    "_version errors redact signals _results",  # no phasescope import at all
    "safeio jsonutil",                  # bounded reading and JSON, on errors and redaction
    "measure",                          # records, clocks, stats, warnings: derivation only
    "theory",                           # physics on a ModelSpec and a Device: no I/O to servers
    "apis",                             # every byte to or from a server, and its error map
    "engine metrics prompting",         # the embedded server, /metrics and GPU telemetry, prompts: on apis
    "target",                           # what the user typed → a resolved Target (apis + engine)
    "diagnose",                         # findings from results (experiments' rules live here)
    "store",                            # the run store a run is written into
    "lifecycle",                        # one run's output: the store or --out, partial, finish
    "load", "probing", "experiments", "planning", "tuning",  # the runners, each on the ones before it
    "report",                           # reads stored runs: nothing below imports it
    "cli", "api", "(root)", "__main__", "testing",  # the commands, the public API on top; fakes
))

#: imports against the flow still allowed, each with why (none: issue 32's lanes moved the last ones)
FLOW_ALLOWED: dict[tuple[str, str], str] = {}  # (importing module prefix, imported module prefix): why


def _allowed(mod: str, dep: str) -> bool:
    return any((mod == a or mod.startswith(a + ".")) and (dep == b or dep.startswith(b + "."))
               for a, b in FLOW_ALLOWED)


#: packages outside apis/ and testing/ still allowed to import aiohttp, each with why (none: load/
#: types its sessions as :data:`phasescope.apis.Session`)
AIOHTTP_ALLOWED: dict[str, str] = {}


def _pkg(mod: str) -> str:
    """The package (or top-level module) ``mod`` belongs to; ``(root)`` for ``phasescope/__init__``."""
    return mod.split(".")[1] if "." in mod else "(root)"


def _layer_of(mod: str) -> int:
    key = _pkg(mod)
    for i, layer in enumerate(LAYERS):
        if key in layer:
            return i
    raise AssertionError(f"{mod}: package {key!r} is in no layer of LAYERS; add it where its imports put it")


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / PKG).rglob("*.py")):
        rel = p.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool, int]]:
    """(imported phasescope module, at module level?, line) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, bool, int]] = []

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for c in child.orelse:
                    visit_one(c, top)
                continue
            visit_one(child, top)

    def visit_one(child: ast.AST, top: bool) -> None:
        if isinstance(child, ast.Import):
            for a in child.names:
                if a.name.split(".")[0] == PKG and (m := resolve(a.name)):
                    out.append((m, top, child.lineno))
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (child.level - 1)]
                name = ".".join(base + ([child.module] if child.module else []))
            else:
                name = child.module or ""
            if name.split(".")[0] != PKG:
                return
            for a in child.names:  # `from phasescope.load import bench` imports the submodule
                sub = f"{name}.{a.name}"
                m = sub if sub in modules else resolve(name)
                if m:
                    out.append((m, top, child.lineno))
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            visit(child, False)
        else:
            visit(child, top)

    visit(tree, True)
    return [x for x in out if x[0] != mod]


@functools.lru_cache(maxsize=1)  # the tree does not change during a run: parse it once, not 13 times
def _graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[str, int]]]]:
    modules = _modules()
    top: dict[str, set[str]] = {m: set() for m in modules}
    every: dict[str, list[tuple[str, int]]] = {m: [] for m in modules}
    for m, p in modules.items():
        for dep, at_top, line in _imports(m, p, modules):
            every[m].append((dep, line))
            if at_top:
                top[m].add(dep)
    return top, every


def _ancestors_are_loaded(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Importing ``a.b.c`` first runs ``a/__init__`` and ``a.b/__init__``: a real edge of the graph."""
    g = {m: set(d) for m, d in graph.items()}
    for m in list(g):
        for dep in list(g[m]):
            parts = dep.split(".")
            for i in range(1, len(parts)):
                anc = ".".join(parts[:i])
                if anc in g and not m.startswith(anc + ".") and m != anc:
                    g[m].add(anc)
    return g


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(old)
    return out


def test_the_checker_sees_a_cycle_and_a_forbidden_arrow(tmp_path: Path) -> None:
    # the checker itself can fail: a two-module cycle and an arrow it must report
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    pkg = tmp_path / "phasescope"
    (pkg / "b").mkdir(parents=True)
    for f in ("__init__.py", "b/__init__.py", "b/c.py"):
        (pkg / f).write_text("")
    mods = {"phasescope": pkg / "__init__.py", "phasescope.b": pkg / "b/__init__.py", "phasescope.b.c": pkg / "b/c.py"}
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from phasescope.b import X\n"
                              "def f():\n    from phasescope.b import c\n")
    mods["phasescope.a"] = pkg / "a.py"
    # the function-level import counts (as a lazy one), the TYPE_CHECKING one does not
    assert _imports("phasescope.a", pkg / "a.py", mods) == [("phasescope.b.c", False, 5)]
    top, every = _graph()
    assert "phasescope.errors" in top["phasescope.probing"]  # a module-level import it must see
    assert "phasescope.lifecycle" in {d for d, _ in every["phasescope.probing"]}  # and a lazy one


FACADE = (PKG, f"{PKG}.api")


def test_no_import_cycles_at_module_level() -> None:
    top, _ = _graph()
    cycles = find_cycles(_ancestors_are_loaded(top))
    assert not cycles, "import cycles (module-level imports): " + "; ".join(" → ".join(c) for c in cycles)


def test_no_import_cycles_lazy_imports_included() -> None:
    _, every = _graph()
    graph = {m: {d for d, _ in deps} for m, deps in every.items() if m not in FACADE}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (lazy imports included): " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_nothing_imports_the_facade() -> None:
    _, every = _graph()
    bad = [f"{m}:{line} imports {d}" for m, deps in every.items() if m not in FACADE
           for d, line in deps if d in FACADE]
    assert not bad, "the public API sits on top; import the module itself: " + "; ".join(bad)


def against_the_flow(every: dict[str, list[tuple[str, int]]],
                     top: dict[str, set[str]] | None = None) -> list[tuple[str, str, int, bool]]:
    """(module, imported module, line, at module level?) for every import into the same or a
    higher layer of another package."""
    out = []
    for mod, deps in every.items():
        for dep, line in dict.fromkeys(deps):  # `from x import a, b` is one arrow
            if _pkg(dep) == _pkg(mod):
                continue
            if _layer_of(dep) >= _layer_of(mod):
                out.append((mod, dep, line, top is not None and dep in top.get(mod, set())))
    return out


def third_party_imports(path: Path, name: str) -> list[int]:
    """Lines importing ``name`` (or a submodule), at any depth, ``TYPE_CHECKING`` blocks included."""
    tree = ast.parse(path.read_text(), str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == name for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == name:
            lines.append(node.lineno)
    return lines


def test_the_layer_checker_sees_an_arrow_up_at_any_depth() -> None:
    every = {"phasescope.apis.x": [("phasescope.engine", 3)],            # in a function: still an arrow
             "phasescope.engine": [("phasescope.apis.x", 1)],            # down: fine
             "phasescope.metrics.a": [("phasescope.prompting", 2)],      # one layer: peers do not
             "phasescope.cli": [("phasescope.report.html", 9)]}          # down: fine
    bad = against_the_flow(every, {"phasescope.apis.x": set()})
    assert bad == [("phasescope.apis.x", "phasescope.engine", 3, False),
                   ("phasescope.metrics.a", "phasescope.prompting", 2, False)]
    with pytest.raises(AssertionError, match="no layer"):
        _layer_of("phasescope.somethingnew")


def test_every_package_has_a_layer() -> None:
    for mod in _modules():
        _layer_of(mod)


def test_imports_follow_the_flow_at_module_level_and_in_functions() -> None:
    top, every = _graph()
    bad = [(m, d, line, t) for m, d, line, t in against_the_flow(every, top)
           if not _allowed(m, d)]
    lines = [f"{m}:{line} imports {d} ({'module level' if t else 'in a function'})" for m, d, line, t in bad]
    n_top = sum(1 for *_, t in bad if t)
    assert not bad, (f"{len(bad)} imports against the flow ({n_top} at module level, {len(bad) - n_top} in "
                     f"functions): " + "; ".join(lines))


def test_aiohttp_only_in_apis() -> None:
    bad = []
    for mod, path in _modules().items():
        if _pkg(mod) in ("apis", "testing") or _pkg(mod) in AIOHTTP_ALLOWED:
            continue
        bad += [f"{mod}:{line}" for line in third_party_imports(path, "aiohttp")]
    assert not bad, "aiohttp outside apis/ (call an apis function; catch phasescope.errors): " + "; ".join(bad)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_forbidden_arrows(layer: str) -> None:
    _, every = _graph()
    bad = []
    for mod, deps in every.items():
        if mod.split(".")[1:2] != [layer]:
            continue
        for dep, line in deps:
            if dep.split(".")[1:2] and dep.split(".")[1] in FORBIDDEN[layer]:
                bad.append(f"{mod}:{line} imports {dep}")
    assert not bad, f"{layer}/ must not import {', '.join(FORBIDDEN[layer])}/: " + "; ".join(bad)
