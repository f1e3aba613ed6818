"""The shape of a bench run, measured (issue 32 item 3): how many times the control flow enters
``load/bench.py`` from outside it on one small fake run, and how many places branch on the dataset.

* entries: a ``sys.setprofile`` (and ``threading.setprofile``) hook counts each new frame whose code is in
  ``load/bench.py`` and whose caller's is not — one per call into the module from another one, a
  coroutine resumed by the event loop counted once (its first frame only);
* dataset branches: comparisons with ``cfg.dataset``/``self.dataset`` (``cfg.dataset == "random"``,
  ``self.dataset in (...)``) anywhere under ``src/phasescope``, by file (``ast``; the plan command's own
  ``--dataset`` option, ``o.dataset``, is another thing), and table look-ups keyed by it
  (``WORKLOADS.get(cfg.dataset)``).

    .venv/bin/python benchmarks/bench_shape.py            # random, trace, mooncake, trials, conversation
"""

from __future__ import annotations

import ast
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "phasescope"
TRACES = ROOT / "examples" / "traces"


def _is_dataset(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "dataset" and isinstance(node.value, ast.Name)
            and node.value.id in ("cfg", "self"))


def dataset_branches() -> tuple[Counter[str], Counter[str]]:
    """(comparisons with ``cfg.dataset`` by file, table look-ups keyed by it by file)."""
    cmp: Counter[str] = Counter()
    look: Counter[str] = Counter()
    for p in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Compare) and any(_is_dataset(x) for x in (node.left, *node.comparators)):
                cmp[str(p.relative_to(SRC))] += 1
            elif ((isinstance(node, ast.Subscript) and _is_dataset(node.slice))
                  or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                      and node.args and _is_dataset(node.args[0]))):
                look[str(p.relative_to(SRC))] += 1
    return cmp, look


def entries(kw: dict[str, Any]) -> tuple[int, Counter[str]]:
    from phasescope.load.bench import BenchConfig, run_bench
    from phasescope.testing.fakeserver import FakeServer

    target = str(SRC / "load" / "bench.py")
    seen: set[int] = set()
    keep: list[Any] = []  # frames seen stay alive, so a new frame never reuses a seen one's id
    by: Counter[str] = Counter()
    lock = threading.Lock()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_filename != target:
            return
        back = frame.f_back
        if back is not None and back.f_code.co_filename == target:
            return
        with lock:
            if id(frame) in seen:
                return
            seen.add(id(frame))
            keep.append(frame)
            by[f"{frame.f_code.co_name} ← {Path(back.f_code.co_filename).name if back else '?'}"] += 1

    with tempfile.TemporaryDirectory() as tmp, FakeServer(flavor="vllm", ttft_s=0.001, itl_s=0.001).running() as srv:
        cfg = BenchConfig(url=srv.url, store=False, out_dir=str(Path(tmp) / "o"), server_metrics=False, nvml=False,
                          **kw)
        threading.setprofile(prof)
        sys.setprofile(prof)
        try:
            run_bench(cfg)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    return sum(by.values()), by


RUNS = {
    "random": dict(num_prompts=10, max_concurrency=2, input_len=32, output_len=4),
    "trace": dict(shape="trace", trace_path=str(TRACES / "requests.jsonl"), trace_speed=50.0, num_prompts=3),
    "mooncake": dict(dataset="mooncake", dataset_path=str(TRACES / "mooncake.jsonl"), trace_speed=50.0,
                     output_len=4, warmup=0),
    "trials": dict(num_prompts=4, max_concurrency=2, input_len=32, output_len=4, trials=2),
    "conversation": dict(dataset="conversation", users=2, sessions=2, turns="2", turn_input_len=16, output_len=4),
}

if __name__ == "__main__":
    br, look = dataset_branches()
    print(f"dataset branches (comparisons): {sum(br.values())} in {len(br)} files: {dict(br)}")
    print(f"dataset table look-ups: {sum(look.values())} in {len(look)} files: {dict(look)}")
    for name in sys.argv[1:] or list(RUNS):
        n, by = entries(RUNS[name])
        print(f"{name}: load/bench.py entered {n}×: {dict(by)}")
