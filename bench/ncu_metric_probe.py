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

# The CUDA-core arithmetic a kernel could do its work with instead of its target family (the roofline sections'
# per-thread counters), and the tensor paths' FLOP counters.
METRICS = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in
           ("ffma", "fadd", "fmul", "hfma", "hadd", "hmul", "dfma", "dadd", "dmul")] + [
           "sm__ops_path_tensor_src_fp64.sum",
           "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum",
           "sm__ops_path_tensor_op_imma_src_int8.sum",
           "l1tex__t_bytes_pipe_lsu_mem_global_op_atom.sum",
           "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",
           "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum",
           "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
           "sm__inst_executed_pipe_tensor_op_hmma.sum",
           "sm__inst_executed_pipe_tensor_op_gmma.sum",
           "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_bytes_pipe_lsu_mem_global_op_ldgsts.sum",
           # cp.async's bytes as sectors (ncu names no byte counter for LDGSTS): TMA's decoy counter, once collected
           "sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"]
# Query lines kept whole (name and description) when they contain one of these: what else a check could read.
NAMES_OF_INTEREST = ("ops_path_tensor", "op_ffma", "op_hfma", "pipe_tensor", "pipe_fma", "lsu_mem_global_op_ld")

WORK = """
import torch
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
torch.matmul(a, b)                                   # 2 * 2048^3 = 17.18 GFLOP on the tensor cores
x, y, z = (torch.randn(1 << 24, device="cuda") for _ in range(3))
torch.addcmul(z, x, y)                               # 16.78 M FFMA (one per element)
xh, yh, zh = x.half(), y.half(), z.half()
torch.addcmul(zh, xh, yh)                            # 16.78 M half FMAs: HFMA2 packs two (8.39 M instructions?)
torch.cuda.synchronize()
"""


def query(ncu: str) -> tuple[dict, list[str]]:
    """Which of METRICS this ncu names for the GPU's chip (a name it rejects would fail a whole profile pass), and
    the query's lines of interest."""
    p = subprocess.run([ncu, "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, timeout=120)
    lines = [line.strip() for line in p.stdout.splitlines() if line.strip()]
    names = {line.split()[0] for line in lines}
    return ({m: m.rsplit(".", 1)[0] in names for m in METRICS},
            [line for line in lines if any(k in line.split()[0] for k in NAMES_OF_INTEREST)])


def collect(ncu: str, metrics: list[str]) -> tuple[list[dict], list[str]]:
    """Per kernel the metrics' values, and ncu's lines naming how many replay passes each kernel took."""
    p = subprocess.run([ncu, "--metrics", ",".join(metrics), "--csv", "--page", "raw", sys.executable, "-c", WORK],
                       capture_output=True, text=True, timeout=300)
    passes = [line.strip() for line in (p.stdout + p.stderr).splitlines() if "pass" in line and "==PROF==" in line]
    text = p.stdout[p.stdout.find('"ID"'):] if '"ID"' in p.stdout else ""
    rows = list(csv.DictReader(io.StringIO(text)))
    out = []
    for r in rows[1:] if rows and rows[0].get("ID", "").strip() == "" else rows:  # the units row
        out.append({"kernel": r.get("Kernel Name", "")[:80], **{m: r.get(m) for m in metrics}})
    return (out if out else [{"error": (p.stderr or p.stdout)[-3000:], "raw": text[:3000]}]), passes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    from ptxbench.tools.profile.runner import VERDICT_METRICS
    from ptxbench.workloads.arch import SM90A

    known, interest = query(ncu)
    verdict = list(dict.fromkeys(VERDICT_METRICS + [c for f in SM90A.families for c in f.counters]))
    _, verdict_passes = collect(ncu, verdict)  # what the verdict's pass costs today, in replay passes
    rows, passes = collect(ncu, list(dict.fromkeys(verdict + [m for m, ok in known.items() if ok])))
    out = {"known": known, "names_of_interest": interest, "kernels": rows,
           "passes": {"verdict counters": verdict_passes, "with every known counter above": passes},
           "expected": {"gemm": "HGMMA ops 2 * 2048^3 = 17,179,869,184 (if the counter counts FLOPs); FFMA ~0",
                        "addcmul": "FFMA 16,777,216 (one per element); HGMMA 0",
                        "addcmul half": "HFMA 16,777,216 if counted per element, 8,388,608 per HFMA2 instruction"}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
