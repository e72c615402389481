"""bench/loop_schedule.py's comparisons on made-up SASS lines (the compiles it reads: run it on the CPU by hand)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def test_a_name_the_registry_renders_is_known_and_any_other_is_named_with_the_valid_ones():
    """`checked-in` exists only with a launch order: alone it raised the registry's KeyError after the base compiled."""
    from loop_schedule import unknown_variants

    from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

    good = ["pre_plain", "late_d96+head_groups", "checked-in+head_major", "checked-in+head_groups"]
    assert unknown_variants(good) == "" and all(variant_text(n) for n in good)
    why = unknown_variants(["pre_plain", "checked-in", "pre_plain+nope", "nope+head_groups", "nope"])
    assert why.startswith("unknown variant 'checked-in', 'pre_plain+nope', 'nope+head_groups', 'nope'.")
    assert "pre_plain" in why and "+head_groups" in why and "checked-in+head_major" in why


def test_an_unknown_variant_is_a_usage_error_before_anything_compiles():
    import subprocess

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "bench" / "loop_schedule.py"), "checked-in", "X"],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "usage:" in done.stderr and "unknown variant 'checked-in', 'X'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv, said", [
    (["pre_plain", "late_d96", "--workload", "nope"], "--workload 'nope' is not an attention backward workload (mha_bwd"),
    (["pre_plain", "late_d96", "--workload", "mha_fwd_d128"], "--workload 'mha_fwd_d128' is not an attention backward"),
    (["--gemm", "{bad", "{}"], "--gemm takes JSON objects of template changes; '{bad' is not JSON"),
    (["--gemm", "{}", "[3]"], "'[3]' is not one"),
    (["--gemm", "{}", '{"stagez": 3}'], "--gemm: stagez not among the template's parameters (bk, bm, bn"),
])
def test_a_bad_workload_or_gemm_change_is_a_usage_error_before_anything_compiles(argv, said):
    """--workload took any name and raised the registry's KeyError mid-run; --gemm's JSON raised a JSONDecodeError, and a
    misspelt parameter was silently ignored (model_copy takes any key), comparing the base with itself."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "bench" / "loop_schedule.py"), *argv],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "usage:" in done.stderr and said in done.stderr and "Traceback" not in done.stderr, done.stderr
