"""bench/loop_schedule.py's comparisons on made-up SASS lines (the compiles it reads: run it on the CPU by hand)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from loop_schedule import abstract, hgmma_span, in_order  # noqa: E402

KERNEL = ["S2R R0, SR_TID.X", "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ", "FMUL R2, R24, 0x3fb8aa3b",
          "@P0 HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24", "STS [R3], R2", "EXIT"]


def test_the_span_runs_from_the_first_hgmma_to_the_last_predicated_or_not():
    assert hgmma_span(KERNEL) == KERNEL[1:4]


def test_abstracting_keeps_the_shape_and_forgets_registers_and_constants():
    renamed = [ln.replace("R24", "R40").replace("UR8", "UR12").replace("0x3fb8aa3b", "0x3f800000") for ln in KERNEL]
    assert renamed != KERNEL and abstract(renamed) == abstract(KERNEL)
    assert abstract(["FMUL R2, R24, 0x3fb8aa3b"]) == ["FMUL R, R, X"]


def test_in_order_counts_the_lines_kept_in_sequence():
    moved = KERNEL[:2] + [KERNEL[4], KERNEL[2], KERNEL[3]] + KERNEL[5:]  # the store hoisted above the math
    assert in_order(KERNEL, KERNEL) == 6 and in_order(KERNEL, moved) == 5
    assert in_order(KERNEL, list(reversed(KERNEL))) == 1
