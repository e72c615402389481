"""The range check (tools/profile/range_check.py): a multi-launch plan's target work read again with its launches back
to back (ncu's range replay), against the kernel replay's per-launch sum. On the CPU: the command, the judgment, the
outcome it gives an EvalResult and the wiring in profile_candidate (a fake ncu or a fake profile_command); the GPU
side is tests/tools/test_profile_gpu.py and tests/workloads/test_cheat_attacks.py."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ptxbench.tools.profile import runner
from ptxbench.tools.profile.candidate import ProfileOutcome
from ptxbench.tools.profile.range_check import RANGE_SHARE, RangeCheck, checked_families, judge_range
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
from ptxbench.tools.results import PROFILE_RANGE_SHORT, EvalResult, RuntimeTarget, Timing, TimingStat
from ptxbench.workloads.arch import SM90A

WGMMA_WORK = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"
TMA_WORK = "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"


def verdicts(wgmma_ops=6.0e11, tma_bytes=4.0e8, tma="executed"):
    return {"wgmma": RuntimeTarget(verdict="executed", counter_values={WGMMA_WORK: wgmma_ops}),
            "tma": RuntimeTarget(verdict=tma, counter_values={TMA_WORK: tma_bytes})}


def kernel_summary(launches: int) -> ProfileSummary:
    return ProfileSummary(ok=True, mode="verdict", kernels=[KernelProfile(name=f"k{i}", duration_us=100.0)
                                                            for i in range(launches)])


def range_summary(**counters) -> ProfileSummary:
    return ProfileSummary(ok=True, mode="verdict", kernels=[KernelProfile(name="range", duration_us=210.0,
                                                                          counters=counters)])


def test_the_range_replay_is_asked_of_ncu_by_name(tmp_path):
    kernel = runner.ncu_command("ncu", ["python", "replay"], tmp_path / "r", ["a.sum"], full=False)
    ranged = runner.ncu_command("ncu", ["python", "replay"], tmp_path / "r", ["a.sum"], full=False, replay="range")
    assert "--replay-mode" not in kernel
    assert ranged[ranged.index("--replay-mode") + 1] == "range" and ranged[-2:] == ["python", "replay"]
    assert ranged[:6] == kernel[:6]  # the same NVTX range, the same unlocked clocks


def test_counters_range_replay_refuses_are_named_like_unknown_ones():
    log = ("==ERROR== Metric smsp__sass_inst_executed_op_tma.sum is not supported in range replay mode\n"
           "==ERROR== Failed to find metric regex:not_a_metric.sum\n")
    assert runner.refused_metrics(log) == ["smsp__sass_inst_executed_op_tma.sum", "not_a_metric.sum"]
    assert runner.refused_metrics("") == []


def test_only_credited_families_of_a_multi_launch_plan_are_checked():
    assert checked_families(SM90A, kernel_summary(1), verdicts()) == {}  # one launch: no gap between launches to time
    assert checked_families(SM90A, kernel_summary(3), verdicts()) == {"wgmma": WGMMA_WORK, "tma": TMA_WORK}
    assert checked_families(SM90A, kernel_summary(2), verdicts(tma="token")) == {"wgmma": WGMMA_WORK}
    assert checked_families(SM90A, kernel_summary(2), verdicts(tma_bytes=0.0)) == {"wgmma": WGMMA_WORK}
    assert checked_families(SM90A, ProfileSummary(ok=False, error="x"), verdicts()) == {}


def test_an_honest_plan_reads_the_same_work_back_to_back():
    v = verdicts()
    checked = checked_families(SM90A, kernel_summary(3), v)
    rc = judge_range(checked, v, range_summary(**{WGMMA_WORK: 6.0e11, TMA_WORK: 4.0e8}), 3)
    assert rc.ok and rc.short == [] and rc.reason() == "" and rc.share("tma") == 1.0 and rc.range_us == 210.0
    edge = judge_range(checked, v, range_summary(**{WGMMA_WORK: 6.0e11, TMA_WORK: RANGE_SHARE * 4.0e8}), 3)
    assert edge.ok and edge.short == []  # at the share: kept


def test_a_plan_that_runs_its_target_path_only_launch_by_launch_is_short():
    v = verdicts()
    checked = checked_families(SM90A, kernel_summary(2), v)
    rc = judge_range(checked, v, range_summary(**{WGMMA_WORK: 6.0e11, TMA_WORK: 8192.0}), 2)
    assert rc.ok and rc.short == ["tma"]
    assert f"tma's {TMA_WORK} read 8,192 with the plan's 2 launches back to back against 400,000,000" in rc.reason()


@pytest.mark.parametrize("ranged,error", [
    (ProfileSummary(ok=False, error="ncu exited with status 1: range replay refused"), "range replay refused"),
    (range_summary(**{WGMMA_WORK: 6.0e11}), f"range replay read no {TMA_WORK}"),
    (kernel_summary(2), "gave 2 rows"),
])
def test_a_range_that_cannot_be_read_withholds_nothing_and_says_why(ranged, error):
    v = verdicts()
    rc = judge_range(checked_families(SM90A, kernel_summary(2), v), v, ranged, 2)
    assert not rc.ok and error in rc.error and rc.short == []
    r = ProfileOutcome(ok=True, targets_runtime=v, summary=kernel_summary(2), range_check=rc).apply_to(timed())
    assert r.target_executed is True and r.profile["range_check"]["error"] == rc.error


def timed(ms: float = 0.2) -> EvalResult:
    return EvalResult(workload="w", status="PASSED", message="passed",
                      timing=Timing(candidate=TimingStat(median_ms=ms, ci_low_ms=ms, ci_high_ms=ms, n=30)))


def test_a_short_range_withholds_the_credit_with_its_own_flag():
    v = verdicts()
    checked = checked_families(SM90A, kernel_summary(2), v)
    short = judge_range(checked, v, range_summary(**{WGMMA_WORK: 6.0e11, TMA_WORK: 0.0}), 2)
    summary = ProfileSummary(ok=True, mode="verdict", kernels=[KernelProfile(name="stamp", duration_us=2.0),
                                                                KernelProfile(name="gemm", duration_us=198.0)])
    r = ProfileOutcome(ok=True, targets_runtime=v, summary=summary, feedback="f", range_check=short).apply_to(timed())
    assert r.target_executed is False and PROFILE_RANGE_SHORT in r.timing.flags
    assert {t.verdict for t in r.targets_runtime.values()} == {"unknown"}
    assert r.targets_runtime["tma"].reason.startswith("not credited: tma's")
    assert r.feedback.startswith("Run back to back, as when timed") and r.feedback.endswith("\nf")
    assert r.profile["range_check"]["short"] == ["tma"] and "not credited" in r.message
    honest = judge_range(checked, v, range_summary(**{WGMMA_WORK: 6.0e11, TMA_WORK: 4.0e8}), 2)
    kept = ProfileOutcome(ok=True, targets_runtime=v, summary=summary, range_check=honest).apply_to(timed())
    assert kept.target_executed is True and kept.profile["range_check"]["ok"] and PROFILE_RANGE_SHORT not in kept.timing.flags
    assert kept.seconds["profile.range"] == honest.seconds


def test_a_withheld_profile_names_its_first_reason_once():
    """Slower under the profiler and short back to back: the slower flag only (the first reason found), not both."""
    v = verdicts()
    short = judge_range(checked_families(SM90A, kernel_summary(2), v), v, range_summary(**{WGMMA_WORK: 0.0,
                                                                                           TMA_WORK: 0.0}), 2)
    slow = ProfileSummary(ok=True, kernels=[KernelProfile(name="a", duration_us=200.0),
                                            KernelProfile(name="b", duration_us=200.0)])
    r = ProfileOutcome(ok=True, targets_runtime=v, summary=slow, range_check=short).apply_to(timed(0.2))
    assert "profile_slower" in r.timing.flags and PROFILE_RANGE_SHORT not in r.timing.flags
    assert r.profile["range_check"]["short"] == ["wgmma", "tma"]


def fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_range_row_is_read_through_the_runner(monkeypatch, tmp_path):
    """ncu's raw page under range replay: one row, named `range` (as run 36's probe read it), the counters' values in
    it; a first run that names a counter range replay does not collect is retried without it."""
    raw = tmp_path / "range.raw.csv"
    raw.write_text(f'"ID","Kernel Name","gpu__time_duration.sum","{WGMMA_WORK}","{TMA_WORK}"\n'
                   '"","","nsecond","","byte"\n'
                   '"0","range","332,512","34,359,738,368","402,653,184"\n')
    script = f"""
