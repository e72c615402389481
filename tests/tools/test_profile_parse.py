"""Parsing of REAL Nsight Compute 2025.3.1 outputs captured on the H200 (tests/data/ncu/, made by
tests/data/ncu/capture.py from the kernels in tests/data/profile/)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.profile.ncu_csv import parse_details, parse_instances, parse_raw, parse_source, to_number
from ptxbench.tools.profile.runner import summarize
from ptxbench.workloads.arch import SM90A

NCU = Path(__file__).parents[1] / "data" / "ncu"
COUNTERS = [c for f in SM90A.families for c in f.counters]


def page(case: str, kind: str) -> str:
    return (NCU / f"{case}.{kind}.csv").read_text()


def summary(case: str):
    return summarize(page(case, "raw"), page(case, "details"), page(case, "source"), COUNTERS)


@pytest.mark.parametrize("text,unit,expected", [
    ("1,310,720", "", 1310720.0), ("65.536", "Kbyte", 65536.0), ("268.440064", "Mbyte", 268440064.0),
    ("2.624", "us", 2.624e-6), ("82.00", "%", 82.0), ("3.94", "Tbyte/s", 3.94e12), ("1.97", "Ghz", 1.97e9),
    ("no data", "byte", None), ("nan", "", None), ("n/a", "inst", None), ("", "", None), ("-nan", "", None),
    ("30 (0: 30)", "register/thread", 30.0),
])
def test_to_number_undoes_separators_and_scaled_units(text, unit, expected):
    assert to_number(text, unit) == expected


def test_parse_instances_reads_the_per_opcode_breakdown():
    total, counts = parse_instances("3,536 (UMOV: 760; WARPGROUP: 640; HGMMA: 320; UTMALDG: 8)")
    assert total == 3536 and counts == {"UMOV": 760, "WARPGROUP": 640, "HGMMA": 320, "UTMALDG": 8}
    assert parse_instances("103,552 (Uniform Datapath: 35,912; Tensor Memory Access: 8)")[1] == {
        "Uniform Datapath": 35912, "Tensor Memory Access": 8}
    assert parse_instances("nan (HGMMA: nan)") == (None, {})
    assert parse_instances("448") == (448.0, {})


def test_raw_page_of_the_live_wgmma_kernel_has_the_executed_counts():
    (k,) = parse_raw(page("gated_live", "raw"))
    assert (k.name, k.grid, k.block) == ("gated_mma", "(8, 1, 1)", "(128, 1, 1)")
    warp = k.instances("sass__inst_executed_per_opcode")
    true = k.instances("sass__thread_inst_executed_true_per_opcode")
    # 8 CTAs x 4 warps x 10 wgmma issues; one TMA load per CTA issued by one thread
    assert warp["HGMMA"] == 320 and true["HGMMA"] == 320 * 32
    assert warp["UTMALDG"] == 8 and true["UTMALDG"] == 8
    assert k.number("sm__inst_executed_pipe_tensor_op_gmma.sum") == 320
    assert k.number("smsp__sass_inst_executed_op_tma_ld.sum") == 8
    assert k.number("l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum") == 8 * 64 * 64 * 2
    assert k.number("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum") == 320 / 4 * 2 * 64 * 8 * 16


def test_raw_page_of_the_dead_branch_has_no_tensor_opcodes_executed():
    (k,) = parse_raw(page("gated_dead", "raw"))
    warp = k.instances("sass__inst_executed_per_opcode")
    assert "HGMMA" not in warp and "UTMALDG" not in warp and warp["EXIT"] == 32
    assert k.number("sm__inst_executed_pipe_tensor_op_gmma.sum") == 0


def test_source_page_lists_sass_that_never_ran():
    (k,) = parse_source(page("gated_dead", "source"))
    hgmma = [ln for ln in k.lines if ln.opcode == "HGMMA"]
    assert k.name == "gated_mma" and len(hgmma) == 8  # ptxas unrolled the loop: 4 + 3 remainder + 1
    assert all(ln.inst_executed == 0 and ln.pred_on_thread_inst_executed == 0 for ln in hgmma)
    (live,) = parse_source(page("gated_live", "source"))
    assert sum(ln.inst_executed for ln in live.lines if ln.opcode == "HGMMA") == 320
    assert {"HGMMA", "UTMALDG", "SYNCS"} <= live.opcodes_present()
    assert "HGMMA" not in parse_source(page("fma", "source"))[0].opcodes_present()


def test_details_page_gives_sections_and_rules_with_estimated_speedups():
    (d,) = parse_details(page("stream", "details"))
    assert d.value("GPU Speed Of Light Throughput", "DRAM Throughput") == 82.0
    assert d.value("GPU Speed Of Light Throughput", "Duration") == pytest.approx(130.62e-6)
    rules = {(r.name, r.speedup_pct) for r in d.rules}
    assert ("CPIStall", 98.8) in rules and ("SOLBottleneck", None) in rules


def test_summary_of_the_memory_bound_copy():
    s = summary("stream")
    assert s.ok and s.gpu == "NVIDIA H200" and len(s.kernels) == 1
    k = s.main_kernel()
    assert k.bottleneck == "memory" and k.memory_sol_pct == 82.0 and k.compute_sol_pct == pytest.approx(8.43)
    assert k.dram_bytes == pytest.approx(268440064 + 246843648)
    assert next(iter(k.stalls)) == "long_scoreboard" and k.stalls["long_scoreboard"] == pytest.approx(240.78)
    assert k.registers == 16 and k.occupancy_limiter == "threads per block (warps)"
    assert k.duration_us == pytest.approx(130.624)


def test_summary_of_the_fma_kernel_is_compute_bound_on_the_fma_pipe():
    k = summary("fma").main_kernel()
    assert k.bottleneck == "compute" and k.compute_sol_pct > 90
    assert "FMA" in k.top_pipes and k.opcodes["FFMA"] == 33685504


def test_summary_reads_the_sms_clock_and_cycles_of_the_profiled_pass():
    """ncu runs with --clock-control none, so the speed-of-light section's SM Frequency is the clock the kernel got."""
    k = summary("fma").main_kernel()
    assert k.sm_mhz == pytest.approx(1970.0) and k.elapsed_cycles == 85635
    s = summary("stream").main_kernel()
    assert s.sm_mhz is not None and 1000 < s.sm_mhz <= 1980 and s.elapsed_cycles > 0


def test_summary_of_an_empty_report_is_a_failure_with_a_reason():
    s = summarize("", "", "", COUNTERS)
    assert not s.ok and "no profiled kernel" in s.error


def test_verdict_only_run_log_parses_without_sections():
    (k,) = parse_raw((NCU / "verdict_only.csv").read_text())  # --log-file output: ==PROF== lines first
    assert k.instances("sass__thread_inst_executed_true_per_opcode")["HGMMA"] == 10240
