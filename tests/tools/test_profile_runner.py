"""The ncu runner's command line and failure handling (a fake `ncu` stands in for the real one)."""
from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from ptxbench.tools.profile import runner
from ptxbench.tools.profile.candidate import ProfileOutcome, replay_argv
from ptxbench.tools.results import EvalResult

NCU = Path(__file__).parents[1] / "data" / "ncu"


def fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_command_filters_on_the_nvtx_range_with_unlocked_clocks(tmp_path):
    cmd = runner.ncu_command("ncu", ["python", "replay"], tmp_path / "r", ["a.sum", "b.sum", "a.sum"], full=True)
    assert cmd[:6] == ["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include", "ptxbench/"]
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.sum"
    sections = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--section"]
    assert sections == runner.SECTIONS and cmd[-2:] == ["python", "replay"]
    quick = runner.ncu_command("ncu", ["x"], tmp_path / "r", ["a.sum"], full=False)
    assert "--section" not in quick


@pytest.mark.parametrize("rc,log,expected", [
    (None, "", "timed out after 5 s"),
    (1, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", "permission"),
    (0, "==WARNING== No kernels were profiled.", "nothing was launched inside the NVTX range"),
    (2, "==ERROR== The application returned an error code (2).", "status 2"),
    (0, "==PROF== Report: /tmp/x.ncu-rep", ""),
])
def test_failure_reasons(rc, log, expected):
    reason = runner.failure_reason(rc, log, 5)
    assert (expected in reason) if expected else reason == ""


def test_no_ncu_is_a_failed_summary(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "find_ncu", lambda: None)
    s = runner.profile_command(["true"], counters=[], workdir=tmp_path)
    assert not s.ok and "not found" in s.error


def test_permission_error_is_reported(monkeypatch, tmp_path):
    ncu = fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - no access"; exit 1')
    monkeypatch.setattr(runner, "find_ncu", lambda: ncu)
    s = runner.profile_command(["true"], counters=[], workdir=tmp_path / "w")
    assert not s.ok and "ERR_NVGPUCTRPERM" in s.error


def test_a_hanging_profile_is_killed_at_the_time_limit(monkeypatch, tmp_path):
    ncu = fake_ncu(tmp_path, "sleep 30")
    monkeypatch.setattr(runner, "find_ncu", lambda: ncu)
    s = runner.profile_command(["true"], counters=[], workdir=tmp_path / "w", timeout_s=1)
    assert not s.ok and "timed out after 1 s" in s.error and s.seconds < 10


def test_unknown_metric_is_dropped_and_the_profile_retried(monkeypatch, tmp_path):
    # First call: ncu rejects a metric; second call (without it) writes a report; exports print the real pages.
    raw = NCU / "gated_live.raw.csv"
    script = f"""
case "$*" in
  *--import*--page\\ raw*) cat {raw} ;;
  *--import*) ;;
  *--version*) echo "Version 2025.3.1.0" ;;
  *not_a_metric*) echo "==ERROR== Failed to find metric not_a_metric.sum"; exit 1 ;;
  *) out=$(echo "$*" | sed 's/.* -o \\([^ ]*\\) .*/\\1/'); touch "$out.ncu-rep" ;;
esac"""
    ncu = fake_ncu(tmp_path, script)
    monkeypatch.setattr(runner, "find_ncu", lambda: ncu)
    s = runner.profile_command(["true"], counters=["not_a_metric.sum"], full=False, workdir=tmp_path / "w")
    assert s.ok, s.error
    assert "not_a_metric.sum" not in s.command[s.command.index("--metrics") + 1]
    assert s.kernels[0].opcodes_true["HGMMA"] == 10240 and s.ncu_version == "2025.3.1.0"


def test_outcome_fills_the_eval_result():
    from ptxbench.tools.profile.summary import ProfileSummary
    from ptxbench.tools.results import RuntimeTarget

    out = ProfileOutcome(ok=True, targets_runtime={"wgmma": RuntimeTarget(verdict="executed", executed_warp_insts=4)},
                         summary=ProfileSummary(ok=True), feedback="memory-bound", seconds=3.2)
    r = out.apply_to(EvalResult(workload="w", status="PASSED"))
    assert r.target_executed is True and r.feedback == "memory-bound" and r.profile["ok"] and r.seconds["profile"] == 3.2


def test_replay_argv_runs_the_module_with_this_python(tmp_path):
    argv = replay_argv("w", tmp_path / "s.ptx", "k.cubin", "sm_90a", 3, exact=True)
    assert argv[:3] == [sys.executable, "-m", "ptxbench.tools.profile.replay"] and argv[-1] == "--exact"


def test_device_env_narrows_the_visible_gpus(monkeypatch):
    from ptxbench.tools.profile.candidate import device_env

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert device_env(1)["CUDA_VISIBLE_DEVICES"] == "5"
    assert device_env(None, X="1")["CUDA_VISIBLE_DEVICES"] == "2,5"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_env(3)["CUDA_VISIBLE_DEVICES"] == "3"


def test_attach_skips_what_was_not_asked_or_did_not_run():
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.profile.attach import attach
    from ptxbench.tools.results import CompileResult

    comp = CompileResult(status="ok", arch="sm_90a", cubin_path="/nonexistent.cubin")
    failed = EvalResult(workload="w", status="INCORRECT_NUMERICAL", gpu_evaluated=True)
    assert attach(failed, EvalOptions(), "", comp).targets_runtime == {}  # verdicts only for passing kernels
    cpu_only = EvalResult(workload="w", status="COMPILED", gpu_evaluated=False)
    assert attach(cpu_only, EvalOptions(profile=True), "", comp).profile is None


def test_the_profiled_call_gets_the_evaluations_own_inputs():
    """A fixed seed 0 gave the profiled call inputs no evaluated call had, which a kernel could know by their values."""
    from types import SimpleNamespace

    from ptxbench.tools.profile.attach import _replay_seed

    assert _replay_seed(SimpleNamespace(seed=None), SimpleNamespace(input_seed=123456)) == 123456
    assert _replay_seed(SimpleNamespace(seed=7), SimpleNamespace(input_seed=123456)) == 7
    assert _replay_seed(SimpleNamespace(seed=None), SimpleNamespace(input_seed=None)) == 0


# ---- the profiled call's own output (replay.py --judge) ----
def _smoke_buffers(seed: int):
    from ptxbench.tools.gpu.buffers import allocate_set
    from ptxbench.workloads.inputs import make_inputs
    from ptxbench.workloads.registry import get_workload

    wl = get_workload("smoke_gemm_bf16_m256_n256_k512")
    bufs = allocate_set([(t.name, wl.shape(t.name), t.dtype, t.role) for t in wl.tensors], [], device="cpu")
    inputs = make_inputs(wl, seed, "normal", "cpu")
    bufs.load_inputs(inputs)
    return wl, bufs, inputs


def test_the_replay_judges_the_profiled_calls_output_by_the_evaluations_rule():
    import torch

    from ptxbench.tools.profile.replay import judged_output
    from ptxbench.workloads.references import run_reference

    wl, bufs, inputs = _smoke_buffers(11)
    bufs.tensors["C"].data.copy_(run_reference(wl, inputs)["C"].to(torch.bfloat16))
    right = judged_output(wl, 11, "normal", bufs, device="cpu")
    assert (right["passed"], right["status"], right["note"], right["method"]) == (True, "PASSED", "", "referee")
    wrong = judged_output(wl, 12, "normal", bufs, device="cpu")  # another seed's inputs: these outputs are wrong
    assert wrong["passed"] is False and wrong["status"] == "INCORRECT_NUMERICAL" and "C: relative Frobenius" in wrong["note"]
    bufs.tensors["C"].raw[-1] = 0  # a byte past the output's end: the guard zone
    guarded = judged_output(wl, 11, "normal", bufs, device="cpu")
    assert (guarded["status"], guarded["method"]) == ("RUNTIME_ERROR", "guards")
    assert judged_output(wl, 11, "normal", object(), device="cpu")["passed"] is None  # the harness's own failure: null


@pytest.mark.parametrize("workload", ["smoke_gemm_bf16_m256_n256_k512", "smoke_mha_fwd_d64", "smoke_mha_bwd_d64"])
def test_the_sketch_warm_up_runs_for_every_output_dtype_and_never_fails_the_replay(workload, capsys, monkeypatch):
    """The replay takes a sketch of a few harness elements per output dtype before `ready`, so that the judgment's own
    sketch (in the GPU-held window) finds its kernels loaded; a failure of it is only a lost saving."""
    from ptxbench.tools.gpu import calls
    from ptxbench.tools.profile.replay import warm_sketch
    from ptxbench.workloads.registry import get_workload

    wl = get_workload(workload)
    seen = []
    real = calls.sketch_tensors
    monkeypatch.setattr(calls, "sketch_tensors", lambda outs, *a, **k: seen.append(
        sorted(str(t.dtype) for t in outs.values())) or real(outs, *a, **k))
    assert warm_sketch(wl, device="cpu") is True
    assert seen == [sorted({f"torch.{t.dtype}" for t in wl.outputs})]
    monkeypatch.setattr(calls, "sketch_tensors", lambda *a, **k: 1 / 0)
    assert warm_sketch(wl, device="cpu") is False and "sketch warm-up skipped: ZeroDivisionError" in capsys.readouterr().err


def test_a_passing_kernel_whose_profiled_output_is_wrong_is_not_credited(tmp_path):
    """A kernel that told the profiled call apart could run its target instructions there only (a token wgmma whose
    result it dropped): the counters of a call that computed something else say nothing of the evaluated calls."""
    import json as _json

    from ptxbench.tools.profile.candidate import PROFILE_OUTPUT_WRONG, with_judgment
    from ptxbench.tools.profile.summary import ProfileSummary
    from ptxbench.tools.results import RuntimeTarget, Timing

    judged = tmp_path / "judged.json"
    judged.write_text(_json.dumps({"passed": False, "status": "INCORRECT_NUMERICAL", "note": "C: relative Frobenius error 1"}))
    summary = with_judgment(ProfileSummary(ok=True), judged)
    assert summary.output_passed is False and summary.output_status == "INCORRECT_NUMERICAL"
    targets = {"wgmma": RuntimeTarget(verdict="executed", executed_warp_insts=4)}
    out = ProfileOutcome(ok=True, targets_runtime=targets, summary=summary, feedback="compute-bound")
    timing = Timing.model_construct(flags=[])
    r = out.apply_to(EvalResult(workload="w", status="PASSED", timing=timing, message="passed"))
    assert r.target_executed is False and r.targets_runtime["wgmma"].verdict == "unknown"
    assert "not credited" in r.targets_runtime["wgmma"].reason and r.targets_runtime["wgmma"].executed_warp_insts == 4
    assert r.feedback.startswith("The profiled call's output was wrong") and "compute-bound" in r.feedback
    assert "not credited" in r.message and PROFILE_OUTPUT_WRONG in r.timing.flags
    assert out.targets_runtime["wgmma"].verdict == "executed"  # the outcome itself is left as measured
    # A failing kernel's profile (a probe that computes nothing, on purpose) keeps its verdicts: it scores nothing anyway.
    failed = out.apply_to(EvalResult(workload="w", status="INCORRECT_NUMERICAL"))
    assert failed.targets_runtime["wgmma"].verdict == "executed"
    # A right output, or none judged (an old replay, a missing file), changes nothing.
    judged.write_text(_json.dumps({"passed": True, "status": "PASSED", "note": ""}))
    ok = ProfileOutcome(ok=True, targets_runtime=targets, summary=with_judgment(ProfileSummary(ok=True), judged))
    assert ok.apply_to(EvalResult(workload="w", status="PASSED")).target_executed is True
    assert with_judgment(ProfileSummary(ok=True), tmp_path / "absent.json").output_passed is None
    judged.write_text("not json")
    assert with_judgment(ProfileSummary(ok=True), judged).output_passed is None


def test_the_profile_asks_the_replay_to_judge_its_output(monkeypatch, tmp_path):
    from ptxbench.tools.profile import candidate
    from ptxbench.tools.profile.summary import ProfileSummary

    seen = {}

    def fake_command(argv, **kwargs):
        seen["argv"] = argv
        Path(argv[argv.index("--judge") + 1]).write_text('{"passed": false, "status": "INCORRECT_NAN", "note": "C: 3 NaN"}')
        return ProfileSummary(ok=True, mode="verdict")

    monkeypatch.setattr(runner, "profile_command", fake_command)
    s = candidate.measure_candidate("smoke_gemm_bf16_m256_n256_k512", "src", "k.cubin", full=False, seed=9, workdir=tmp_path)
    assert s.output_passed is False and s.output_status == "INCORRECT_NAN" and s.output_note == "C: 3 NaN"
    assert seen["argv"][seen["argv"].index("--seed") + 1] == "9"


def test_the_replay_checks_its_output_against_the_evaluations_verified_sketch():
    """With the evaluation's verified sketch (GpuOutcome.verified_sketch) the replay checks its output as a timed call is
    checked: the same secret signs, the verified scales, a few passes; no reference computed in the GPU-held window."""
    import torch

    from ptxbench.tools.gpu.calls import sketch_tensors, to_sketch
    from ptxbench.tools.profile.replay import judged_output, read_expected
    from ptxbench.workloads.references import run_reference

    wl, bufs, inputs = _smoke_buffers(21)
    right = run_reference(wl, inputs)["C"].to(torch.bfloat16)
    key = 2**61 + 12345
    verified = to_sketch(["C"], [float(p) for p in sketch_tensors({"C": right}, key)])
    expected = {"key": key, "values": {n: list(v) for n, v in verified.values.items()}}
    bufs.tensors["C"].data.copy_(right)
    ok = judged_output(wl, 21, "normal", bufs, device="cpu", expected=expected)
    assert (ok["passed"], ok["status"], ok["method"]) == (True, "PASSED", "sketch") and ok["seconds"] >= 0
    bufs.tensors["C"].data[:64].mul_(0.5)  # a quarter of the rows a half short
    short = judged_output(wl, 21, "normal", bufs, device="cpu", expected=expected)
    assert (short["passed"], short["status"]) == (False, "INCORRECT_NUMERICAL") and "differs from the verified" in short["note"]
    bufs.tensors["C"].data[0, 0] = float("nan")
    assert judged_output(wl, 21, "normal", bufs, device="cpu", expected=expected)["status"] == "INCORRECT_NAN"
    wrong_key = dict(expected, key=key + 1)  # other signs: the honest output no longer matches the projections
    bufs.tensors["C"].data.copy_(right)
    assert judged_output(wl, 21, "normal", bufs, device="cpu", expected=wrong_key)["passed"] is False
    renamed = {"key": key, "values": {"D": expected["values"]["C"]}}
    assert judged_output(wl, 21, "normal", bufs, device="cpu", expected=renamed)["passed"] is None
    assert read_expected(None) is None and read_expected("/nonexistent/expected.json") is None


def test_the_profiled_call_gets_the_evaluations_input_distribution(monkeypatch, tmp_path):
    """The replay drew its inputs from the default distribution whatever the evaluation's (--dist spiky): inputs no
    evaluated call had, so an honest kernel's output failed the verified sketch of the evaluation's set 0 and lost its
    target credit (and the profiled call was known by its inputs' values)."""
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.profile import candidate
    from ptxbench.tools.profile.attach import attach
    from ptxbench.tools.profile.summary import ProfileSummary
    from ptxbench.tools.results import CompileResult

    seen = {}

    def fake_command(argv, **kwargs):
        seen["argv"] = argv
        return ProfileSummary(ok=True, mode="verdict")

    monkeypatch.setattr(runner, "profile_command", fake_command)
    candidate.measure_candidate("smoke_gemm_bf16_m256_n256_k512", "src", "k.cubin", full=False, seed=9, dist="spiky",
                                workdir=tmp_path)
    assert seen["argv"][seen["argv"].index("--dist") + 1] == "spiky"
    assert replay_argv("w", tmp_path / "s.ptx", "k.cubin", "sm_90a", 3)[-2:] == ["--dist", "normal"]

    asked = {}

    def fake_profile(*args, **kwargs):
        asked.update(kwargs)
        return ProfileOutcome(ok=False, error="stand-in")

    monkeypatch.setattr(candidate, "profile_candidate", fake_profile)
    comp = CompileResult(status="ok", arch="sm_90a", cubin_path=str(tmp_path / "k.cubin"))
    result = EvalResult(workload="smoke_gemm_bf16_m256_n256_k512", status="PASSED", gpu_evaluated=True, input_seed=42)
    attach(result, EvalOptions(dist="spiky"), "src", comp, level="verdict")
    assert (asked["seed"], asked["dist"]) == (42, "spiky")


def test_a_profile_that_could_not_tell_leaves_the_target_unmeasured_not_failed():
    """ncu missing or its counters refused: every verdict `unknown`. That is the harness's gap, so the turn's target is
    not measured (None), where it read as not executed (False) and cost the model its target credit like a real miss."""
    from ptxbench.tools.results import RuntimeTarget, Timing

    def result(*verdicts, flags=()):
        return EvalResult(workload="w", status="PASSED", timing=Timing.model_construct(flags=list(flags)),
                          targets_runtime={f"f{i}": RuntimeTarget(verdict=v) for i, v in enumerate(verdicts)})

    assert result("executed", "executed").target_executed is True
    assert result("unknown", "unknown").target_executed is None
    assert result("executed", "unknown").target_executed is None
    assert result("token", "unknown").target_executed is False  # one family known not to have run
    assert result("absent").target_executed is False and result("present_not_executed").target_executed is False
    assert result("unknown", flags=["profile_output_wrong"]).target_executed is False  # not credited: a known miss
    assert EvalResult(workload="w", status="PASSED").target_executed is None


def test_a_profiled_call_far_slower_than_the_timed_ones_is_not_credited():
    """A kernel that tells the profiler's launches apart (ncu runs each on its own, milliseconds apart) can take a
    target-instruction path there and a faster other path when timed, right output both ways
    (tests/data/cheats/attacks/profiled_tma_only.cu). That other path shows as time: honest kernels' profiled time is
    0.76-1.03x their timed median (SLOWER_UNDER_PROFILER's note), so past 1.2x the counters are not credited."""
    from ptxbench.tools.profile.candidate import SLOWER_UNDER_PROFILER, profiled_slowdown
    from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
    from ptxbench.tools.results import PROFILE_FASTER, PROFILE_SLOWER, RuntimeTarget, Timing, TimingStat

    def outcome(*kernel_us):
        kernels = [KernelProfile(name=f"k{i}", duration_us=us) for i, us in enumerate(kernel_us)]
        summary = ProfileSummary(ok=True, kernels=kernels, output_passed=True, output_status="PASSED")
        targets = {"tma": RuntimeTarget(verdict="executed", executed_warp_insts=64)}
        return ProfileOutcome(ok=True, targets_runtime=targets, summary=summary, feedback="memory-bound")

    def timed(ms):
        return EvalResult(workload="w", status="PASSED", message="passed",
                          timing=Timing(candidate=TimingStat(median_ms=ms, ci_low_ms=ms, ci_high_ms=ms, n=30)))

    honest = outcome(6.0, 3.5).apply_to(timed(0.010))  # two launches: 9.5 us of kernels in a 10 us call
    assert honest.target_executed is True and PROFILE_SLOWER not in honest.timing.flags
    edge = outcome(12.0).apply_to(timed(0.010))
    assert edge.target_executed is True  # at the bound: credited
    past = outcome(12.5).apply_to(timed(0.010))
    assert past.target_executed is False and PROFILE_SLOWER in past.timing.flags  # a path 25% slower is no longer hidden
    assert "took 1.25x" in past.targets_runtime["tma"].reason
    assert outcome(10.27).apply_to(timed(0.010)).target_executed is True  # the widest honest reading, 1.027
    cheat = outcome(2.0, 40.0).apply_to(timed(0.010))
    assert profiled_slowdown(outcome(2.0, 40.0).summary, cheat.timing) == pytest.approx(4.2)
    assert cheat.target_executed is False and cheat.targets_runtime["tma"].verdict == "unknown"
    assert "4.20x" in cheat.targets_runtime["tma"].reason and cheat.targets_runtime["tma"].executed_warp_insts == 64
    assert cheat.feedback.startswith("The profiled call's kernels took 4.20x") and "memory-bound" in cheat.feedback
    assert "not credited" in cheat.message and PROFILE_SLOWER in cheat.timing.flags
    assert SLOWER_UNDER_PROFILER == 1.2
    # The other side: TMA under the profiler, plain loads when timed, read 0.73x on an H100 (profiled_tma_only.cu)
    quick = outcome(73.0).apply_to(timed(0.100))
    assert quick.target_executed is False and PROFILE_FASTER in quick.timing.flags and PROFILE_SLOWER not in quick.timing.flags
    assert "0.73x" in quick.targets_runtime["tma"].reason and quick.feedback.startswith("The profiled call's kernels took 0.73x")
    assert outcome(90.0).apply_to(timed(0.100)).target_executed is True  # within the honest 0.94-1.03 and a margin
    assert outcome(5.0).apply_to(timed(0.010)).target_executed is True  # a 10 us call: launch gaps, not checked
    # Nothing to compare: no timing (`ptxbench profile` alone), a kernel without its time, or a failing kernel.
    assert outcome(40.0).apply_to(EvalResult(workload="w", status="PASSED")).target_executed is True
    assert outcome(None).apply_to(timed(0.010)).target_executed is True
    failed = outcome(40.0).apply_to(EvalResult(workload="w", status="INCORRECT_NUMERICAL", timing=timed(0.01).timing))
    assert failed.targets_runtime["tma"].verdict == "executed" and PROFILE_SLOWER not in failed.timing.flags
