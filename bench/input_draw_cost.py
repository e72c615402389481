"""Seconds per fresh input set (`make_inputs`) on a device, with the forward's offset heads and without them.

    python bench/input_draw_cost.py [--device cuda] [--reps 10] [WORKLOAD ...]

Prints a Markdown table: median and range over `--reps` draws after two warm-up draws, each timed to its device's
completion, for the workloads as registered; the same with `OFFSET_HEADS = 0` (plain heads) beside it; and whether two
draws of one seed give the same input digest (tools/gpu/referee.py: the worker's and the referee's must match).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from ptxbench.tools.gpu.referee import input_digest
from ptxbench.workloads import inputs
from ptxbench.workloads.registry import get_workload


def _timed(workload, device: str, reps: int) -> list[float]:
    times = []
    for seed in range(reps + 2):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        inputs.make_inputs(workload, seed, "normal", device)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times[2:]


def _same_bits(workload, device: str) -> bool:
    """Two draws of one seed under the referee's own input digest (what the worker's and the referee's must match)."""
    a, b = (inputs.make_inputs(workload, 11, "normal", device) for _ in range(2))
    return input_digest(a) == input_digest(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", default=["mha_fwd_d128", "mha_fwd_d128_gqa_h32_kv8_causal", "mha_fwd_d64"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    fmt = lambda t: f"{statistics.median(t) * 1e3:.1f} [{min(t) * 1e3:.1f}, {max(t) * 1e3:.1f}]"  # noqa: E731
    print("| workload | ms per draw, offset heads | ms per draw, plain heads | same bits twice |")
    print("| --- | --- | --- | --- |")
    offset = inputs.OFFSET_HEADS
    for wid in args.workloads:
        wl = get_workload(wid)
        with_heads, same = _timed(wl, args.device, args.reps), _same_bits(wl, args.device)
        inputs.OFFSET_HEADS = 0.0
        try:
            plain = _timed(wl, args.device, args.reps)
        finally:
            inputs.OFFSET_HEADS = offset
        print(f"| {wid} | {fmt(with_heads)} | {fmt(plain)} | {same} |")


if __name__ == "__main__":
    main()
