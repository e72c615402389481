"""Where the reference attention solutions live: one file per (op, causal), plus the GQA forward;
valid for any head dim that is a multiple of 16 up to 128 (plain CUDA-core code that validates the
harness). `fast_solution` names the Hopper wgmma + TMA forward where its shape rule holds (D = 128,
S a multiple of 128, no GQA): about 1.0x cuDNN on the H200 (bench/results/attention_wgmma.md)."""
from __future__ import annotations

from pathlib import Path

from ..schema import Workload

HERE = Path(__file__).resolve().parent
FILES = {("mha_fwd", False): "attention_fwd.cu", ("mha_fwd", True): "attention_fwd_causal.cu",
         ("mha_bwd", False): "attention_bwd.cu", ("mha_bwd", True): "attention_bwd_causal.cu"}


def solution_path(op: str, causal: bool) -> Path:
    return HERE / FILES[(op, causal)]


GQA_FORWARD = "attention_fwd_gqa.cu"  # the plan passes group = H // HKV


def attention_solution(workload: Workload) -> Path:
    if "HKV" in workload.symbols:
        if workload.op != "mha_fwd" or workload.causal:
            raise KeyError(f"{workload.id}: no reference solution for this GQA variant")
        return HERE / GQA_FORWARD
    return solution_path(workload.op, workload.causal)


FAST_FORWARD = {False: "attention_fwd_wgmma.cu", True: "attention_fwd_wgmma_causal.cu"}


def fast_solution(workload: Workload) -> Path | None:
    """The wgmma + TMA forward for a workload it covers (its kernel traps on any other shape), else None."""
    sym = workload.symbols
    if workload.op != "mha_fwd" or "HKV" in sym or int(sym.get("D", 0)) != 128 or int(sym.get("S", 1)) % 128:
        return None
    return HERE / FAST_FORWARD[workload.causal]
