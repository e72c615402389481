"""Feedback text from real H200 profiles: ranked, in a performance engineer's words, within budget."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.profile.feedback import count_tokens, profile_feedback, template
from ptxbench.tools.profile.runner import summarize
from ptxbench.tools.profile.summary import ProfileSummary
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
    assert set(t["verdict"]) == {"absent", "present_not_executed", "unknown"}


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
    from ptxbench.tools.profile.summary import KernelProfile

    cr = CompileResult(status="ok", arch="sm_90a", kernels={"k": KernelResources(
        name="k", sass_features=["tma_load", "mbarrier_wait", "setmaxnreg", "wgmma"])})
    two = traits(cr, {}, KernelProfile(name="k", block="(384, 1, 1)", registers=168, grid="(32, 192, 1)"))
    one = traits(cr, {}, KernelProfile(name="k", block="(256, 1, 1)", registers=168, grid="(32, 192, 1)"))
    assert "consumer_warpgroups" in two.has and "consumer_warpgroups" not in one.has
    t = template()["other"]
    assert "a second consumer warpgroup" not in t["tensor_idle_consumers"] and "ping-pong" in t["tensor_idle_consumers"]
    assert "a second consumer warpgroup" in t["tensor_idle_ring"]
