"""The reference attention solutions: one self-contained solution text per workload (plan block and device
code, exactly as a model's answer), made from three checked-in files, as the GEMM's are renders of its
template:

- attention_fwd.cu, attention_bwd.cu: plain fp32 CUDA-core code for any head dim that is a multiple of 16 up
  to 128 (they validate the harness); `attention_solution(workload)`.
- attention_fwd_wgmma.cu: the Hopper wgmma + TMA forward, one template with six entry points; it covers D = 64
  or 128, S a multiple of 128, GQA non-causal only (its kernels trap on any other shape); on the H200 1.02x
  cuDNN for D = 128 (0.99x causal), 0.9x for D = 64 (bench/results/attention_wgmma.md); `fast_solution(workload)`.

A variant is its base file with a few plan lines changed (the causal flag, the GQA group and K / V rows, the
entry point, shared memory); the device code is the base file's, byte for byte.
"""
from __future__ import annotations

from pathlib import Path

from ..schema import Workload

HERE = Path(__file__).resolve().parent
PLAIN = {"mha_fwd": "attention_fwd.cu", "mha_bwd": "attention_bwd.cu"}
FAST_FORWARD = "attention_fwd_wgmma.cu"  # as checked in: the D = 128, non-causal, non-GQA plan


def with_plan_edits(name: str, edits: list[tuple[str, str]]) -> str:
    """The file `name` with every occurrence of each `old` replaced by `new`; each `old` must be there."""
    text = (HERE / name).read_text(encoding="utf-8")
    for old, new in edits:
        if old not in text:
            raise ValueError(f"{name}: the plan has no {old!r} to change")
        text = text.replace(old, new)
    return text


def attention_solution(workload: Workload) -> str:
    """The plain CUDA-core solution of an attention workload (KeyError for a GQA backward or causal GQA)."""
    edits = []
    if workload.causal:  # the plan's last argument is the causal flag (every launch of the backward)
        edits.append(('"f32:scale", "i32:0"]', '"f32:scale", "i32:1"]'))
    if "HKV" in workload.symbols:
        if workload.op != "mha_fwd" or workload.causal:
            raise KeyError(f"{workload.id}: no reference solution for this GQA variant")
        edits.append(('"i32:H", "i32:1", "f32:scale"', '"i32:H", "i32:H // HKV", "f32:scale"'))  # group = H / HKV
    return with_plan_edits(PLAIN[workload.op], edits)


def fast_entry_point(head_dim: int, causal: bool, gqa: bool) -> str:
    return "attn_fwd_wgmma" + ("_d64" if head_dim == 64 else "") + ("_causal" if causal else "") + ("_gqa" if gqa else "")


def fast_solution(workload: Workload) -> str | None:
    """The wgmma + TMA forward for a workload it covers, else None: D in {64, 128}, S a multiple of 128, and
    with GQA (HKV in the symbols) H a multiple of HKV, non-causal (no workload asks for a causal GQA one)."""
    sym = workload.symbols
    s, d, gqa = int(sym.get("S", 0)), int(sym.get("D", 0)), "HKV" in sym
    if workload.op != "mha_fwd" or s <= 0 or s % 128 or d not in (64, 128):
        return None
    if gqa and (workload.causal or int(sym["HKV"]) < 1 or int(sym["H"]) % int(sym["HKV"])):
        return None
    edits = [('kernel = "attn_fwd_wgmma"', f'kernel = "{fast_entry_point(d, workload.causal, gqa)}"')]
    if d == 64:  # one 64-wide slab per tile and a 4-deep ring: 16 KiB x (Q + 4 x (K, V))
        edits.append(('smem = "1024 + 32768 * 5 + 256"  # 1 KiB alignment slack, Q, STAGES = 2 x (K, V) tiles',
                      'smem = "1024 + 16384 * 9 + 256"  # 1 KiB alignment slack, Q, STAGES = 4 x (K, V) tiles'))
    if gqa:  # the group argument, and K / V are [B, HKV, S, D]
        edits.append(('"f32:scale"]', '"f32:scale", "i32:H // HKV"]'))
        edits += [(f'tensor = "{t}"\ndims = ["D", "B * H * S"]', f'tensor = "{t}"\ndims = ["D", "B * HKV * S"]')
                  for t in ("K", "V")]
    return with_plan_edits(FAST_FORWARD, edits)
