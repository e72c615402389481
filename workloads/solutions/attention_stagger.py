"""The attention forward template's stagger option, as edits of the rendered body: consumer 1 issues its first S
once consumer 0's is done, so the two run half a tile apart from the start.

Cooperative consumers start together: both issue S_0 = Q K_0^T, wait for it, and run its softmax (66 exponentials a
thread at 128-key tiles, about half a microsecond of MUFU time with both consumers' warps on every SM sub-partition)
while the tensor pipe has nothing; from key tile 1 on each softmax runs under the previous P V product. With the
stagger, consumer 1 waits at a named barrier before its first issue, and consumer 0 arrives there once its S_0 is done:
consumer 0's softmax then runs under consumer 1's S_0, and consumer 1's under consumer 0's first S and P V products.
Nothing else changes: the key-tile loop is the same text, and ptxas keeps its SASS (tests/workloads/
test_attention_stagger.py).
"""
from __future__ import annotations

BAR_STAGGER = 7  # named barrier id: 1..3 are the ping-pong turns, 4..6 the epilogue staging

STAGGER_EDITS = [
    ("    // tile 0: S only\n    mbar_wait(&fullK[0], 0);\n    turn_wait(c);\n",
     "    // tile 0: S only\n    mbar_wait(&fullK[0], 0);\n"
     f"    if (c == 1) bar_sync_imm<{BAR_STAGGER}, 256>();  // stagger: consumer 1 issues once consumer 0's S_0 is done\n"
     "    turn_wait(c);\n"),
    ("    turn_pass(c);\n    wgmma_wait<0>();\n    wgmma_fence_regs(s);\n    if (lane == 0) mbar_arrive(&emptyK[0]);\n",
     "    turn_pass(c);\n    wgmma_wait<0>();\n"
     f"    if (c == 0) bar_arrive_imm<{BAR_STAGGER}, 256>();  // stagger: consumer 0's S_0 is done\n"
     "    wgmma_fence_regs(s);\n    if (lane == 0) mbar_arrive(&emptyK[0]);\n"),
]
