"""The runtime target-instruction verdict, on real H200 profiles and on edge cases built from them."""
from __future__ import annotations

from pathlib import Path

from ptxbench.tools.profile.runner import summarize
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
from ptxbench.tools.profile.verdict import runtime_verdicts, static_histogram
from ptxbench.tools.results import KernelResources
from ptxbench.workloads.arch import SM90A, SM100A

NCU = Path(__file__).parents[1] / "data" / "ncu"
COUNTERS = [c for f in SM90A.families for c in f.counters]


def page(case: str, kind: str) -> str:
    return (NCU / f"{case}.{kind}.csv").read_text()


def verdicts(case: str, raw: str | None = None, static=None, full: bool = True):
    s = summarize(raw or page(case, "raw"), page(case, "details") if full else "", page(case, "source") if full else "", COUNTERS)
    return runtime_verdicts(SM90A, s, static_opcodes=static)


def test_live_wgmma_and_tma_are_executed_with_their_counts():
    v = verdicts("gated_live")
    assert v["wgmma"].verdict == "executed" and v["tma"].verdict == "executed"
    assert (v["wgmma"].executed_warp_insts, v["wgmma"].executed_thread_insts_true) == (320, 10240)
    assert v["wgmma"].counter_values["sm__inst_executed_pipe_tensor_op_gmma.sum"] == 320
    assert (v["tma"].executed_warp_insts, v["tma"].executed_thread_insts_true) == (8, 8)
    assert v["tma"].counter_values["smsp__sass_inst_executed_op_tma_ld.sum"] == 8


def test_wgmma_behind_a_never_taken_branch_is_present_not_executed():
    v = verdicts("gated_dead")
    assert v["wgmma"].verdict == "present_not_executed" and v["tma"].verdict == "present_not_executed"
    assert v["wgmma"].executed_thread_insts_true == 0 and "never" in v["wgmma"].reason


def test_plain_fma_kernel_is_absent():
    v = verdicts("fma")
    assert v["wgmma"].verdict == "absent" and v["tma"].verdict == "absent"


def test_without_the_source_page_presence_comes_from_the_static_sass():
    dead_static = {"HGMMA": 8, "UTMALDG": 1, "FFMA": 0}
    v = verdicts("gated_dead", static=dead_static, full=False)
    assert v["wgmma"].verdict == "present_not_executed"
    v = verdicts("fma", static={"FFMA": 4}, full=False)
    assert v["wgmma"].verdict == "absent"
    v = verdicts("fma", static=None, full=False)
    assert v["wgmma"].verdict == "unknown" and "SASS listing" in v["wgmma"].reason


def test_nan_counts_give_unknown_with_the_reason():
    raw = page("gated_live", "raw")
    header, units, row = raw.splitlines()[:3]
    cells = row.split('","')
    names = header.split('","')
    for metric in ("sass__thread_inst_executed_true_per_opcode", "sass__inst_executed_per_opcode"):
        cells[names.index(metric)] = "nan"
    v = verdicts("gated_live", raw="\n".join([header, units, '","'.join(cells)]))
    assert v["wgmma"].verdict == "unknown" and "NaN" in v["wgmma"].reason


def test_counter_disagreement_is_unknown():
    k = KernelProfile(name="k", opcodes={"HGMMA": 320}, opcodes_true={"HGMMA": 10240}, sass_present=["HGMMA"],
                      counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 0.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[k]), ["wgmma"])
    assert v["wgmma"].verdict == "unknown" and "disagree" in v["wgmma"].reason


def test_predicated_off_warps_do_not_count_as_executed():
    # warp-level counts include warps whose predicate was false (FACTS.md); only predicate-true decides
    k = KernelProfile(name="k", opcodes={"UTMALDG": 32}, opcodes_true={"UTMALDG": 0}, sass_present=["UTMALDG"],
                      counters={"smsp__sass_inst_executed_op_tma_ld.sum": 0.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[k]), ["tma"])
    assert v["tma"].verdict == "present_not_executed" and v["tma"].executed_warp_insts == 32


