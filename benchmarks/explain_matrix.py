"""The explain scenario matrix's confusion table, from the JSON lines the matrix test writes.

    PHASESCOPE_FULL_MATRIX=1 PHASESCOPE_MATRIX_OUT=m.jsonl pytest tests/integration/test_i15_matrix.py
    python benchmarks/explain_matrix.py m.jsonl [more.jsonl …]

Prints, as markdown: cells right / cannot tell / wrong per speed, then every cell that was not
right with the reason (what was undecided or wrong)."""

from __future__ import annotations

import json
import sys
from collections import Counter


def main(paths: list[str]) -> int:
    rows = []
    for p in paths:
        with open(p) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    speeds = sorted({r["step_s"] for r in rows})
    grades = ("right", "cannot tell", "wrong")
    print("| speed (decode step) | cells | right | cannot tell | wrong |")
    print("|---|---|---|---|---|")
    tot: Counter[str] = Counter()
    for s in speeds:
        c = Counter(r["grade"] for r in rows if r["step_s"] == s)
        tot.update(c)
        print(f"| {s * 1e3:g} ms/token | {sum(c.values())} | " + " | ".join(str(c[g]) for g in grades) + " |")
    print(f"| **all** | **{sum(tot.values())}** | " + " | ".join(f"**{tot[g]}**" for g in grades) + " |")
    print()
    odd = [r for r in rows if r["grade"] != "right"]
    if odd:
        print("| cell | grade | why |")
        print("|---|---|---|")
        for r in sorted(odd, key=lambda r: (r["step_s"], r["effects"])):
            cell = f"{'+'.join(r['effects']) or 'healthy'} @ {r['step_s'] * 1e3:g} ms"
            why = "; ".join(r["why"]).replace("|", "\\|")
            print(f"| {cell} | {r['grade']} | {why} |")
    wall = sum(r.get("wall_s", 0) for r in rows)
    print(f"\n{len(rows)} cells, {wall / 60:.0f} min of explain runs in all.")
    return 1 if tot["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
