"""Per-line profile and grounded feedback: Nsight's source counters on solution lines; advice that knows
what the kernel already does; every item with its worth; the feedback opens with where the kernel stands."""
from __future__ import annotations

from pathlib import Path

from ptxbench.tools.compile import compile_source
from ptxbench.tools.profile.feedback import profile_feedback
from ptxbench.tools.profile.lines import fold_lines, hot_instructions
from ptxbench.tools.profile.ncu_csv import parse_source
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary, Rule
from ptxbench.tools.results import RuntimeTarget, Timing, TimingStat
from ptxbench.workloads.registry import get_workload

DATA = Path(__file__).parents[1] / "data"
ROOT = Path(__file__).parents[2]
GEMM = get_workload("gemm_bf16_m8192_n7168_k5120")


def test_real_h200_source_counters_fold_onto_the_lines_of_the_ptx():
    # tests/data/ncu/stream.source.csv: ncu 2025.3 on the H200; its SASS is the one ptxas makes here, instruction for instruction
    src = (DATA / "profile" / "stream_copy.ptx").read_text()
    lines = compile_source(src, "ptx").kernels["stream_copy"].sass_lines
    page = parse_source((DATA / "ncu" / "stream.source.csv").read_text())[0]
    hot = fold_lines(page, lines, src)
    assert hot[0].text.startswith("st.global.v4.f32") and hot[0].share_pct > 90  # the store waits on its load
    assert hot[0].dominant == "long_scoreboard" and src.splitlines()[hot[0].line - 1].strip() == hot[0].text
    assert fold_lines(page, lines[:-1], src) == []  # another cubin: no guessing
    # the same samples by instruction: the store first, on its line; the shares of all instructions sum to 100
    top = hot_instructions(page, lines, top=len(lines))
    assert top[0].sass.startswith("STG") and top[0].line == hot[0].line and top[0].dominant == "long_scoreboard"
    assert abs(sum(h.share_pct for h in top) - 100) < 0.5 and top[0].share_pct >= top[-1].share_pct
    assert hot_instructions(page, lines[:-1]) == []


def test_hot_lines_are_numbered_as_the_compilers_number_them():
    # a form feed (or \x85, \u2028) in a comment ends no line for ptxas, nvcc or line_of: the hot line is still the
    # store's line, quoted with the store's text, not with the text of the line above it
    src = (DATA / "profile" / "stream_copy.ptx").read_text().replace("// i\n", "// i\x0c next\n")
    lines = compile_source(src, "ptx").kernels["stream_copy"].sass_lines
    page = parse_source((DATA / "ncu" / "stream.source.csv").read_text())[0]
    hot = fold_lines(page, lines, src)
    assert hot[0].text.startswith("st.global.v4.f32") and src.split("\n")[hot[0].line - 1].strip() == hot[0].text


def _gemm_summary(hot_line: int, hot_text: str) -> ProfileSummary:
    """The reference GEMM's profile as recorded on the H200 on 2026-11-30 (issue 12): 93% SM throughput,
    tensor pipe 97%, DRAM 3.4x the minimum, ncu's occupancy rule 'up to 81%'."""
    k = KernelProfile(name="gemm_bf16_tn", grid="(132, 1, 1)", block="(384, 1, 1)", duration_us=772.0,
                      compute_sol_pct=93.0, memory_sol_pct=45.0, dram_sol_pct=30.0, tensor_pipe_pct=97.0,
                      registers=168, theoretical_occupancy_pct=18.75, achieved_occupancy_pct=18.0,
                      occupancy_limiter="registers", dram_bytes=3.4 * GEMM.min_bytes, opcodes={"HGMMA": 1.0e6},
                      stalls={"barrier": 3.0, "long_scoreboard": 2.0, "mio_throttle": 1.0, "selected": 1.0},
                      rules=[Rule(section="Occupancy", name="AchievedOccupancy", type="OPT", speedup_pct=81.0,
                                  message="The difference between calculated theoretical and achieved occupancy...")])
    from ptxbench.tools.profile.lines import HotLine
    k.hot_lines = [HotLine(line=hot_line, text=hot_text, samples=310, share_pct=31.0,
                           stalls={"long_scoreboard": 250, "selected": 60})]
    return ProfileSummary(ok=True, gpu="NVIDIA H200", kernels=[k])


def _timing(now_ms: float) -> Timing:
    return Timing(candidate=TimingStat(median_ms=now_ms, ci_low_ms=now_ms, ci_high_ms=now_ms, n=150),
                  baselines={"cublas": TimingStat(median_ms=0.876, ci_low_ms=0.87, ci_high_ms=0.88, n=150)},
                  primary_baseline="cublas", speedup=0.876 / now_ms, ceilings={"tflops_bf16": 780.0, "hbm_gbps": 4100.0})


