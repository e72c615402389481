"""Feedback text from real H200 profiles: ranked, in a performance engineer's words, within budget."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.profile.feedback import DEFAULT_BUDGET, count_tokens, headline, profile_feedback, template
from ptxbench.tools.profile.runner import summarize
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
from ptxbench.tools.profile.verdict import runtime_verdicts
from ptxbench.tools.results import CompileResult, KernelResources
from ptxbench.workloads.arch import SM90A
from ptxbench.workloads.registry import get_workload

NCU = Path(__file__).parents[1] / "data" / "ncu"
COUNTERS = [c for f in SM90A.families for c in f.counters]
GEMM = get_workload("gemm_bf16_m8192_n7168_k5120")


def feedback(case: str, budget: int = 450, compile_result=None) -> str:
    pages = [(NCU / f"{case}.{k}.csv").read_text() for k in ("raw", "details", "source")]
    s = summarize(*pages, COUNTERS)
    return profile_feedback(s, runtime_verdicts(SM90A, s), GEMM, compile_result, token_budget=budget)


def test_template_sections_are_loaded_from_prompts():
    t = template()
    assert "{headline}" in t["frame"] and "{items}" in t["frame"]
    assert {"long_scoreboard", "barrier", "gmma", "mio_throttle"} <= set(t["stall"])
    assert set(t["verdict"]) == {"absent", "token", "present_not_executed", "unknown"}  # every verdict but executed


def test_memory_bound_copy_is_named_memory_bound_with_its_stall():
    text = feedback("stream")
    first = next(ln for ln in text.splitlines() if ln.startswith("Nsight Compute"))
    assert "memory-bound" in first and "compute at 8%" in first
    assert "98% of warp stall cycles are 'long_scoreboard'" in text
    assert "DRAM traffic was 515 MB for a minimum of 275 MB" in text
    assert "[ncu CPIStall" not in text  # said once, with advice, not twice


def test_verdict_problems_come_first():
    dead = feedback("gated_dead").splitlines()
    assert next(ln for ln in dead if ln.startswith("1.")).startswith("1. wgmma is in your SASS but never executed")
    fma = feedback("fma").splitlines()
    assert any("compute-bound" in ln and "FMA" in ln for ln in fma)
    assert next(ln for ln in fma if ln.startswith("1.")).startswith("1. wgmma is not in your SASS")


def test_spills_rank_above_profile_findings():
    cr = CompileResult(status="ok", arch="sm_90a", kernels={"gemm": KernelResources(name="gemm", spill_stores=96, spill_loads=128)})
    items = [ln for ln in feedback("gated_live", compile_result=cr).splitlines() if ln[:2] in ("1.", "2.")]
    assert "spilled registers in gemm (96 bytes stored, 128 loaded" in items[0]
    assert "give math warps more registers" in items[0]


def test_spills_in_the_warpgroup_that_gave_registers_back_get_the_other_move():
    k = KernelResources(name="gemm", spill_stores=24, spill_loads=44, setmaxnreg_dec=[24], setmaxnreg_inc=[240],
                        spills_after_dec=7, spills_after_inc=2)
    cr = CompileResult(status="ok", arch="sm_90a", kernels={"gemm": k})
    first = next(ln for ln in feedback("gated_live", compile_result=cr).splitlines() if ln.startswith("1."))
    assert "in the warpgroup that setmaxnreg.dec shrank" in first and "a higher dec" in first
    assert "give math warps more registers" not in first


def test_spills_are_reported_for_the_kernels_that_ran_only():
    """A module's other entry points (the backward's D = 64 kernels when D = 128 is profiled) say nothing about this
    workload: their spills are left out once a launched kernel is among the compiled ones."""
    quiet = KernelResources(name="gated_mma")  # the kernel the gated_live profile launched
    other = KernelResources(name="other_entry", spill_stores=12, spill_loads=32)
    cr = CompileResult(status="ok", arch="sm_90a", kernels={"gated_mma": quiet, "other_entry": other})
    assert "spilled registers" not in feedback("gated_live", compile_result=cr)
    loud = KernelResources(name="gated_mma", spill_stores=8, spill_loads=8)
    cr = CompileResult(status="ok", arch="sm_90a", kernels={"gated_mma": loud, "other_entry": other})
    text = feedback("gated_live", compile_result=cr)
    assert "spilled registers in gated_mma (8 bytes stored" in text and "other_entry" not in text


def test_a_long_kernel_name_pushes_no_finding_out():
    # the kernel's name is the model's (any length ptxas accepts): quoted whole, it filled the budget before item 1
    name = "gated_mma" + "_" * 6000
    pages = [(NCU / f"gated_dead.{k}.csv").read_text().replace("gated_mma", name) for k in ("raw", "details", "source")]
    s = summarize(*pages, COUNTERS)
    cr = CompileResult(status="ok", arch="sm_90a", kernels={name: KernelResources(name=name, spill_stores=8, spill_loads=8)})
    text = profile_feedback(s, runtime_verdicts(SM90A, s), GEMM, cr)
    assert "1. wgmma is in your SASS but never executed" in text and "spilled registers in gated_mma" in text
    assert count_tokens(text) <= DEFAULT_BUDGET and "_" * 100 not in text


@pytest.mark.parametrize("budget", [60, 120, 250, 450])
def test_feedback_stays_within_its_token_budget(budget):
    for case in ("stream", "gated_dead", "gated_live", "fma"):
        text = feedback(case, budget)
        assert text and count_tokens(text) <= budget


def test_a_larger_budget_keeps_more_findings():
    assert len(feedback("stream", 450)) > len(feedback("stream", 150))


def test_a_failed_profile_says_why():
    text = profile_feedback(ProfileSummary(ok=False, error="ncu timed out after 120 s"), {}, GEMM)
    assert text == "No profile could be taken: ncu timed out after 120 s."


def test_token_estimate_without_tiktoken_is_four_characters_a_token():
    assert count_tokens("x" * 400, exact=False) == 100


def test_a_warp_specialised_kernel_with_two_consumers_is_not_told_to_add_a_second_one():
    """The attention backward's profile (H200): tensor pipe 38% busy, a TMA ring, a producer and two consumer
    warpgroups (384 threads, setmaxnreg). The advice names alternating the consumers, not adding one."""
    from ptxbench.tools.profile.feedback import traits

    cr = CompileResult(status="ok", arch="sm_90a", kernels={"k": KernelResources(
        name="k", sass_features=["tma_load", "mbarrier_wait", "setmaxnreg", "wgmma"])})
    two = traits(cr, {}, KernelProfile(name="k", block="(384, 1, 1)", registers=168, grid="(32, 192, 1)"))
    one = traits(cr, {}, KernelProfile(name="k", block="(256, 1, 1)", registers=168, grid="(32, 192, 1)"))
    assert "consumer_warpgroups" in two.has and "consumer_warpgroups" not in one.has
    t = template()["other"]
    assert "a second consumer warpgroup" not in t["tensor_idle_consumers"] and "ping-pong" in t["tensor_idle_consumers"]
    assert "a second consumer warpgroup" in t["tensor_idle_ring"]


def test_ncu_access_pattern_rules_are_worth_what_their_own_counts_say():
    """The attention backward's H200 profile: ncu gave its 4-byte dK / dV epilogue stores 'est. gain up to 50%'
    (12.6 M excess sectors = 400 MB, about 0.1 ms of DRAM time) and ranked them first at 3.2 ms of 8.4. By their
    counts they are worth ~0.08 ms, the bank conflicts 22% of the L1 pipe's 61%, and the stall finding leads."""
    from ptxbench.tools.profile.summary import KernelProfile, Rule

    glob = ("This kernel has uncoalesced global accesses resulting in a total of 12582912 excessive sectors (50% of the "
            "total 25165824 sectors). Check the L2 Theoretical Sectors Global Excessive table for the primary source "
            "locations.")
    shared = ("This kernel has uncoalesced shared accesses resulting in a total of 301989888 excessive wavefronts (22% "
              "of the total 1358954496 wavefronts). Check the L1 Wavefronts Shared Excessive table for the primary "
              "source locations.")
    k = KernelProfile(name="attn_bwd_wgmma", duration_us=8376.5, l1_sol_pct=61.0, compute_sol_pct=53.0,
                      memory_sol_pct=61.0, stalls={"wait": 2.3, "long_scoreboard": 1.7, "selected": 1.0, "barrier": 1.5},
                      rules=[Rule(section="MemoryWorkloadAnalysis", name="UncoalescedGlobalAccess", type="OPT",
                                  message=glob, speedup_pct=50.0),
                             Rule(section="MemoryWorkloadAnalysis", name="UncoalescedSharedAccess", type="OPT",
                                  message=shared, speedup_pct=22.0)])
    s = ProfileSummary(ok=True, kernels=[k], gpu="NVIDIA H200")
    text = profile_feedback(s, {}, get_workload("mha_bwd_d128"), token_budget=900)
    items = [ln for ln in text.splitlines() if ln[:1].isdigit()]
    assert "'wait'" in items[0]  # the largest stall share (35% of the samples) leads now
    glob_item = next(ln for ln in items if "UncoalescedGlobalAccess" in ln)
    shared_item = next(ln for ln in items if "UncoalescedSharedAccess" in ln)
    assert glob_item.endswith("[worth up to ~83.9 us, 1% of the time]"), glob_item  # 403 MB at 4.8 TB/s
    assert shared_item.endswith("[worth up to ~1.12 ms, 13% of the time]"), shared_item
    assert items.index(shared_item) < items.index(glob_item)  # 22% x 61% of 8.4 ms = 1.1 ms before 0.08 ms


