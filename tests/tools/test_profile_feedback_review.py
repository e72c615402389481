"""Profile feedback read against the H200 profiles it was written from (tests/data/profile/review: the summaries
that bench/results recorded, cut to their top lines and rules): each statement checked against the figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.tools.profile.feedback import headline, profile_feedback
from ptxbench.tools.profile.ncu_csv import to_number
from ptxbench.tools.profile.summary import ProfileSummary
from ptxbench.tools.results import CompileResult, KernelResources, RuntimeTarget
from ptxbench.workloads.registry import get_workload

REVIEW = Path(__file__).parents[1] / "data" / "profile" / "review"


def recorded(case: str) -> tuple[ProfileSummary, dict]:
    data = json.loads((REVIEW / f"{case}.json").read_text())
    return ProfileSummary.model_validate(data["summary"]), data


# What each recorded kernel's SASS does (tools/sass_features.py): every one is a TMA + mbarrier ring of wgmma,
# warp-specialised by setmaxnreg; the backward's pre- and post-passes are plain loads and stores.
RING = ["wgmma", "tma_load", "mbarrier_wait", "setmaxnreg"]


def compiled(s: ProfileSummary, sass_by_line: dict[int, dict[str, int]] | None = None) -> CompileResult:
    kernels = {k.name: KernelResources(name=k.name, sass_features=RING if k.tensor_pipe_pct else [])
               for k in s.kernels}
    return CompileResult(status="ok", arch="sm_90a", kernels=kernels, sass_by_line=sass_by_line or {})


def feedback(case: str, sass_by_line: dict[int, dict[str, int]] | None = None, budget: int = 450) -> str:
    s, data = recorded(case)
    verdicts = {n: RuntimeTarget(verdict="executed") for n in ("wgmma", "tma")}
    return profile_feedback(s, verdicts, get_workload(data["workload"]), compiled(s, sass_by_line), token_budget=budget)


def item(text: str, needle: str) -> str:
    return next((ln for ln in text.splitlines() if needle in ln), "")


def test_the_recorded_figures_are_what_the_feedback_quotes():
    """Units as ncu's raw page had them (profile_clock_2026-12-04's raw_metrics): DRAM bytes are read + write bytes
    (480,869,120 + 107,851,264), not sectors; the clock is gpc__cycles_elapsed.avg.per_second in MHz."""
    s, _ = recorded("gemm_m8192")
    k = s.main_kernel()
    assert k.dram_bytes == 480_869_120 + 107_851_264
    assert k.sm_mhz == pytest.approx(1654.4, abs=0.1) and k.elapsed_cycles == 1_202_211
    assert k.bottleneck == "compute"  # SM 94%, memory 60%
    text = feedback("gemm_m8192")
    assert "compute-bound: SM throughput at 94% of peak, busiest pipe Tensor (All) at 98%, memory at 60%" in text
    assert "841 TFLOP/s, 85% of the 989 TFLOP/s bf16 peak" in text  # 2 x 8192 x 7168 x 5120 in 714.7 us
    assert "the roofline allows 608 us" in text  # the FLOPs at 989 TFLOP/s; the 275 MB minimum takes 57 us


def test_the_clock_sentence_quotes_the_clock_its_cycles_make_the_kernels_time_at():
    """ncu's SM Frequency is the GPCs' mean elapsed count over the duration (gpc__cycles_elapsed.avg.per_second), its
    Elapsed Cycles their largest (gpc__cycles_elapsed.max): the sentence paired 1,654 MHz with 1,202,211 cycles, 727 us
    "over it" for a kernel that ran 714.7 us. The clock quoted is the cycles over the kernel's time (1,682 MHz, the
    raw page's gpc__cycles_elapsed.max.per_second), so "the time is the cycles over it" holds."""
    import re

    s, _ = recorded("gemm_m8192")
    k = s.main_kernel()
    said = re.search(r"The SMs ran at ([\d,]+) of ([\d,]+) MHz over it \(([\d,]+) cycles\)", headline(s, None))
    assert said, headline(s, None)
    mhz, cycles = (float(said.group(i).replace(",", "")) for i in (1, 3))
    assert cycles == k.elapsed_cycles and said.group(2) == "1,980"
    assert cycles / mhz == pytest.approx(k.duration_us, rel=1e-3)  # 1,682 MHz; 1,654 made it 1.7% long
    assert k.clock_mhz == pytest.approx(1682.22, abs=0.01) and k.sm_mhz == pytest.approx(1654.4, abs=0.1)


