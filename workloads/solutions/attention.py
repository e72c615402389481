"""Where the reference attention solutions live: one file per (op, causal), valid for any head dim
that is a multiple of 16 up to 128 (not GQA: they pass group = 1)."""
from __future__ import annotations

from pathlib import Path

from ..schema import Workload

HERE = Path(__file__).resolve().parent
FILES = {("mha_fwd", False): "attention_fwd.cu", ("mha_fwd", True): "attention_fwd_causal.cu",
         ("mha_bwd", False): "attention_bwd.cu", ("mha_bwd", True): "attention_bwd_causal.cu"}


def solution_path(op: str, causal: bool) -> Path:
    return HERE / FILES[(op, causal)]


def attention_solution(workload: Workload) -> Path:
    if "HKV" in workload.symbols:
        raise KeyError(f"{workload.id}: no reference solution for GQA workloads yet")
    return solution_path(workload.op, workload.causal)