def test_long_scoreboard_in_a_tma_ring_kernel_is_read_as_mbarrier_waits():
    """An mbarrier try_wait is sampled as long_scoreboard (the GEMM's `mbar_wait(&full[stage], phase)` line: 48% of
    samples, mostly long_scoreboard, on the H200): in a TMA-ring kernel the kernel-level item must not send the
    model looking for global loads that are not there."""
    from ptxbench.tools.profile.feedback import _advice, traits
    from ptxbench.tools.profile.summary import KernelProfile

    cr = CompileResult(status="ok", arch="sm_90a", kernels={"k": KernelResources(
        name="k", sass_features=["tma_load", "mbarrier_wait", "setmaxnreg", "wgmma"])})
    tr = traits(cr, {}, KernelProfile(name="k", block="(384, 1, 1)", registers=168, grid="(32, 192, 1)"))
    assert tr.tma_ring
    advice = _advice("long_scoreboard", tr)
    assert "mbarrier wait is sampled as long_scoreboard" in advice and "producer warp waiting for a free slot" in advice
    assert "load tiles ahead with TMA" in _advice("long_scoreboard", traits(None, {}, KernelProfile(name="k")))


def test_a_hot_line_of_integer_arithmetic_is_read_as_recomputed_addresses():
    """The backward's v11 profile put 16% of its stall samples (short_scoreboard) on `const int t = threadIdx.x % 128;`:
    ptxas had attributed there the dQ tile stores' addresses, recomputed per store behind a runtime width. A line made
    only of integer arithmetic gets that reading, not the shared-load advice; a line with a shared load keeps it."""
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.profile.feedback import _advice, traits
    from ptxbench.tools.profile.summary import KernelProfile
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions.attention_backward import fast_backward
    from ptxbench.workloads.solutions.attention_bwd_variants import variant_text

    tr = traits(None, {}, KernelProfile(name="k"))
    assert "compile-time constant" in _advice("short_scoreboard", tr, {"LOP3": 40, "IMAD": 26, "LEA": 16})
    assert "fewer shared loads" in _advice("short_scoreboard", tr, {"LDS": 2, "IMAD": 4})
    assert "fewer shared loads" in _advice("short_scoreboard", tr)
    text = fast_backward(get_workload("mha_bwd_d128"), variant_text("dv_uniform+head_groups"))
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "const int t = threadIdx.x % 128;")
    ops = compile_source(text, "cuda", "sm_90a").sass_by_line[line]
    assert sum(ops.values()) > 100 and "compile-time constant" in _advice("short_scoreboard", tr, ops), ops


