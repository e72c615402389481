"""Does the main GEMM's time depend on the values it multiplies? The reference kernel (and cuBLAS) timed on the same
shape with inputs that differ only in their values: A and B from randn (what `ptxbench eval` draws), A all zeros, B all
zeros, both zeros, A a constant 1.0, and randn rounded to 2 mantissa bits (fewer toggling bits, the same magnitudes).
At a fixed clock a tensor core's throughput does not depend on its data, but its power does; a kernel near the power
or current limit that runs faster on zeros is held back by its energy, not by its schedule. Also times the diagnosis
variants named with --variants on randn inputs, beside the reference (round 26 of bench/results/gemm_sweep.md).

    python3 bench/gemm_diagnose.py build --variants no_a_tma          # here (bench/build_gemm_diag, carried)
    source bench/gpu_env.sh && python3 bench/gemm_data_power.py --json $OUT/data.json [--variants no_a_tma]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
BUILD = ROOT / "bench" / "build_gemm_diag"
M, N, K = 8192, 7168, 5120


def inputs(torch) -> dict:
    """name -> (A, B): the same shapes, different values."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)

    def coarse(x):  # randn rounded to 2 mantissa bits: bf16's low 5 mantissa bits zero
        return (x.view(torch.int16) & ~0x1F).view(torch.bfloat16)

    return {"randn": (a, b), "a_zero": (torch.zeros_like(a), b), "b_zero": (a, torch.zeros_like(b)),
            "both_zero": (torch.zeros_like(a), torch.zeros_like(b)), "a_one": (torch.ones_like(a), b),
            "coarse": (coarse(a), coarse(b))}


def main() -> None:
    import torch
    from gemm_reference_bench import Runner, interleaved_times

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--gap-ms", type=float, default=3.0)
    ap.add_argument("--variants", default="", help="diagnosis variants (bench/build_gemm_diag) timed on randn too")
    ap.add_argument("--json")
    a = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    syms = {"M": M, "N": N, "K": K}
    names = ["ref"] + [v for v in a.variants.split(",") if v and v != "ref"]
    runners = {n: Runner(n, (BUILD / f"{n}.cu").read_text(), (BUILD / f"{n}.cubin").read_bytes(), num_sms) for n in names}
    fns = {}
    for data, (A, B) in inputs(torch).items():
        fns[f"cublas/{data}"] = (lambda A=A, B=B: torch.matmul(A, B.T, out=C))
        fns[f"ref/{data}"] = runners["ref"].prepare({"A": A, "B": B, "C": C}, syms)
        if data == "randn":
            for n in names[1:]:
                fns[f"{n}/randn"] = runners[n].prepare({"A": A, "B": B, "C": C}, syms)
    times = interleaved_times(fns, a.iters, flush, gap_s=a.gap_ms / 1000)
    rows = {k: {"median_ms": statistics.median(v), "q1_ms": statistics.quantiles(v, n=4)[0],
                "q3_ms": statistics.quantiles(v, n=4)[2]} for k, v in times.items()}
    print("| kernel / inputs | median ms | IQR ms | vs the same kernel on randn |\n|---|---|---|---|")
    for k, r in rows.items():
        kernel = k.split("/")[0]
        base = rows[f"{kernel}/randn" if kernel in ("ref", "cublas") else "ref/randn"]["median_ms"]
        print(f"| {k} | {r['median_ms']:.4f} | {r['q1_ms']:.4f}-{r['q3_ms']:.4f} | {100 * (r['median_ms'] / base - 1):+.1f}% |")
    if a.json:
        Path(a.json).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "gap_ms": a.gap_ms,
                                            "iters": a.iters, "timing": rows}, indent=1))


if __name__ == "__main__":
    main()
