"""What the profiled replay's output check costs inside its GPU-held window, and why: the verified-sketch judgment
(tools/gpu/calls.py sketch_tensors, as tools/profile/replay.py's --judge --expect runs it) on the main GEMM's output
(8192 x 7168 bf16: four passes of SKETCH_CHUNK elements), timed in a fresh process bare and under Nsight Compute
(the verdict level's command: NVTX-filtered, one metric), each with and without a warm-up sketch of a small tensor
taken first (which loads the sketch's kernels before the timed one).

    python3 bench/sketch_cost.py [--reps 3] [--json F]        (GPU; repository root, ptxbench importable)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPE = (8192, 7168)


def inner(warm: str) -> dict:
    import torch

    from ptxbench.tools.gpu.calls import SketchSpace, sketch_tensors
    from ptxbench.tools.profile.replay import NVTX_RANGE, _nvtx

    push, pop = _nvtx()
    torch.cuda.set_device(0)
    out = torch.randn(*SHAPE, device="cuda").to(torch.bfloat16)
    small = torch.randn(4096, device="cuda").to(torch.bfloat16)
    torch.cuda.synchronize()
    times = {}
    if warm == "tiny":  # the sketch's kernels loaded by a sketch of a small tensor, before the timed one
        t = time.perf_counter()
        [float(p) for p in sketch_tensors({"C": small}, 7, scales={"C": 1.0})]
        times["warm_tiny_s"] = time.perf_counter() - t
    if warm == "space":  # only the working memory allocated first (no kernel but its poisoning)
        t = time.perf_counter()
        space = SketchSpace(out.device, min(1 << 24, out.numel()))
        torch.cuda.synchronize()
        times["space_s"] = time.perf_counter() - t
    push(NVTX_RANGE)  # one profiled kernel, as the replay's launch
    out.add_(0)
    torch.cuda.synchronize()
    pop()
    for i in range(3):
        t = time.perf_counter()
        kw = {"space": space} if warm == "space" and i == 0 else {}
        [float(p) for p in sketch_tensors({"C": out}, 11 + i, scales={"C": 1.0}, **kw)]
        times[f"sketch_{i}_s"] = time.perf_counter() - t
    return {k: round(v, 4) for k, v in times.items()}


def outer(reps: int) -> dict:
    from ptxbench.tools.profile.runner import NVTX_RANGE, find_ncu

    ncu = find_ncu()
    rows = []
    for rep in range(reps):
        for under in ("bare", "ncu"):
            for warm in ("none", "tiny", "space"):
                cmd = [sys.executable, __file__, "--inner", warm]
                if under == "ncu":
                    if not ncu:
                        continue
                    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "-f", "-o",
                           f"/tmp/sketch_cost_{rep}", "--metrics", "gpu__time_duration.sum"] + cmd
                start = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                line = next((ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("{")), None)
                row = {"rep": rep, "under": under, "warm": warm, "process_s": round(time.perf_counter() - start, 2),
                       "rc": proc.returncode, **(json.loads(line) if line else {"error": (proc.stdout + proc.stderr)[-400:]})}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return {"rows": rows}


def table(out: dict) -> str:
    lines = ["| under | warm-up | first sketch s | second s | third s | warm-up s |", "| --- | --- | --- | --- | --- | --- |"]
    groups: dict[tuple, list] = {}
    for r in out["rows"]:
        groups.setdefault((r["under"], r["warm"]), []).append(r)
    med = lambda rs, k: round(statistics.median(r[k] for r in rs), 3) if all(k in r for r in rs) and rs else "-"
    for (under, warm), rs in groups.items():
        w = med(rs, "warm_tiny_s") if warm == "tiny" else med(rs, "space_s") if warm == "space" else "-"
        lines.append(f"| {under} | {warm} | {med(rs, 'sketch_0_s')} | {med(rs, 'sketch_1_s')} | {med(rs, 'sketch_2_s')} | {w} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inner", choices=["none", "tiny", "space"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.inner:
        print(json.dumps(inner(a.inner)))
        return
    out = outer(a.reps)
    print(table(out))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
