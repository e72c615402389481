"""Wall time and peak memory of `export`, `report` and `score` on a large run, built from a recorded trajectory
copied N times under fresh trajectory ids (docs/examples/tuner-climb/run1: 8 turns, each model call with the whole
conversation). Each command runs in a fresh process (its peak resident memory from the kernel's rusage).

    python3 bench/export_scale.py [--copies 300] [--json F]      (CPU; repository root)
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path("docs/examples/tuner-climb/run1")


def build_run(dst: Path, copies: int) -> int:
    """A run of `copies` trajectories, each the source's first, its trajectory_id made its own; returns its bytes."""
    src = sorted((SOURCE / "trajectories").iterdir())[0]
    (dst / "trajectories").mkdir(parents=True)
    shutil.copy(SOURCE / "manifest.json", dst / "manifest.json")
    log = gzip.decompress((src / "trajectory.jsonl.gz").read_bytes()).decode()
    for i in range(copies):
        t = dst / "trajectories" / f"t{i:05d}"
        shutil.copytree(src, t)
        text = re.sub(r'"trajectory_id":"[^"]*"', f'"trajectory_id":"t{i:05d}"', log)
        (t / "trajectory.jsonl.gz").write_bytes(gzip.compress(text.encode(), compresslevel=1))
    return sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())


def timed(args: list[str]) -> dict:
    """One ptxbench command in a fresh process: wall seconds, peak resident MB, exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ptxbench.agent", *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far: each command grows it
    return {"command": " ".join(args), "wall_s": round(wall, 1), "peak_mb": round(peak / 1024),
            "peak_is_own": peak > before, "rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=300)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        size = build_run(run, args.copies)
        # the smallest first: RUSAGE_CHILDREN keeps the largest child's peak, so each later figure is its own only
        # when it is larger (peak_is_own says so)
        rows = [timed(["score", str(run)]),
                timed(["report", str(run), "--out", f"{tmp}/report"]),
                timed(["export", str(run), "--recipe", "kernelgen", "--no-require-target", "--no-dedup",
                       "--out", f"{tmp}/export"])]
    out = {"copies": args.copies, "run_mb": round(size / 2**20, 1), "cpus": os.cpu_count(), "rows": rows}
    print(f"{args.copies} trajectories ({out['run_mb']} MB on disk)")
    print("| command | wall s | peak MB | rc |\n| --- | --- | --- | --- |")
    for r in rows:
        peak = r["peak_mb"] if r["peak_is_own"] else f"<= {r['peak_mb']}"
        print(f"| {r['command'].split()[0]} | {r['wall_s']} | {peak} | {r['rc']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
