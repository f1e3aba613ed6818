"""The package's data flows one way, checked on the import graph (stdlib ``ast``, nothing imported).

Three rules (docs/api.md, issue #16):

* **No cycles**, lazy imports included: an import inside a function is the package's way to load a
  heavy part on first use, but it is a dependency all the same, and a cycle through it is a flow that
  doubles back. ``if TYPE_CHECKING:`` imports are ignored (types only, never run). At module level the
  parent packages a module's import runs first count too (``import a.b.c`` runs ``a/__init__``).
* **The facade is on top**: ``phasescope/__init__`` and ``phasescope.api`` (the public API) import the
  rest; nothing in the package imports them back (the version lives in ``phasescope._version``).
* **Forbidden arrows**: the runners (``load``, ``probe``, ``experiments``, ``plan``, ``tune``) never import
  ``report`` (they hand records to a sink; report reads the store); ``measure`` and ``theory`` never
  import ``apis`` (derivation and physics do not talk to servers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "phasescope"

FORBIDDEN = {
    "load": ("report",),
    "probe": ("report",),
    "experiments": ("report",),
    "plan": ("report",),
    "tune": ("report",),
    "measure": ("apis",),
    "theory": ("apis",),
}


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
    assert "phasescope.errors" in top["phasescope.probe"]  # a module-level import it must see
    assert "phasescope.lifecycle" in {d for d, _ in every["phasescope.probe"]}  # and a lazy one


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