case "$*" in
  *--import*--page\\ raw*) cat {raw} ;;
  *--import*) ;;
  *--version*) echo "Version 2025.3.1.0" ;;
  *smsp__sass_inst_executed_op_tma.sum*) echo "==ERROR== Metric smsp__sass_inst_executed_op_tma.sum is not supported in range replay mode"; exit 1 ;;
  *--replay-mode\\ range*) out=$(echo "$*" | sed 's/.* -o \\([^ ]*\\) .*/\\1/'); touch "$out.ncu-rep" ;;
  *) exit 7 ;;
esac"""
    monkeypatch.setattr(runner, "find_ncu", lambda: fake_ncu(tmp_path, script))
    s = runner.profile_command(["true"], counters=[WGMMA_WORK, TMA_WORK, "smsp__sass_inst_executed_op_tma.sum"],
                               full=False, workdir=tmp_path / "w", replay="range")
    assert s.ok, s.error
    assert "smsp__sass_inst_executed_op_tma.sum" not in s.command[s.command.index("--metrics") + 1]
    (row,) = s.kernels
    assert row.counters[WGMMA_WORK] == 34359738368 and row.counters[TMA_WORK] == 402653184
    assert row.duration_us == pytest.approx(332.512)


def test_profile_candidate_runs_the_range_check_for_a_multi_launch_plan(monkeypatch, tmp_path):
    """The kernel replay gives two launches with TMA credited; the range replay (the same replay program, no output
    judgment, replay="range") reads TMA's bytes near 0: the outcome carries the check, and applied it withholds."""
    from ptxbench.tools.profile import candidate

    calls = []

    def fake_command(argv, **kwargs):
        calls.append((argv, kwargs))
        if kwargs.get("replay") == "range":
            assert kwargs["counters"] == [TMA_WORK] and not kwargs["full"]
            return range_summary(**{TMA_WORK: 4096.0})
        kernels = [KernelProfile(name=n, duration_us=us, counters={"smsp__sass_inst_executed_op_tma.sum": t,
                                                                   TMA_WORK: b})
                   for n, us, t, b in (("stamp", 2.0, 0.0, 0.0), ("gemm", 150.0, 128.0, 1048576.0))]
        return ProfileSummary(ok=True, mode="verdict", kernels=kernels)

    monkeypatch.setattr(runner, "profile_command", fake_command)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"")
    out = candidate.profile_candidate("smoke_gemm_bf16_m256_n256_k512", "text", cubin, full=False, workdir=tmp_path / "p")
    # launch by launch TMA did all of the input traffic, back to back almost none: withheld already here (no timing
    # needed), so `ptxbench profile` shows it as the evaluation does
    assert out.range_check is not None and out.range_check.short == ["tma"] and out.range_check.launches == 2
    tma = out.targets_runtime["tma"]
    assert tma.verdict == "unknown" and tma.reason.startswith("not credited: tma's") and tma.counter_values[TMA_WORK] > 0
    assert out.feedback.startswith("Run back to back, as when timed") and out.feedback.count("Run back to back") == 1
    kernel_argv, range_argv = calls[0][0], calls[1][0]
    assert "--judge" in kernel_argv and "--judge" not in range_argv
    assert range_argv[range_argv.index("--workload") + 1] == "smoke_gemm_bf16_m256_n256_k512"
    assert (tmp_path / "p" / "range" / "solution.txt").read_text() == "text"
    r = out.apply_to(timed(0.152))
    assert r.target_executed is False and PROFILE_RANGE_SHORT in r.timing.flags
    assert r.feedback.count("Run back to back") == 1 and r.profile["range_check"]["short"] == ["tma"]


