"""The fences around a candidate module's data (tools/gpu/module_fences.py): when they border it, and a candidate call
that writes into one is an out-of-bounds write. CPU only: the call protocol with a kernel played by Python
(test_timing_integrity.py's fakes), the driver's pool a CPU tensor. The attack itself
(tests/data/cheats/attacks/global_tail_stash.cu) runs in test_cheat_attacks.py on a GPU."""
from __future__ import annotations

import pytest
import torch

from ptxbench.tools.gpu.module_fences import FENCE_BYTES, FENCE_PTX, Fences, adjacent
from ptxbench.tools.gpu.verdict import Failed
from test_timing_integrity import honest, make_calls, run

KIB = 1 << 10


def test_fences_border_the_data_the_pool_packs_between_them():
    """The pool's layout on an H100 (bench/results/run32/module_memory_probe.json.gz): modules one after another,
    256-byte aligned."""
    fence = FENCE_BYTES
    before, data, after = (0, fence), [(fence + 256, 16), (fence + 512, 4112)], (fence + 512 + 4352, fence)
    assert adjacent(before, data, after)
    assert not adjacent(before, data, (fence + 64 * KIB, fence))  # a module placed between: not bordered
    assert not adjacent((1 << 40, fence), data, after)  # the first fence elsewhere
    assert not adjacent(before, [], after)


def test_the_fence_module_is_one_zero_filled_global():
    assert f"[{FENCE_BYTES}]" in FENCE_PTX and ".global" in FENCE_PTX and ".entry" not in FENCE_PTX
    assert FENCE_BYTES >= 1 << 20 > 64 * KIB  # wider than the attack's offset, by far


class Pool:
    """The driver's pool as a CPU tensor: fence, the module's one global, fence."""

    def __init__(self):
        self.memory = torch.zeros(2 * 64 * KIB + 256, dtype=torch.uint8)

    def fences(self) -> Fences:
        def fence(lo):
            return type("F", (), {"span": (lo, 64 * KIB), "view": self.memory[lo:lo + 64 * KIB],
                                  "written": lambda f: f.view.any(), "close": lambda f: None})()

        return Fences(fence(0), fence(64 * KIB + 256), [(64 * KIB, 16)])


def fenced_calls(kernel, pool: Pool):
    calls = make_calls(kernel)
    calls.cand.fences = pool.fences()
    return calls


def test_a_stash_past_the_modules_data_is_an_out_of_bounds_write():
    pool = Pool()

    def stash(n, bufs):
        honest(n, bufs)
        pool.memory[64 * KIB + 256 + 8 * KIB] = 1  # 8 KiB past the module's global: in the fence after it

    with pytest.raises(Failed) as failed:
        run(fenced_calls(stash, pool), timed=2)
    assert failed.value.status == "RUNTIME_ERROR"
    assert failed.value.runtime_error == "OUT_OF_BOUNDS_WRITE: beside the module's data"


def test_a_kernel_that_writes_only_its_own_global_passes():
    pool = Pool()

    def counter(n, bufs):
        honest(n, bufs)
        pool.memory[64 * KIB] = n % 256  # its own global: the restore's business, not the fences'

    calls = fenced_calls(counter, pool)
    assert calls.cand.fences.borders
    run(calls, timed=6)
