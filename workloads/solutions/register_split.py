"""How a warp-specialised template splits its CTA's registers between the producer and the consumer warpgroups.

`setmaxnreg` moves registers through a pool per CTA that holds only the launch's allocation: threads x the register
count ptxas gives the entry under `__launch_bounds__(threads, 1)` (65,536 / threads, rounded down to 8, at most 255),
not the SM's 65,536 (tools/regpool.py checks compiled kernels the same way). At 384 threads that is 64,512: a
producer at 32 leaves the two consumers 236 each, so 240 would hang in setmaxnreg.inc.
"""
from __future__ import annotations

REGS_PER_SM = 65536
MAX_REGS = 255


def launch_regs(threads: int) -> int:
    """Registers per thread ptxas gives an entry of `threads` threads at one CTA per SM."""
    return min(MAX_REGS, REGS_PER_SM // threads) // 8 * 8


def inc_limit(registers: int, threads: int, dec: int) -> int:
    """The highest setmaxnreg.inc (a multiple of 8) every other warpgroup of a `threads`-thread CTA launched at
    `registers` per thread can get while one warpgroup sits at `dec`: the pool's registers shared among them."""
    return (threads * registers - 128 * dec) // (threads - 128) // 8 * 8


def consumer_regs(producer_regs: int, consumers: int, cap: int = 240) -> int:
    """What each consumer warpgroup can take once the producer warpgroup has given registers back: a multiple of 8,
    at most `cap`."""
    threads = 128 * (consumers + 1)
    return min(cap, inc_limit(launch_regs(threads), threads, producer_regs))
