"""Bench is workload × driver (issue 32 item 3), checked on the source: one place tells the datasets apart
(load/datasets' table), every dataset the CLI accepts has a workload, the runners take Ctrl-C from
phasescope.signals and never open the run store, and each way of sending is one driver. (How often a
real run enters load/bench.py is traced by benchmarks/bench_shape.py: once.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "phasescope"


def _is_dataset(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "dataset" and isinstance(node.value, ast.Name)
            and node.value.id in ("cfg", "self"))


def test_no_module_compares_the_dataset_name() -> None:
    where = []
    for p in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Compare) and any(_is_dataset(x) for x in (node.left, *node.comparators)):
                where.append(f"{p.relative_to(SRC)}:{node.lineno}")
    assert where == [], "branch on the workload (load/datasets.py), not on cfg.dataset: " + ", ".join(where)


def test_every_cli_dataset_has_a_workload_and_a_driver() -> None:
    from phasescope.load.datasets import WORKLOADS, workload_for
    from phasescope.load.drivers import DRIVERS, driver_for
    from phasescope.load.bench import BenchConfig
    from phasescope.cli.validate import CHOICES

    assert set(WORKLOADS) == set(CHOICES["--dataset"])
    for name in WORKLOADS:
        cfg = BenchConfig(url="http://127.0.0.1:9", dataset=name)
        wl = workload_for(cfg)
        assert wl.name == name and driver_for(cfg, wl) in DRIVERS.values()
    plain = BenchConfig(url="http://127.0.0.1:9")
    assert driver_for(plain, workload_for(plain)).name == "single"
    assert driver_for(BenchConfig(workers=2), workload_for(plain)).name == "workers"
    assert driver_for(BenchConfig(ray=True), workload_for(plain)).name == "ray"
    assert driver_for(plain, workload_for(BenchConfig(dataset="conversation"))).name == "conversation"


def _imports(p: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_load_takes_signals_from_their_module_and_never_opens_the_store() -> None:
    for p in sorted((SRC / "load").rglob("*.py")):
        mods = _imports(p)
        assert not {m for m in mods if m == "phasescope.store" or m.startswith("phasescope.store.")}, p.name
        if "phasescope.lifecycle" in mods:  # the bench run opens its output (run_output) and nothing else does
            assert p.name == "bench.py", p
            tree = ast.parse(p.read_text())
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "phasescope.lifecycle"
                     for a in n.names}
            assert names == {"run_output"}
