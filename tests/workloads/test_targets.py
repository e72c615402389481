"""Default targets come from how close the library runs to the roof, and the task text says so."""
from __future__ import annotations

from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.loop.task import task_prompt
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.targets import LIBRARY_TFLOPS, MAX_TARGET, PEAK_TFLOPS, default_target


def test_a_library_near_the_roof_gets_a_target_below_the_roof():
    gemm = get_workload("gemm_bf16_m8192_n7168_k5120")
    t = default_target(gemm)
    # cuBLAS at 796 of 989 TFLOP/s: the roof is 1.242x the library, half of that headroom is 1.12x
    assert PEAK_TFLOPS["sm_90a"] / LIBRARY_TFLOPS[gemm.id] > 1.24
    assert t.speedup == 1.12 and "80% of the 989 TFLOP/s" in t.reason and "roof is 1.24x" in t.reason
    assert default_target(get_workload("mha_bwd_d128")).speedup == MAX_TARGET  # far from its roof: the cap
    assert default_target(get_workload("mha_fwd_d64")).speedup == MAX_TARGET  # no measured rate: the default
    gqa_bwd = default_target(get_workload("mha_bwd_d128_gqa_h32_kv8"))
    assert gqa_bwd.speedup == MAX_TARGET and "no library rate is recorded" in gqa_bwd.reason


def test_the_run_stops_at_and_the_task_states_the_derived_target():
    wl = get_workload("gemm_bf16_m8192_n7168_k5120")
    cfg = OptimizeConfig(workload=wl.id, model="builtin/tuner")
    assert cfg.target() == default_target(wl).speedup
    text = task_prompt(cfg, wl)
    assert f"at least {default_target(wl).speedup}x as fast as the library" in text and "half of that headroom" in text
    assert OptimizeConfig(workload=wl.id, model="m", target_speedup=0).target() is None  # 0: never stop early
    given = OptimizeConfig(workload=wl.id, model="m", target_speedup=1.5)
    assert given.target() == 1.5 and "the target this run was given" in task_prompt(given, wl)
