"""The explain scenario matrix's confusion table, from the JSON lines the matrix tests write.

    PHASESCOPE_FULL_MATRIX=1 PHASESCOPE_MATRIX_OUT=m.jsonl pytest tests/integration/test_i15_matrix.py
    PHASESCOPE_HELDOUT_MATRIX=1 PHASESCOPE_MATRIX_OUT=h.jsonl pytest tests/integration/test_explain_heldout_matrix.py
    python benchmarks/explain_matrix.py m.jsonl [more.jsonl …]

Prints, as markdown: cells right / cannot tell / wrong per speed (the held-out matrix's rows, which
carry ``cell`` and ``flavour``: per server flavour), then every cell that was not right with the reason
(what was undecided or wrong). Exits 1 when any cell was wrong."""

from __future__ import annotations

import json
import sys
from collections import Counter


def main(paths: list[str]) -> int:
    rows = []
    for p in paths:
        with open(p) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    heldout = any("cell" in r for r in rows)
    grades = ("right", "cannot tell", "wrong")

    def group(r: dict) -> str:
        return str(r.get("flavour")) if heldout else f"{r['step_s'] * 1e3:g} ms/token"
    keys = sorted({group(r) for r in rows}) if heldout else [group({"step_s": s}) for s in sorted({r["step_s"] for r in rows})]
    print(f"| {'server flavour' if heldout else 'speed (decode step)'} | cells | right | cannot tell | wrong |")
    print("|---|---|---|---|---|")
    tot: Counter[str] = Counter()
    for k in keys:
        c = Counter(r["grade"] for r in rows if group(r) == k)
        tot.update(c)
        print(f"| {k} | {sum(c.values())} | " + " | ".join(str(c[g]) for g in grades) + " |")
    print(f"| **all** | **{sum(tot.values())}** | " + " | ".join(f"**{tot[g]}**" for g in grades) + " |")
    print()
    odd = [r for r in rows if r["grade"] != "right"]
    if odd:
        print("| cell | grade | why |")
        print("|---|---|---|")
        for r in sorted(odd, key=lambda r: (r["step_s"], r["effects"])):
            cell = r.get("cell") or f"{'+'.join(r['effects']) or 'healthy'} @ {r['step_s'] * 1e3:g} ms"
            why = "; ".join(r["why"]).replace("|", "\\|")
            print(f"| {cell} | {r['grade']} | {why} |")
    wall = sum(r.get("wall_s", 0) for r in rows)
    print(f"\n{len(rows)} cells, {wall / 60:.0f} min of explain runs in all.")
    return 1 if tot["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
