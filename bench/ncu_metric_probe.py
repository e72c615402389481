"""Whether Nsight Compute on this GPU knows the counters a decoy check would read, and what they count on known work.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/ncu_metric_probe.py --json F

Three kernels of known work under `ncu --metrics`: a bf16 cuBLAS GEMM (wgmma: HGMMA FLOPs, no FFMA), an fp32
elementwise a * b + c (FFMA: one per element), and a bf16 mma.sync-era GEMM is not forced (cuBLAS on Hopper picks
wgmma). Prints per kernel the counters and the expected figures beside them.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

METRICS = ["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
           "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",
           "sm__inst_executed_pipe_tensor_op_hmma.sum",
           "smsp__inst_executed_op_hmma.sum"]

WORK = """
import torch
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
torch.matmul(a, b)                                   # 2 * 2048^3 = 17.18 GFLOP on the tensor cores
x, y, z = (torch.randn(1 << 24, device="cuda") for _ in range(3))
torch.addcmul(z, x, y)                               # 16.78 M FFMA (one per element)
torch.cuda.synchronize()
"""


def query(ncu: str) -> dict:
    """Which of METRICS this ncu names for the GPU's chip (a name it rejects would fail a whole profile pass)."""
    p = subprocess.run([ncu, "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, timeout=120)
    names = {line.split()[0] for line in p.stdout.splitlines() if line.strip()}
    return {m: m.rsplit(".", 1)[0] in names for m in METRICS}


def collect(ncu: str, metrics: list[str]) -> list[dict]:
    p = subprocess.run([ncu, "--metrics", ",".join(metrics), "--csv", "--page", "raw", sys.executable, "-c", WORK],
                       capture_output=True, text=True, timeout=300)
    text = p.stdout[p.stdout.find('"ID"'):] if '"ID"' in p.stdout else ""
    rows = list(csv.DictReader(io.StringIO(text)))
    out = []
    for r in rows[1:] if rows and rows[0].get("ID", "").strip() == "" else rows:  # the units row
        out.append({"kernel": r.get("Kernel Name", "")[:80], **{m: r.get(m) for m in metrics}})
    return out if out else [{"error": (p.stderr or p.stdout)[-3000:], "raw": text[:3000]}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    known = query(ncu)
    rows = collect(ncu, [m for m, ok in known.items() if ok])
    out = {"known": known, "kernels": rows,
           "expected": {"gemm": "HGMMA ops 2 * 2048^3 = 17,179,869,184 (if the counter counts FLOPs); FFMA ~0",
                        "addcmul": "FFMA 16,777,216 (one per element); HGMMA 0"}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