def _gemm_feedback(now_ms: float = 0.875) -> tuple[str, str, int]:
    src = (ROOT / "workloads" / "solutions" / "gemm_bf16_m8192_n7168_k5120.cu").read_text()
    cr = compile_source(src, "cuda", "sm_90a", GEMM)
    wait = next(n for n, ln in enumerate(src.splitlines(), 1) if "mbar_wait(&full[stage], phase)" in ln)
    verdicts = {"wgmma": RuntimeTarget(verdict="executed"), "tma": RuntimeTarget(verdict="executed")}
    s = _gemm_summary(wait, src.splitlines()[wait - 1].strip())
    return profile_feedback(s, verdicts, GEMM, cr, timing=_timing(now_ms), token_budget=600), src, wait


def test_reference_gemm_is_not_told_to_add_what_it_already_has():
    text, _, wait = _gemm_feedback()
    low = text.lower()
    assert "per-stage mbarriers" not in low and "load tiles ahead with tma" not in low
    assert "multi-stage shared-memory ring" not in low and "up to 81%" not in text and "occupancy is" not in low
    items = [ln for ln in text.splitlines() if ln[:2].rstrip(".").isdigit()]
    assert items[0].startswith(f"1. line {wait} `mbar_wait(&full[stage], phase);`: 31% of stall samples, mostly long_scoreboard")
    assert "this is an mbarrier wait" in items[0] and "[worth up to ~" in items[0]


def test_feedback_opens_with_the_roof_and_the_library_and_orders_items_by_worth():
    text, _, _ = _gemm_feedback(0.875)
    first = text.splitlines()[0]
    assert first.startswith("Where it stands: 875 us") and "1.00x cublas (876 us)" in first
    roof_pct = 100 * (2 * 8192 * 7168 * 5120 / 780e12) / 0.875e-3
    assert f"({roof_pct:.0f}% of the roof, measured ceilings)" in first and "within" not in first
    worths = [float(ln.split("[worth up to ~")[1].split()[0]) for ln in text.splitlines() if "[worth up to ~" in ln]
    assert worths == sorted(worths, reverse=True) and len(worths) >= 2
    headroom = 875 - (2 * 8192 * 7168 * 5120 / 780e12) * 1e6
    assert max(worths) <= headroom + 1  # no item is worth more than the distance to the roof


def test_a_kernel_at_its_roof_is_told_so():
    roof_ms = 2 * 8192 * 7168 * 5120 / 780e12 * 1e3
    text, _, _ = _gemm_feedback(roof_ms * 1.03)
    assert "It is within 3% of its roof" in text.splitlines()[0]
    # past the measured ceilings (medians, so a kernel can beat them: the H200's GEMM reference read 103%): no
    # negative headroom, and the tuner's evidence reads no headroom left
    text, _, _ = _gemm_feedback(roof_ms * 0.97)
    first = text.splitlines()[0]
    assert "It runs at or past its roof" in first and "within" not in first and "-" not in first.split("roof, ")[1]
    from ptxbench.agent.models.evidence import evidence_from
    from ptxbench.tools.results import EvalResult

    assert evidence_from(EvalResult(workload="gemm_bf16_m8192_n7168_k5120", status="PASSED",
                                    feedback=text)).headroom_pct == 0.0


def test_a_multi_kernel_plans_source_pages_join_their_launches_by_name():
    """The backward's three launches: a source page missing for one (or pages in another order) never lands on
    another launch; a launch whose page and compile disagree says so (lines_note) instead of guessing."""
    from ptxbench.tools.profile.ncu_csv import RawKernel, SourceKernel, SourceLine
    from ptxbench.tools.profile.summary import attach_lines, build_summary

    def page(name: str, n: int) -> SourceKernel:
        return SourceKernel(name, [SourceLine(f"0x{16 * i:x}", "FFMA R1, R2, R3, R4", 1.0, 32.0, 32.0, 10.0 * (i + 1),
                                              {"wait": 10.0 * (i + 1)}) for i in range(n)])

    raw = [RawKernel(0, "attn_bwd_pre"), RawKernel(1, "attn_bwd_wgmma"), RawKernel(2, "attn_bwd_post")]
    kernels = build_summary(raw, [], [page("attn_bwd_post", 2), page("attn_bwd_wgmma", 3)], counters=[])
    assert [k._source.name if k._source else None for k in kernels] == [None, "attn_bwd_wgmma", "attn_bwd_post"]
    summary = ProfileSummary(ok=True, gpu="NVIDIA H200", kernels=kernels)
    solution = "line one\nline two\nline three\n"
    attach_lines(summary, {"attn_bwd_wgmma": [1, 2, 3], "attn_bwd_post": [1, 2, 3]}, solution)
    main, post = summary.kernels[1], summary.kernels[2]
    assert [h.line for h in main.hot_lines] == [3, 2, 1] and main.hot_lines[0].text == "line three"
    assert [(h.index, h.line, h.dominant) for h in main.hot_sass] == [(2, 3, "wait"), (1, 2, "wait"), (0, 1, "wait")]
    assert post.hot_sass == []
    assert post.hot_lines == [] and post.lines_note == "the source page has 2 instructions, the compile 3"