def test_a_failed_profile_is_unknown_never_pass_or_fail():
    v = runtime_verdicts(SM90A, ProfileSummary(ok=False, error="ncu timed out after 120 s"))
    assert all(t.verdict == "unknown" and "timed out" in t.reason for t in v.values())
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[]))
    assert all(t.verdict == "unknown" for t in v.values())


def test_counts_add_up_over_the_launches_of_a_plan():
    a = KernelProfile(name="pre", opcodes={"FFMA": 5}, opcodes_true={"FFMA": 160}, sass_present=["FFMA"])
    b = KernelProfile(name="main", opcodes={"HGMMA.64x256x16": 40}, opcodes_true={"HGMMA": 1280}, sass_present=["HGMMA"],
                      counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[a, b]), ["wgmma"])
    assert v["wgmma"].verdict == "executed" and v["wgmma"].executed_warp_insts == 40


def test_blackwell_tcgen05_opcodes_and_counters():
    fam = SM100A.family("tcgen05")
    assert all(fam.matches_opcode(op) for op in ("UTCHMMA", "UTCQMMA", "UTCBAR", "UTCATOMSWS", "LDTM", "STTM"))
    assert not fam.matches_opcode("HGMMA") and fam.counters
    k = KernelProfile(name="k", opcodes={"UTCHMMA": 64, "LDTM": 32}, opcodes_true={"UTCHMMA": 64, "LDTM": 1024},
                      sass_present=["UTCHMMA", "LDTM", "UTMALDG"], counters={})
    v = runtime_verdicts(SM100A, ProfileSummary(ok=True, kernels=[k]))
    assert v["tcgen05"].verdict == "executed" and v["tma"].verdict == "present_not_executed"


def test_static_histogram_sums_the_module():
    kernels = {"a": KernelResources(name="a", sass_opcodes={"HGMMA": 4, "FFMA": 2}),
               "b": KernelResources(name="b", sass_opcodes={"FFMA": 3})}
    assert static_histogram(kernels) == {"HGMMA": 4, "FFMA": 5}


def _verdict_level(counters: dict[str, float], static: dict[str, int] | None):
    k = KernelProfile(name="k", counters=counters)  # no per-opcode counts at the verdict level
    return runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="verdict", kernels=[k]), static_opcodes=static)


def test_the_verdict_level_decides_on_the_instruction_counters():
    live = {"sm__inst_executed_pipe_tensor_op_gmma.sum": 320.0, "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum": 5.2e6,
            "smsp__sass_inst_executed_op_tma.sum": 8.0, "smsp__sass_inst_executed_op_tma_ld.sum": 8.0}
    v = _verdict_level(live, {"HGMMA": 8, "UTMALDG": 1})
    assert v["wgmma"].verdict == "executed" and v["tma"].verdict == "executed"
    assert "hardware counters" in v["wgmma"].reason and v["wgmma"].executed_thread_insts_true is None
    dead = {c: 0.0 for c in live}
    v = _verdict_level(dead, {"HGMMA": 8, "UTMALDG": 1})
    assert v["wgmma"].verdict == "present_not_executed" and v["tma"].verdict == "present_not_executed"
    assert _verdict_level(dead, {"FFMA": 4})["wgmma"].verdict == "absent"
    assert _verdict_level(dead, None)["wgmma"].verdict == "unknown"


def test_the_verdict_level_never_guesses():
    # a decisive counter missing (NaN or not collected) -> unknown, not absent or executed
    v = _verdict_level({"sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum": 5.2e6}, {"HGMMA": 8})
    assert v["wgmma"].verdict == "unknown" and "sm__inst_executed_pipe_tensor_op_gmma.sum" in v["wgmma"].reason
    # work counted where the SASS has none of the family's opcodes: the counter is not what it claims
    v = _verdict_level({"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0}, {"FFMA": 4})
    assert v["wgmma"].verdict == "unknown"
    # at the full level a missing per-opcode count is still unknown (the counters alone never decide there)
    k = KernelProfile(name="k", counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0})
    full = runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="full", kernels=[k]), ["wgmma"], {"HGMMA": 8})
    assert full["wgmma"].verdict == "unknown"
