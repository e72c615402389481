"""The memory around a candidate module's data (tools/gpu/module_tail.py): which pieces are watched, and a candidate
call that writes there is an out-of-bounds write while the harness's own rehearsal and a library's call are not. CPU
only: the call protocol with a kernel played by Python (test_timing_integrity.py's fakes), the module's memory a CPU
tensor. The attack itself (tests/data/cheats/attacks/global_tail_stash.cu) runs in test_cheat_attacks.py on a GPU."""
from __future__ import annotations

import pytest
import torch

from ptxbench.tools.gpu.module_tail import ModuleTail, nearest, outside, watched_pieces
from ptxbench.tools.gpu.verdict import Failed
from test_timing_integrity import FakeCandidate, honest, make_calls, run

KIB, MIB = 1 << 10, 1 << 20


def test_the_pieces_are_the_allocation_less_the_modules_own_data():
    assert outside((0, 100), [(10, 10), (50, 20)]) == [(0, 10), (20, 30), (70, 30)]
    assert outside((0, 100), [(0, 100)]) == []
    assert outside((100, 50), [(0, 120), (140, 100)]) == [(120, 20)]  # spans reaching past the extent are clipped


def test_every_allocation_holding_a_span_is_watched_and_one_the_driver_cannot_name_is_not():
    ranges = {0x10000: (0x10000, 2 * MIB), 0x10100: (0x10000, 2 * MIB), 0x900000: None}
    pieces = watched_pieces([(0x10000, 16), (0x10100, 256), (0x900000, 64)], ranges.get)
    assert pieces == [(0x10010, 0xF0), (0x10200, 2 * MIB - 0x200)]


def test_a_very_large_allocation_is_watched_nearest_the_module_first():
    pieces = nearest([(0, 4 * MIB), (5 * MIB, 4 * MIB)], [(4 * MIB, MIB)], limit=2 * MIB)
    assert pieces == [(3 * MIB, MIB), (5 * MIB, MIB)]  # the megabyte on each side nearest the module's data


class Module:
    """A module's memory as a CPU tensor: its one global at `start`, the rest the driver's tail."""

    def __init__(self, size: int = 64 * KIB, start: int = 0, length: int = 16):
        self.memory = torch.zeros(size, dtype=torch.uint8)
        self.start, self.length = start, length

    def tail(self) -> ModuleTail:
        pieces = outside((0, self.memory.numel()), [(self.start, self.length)])
        return ModuleTail([self.memory[p:p + n] for p, n in pieces])


def tail_calls(kernel, module: Module):
    calls = make_calls(kernel)
    calls.cand.tail = module.tail()
    return calls


def test_a_stash_past_the_modules_data_is_an_out_of_bounds_write():
    """The attack's shape: each call looks up its inputs' output in the tail and, on a miss, computes and keeps it."""
    module = Module()

    def stash(_n, bufs):
        honest(_n, bufs)
        module.memory[8 * KIB] = 1  # 8 KiB past the global: a key or a slot of the stash

    calls = tail_calls(stash, module)
    with pytest.raises(Failed) as failed:
        run(calls, timed=2)
    assert failed.value.status == "RUNTIME_ERROR"
    assert failed.value.runtime_error == "OUT_OF_BOUNDS_WRITE: memory around the module's data"


def test_a_kernel_that_writes_only_its_own_global_passes():
    module = Module()

    def counter(n, bufs):
        honest(n, bufs)
        module.memory[module.start] = n % 256  # its own global: the restore's, not the watch's

    run(tail_calls(counter, module), timed=6)


def test_what_changes_there_outside_a_candidate_call_is_not_the_candidates():
    """A module loaded lazily by the harness or a library lands between calls (after the snapshot of one call and
    before that of the next): the next call finds it in its snapshot; the rehearsal's own loads are never judged."""
    module = Module()
    calls = tail_calls(honest, module)
    real_restore = calls.restore

    def restore_then_a_library_loads():
        real_restore()
        module.memory[32 * KIB] += 1  # after the snapshot: as if loaded during the rehearsal's harness work

    calls.restore = restore_then_a_library_loads
    s = calls.sets[0]
    calls.restore()
    calls.observe(0, judge_tail=False)  # the rehearsal's check: nothing judged
    calls.restore = real_restore
    module.memory[40 * KIB] = 7  # between calls (a library's call): part of the next snapshot
    run(calls, timed=3)
    assert s.bufs is calls.sets[0].bufs


def test_a_candidate_without_a_watched_tail_is_checked_as_before():
    calls = make_calls(honest)
    assert getattr(calls.cand, "tail", None) is None and isinstance(calls.cand, FakeCandidate)
    run(calls, timed=3)


def test_the_copy_it_compares_with_is_out_of_every_kernels_reach():
    """A copy on the device, or in pinned host memory (mapped for the device), could be rewritten by the same kernel to
    match the stash it left: the copy is pageable host memory, apart from what it copies."""
    module = Module()
    tail = module.tail()
    tail.snapshot()
    for view, was in zip(tail.views, tail.before):
        assert was.device.type == "cpu" and not was.is_pinned() and was.data_ptr() != view.data_ptr()
    module.memory[100] = 9
    assert tail.changed()
