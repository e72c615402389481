"""Two solutions of one workload evaluated in alternation by `ptxbench eval`, and whether one is faster.

Rounds 13 and 14 of bench/results/gemm_sweep.md promoted a change only when every reading of it was faster than every
reading of the point it replaced, in evaluations that alternate the two (A B B A A B ...), so that a machine's drift
falls on both. This runs that protocol and prints the table those rounds recorded, then the verdict: the change of
the median kernel time, and whether the two sets of readings are separated.

    source bench/gpu_env.sh
    python3 bench/paired_eval.py WORKLOAD A.cu B.cu --pairs 5 --out $OUT/pairs     # GPU: 2 x pairs evaluations
    python3 bench/paired_eval.py --summary $OUT/pairs                                # anywhere: the table again

Each evaluation's JSON is kept as OUT/NN_<label>.json (labels: the files' stems).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def order(pairs: int) -> list[int]:
    """Which of the two (0 = A, 1 = B) each evaluation runs: A B B A A B B A ..., 2 x pairs in all."""
    return [(i + 1) // 2 % 2 for i in range(2 * pairs)]


def readings(folder: Path) -> list[tuple[int, str, dict]]:
    """(order, label, result) of every NN_label.json in the folder, in order."""
    out = []
    for f in folder.glob("*.json"):
        n, _, label = f.stem.partition("_")
        if n.isdigit():
            out.append((int(n), label, json.loads(f.read_text())))
    return sorted(out, key=lambda x: x[0])


def median_change_pct(a_ms: list[float], b_ms: list[float]) -> float:
    """B's median kernel time against A's, in percent (negative: B is faster)."""
    return 100 * (statistics.median(b_ms) / statistics.median(a_ms) - 1)


def summary(rows: list[tuple[int, str, dict]]) -> str:
    """The table of the evaluations, then the verdict for the second label against the first."""
    lines = ["| order | point | status | kernel ms | library ms | speedup [95% CI] |", "|---|---|---|---|---|---|"]
    kernel: dict[str, list[float]] = {}
    for n, label, r in rows:
        t = r.get("timing") or {}
        if r.get("status") != "PASSED" or not t:
            lines.append(f"| {n} | {label} | {r.get('status')} | - | - | - |")
            continue
        lib = t["baselines"][t["primary_baseline"]]["median_ms"]
        lo, hi = t["speedup_ci"]
        ms = t["candidate"]["median_ms"]
        kernel.setdefault(label, []).append(ms)
        lines.append(f"| {n} | {label} | PASSED | {ms:.4f} | {lib:.4f} | {t['speedup']:.4f}x [{lo:.4f}, {hi:.4f}] |")
    labels = list(dict.fromkeys(label for _, label, _ in rows))
    if len(labels) != 2 or any(label not in kernel for label in labels):
        return "\n".join(lines + ["", "verdict: needs two points with passing evaluations"])
    a, b = (kernel[label] for label in labels)
    change = median_change_pct(a, b)
    if max(b) < min(a):
        apart = f"every {labels[1]} reading below every {labels[0]} reading"
    elif min(b) > max(a):
        apart = f"every {labels[1]} reading above every {labels[0]} reading"
    else:
        apart = "the readings overlap"
    return "\n".join(lines + ["", f"verdict: {labels[1]} {change:+.2f}% median kernel time against {labels[0]} "
                                  f"({len(b)} and {len(a)} readings); {apart}"])


def run(workload: str, files: list[Path], pairs: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i, which in enumerate(order(pairs), start=1):
        f = files[which]
        dest = out / f"{i:02d}_{f.stem}.json"
        with dest.open("w") as sink:
            subprocess.run([sys.executable, "-m", "ptxbench.agent", "eval", workload, str(f), "--json"], stdout=sink,
                           check=False)
        print(f"{i:02d} {f.stem}: written {dest.name}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", nargs="?")
    ap.add_argument("files", nargs="*", type=Path, help="A.cu B.cu (B is the change)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("paired_eval"))
    ap.add_argument("--summary", type=Path, help="print the table of a folder of earlier evaluations")
    a = ap.parse_args()
    if a.summary:
        print(summary(readings(a.summary)))
        return
    if not a.workload or len(a.files) != 2 or a.files[0].stem == a.files[1].stem:
        ap.error("give WORKLOAD A.cu B.cu (two files with different names), or --summary FOLDER")
    run(a.workload, a.files, a.pairs, a.out)
    print(summary(readings(a.out)))


if __name__ == "__main__":
    main()