def test_traffic_under_the_math_is_not_advised_away():
    """The H200's GEMM at its persistent TMA-epilogue point (a climb's turn 6: compute-bound at 93%, DRAM 25% busy,
    3.3x the minimum bytes): the excess bytes move under the math, so the finding says so instead of asking for
    larger tiles or multicast; the same kernel with its DRAM busy gets that advice."""
    import json

    rec = json.loads((Path(__file__).parents[2] / "bench/results/tuner_evidence/"
                      "gemm_persistent_turn6_2026-12-03.json").read_text())
    s = ProfileSummary.model_validate(rec["result"]["profile"])
    text = profile_feedback(s, runtime_verdicts(SM90A, s), GEMM, token_budget=600)
    line = next(ln for ln in text.splitlines() if "DRAM traffic was" in ln)
    assert "(3.3x), but the kernel is compute-bound with DRAM 25% busy: these bytes move under the math" in line
    assert "Use larger tiles" not in text and "the epilogue" in line
    busy = s.model_copy(update={"kernels": [s.kernels[0].model_copy(update={"dram_sol_pct": 70.0})]})
    text = profile_feedback(busy, runtime_verdicts(SM90A, busy), GEMM, token_budget=600)
    assert "(3.3x): operands are re-read from memory. Use larger tiles" in text