def test_a_single_launch_or_a_wrong_profiled_output_takes_no_range_profile(monkeypatch, tmp_path):
    from ptxbench.tools.profile import candidate

    replays = []

    def fake_command(argv, **kwargs):
        replays.append(kwargs.get("replay", "kernel"))
        return ProfileSummary(ok=True, mode="verdict", kernels=[KernelProfile(
            name="gemm", duration_us=150.0, counters={"smsp__sass_inst_executed_op_tma.sum": 128.0, TMA_WORK: 1048576.0})])

    monkeypatch.setattr(runner, "profile_command", fake_command)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"")
    out = candidate.profile_candidate("smoke_gemm_bf16_m256_n256_k512", "text", cubin, full=False)
    assert out.range_check is None and replays == ["kernel"]
    two = ProfileSummary(ok=True, mode="verdict", output_passed=False, kernels=[KernelProfile(
        name=n, counters={"smsp__sass_inst_executed_op_tma.sum": 128.0, TMA_WORK: 1048576.0}) for n in "ab"])
    out = candidate.profile_candidate("smoke_gemm_bf16_m256_n256_k512", "text", cubin, full=False, measured=(two, 1.0))
    assert out.range_check is None and replays == ["kernel"]  # already withheld by its output: no second run


def test_a_range_check_round_trips_through_the_result():
    rc = RangeCheck(ok=True, launches=3, counters={"wgmma": WGMMA_WORK}, kernel_sums={"wgmma": 1.0},
                    range_values={"wgmma": 1.0})
    assert RangeCheck.model_validate(rc.model_dump()) == rc


