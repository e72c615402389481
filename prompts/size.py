"""What each prompt variant costs: system + task prompt, the text a model reads before its first reply.

Counted in tokens of tiktoken's `o200k_base` (the GPT-4o family's encoding; other vendors' tokenizers land
within about 15% on this mix of prose, PTX and C++). Offline, the encoding file comes from the copy litellm
ships; without either, `tokens` is None and only the estimate (characters / 4) is given. The budgets are
recorded here and held by tests/prompts/test_prompt_contract.py; `python3 -m ptxbench.prompts.size` prints
the table prompts/README.md keeps.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .encodings import encoding

ENCODING = "o200k_base"
WORKLOADS = ("gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128", "mha_bwd_d128")
# Budgets for the main GEMM's prompt (issue 17): o200k tokens, and the characters / 4 estimate.
# The attention backward section (issue 13) raised knowledge and expert by its measured +844 tokens (+599 / 4).
# The "Measured on the H200" section (issue 14: what the tuned kernels taught) raised both by its +348 (+251 / 4),
# and its warp-uniform index bullet by +124 (+88 / 4); the backward's compile-time dQ tile width and fp32 P in dS,
# and the forward's early packing of P, by +139 (+117 / 4); the GEMM's deferred epilogue by +41 (+32 / 4); the two
# other ways ptxas serialises wgmma (C7511, C7512, met building the causal kernels' skipped work) by +48 (+44 / 4); the
# backward's stmatrix dS^T tile and 16-byte preprocess, and the forward's Q fragments in registers, by +181 (+121 / 4);
# keeping the main loop's code (a tail split inside the kernel rescheduled it) by +83 (+80 / 4); that the split in a
# launch of its own lost too by +25 (+14 / 4); the compiler's CPU limit and its advice (solution_format.md) by +33
# (+30 / 4); the CTA's register pool under setmaxnreg (a hang the backward's writer warp met) and the writer warp itself
# by +275 (+225 / 4, expert +224); the writer warp at D = 96 and D = 64, and what did not pay on the softmax's
# exponentials and the last store's wait, by +154 (+109 / 4); the D = 64 writers causal only and the backward's lockstep
# walk (a rotated one cost 4%) by +57 (+50 / 4); the D = 64 writers' spills and the 40 / 232 split that removed them
# by +30 (+24 / 4); the forward's staggered start (and the peeled step that rescheduled the loop) by +103 (+101 / 4,
# expert +100); the forward's persistent walk (level alone, paying with the next tile's Q a tile ahead) by +117 (+103 / 4,
# expert +104); its producer as a function of its own (ptxas schedules a loop by its whole function) by +60 (+53 / 4,
# expert +52); timing a loop option again under new surrounding code (the walk swapped the forward's row-reduction
# splits) by +90 (+79 / 4); the deferred slabs kept on the TMA store (straight register stores cost 8.9%) by +42
# (+38 / 4, expert +39); no L2 prefetch from the producer thread and no eviction hints (both measured slower or level)
# by +87 (+74 / 4); the GEMM ring kept in 64-element k-chunks (32-element ones under the 64B swizzle lost 1.6-4.9%) by
# +45 (+32 / 4, expert +31); the grouped order's traffic under the math (a compute-bound GEMM with DRAM 25% busy: group_m
# 16 level, a 2-CTA cluster 1.5-1.9% slower, the epilogue the thing to hide) by +39 (+24 / 4, expert +25); group_m 16
# 0.3% faster than 8 under the deferred epilogue (the reference's order since) by +22 (+10 / 4); no prefetching from
# feeder CTAs on idle SMs either, and the L2 eviction priorities as a set (with its createpolicy line) by +156
# (+121 / 4); a persistent grid kept in step (the GEMM's last wave split first: 2.7x the DRAM bytes) by +21 (+12 / 4,
# expert +21); the load/store path's L2 prefetch (prefetch.L2) measured slower too by +40 (+29 / 4); tiles handed out
# at run time (+1.5%) by +17 (+14 / 4, expert +15); the decode GEMMs' B stream (ring depth, k-block depth, L2 promotion
# and SM count level; K split over every SM 17-49% slower) by +101 (+65 / 4, expert +64); the GEMM bound by the clock
# its data's power allows, read by its cycles apart from its clock (in place of "near 128 B a cycle of shared memory",
# which the cycle counts disproved) by +114 (+85 / 4, expert +86); the decode GEMMs from a clean L2 (8 stages and 64
# columns the fastest, A's L2 reads 2-5% of the time, A multicast over clusters 4-8% slower) by +130 (+86 / 4, expert +86);
# the attention forward under the power limit too (a cycle saving keeps 62-86% of itself in time on randn) by +70
# (+62 / 4, expert +61); the solution format's one line on device system calls (an `.extern .func`, vprintf or malloc,
# refused in either language) by +22 (+18 / 4, expert +22, +19 / 4); the task's correctness line naming the per-block
# Frobenius bound, each tensor's own bounds (the forward's LSE) and the declared distributions checked (the backward's
# spiky) by +16 (+18 / 4) on the GEMM; the wrapper header's wgmma_fence and setmaxnreg contracts (a fence orders
# registers, not st.shared; setmaxnreg is the whole warpgroup's and in PTX needs .minnctapersm 1 too) by +19 (+12 / 4,
# expert +22, +10 / 4); what the harness does that the task and format left out or misstated (the source policy's
# `std::`, `new` and directive refusals, `max_clusters` in launch tables only, the zero fill of `zero = true` scratch
# timed with the launches, the target families' share of the work, the library-calibrated correctness rule) by +174
# (+159 / 4) in every variant; a runtime scale-d in one's own asm passed as an int (a bool operand is refused) by +25
# (+17 / 4); the expert notes' register splits as pairs that fit the CTA's pool (their ranges held 40 / 240, which
# hangs) by +22 (+15 / 4), expert only; the format's target named as the task's architecture, not sm_90a (a task for
# sm_100a said `.target sm_90a`) by +2 (+14 / 4); the attention overlap's wait spelled whole
# (`wgmma.wait_group.sync.aligned 1;`: ptxas refuses `wgmma.wait_group 1`) by +5 (+3 / 4); the format's refusals
# reflowed to its line width by +4 (+1 / 4); the pack's cluster line as measured (a 2-CTA cluster multicasting B made
# the tuned GEMM 1.5-3.3% slower, where it said 2 was the sweet spot) by +30 (+22 / 4, expert +23); the format's line
# on module data (a `__device__` variable written only directly, arrays written at run-time indices in a scratch buffer: the
# compile refuses the rest, tools/module_data.py) by +48 (+39 / 4) in every variant, basic within its budget.
BUDGETS = {"basic": (3350, 2850), "knowledge": (13392, 10736), "expert": (14048, 11286)}


@functools.cache
def encoder():
    """o200k_base from a local copy (prompts/encodings.py), None without one: the sizes never wait on a download."""
    return encoding(ENCODING)


@dataclass(frozen=True)
class PromptSize:
    variant: str
    workload: str
    chars: int
    tokens: int | None  # o200k_base; None without tiktoken's encoding

    @property
    def estimate(self) -> int:
        return math.ceil(self.chars / 4)


def prompt_text(variant: str, workload: str = WORKLOADS[0]) -> str:
    """System + task prompt of a pipeline-mode run (the agent's own functions, so nothing is counted twice)."""
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.loop.task import system_prompt, task_prompt
    from ptxbench.workloads.registry import get_workload

    config = OptimizeConfig(workload=workload, prompt=variant)
    return system_prompt(config) + task_prompt(config, get_workload(workload))


def measure(variant: str, workload: str = WORKLOADS[0]) -> PromptSize:
    text = prompt_text(variant, workload)
    enc = encoder()
    return PromptSize(variant, workload, len(text), len(enc.encode(text)) if enc is not None else None)


def within_budget(size: PromptSize) -> bool:
    tokens, estimate = BUDGETS[size.variant]
    return size.estimate <= estimate and (size.tokens is None or size.tokens <= tokens)


def table(workloads=WORKLOADS) -> str:
    from ptxbench.prompts import VARIANTS

    lines = ["| variant | " + " | ".join(workloads) + " | budget (GEMM) |", "| --- |" + " --- |" * (len(workloads) + 1)]
    for v in VARIANTS:
        cells = []
        for w in workloads:
            s = measure(v, w)
            cells.append(f"{s.tokens if s.tokens is not None else '?'} ({s.estimate})")
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {BUDGETS[v][0]} ({BUDGETS[v][1]}) |")
    return "\n".join(lines) + f"\n\n{ENCODING} tokens (characters / 4 in brackets)"


if __name__ == "__main__":
    print(table())