def test_the_live_evaluation_printed_the_traffic_under_the_math_finding():
    """The same turn-6 kernel evaluated by `ptxbench eval --profile` on the H200 with the finding in place
    (2026-12-03, bench/results/gemm_sweep.md round 13): the feedback the GPU run printed holds the finding, and the
    profile it measured gives the same line again here."""
    import json

    rec = json.loads((Path(__file__).parents[2] / "bench/results/tuner_evidence/"
                      "gemm_persistent_turn6_profiled_2026-12-03.json").read_text())
    assert rec["status"] == "PASSED" and rec["profile_level"] == "full" and rec["fingerprint"]["gpu"] == "NVIDIA H200"
    live = next(ln for ln in rec["feedback"].splitlines() if "DRAM traffic was" in ln)
    assert "but the kernel is compute-bound with DRAM 25% busy: these bytes move under the math" in live
    s = ProfileSummary.model_validate(rec["profile"])
    again = next(ln for ln in profile_feedback(s, runtime_verdicts(SM90A, s), GEMM, token_budget=600).splitlines()
                 if "DRAM traffic was" in ln)
    assert again.split(". ", 1)[1].split(" [worth")[0] in live  # the same finding (its rank follows the hot lines)


def _gemm_profile(gpu: str = "NVIDIA H200", **changes) -> ProfileSummary:
    """The H200's main GEMM as its full profile reads (compute-bound, tensor pipe busy), at the clock given."""
    fields = dict(name="gemm_bf16_tn", duration_us=1.17e6 / 1612.0, compute_sol_pct=93.0, memory_sol_pct=41.0,
                  tensor_pipe_pct=97.0, sm_mhz=1600.0, elapsed_cycles=1.17e6) | changes  # 1,612 MHz: cycles / time
    return ProfileSummary(ok=True, gpu=gpu, kernels=[KernelProfile(**fields)])


def test_a_compute_bound_kernel_under_its_top_clock_is_told_the_power_limit_sets_it():
    text = headline(_gemm_profile(), None)
    assert "The SMs ran at 1,612 of 1,980 MHz over it (1,170,000 cycles)" in text
    assert "the power limit sets the clock" in text and "fewer cycles or by less energy a cycle" in text


@pytest.mark.parametrize("gpu,changes", [
    ("NVIDIA H200", {"duration_us": 1.17e6 / 1900.0}),  # near its top clock: nothing to say
    ("NVIDIA H200", {"duration_us": None, "sm_mhz": 1900.0}),  # likewise by ncu's SM Frequency, with no duration
    ("NVIDIA H200", {"compute_sol_pct": 30.0, "memory_sol_pct": 85.0}),  # memory-bound: the clock is not its limit
    ("NVIDIA H200", {"sm_mhz": None, "elapsed_cycles": None}),  # no speed-of-light section
    ("NVIDIA H200", {"elapsed_cycles": None}),
    ("NVIDIA A100-SXM4-80GB", {}),  # no top clock known for this GPU
])
def test_no_clock_sentence_where_it_would_not_hold(gpu, changes):
    assert "MHz" not in headline(_gemm_profile(gpu, **changes), None)


def test_the_clock_sentence_fits_the_feedback_with_its_items():
    text = profile_feedback(_gemm_profile(), {}, None)
    assert "The SMs ran at 1,612 of 1,980 MHz" in text and count_tokens(text) <= DEFAULT_BUDGET