def test_an_older_ncus_clock_unit_is_read_as_a_clock():
    """ncu before 2024 gave SM Frequency as 'cycle/nsecond': read as 1.65 Hz it was dropped as implausible."""
    assert to_number("1.65", "cycle/nsecond") == pytest.approx(1.65e9)
    assert to_number("1.65", "Ghz") == pytest.approx(1.65e9)
    assert to_number("3.20", "Tbyte/s") == pytest.approx(3.2e12) and to_number("16", "Kbyte/block") == 16_000


def test_a_wgmma_waiting_to_issue_under_a_busy_tensor_pipe_is_not_told_to_use_ldmatrix():
    """The main GEMM's wgmma line (25% of samples, 40% of them mio_throttle) with the tensor pipe 94% busy: it does
    no other shared-memory access to widen, and its wgmmas read shared memory themselves."""
    line = item(feedback("gemm_m8192", {311: {"HGMMA": 8, "R2UR": 2}, 319: {"WARPGROUP": 1}}, budget=1200), "line 311")
    assert "mostly mio_throttle" in line
    assert "ldmatrix" not in line and "16-byte vectors" not in line
    assert "tensor pipe is near its peak" in line


def test_a_wgmma_waiting_on_shared_memory_traffic_is_told_to_cut_that_traffic():
    s, _ = recorded("attn_bwd_d128")
    k = next(x for x in s.kernels if x.name == "attn_bwd_wgmma")  # tensor pipe 62%, L1/shared 70%
    k.hot_lines[0].stalls = {"mio_throttle": 60_000.0, "wait": 32_529.0}
    from ptxbench.tools.profile.feedback import Traits, _line_items

    cr = CompileResult(status="ok", arch="sm_90a", sass_by_line={302: {"HGMMA": 16}})
    text = _line_items(k, Traits(), cr, 7000.0)[0][1]
    assert "other shared-memory traffic" in text and "near its peak" not in text


def test_a_memory_bound_gemm_is_not_told_to_feed_its_tensor_pipe():
    """M = 64 GEMM: DRAM 72% busy, tensor pipe 23%. The tensor pipe idles for the bytes; a second consumer in
    ping-pong (which the forward measured 5.5-5.9% slower) is not the move."""
    s, _ = recorded("gemm_m64")
    assert s.main_kernel().bottleneck == "memory"
    text = feedback("gemm_m64")
    assert "memory-bound" in text
    assert "tensor pipe was busy only" not in text and "ping-pong" not in text


def test_excess_dram_bytes_of_a_kernel_bound_by_shared_memory_are_not_worth_their_full_time():
    """The attention backward: memory-bound by L1/shared memory (70%) with DRAM 7% busy, 3.76 GB read and written
    for 1.61 GB. The recorded feedback ranked that second, 'worth up to ~446 us' (all 2.15 GB of excess at 4.8 TB/s),
    with advice to cut DRAM re-reads. Each launch's share of the excess now counts as its DRAM limits it: the main
    kernel's 2.37 GB at 7% busy ~20 us, the DRAM-bound pre- and post-passes' 0.79 + 0.59 GB in full ~164 us."""
    text = feedback("attn_bwd_d128")
    assert "memory-bound: L1/shared memory at 70% of its peak throughput" in text
    traffic = item(text, "DRAM traffic was 3.76 GB")
    assert traffic, text
    assert "the longest launch's DRAM was only 7% busy" in traffic and "L1/shared memory, not DRAM" in traffic
    assert "operands are re-read from memory" not in traffic
    worth_us = float(traffic.split("worth up to ~")[1].split(" us")[0])
    assert 170 < worth_us < 200


def test_a_worth_under_half_a_percent_does_not_read_as_nothing():
    s, data = recorded("attn_bwd_d128")
    s.kernels = [x for x in s.kernels if x.name == "attn_bwd_wgmma"]  # its 2.37 GB alone, 7% busy: ~20 us of 7 ms
    s.kernels[0].dram_bytes = 3.76e9
    text = profile_feedback(s, {}, get_workload(data["workload"]), compiled(s), token_budget=1200)
    assert item(text, "DRAM traffic was 3.76 GB").endswith("<1% of the time]")