def test_ptxbench_profile_says_what_the_launches_did_back_to_back(monkeypatch):
    """The command prints the range check's line (text) and carries it (--json); a short range shows the families as
    not credited there too, since that needs no timing."""
    import json

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    def fake_command(argv, **kwargs):
        if kwargs.get("replay") == "range":
            return range_summary(**{TMA_WORK: 0.0})
        return ProfileSummary(ok=True, mode="verdict", kernels=[KernelProfile(
            name=n, duration_us=50.0, counters={"smsp__sass_inst_executed_op_tma.sum": 64.0, TMA_WORK: 524288.0})
            for n in ("stamp", "gemm")])

    monkeypatch.setattr(runner, "profile_command", fake_command)
    monkeypatch.setattr("ptxbench.agent.cli.preflight.no_gpu_reason", lambda: None)
    cheat = str(Path(__file__).parents[1] / "data" / "cheats" / "attacks" / "profiled_tma_only.cu")  # TMA in its SASS
    text = CliRunner().invoke(app, ["profile", "smoke_gemm_bf16_m256_n256_k512", cheat, "--verdict-only"])
    assert "the 2 launches back to back (range replay): short, tma's" in text.output, text.output
    assert "tma: unknown" in text.output and "not credited" in text.output
    out = CliRunner().invoke(app, ["profile", "smoke_gemm_bf16_m256_n256_k512", cheat, "--verdict-only", "--json"])
    record = json.loads(out.stdout[out.stdout.index("{"):])
    assert record["range_check"]["short"] == ["tma"] and record["targets_runtime"]["tma"]["verdict"] == "unknown"