def _stalled_gemm(now_ms: float, roof_ms: float):
    """A GEMM-sized profile with three stall findings (45%, 25% and 20% of the samples) and an ncu rule, timed at `now_ms`
    against ceilings that put its roof at `roof_ms`."""
    from ptxbench.tools.profile.summary import Rule
    from ptxbench.tools.results import Timing, TimingStat

    k = KernelProfile(name="gemm", duration_us=now_ms * 1e3, compute_sol_pct=55.0, memory_sol_pct=50.0,
                      stalls={"barrier": 4.5, "wait": 2.5, "mio_throttle": 2.0, "selected": 1.0},
                      rules=[Rule(section="x", name="FPInstructions", type="OPT", speedup_pct=5.0,
                                  message="This kernel executes 10 fused and 30 non-fused FP32 instructions.")])
    s = ProfileSummary(ok=True, kernels=[k], gpu="NVIDIA H200")
    tflops = GEMM.flops / (roof_ms * 1e-3) / 1e12
    timing = Timing(candidate=TimingStat(median_ms=now_ms, ci_low_ms=now_ms, ci_high_ms=now_ms, n=150),
                    ceilings={"tflops_bf16": tflops, "hbm_gbps": 1e9})
    return profile_feedback(s, {}, GEMM, timing=timing, token_budget=900)


def test_past_its_roof_no_finding_is_said_to_be_worth_nothing():
    """The GEMM climb (H200) read "[worth up to ~0 us, 0% of the time]" on every finding from the turn it passed the
    measured roof (a median, beatable), and gained 8 us more the next turn; near the roof every finding tied at the
    headroom and lost its order. The findings keep their own order; the figure shown is bounded, or left out."""
    past = _stalled_gemm(0.73, 0.75)
    items = [ln for ln in past.splitlines() if ln[:2] in ("1.", "2.", "3.")]
    assert "It runs at or past its roof" in past and "~0 us" not in past and "worth up to" not in past
    assert "'barrier'" in items[0] and "'wait'" in items[1] and "'mio_throttle'" in items[2]
    near = _stalled_gemm(0.76, 0.75)
    items = [ln for ln in near.splitlines() if ln[:2] in ("1.", "2.", "3.")]
    assert "'barrier'" in items[0] and "'wait'" in items[1] and "'mio_throttle'" in items[2]
    assert all(ln.endswith("[worth up to ~10 us, 1% of the time]") for ln in items), items


def test_an_ncu_rule_keeps_its_facts_and_advice_not_its_pointers():
    """ncu's rules were cut to their first sentences: the tail-effect rule said only what a wave is, the fused-FMA
    rule counted instructions without its advice, and the access-pattern rules sent the model to ncu's tables."""
    from ptxbench.tools.profile.feedback import RULE_CHARS, rule_text

    wave = ("A wave of thread blocks is defined as the maximum number of blocks that can be executed in parallel on the "
            "target GPU. The number of blocks in a wave depends on the number of multiprocessors and the theoretical "
            "occupancy of the kernel. This kernel launch results in 3 full waves and a partial wave of 929 thread "
            "blocks. Under the assumption of a uniform execution duration of all thread blocks, this partial wave may "
            "account for up to 25.0% of the total runtime of this kernel. Try launching a grid with no partial wave. "
            "The overall impact of this tail effect also lessens with the number of full waves executed for a grid. "
            "See the Hardware Model (https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#metrics-hw-model) "
            "description for more details on launch configurations.")
    text = rule_text(wave, RULE_CHARS)
    assert text.startswith("This kernel launch results in 3 full waves") and "Try launching a grid with no partial" in text
    assert "is defined as" not in text and "Hardware Model" not in text and len(text) <= RULE_CHARS
    fused = ("This kernel executes 55787520 fused and 160382976 non-fused FP32 instructions. By converting pairs of "
             "non-fused instructions to their fused (https://docs.nvidia.com/cuda/floating-point/#cuda-and-floating-point),"
             " higher-throughput equivalent, the achieved FP32 performance could be increased by up to 37% (relative to "
             "its current performance).")
    text = rule_text(fused, RULE_CHARS)
    assert "By converting pairs of non-fused instructions to their fused, higher-throughput" in text and "http" not in text
    coalesce = ("This kernel has uncoalesced global accesses resulting in a total of 6291456 excessive sectors (50% of "
                "the total 12681216 sectors). Check the L2 Theoretical Sectors Global Excessive table for the primary "
                "source locations. The CUDA Programming Guide (https://docs.nvidia.com/cuda/cuda-c-programming-guide/"
                "index.html#device-memory-accesses) has additional information on reducing uncoalesced device memory "
                "accesses.")
    assert rule_text(coalesce, RULE_CHARS) == ("This kernel has uncoalesced global accesses resulting in a total of "
                                               "6291456 excessive sectors (50% of the total 12681216 sectors).")


