"""pair_d64_r40 (on pair_d64): the D = 64 writers' warpgroup at 40 registers; the reference.

The writer warps share the producer warpgroup's 24 registers, and beside them ptxas 13.5 spills in the D = 64 kernels
(pair_d64: 24 / 44 bytes non-causal, 8 / 8 causal, one 8-byte pair stored and reloaded by the producer thread every
block). The CTA's pool is 168 x 384 registers, so the producer warpgroup can have 40 only if the consumers take 232
instead of 240 (40 x 128 + 232 x 256 = 64,512). Here the kernels with D = 64 writers split the pool 40 / 232: the
causal D = 64 kernel compiles without spills, pair_d64's non-causal ones with half (12 / 32 and 12 / 24 bytes).
The non-causal kernels' spills were what the writers cost there (+1.1%, attention_bwd.md "v30 measured"): at 40 / 232
the D = 64 kernels ran -1.1% and causal -2.1% against writer_d96's, which have no writers ("v32 measured").
"""
from __future__ import annotations


# the producer's and consumers' setmaxnreg moves at 40 / 232 in the D = 64 kernels
PAIR_D64_R40 = [("    setmaxnreg_dec<PRODUCER_REGS>();",
                 "    setmaxnreg_dec<HD == 64 ? 40 : PRODUCER_REGS>();  // regs_d64: the writers' warpgroup at 40"),
                ("    setmaxnreg_inc<CONSUMER_REGS>();",
                 "    setmaxnreg_inc<HD == 64 ? 232 : CONSUMER_REGS>();  // regs_d64: 40 x 128 + 232 x 256 = the pool")]
