"""Where the reference attention solutions live: one file per (op, causal), plus the GQA forward;
valid for any head dim that is a multiple of 16 up to 128 (plain CUDA-core code that validates the
harness). `fast_solution` names the Hopper wgmma + TMA forward where its shape rule holds (D = 128 or
64, S a multiple of 128; GQA non-causal only): on the H200 1.02x cuDNN for D = 128 (0.99x causal), 0.9x
for D = 64 (bench/results/attention_wgmma.md)."""
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


# The wgmma + TMA forward: one code, one file per entry point, keyed by (D, causal, GQA). There is no
# causal GQA entry point (no workload asks for one).
FAST_FORWARD = {(128, False, False): "attention_fwd_wgmma.cu", (128, True, False): "attention_fwd_wgmma_causal.cu",
                (128, False, True): "attention_fwd_wgmma_gqa.cu",
                (64, False, False): "attention_fwd_wgmma_d64.cu", (64, True, False): "attention_fwd_wgmma_d64_causal.cu",
                (64, False, True): "attention_fwd_wgmma_d64_gqa.cu"}


def fast_solution(workload: Workload) -> Path | None:
    """The wgmma + TMA forward for a workload it covers (its kernels trap on any other shape), else None:
    D in {64, 128}, S a multiple of 128, and with GQA (HKV in the symbols) H a multiple of HKV, non-causal."""
    sym = workload.symbols
    s = int(sym.get("S", 0))
    if workload.op != "mha_fwd" or s <= 0 or s % 128:
        return None
    gqa = "HKV" in sym
    if gqa and (int(sym["HKV"]) < 1 or int(sym["H"]) % int(sym["HKV"])):
        return None
    name = FAST_FORWARD.get((int(sym.get("D", 0)), bool(workload.causal), gqa))
    return HERE / name if name else None