def test_a_rule_bounded_by_its_own_counts_does_not_quote_ncus_gain():
    """"[ncu UncoalescedGlobalAccess, est. gain up to 49%] ... [worth up to ~47.2 us, 2% of the time]" (the attention
    forward, H200): ncu's figure is the excess share of the accesses, which the counts bound far lower."""
    from ptxbench.tools.profile.summary import Rule

    glob = ("This kernel has uncoalesced global accesses resulting in a total of 6291456 excessive sectors (50% of the "
            "total 12681216 sectors).")
    k = KernelProfile(name="attn", duration_us=2400.0, compute_sol_pct=76.0, memory_sol_pct=51.0,
                      rules=[Rule(section="x", name="UncoalescedGlobalAccess", type="OPT", message=glob, speedup_pct=49.4)])
    text = profile_feedback(ProfileSummary(ok=True, kernels=[k], gpu="NVIDIA H200"), {}, get_workload("mha_fwd_d128"))
    item = next(ln for ln in text.splitlines() if "UncoalescedGlobalAccess" in ln)
    assert item.startswith("1. [ncu UncoalescedGlobalAccess] This kernel") and "est. gain" not in item, item


def test_a_profiler_failure_quotes_no_host_folder_and_stays_short():
    """ncu's exit reason quotes its log's last lines, a replay's traceback among them: the model read the host's
    folders ('File "/home/alice/.venv/..."') and a line of any length, in the profile text and in every unknown
    verdict."""
    from ptxbench.agent.loop.feedback import render_eval
    from ptxbench.tools.results import EvalResult, RuntimeTarget

    error = ('ncu exited with status 1: File "/home/alice/.venv/lib/python3.12/site-packages/ptxbench/tools/profile/'
             'replay.py", line 220, in main | RuntimeError: ' + "x" * 2000)
    text = profile_feedback(ProfileSummary(ok=False, error=error), {}, GEMM)
    assert "/home/alice" not in text and 'File "replay.py", line 220' in text and len(text) < 400
    unknown = RuntimeTarget(verdict="unknown", reason=f"no profile: {error}")
    shown = render_eval(EvalResult(workload=GEMM.id, status="PASSED", targets_runtime={"wgmma": unknown}), 1, False)
    line = next(ln for ln in shown.splitlines() if ln.startswith("- target wgmma"))
    assert "/home/alice" not in line and len(line) < 700


def test_a_second_hot_line_with_the_same_advice_points_to_the_first():
    """The attention forward's turn 5 (H200): its wgmma line and its wgmma_wait line each carried the same 200
    characters of advice, in a budget that then had no room for the next finding."""
    from ptxbench.tools.profile.lines import HotLine

    hot = [HotLine(line=284, text="wgmma(...);", share_pct=12.0, stalls={"wait": 10.0}),
           HotLine(line=354, text="wgmma_wait<1>();", share_pct=10.0, stalls={"barrier": 8.0})]
    k = KernelProfile(name="attn", duration_us=2240.0, compute_sol_pct=82.0, memory_sol_pct=44.0, hot_lines=hot)
    cr = CompileResult(status="ok", arch="sm_90a", sass_by_line={284: {"HGMMA": 4}, 354: {"WARPGROUP": 1}})
    text = profile_feedback(ProfileSummary(ok=True, kernels=[k], gpu="NVIDIA H200"), {}, get_workload("mha_fwd_d128"), cr)
    items = [ln for ln in text.splitlines() if ln[:2] in ("1.", "2.")]
    assert "warps wait on the wgmma pipeline here" in items[0], items
    assert "mostly barrier: the same advice as for line 284." in items[1] and "wgmma pipeline" not in items[1], items


def test_a_memory_bound_kernel_is_not_told_its_math_pipes_are_idle():
    """The streaming copy (H200, memory-bound, L2 at 88%): ncu's HighPipeUtilization rule ('all compute pipelines are
    under-utilized ... est. gain up to 92%') came fourth, against the headline it sat under."""
    text = feedback("stream")
    assert "memory-bound" in text and "HighPipeUtilization" not in text
    assert "HighPipeUtilization" in feedback("gated_live")  # a latency-bound kernel keeps it
