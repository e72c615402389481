"""bench/attention_energy.py on the CPU: its points are the D = 128 reference and one neighbour per tuner move, each a
valid build that differs from the reference in that move's parameters only; the launch plan alternates every point and
the library on each input; and ncu's raw page is read back in the planned order, the library's call by its longest
kernel, into each point's time, cycles and clock against the reference."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import attention_energy as ae  # noqa: E402
from test_gemm_data_power import _raw_page  # noqa: E402


def test_each_neighbour_takes_back_one_move_of_the_reference():
    from ptxbench.workloads.solutions import attention_template as at
    from ptxbench.workloads.registry import get_workload

    pts = ae.points()
    ref = pts["ref"]
    assert ref == at.default_params(get_workload(ae.WORKLOAD))
    assert set(pts) == {"ref", *(f"no_{role}" for role in ae.NEIGHBOURS)}
    for role, changes in ae.NEIGHBOURS.items():
        p = pts[f"no_{role}"]
        differ = {k for k in type(p).model_fields if getattr(p, k) != getattr(ref, k)}  # dumps leave defaults out
        assert differ == set(changes), role
        assert at.validate(pts[f"no_{role}"], get_workload(ae.WORKLOAD)) == []
    # every role is one builtin/tuner pulls on this template (the walk is its bundle)
    assert set(ae.NEIGHBOURS) <= set(at.TUNER_LEVERS) | set(at.TUNER_BUNDLES)


def test_the_plan_alternates_every_point_and_the_library_on_each_input():
    plan = ae.plan_of(2, ["no_stagger", "ref", ae.LIBRARY])
    assert plan[:6] == ["no_stagger/randn", "ref/randn", "cudnn/randn", "no_stagger/zeros", "ref/zeros", "cudnn/zeros"]
    assert len(plan) == 12 and plan[6:] == plan[:6]


def _launches(per_library_call: int) -> list[tuple[str, float, float]]:
    """Two rounds of (ref, no_split_rows, cudnn) on randn then zeros: the reference 3.6 M cycles at 1,680 MHz on randn,
    1,800 on zeros; no_split_rows 1% more cycles at the same clock; cuDNN's call its kernel plus a short helper."""
    out = []
    for _ in range(2):
        for mhz in (1680.0, 1800.0):
            out += [("attn_fwd_wgmma", 3.6e6, 3.6e6 / mhz), ("attn_fwd_wgmma", 3.636e6, 3.636e6 / mhz)]
            lib = [("cudnn_sm90_fprop", 3.9e6, 3.9e6 / (mhz - 40))]
            out += lib + [("helper", 2e3, 2.0)] * (per_library_call - 1)
    return out


def test_ncu_reads_back_cycles_over_duration_in_the_planned_order():
    plan = ae.plan_of(2, ["ref", "no_split_rows", ae.LIBRARY])
    clocks = ae.clocks_of(_raw_page(_launches(2)), plan)
    assert [r["kernel"] for r in clocks["cudnn/randn"]] == ["cudnn_sm90_fprop"] * 2  # its longest kernel, not the helper
    assert clocks["ref/randn"][0]["mhz"] == pytest.approx(1680.0, rel=1e-4)
    assert clocks["ref/zeros"][0]["mhz"] == pytest.approx(1800.0, rel=1e-4)
    lines, split = ae.table(clocks)
    vs = split["no_split_rows/randn"]["vs_ref"]
    assert vs["cycles"] == pytest.approx(1.01, rel=1e-4) and vs["mhz"] == pytest.approx(1.0, rel=1e-4)
    assert split["cudnn/zeros"]["vs_ref"]["mhz"] == pytest.approx(1760 / 1800, rel=1e-4)
    assert any(line.startswith("| no_split_rows/randn | 2 |") and "+1.00%" in line for line in lines)


def test_the_library_calls_may_be_one_kernel_and_a_page_that_does_not_split_is_refused():
    plan = ae.plan_of(2, ["ref", "no_split_rows", ae.LIBRARY])
    one = ae.clocks_of(_raw_page(_launches(1)), plan)
    assert one["cudnn/randn"][0]["mhz"] == pytest.approx(1640.0, rel=1e-4)
    with pytest.raises(ValueError, match="do not split"):
        ae.clocks_of(_raw_page(_launches(2)[:-1]), plan)  # a kernel missing
    with pytest.raises(ValueError, match="do not split"):
        ae.clocks_of(_raw_page(_launches(1)[:-2]), plan)
