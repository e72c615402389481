"""The reference attention solutions: one self-contained solution text per workload (plan block and device
code, exactly as a model's answer):

- attention_fwd.cu, attention_bwd.cu: plain fp32 CUDA-core code for any head dim that is a multiple of 16 up
  to 128 (they validate the harness); `attention_solution(workload)`, a variant being its base file with a few
  plan lines changed (the causal flag, the GQA group).
- the Hopper wgmma + TMA forward: attention_template.py renders it for a workload's head dim (64, 96, 128),
  causal flag and GQA at that problem's default point; `fast_solution(workload)`. The checked-in
  attention_fwd_wgmma.cu is the D = 128 non-causal render (the persistent walk since round 22). On the H200 by
  `ptxbench eval` 1.105-1.111x cuDNN for D = 128, 1.116-1.184x causal (bench/results/attention_template.md, rounds 26-27).
"""
from __future__ import annotations

from pathlib import Path

from ..schema import Workload
from . import attention_template as at

HERE = Path(__file__).resolve().parent
PLAIN = {"mha_fwd": "attention_fwd.cu", "mha_bwd": "attention_bwd.cu"}
FAST_FORWARD = "attention_fwd_wgmma.cu"  # as checked in: attention_template.render(default_params())


def plan_edits(text: str, edits: list[tuple[str, str]], name: str) -> str:
    """`text` with every occurrence of each `old` replaced by `new`; each `old` must be there (`name` for errors)."""
    for old, new in edits:
        if old not in text:
            raise ValueError(f"{name}: the plan has no {old!r} to change")
        text = text.replace(old, new)
    return text


def with_plan_edits(name: str, edits: list[tuple[str, str]]) -> str:
    """The file `name` of this folder with `edits` applied (plan_edits)."""
    return plan_edits((HERE / name).read_text(encoding="utf-8"), edits, name)


def attention_solution(workload: Workload) -> str:
    """The plain CUDA-core solution of an attention workload (KeyError for a GQA backward). The forward's causal flag
    and its GQA group are independent plan arguments, so a causal GQA forward takes both edits."""
    edits = []
    if workload.causal:  # the plan's last argument is the causal flag (every launch of the backward)
        edits.append(('"f32:scale", "i32:0"]', '"f32:scale", "i32:1"]'))
    if "HKV" in workload.symbols:
        if workload.op != "mha_fwd":
            raise KeyError(f"{workload.id}: no reference solution for this GQA variant")
        edits.append(('"i32:H", "i32:1", "f32:scale"', '"i32:H", "i32:H // HKV", "f32:scale"'))  # group = H / HKV
    return with_plan_edits(PLAIN[workload.op], edits)


def fast_solution(workload: Workload) -> str | None:
    """The wgmma + TMA forward at its default point for a workload it covers, else None: an mha_fwd with D in
    {64, 96, 128}, S a multiple of 64 (and of the key tile when that is a power of two), with GQA H a multiple
    of HKV (attention_template.validate says which rule a workload breaks)."""
    d = int(workload.symbols.get("D", 0))
    if workload.op != "mha_fwd" or d not in at.HEAD_DIMS:
        return None
    params = at.default_params(workload)
    return None if at.validate(params, workload) else at.render(params)