def test_a_dram_bound_kernel_keeps_the_traffic_advice_at_full_worth():
    s, data = recorded("attn_bwd_d128")
    k = next(x for x in s.kernels if x.name == "attn_bwd_wgmma")
    k.dram_sol_pct, k.memory_sol_pct = 85.0, 85.0
    text = profile_feedback(s, {}, get_workload(data["workload"]), compiled(s))
    traffic = item(text, "DRAM traffic was 3.76 GB")
    assert "operands are re-read from memory" in traffic
    assert float(traffic.split("worth up to ~")[1].split(" us")[0]) > 400


@pytest.mark.parametrize("case", ["gemm_m64", "gemm_m8192", "attn_fwd_d128", "attn_bwd_d128"])
def test_each_recorded_profile_gives_a_bounded_headline_first_finding(case):
    """Within budget, and the first finding is the largest hot line or the largest worth (nothing cut for it)."""
    from ptxbench.tools.profile.feedback import count_tokens

    text = feedback(case)
    assert count_tokens(text) <= 450
    assert "1. " in text
    s, _ = recorded(case)
    assert headline(s, None).split(":")[0] in ("compute-bound", "memory-bound", "latency-bound")


def test_an_occupancy_held_by_two_limits_names_both():
    """The main GEMM's CTA: 168 registers x 384 threads and 225 KB of shared memory each allow one block per SM
    (ncu's TheoreticalOccupancy rule names both); the summary named registers alone."""
    from ptxbench.tools.profile.ncu_csv import DetailKernel, DetailRow
    from ptxbench.tools.profile.summary import OCC, KernelProfile, _fill_from_details

    rows = [DetailRow(OCC, "", f"Block Limit {n}", "block", v)
            for n, v in (("Registers", "1"), ("Shared Mem", "1"), ("Warps", "5"), ("SM", "32"), ("Barriers", "32"))]
    k = KernelProfile(name="gemm_bf16_tn")
    _fill_from_details(k, DetailKernel(0, "gemm_bf16_tn", rows))
    assert k.occupancy_limiter == "registers and shared memory"


@pytest.mark.parametrize("budget", [230, 260, 300])
def test_a_small_budget_cuts_the_first_finding_short_rather_than_dropping_it(budget):
    """The main GEMM's headline carries the clock sentence (~190 tokens before any finding): at 250 tokens the list's
    heading was left with nothing under it, the wgmma_wait line (37% of the samples) gone."""
    from ptxbench.tools.profile.feedback import count_tokens

    text = feedback("gemm_m8192", {311: {"HGMMA": 8}, 319: {"WARPGROUP": 1}}, budget=budget)
    assert count_tokens(text) <= budget
    assert "\n1. line 319 `wgmma_wait<1>();" in text


def test_a_power_limited_gemm_is_not_told_to_fill_the_last_four_sms():
    """ncu's LaunchConfiguration rule on the main GEMM (128 CTAs, 132 SMs, 1,654 of 1,980 MHz): "est. gain up to 3%".
    132 CTAs ran 1.2-1.5% slower (gemm_sweep.md, ref_132): more SMs powered lower the clock, as the feedback's own
    clock sentence says. Under its top clock the rule stays."""
    text = feedback("gemm_m8192", {311: {"HGMMA": 8}, 319: {"WARPGROUP": 1}}, budget=1200)
    assert "power limit sets the clock" in text and "LaunchConfiguration" not in text
    s, data = recorded("gemm_m8192")
    s.kernels[0].duration_us = s.kernels[0].elapsed_cycles / 1950.0  # the same cycles at 1,950 MHz
    cr = compiled(s, {311: {"HGMMA": 8}})
    verdicts = {n: RuntimeTarget(verdict="executed") for n in ("wgmma", "tma")}
    text = profile_feedback(s, verdicts, get_workload(data["workload"]), cr, token_budget=1200)
    assert "[ncu LaunchConfiguration, est. gain up to 3%]" in text


def test_a_wgmma_at_the_tensor_pipes_rate_ranks_below_the_lines_that_can_change():
    """The main GEMM at 450 tokens: its wgmma issue line (tensor pipe 94% busy: nothing to change there) ranked
    second and pushed out the mbarrier wait (15% of the samples, advice that can act)."""
    text = feedback("gemm_m8192", {311: {"HGMMA": 8}, 319: {"WARPGROUP": 1}, 299: {"SYNCS": 2}})
    lines = [ln for ln in text.splitlines() if ln[:3] in ("1. ", "2. ", "3. ")]
    assert lines[0].startswith("1. line 319") and lines[1].startswith("2. line 299"), lines
