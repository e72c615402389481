"""The turn feedback as the model reads it, for each kind of verdict: every fact once, no number that misleads, no
counter dump, and the compile errors the model must fix all named."""
from __future__ import annotations

from ptxbench.agent.loop.feedback import render_eval
from ptxbench.tools.results import CompileIssue, CompileResult, EvalResult, RuntimeTarget, TrialStats

WL = "gemm_bf16_m8192_n7168_k5120"


def test_a_failing_trial_never_reads_as_all_elements_matching():
    """The synthetic missing-fence GEMM (H200): 99.996% of C matched, and its FAIL line said '100.00% elements match'."""
    from ptxbench.agent.loop.feedback import matched_percent

    assert matched_percent(0.99996) == "99.99%" and matched_percent(1.0) == "100%" and matched_percent(0.5) == "50.00%"
    assert matched_percent(0.0) == "0%" and matched_percent(1e-7).startswith("0.0000") and matched_percent(1e-7) != "0%"
    bad = TrialStats(trial=0, tensor="C", passed=False, max_abs_err=338.0, max_rel_err=9.73e25, rel_fro_err=0.00886,
                     frac_matched=0.99996, worst_index=[2562, 3642], worst_value=-216.0, worst_expected=122.17402648925781)
    text = render_eval(EvalResult(workload=WL, status="INCORRECT_NUMERICAL", correctness=[bad]), 1, False)
    line = next(ln for ln in text.splitlines() if ln.startswith("- trial 0 C: FAIL"))
    assert "100.00%" not in line and "99.99% elements match" in line


def test_the_trial_line_shows_the_bounded_error_not_the_elementwise_relative_one():
    """Every passing GEMM turn of the recorded climbs read 'max rel err 9.73e+25' (an element expected near zero):
    the relative Frobenius error, which the rule bounds, is shown instead, and values in six digits."""
    ok = TrialStats(trial=0, tensor="O", passed=True, max_abs_err=0.000574, max_rel_err=2.97e5, rel_fro_err=0.00227,
                    frac_matched=1.0, worst_index=[2, 25, 451, 124], worst_value=-0.126953125,
                    worst_expected=-0.12752722203731537)
    text = render_eval(EvalResult(workload=WL, status="PASSED", correctness=[ok]), 1, False)
    assert "max rel err" not in text and "2.97e+05" not in text
    assert "relative Frobenius err 0.00227" in text and "got -0.126953, expected -0.127527" in text


def test_a_compile_error_lists_each_error_once_and_no_target_verdict():
    """A PTX file whose 30 added lines each failed twice: the message repeated the first 12 errors, the list showed 15
    of 60 (one mistake's repeats) and said nothing of the rest, and 'target wgmma: ABSENT' was added for a module
    that never assembled."""
    errors = []
    for i in range(30):
        errors += [CompileIssue(line=79 + i, message="Arguments mismatch for instruction 'add'"),
                   CompileIssue(line=79 + i, message=f"Unknown symbol '%q{i}'")]
    errors.append(CompileIssue(line=200, message="Not a name of any known instruction: 'movv'"))
    comp = CompileResult(status="error", arch="sm_90a", errors=errors, targets={
        "wgmma": {"in_ptx": False, "in_sass": False}, "tma": {"in_ptx": True, "in_sass": False}})
    summary = "; ".join(f"line {e.line}: {e.message}" for e in errors[:12]) + "; and 49 more"
    text = render_eval(EvalResult(workload=WL, status="COMPILE_ERROR", compile=comp, message=summary), 2, False)
    assert text.count("Unknown symbol '%q0'") == 1
    assert "- lines 79, 80, 81, 82, 83, 84 and 24 more: Arguments mismatch for instruction 'add'" in text
    assert "- ... and 17 more distinct errors" in text
    assert "target wgmma" not in text and "target tma" not in text and "ABSENT" not in text


def test_a_plan_error_is_listed_once():
    """The synthetic wrong-swizzle GEMM: the plan issue came twice, in the message and again as '- plan: ...'."""
    issue = ("line 13: tmap.A_map.box[0] = 64 is 128 bytes; with swizzle 64B the inner box is at most 64 bytes "
             "(32 bfloat16 elements)")
    r = EvalResult(workload=WL, status="PLAN_ERROR", plan_errors=[issue],
                   message="the solution file has problems: " + issue)
    text = render_eval(r, 1, False)
    assert text.count("tmap.A_map.box[0]") == 1
    assert "the solution file has problems:\n- line 13: tmap.A_map.box[0]" in text


def test_a_runtime_error_is_said_once():
    """The synthetic phase-error GEMM: 'the kernel failed: CUDA_ERROR_LAUNCH_FAILED: ...' and again 'Runtime error:
    CUDA_ERROR_LAUNCH_FAILED: ...'; a hang's 'TIMEOUT after 5 s' beside its sentence."""
    r = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
                   message="the kernel failed: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure")
    assert render_eval(r, 1, False).count("unspecified launch failure") == 1
    bare = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="WORKER_DIED: exit code -11")
    assert "Runtime error: WORKER_DIED: exit code -11" in render_eval(bare, 1, False)


def test_an_executed_target_is_said_without_its_counter_dump():
    """Every passing turn of the recorded climbs listed the ncu counters behind 'executed' (about 600 characters);
    the share of the workload's work it did is what tells an honest use from a token one."""
    reason = ("wgmma: 1,207,959,552 predicate-true thread executions, 37,748,736 warp-level, "
              "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum = 1,649,267,441,664")
    r = EvalResult(workload=WL, status="PASSED", targets_runtime={
        "wgmma": RuntimeTarget(verdict="executed", reason=reason, work_share=1.0),
        "tma": RuntimeTarget(verdict="executed", reason="tma: 8 predicate-true thread executions", work_share=12.6),
        "tcgen05": RuntimeTarget(verdict="absent", reason="no UTCHMMA instruction in the SASS")})
    text = render_eval(r, 1, False)
    assert "sm__ops_path" not in text and "predicate-true" not in text
    assert "- target wgmma at runtime: executed (1.00x the workload's FLOPs)" in text
    assert "- target tma at runtime: executed (12.60x the bytes of the workload's inputs)" in text
    assert "- target tcgen05 at runtime: absent (no UTCHMMA instruction in the SASS)" in text


def _timed(ms: float, speedup: float) -> EvalResult:
    from ptxbench.tools.results import Timing, TimingStat

    return EvalResult(workload=WL, status="PASSED", timing=Timing(
        candidate=TimingStat(median_ms=ms, ci_low_ms=ms, ci_high_ms=ms, n=150), speedup=speedup))


def test_the_progress_line_compares_the_kernel_with_the_fastest_before_it():
    """The attention climb's turn 6 (H200) read only "Best passing speedup so far: 1.117x" -- its own speedup, up
    from 1.102x because the library timed slower, while the kernel was slower than turn 5's (2.2544 ms against
    2.2477 ms) and the profile said "not a new best". The turn's own time against the fastest before it is said."""
    from types import SimpleNamespace

    from ptxbench.agent.loop.graph import _progress

    config = SimpleNamespace(turns=8)
    state = {"best_speedup": 1.102, "best_kernel_ms": 2.2477, "done_turns": [{}] * 5}
    text = _progress(config, state, _timed(2.2544, 1.117))
    assert text.startswith("This kernel (2.2544 ms) is 0.3% slower than your fastest so far (2.2477 ms), though its "
                           "speedup is higher: the library timed slower this turn.")
    plain = _progress(config, state, _timed(2.30, 1.05))
    assert plain.startswith("This kernel (2.3000 ms) is 2.3% slower than your fastest so far (2.2477 ms). Best")
    assert text.endswith("Best passing speedup so far: 1.117x. Turns left: 2.")
    text = _progress(config, state, _timed(2.2366, 1.084))
    assert text.startswith("This kernel is your fastest so far: 2.2366 ms, 0.5% faster than your best before (2.2477 ms).")
    first = _progress(config, {"done_turns": []}, _timed(3.7072, 0.665))
    assert first == "Best passing speedup so far: 0.665x. Turns left: 7."
    failed = _progress(config, state, EvalResult(workload=WL, status="TIMEOUT"))
    assert failed == "Best passing speedup so far: 1.102x. Turns left: 2."


def test_a_hang_or_an_unnamed_fault_gets_its_usual_causes():
    """The synthetic expect_tx and phase-parity GEMMs (H200) read "did not finish within 5 s" and "unspecified launch
    failure" and nothing else: no lead to what to check. A hang whose likely cause the evaluation named (the register
    pool) gets no second guess, and a wrong answer gets none."""
    hang = EvalResult(workload=WL, status="TIMEOUT", runtime_error="TIMEOUT after 5 s (run phase)",
                      message="the kernel did not finish within 5 s (run phase)")
    assert "Common causes: " in render_eval(hang, 1, False) and "expect_tx byte count" in render_eval(hang, 1, False)
    pool = hang.model_copy(update={"message": hang.message + ". Likely cause, from the compile warnings: setmaxnreg"})
    assert "Common causes" not in render_eval(pool, 1, False)
    fault = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="CUDA_ERROR_LAUNCH_FAILED: unspecified launch "
                       "failure", message="the kernel failed: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure")
    assert "Common causes: the driver names no cause" in render_eval(fault, 1, False)
    oob = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="OUT_OF_BOUNDS_WRITE: C: 0 bytes changed before "
                     "the buffer, 512 bytes after it", message="out-of-bounds write: the kernel wrote outside its buffers")
    assert "Common causes: stores landed outside the buffers" in render_eval(oob, 1, False)
    died = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="WORKER_DIED: exit code -11", message="died")
    wrong = EvalResult(workload=WL, status="INCORRECT_NUMERICAL", message="C is wrong")
    assert "Common causes" not in render_eval(died, 1, False) + render_eval(wrong, 1, False)


def test_the_summary_context_names_the_fastest_kernel_it_no_longer_shows():
    """With --context summary an older turn is one line: "turn 5: PASSED, speedup 1.102x" gave no time and did not
    say that this turn's kernel, whose code the context had dropped, was still the fastest (turn 6 read 1.117x on a
    slower kernel)."""
    from ptxbench.agent.loop.context import build_messages
    from ptxbench.agent.loop.state import initial_state

    state = initial_state("SYS", "TASK")
    for turn, ms, speedup in ((5, 2.2477, 1.102), (6, 2.2544, 1.117), (7, 2.26, 1.09)):
        outcome = {"turn": turn, "status": "PASSED", "speedup": speedup, "message": "correct",
                   "evidence": {"kernel_ms": ms, "speedup": speedup}}
        state["done_turns"].append({"turn": turn, "messages": [{"role": "assistant", "content": f"reply {turn}"}],
                                    "outcome": outcome})
    summary = build_messages(state, "summary")[1]["content"]
    assert "- turn 5: PASSED, speedup 1.102x, 2.2477 ms (your fastest passing kernel so far; its code is not shown " \
           "here): correct" in summary
    assert "- turn 6: PASSED, speedup 1.117x, 2.2544 ms: correct" in summary


def test_a_sanitizer_finding_names_its_kind_once():
    """compute-sanitizer's memcheck report (H200, tests/data/ncu) read "Invalid __global__ write Invalid __global__ write
    of size 4 bytes: at oob_write.ptx:23, ...", and an API error ran its kind into its message."""
    from pathlib import Path

    from ptxbench.tools.sanitize import parse_sanitizer

    findings, _ = parse_sanitizer((Path(__file__).parents[1] / "data" / "ncu" / "san_memcheck_oob.txt").read_text(),
                                  "memcheck")
    text = render_eval(EvalResult(workload=WL, status="RUNTIME_ERROR", sanitizer=findings), 1, False)
    assert "- sanitizer memcheck: Invalid __global__ write of size 4 bytes: at oob_write.ptx:23" in text
    assert "write Invalid" not in text
    assert "- sanitizer memcheck: CUDA API error: Program hit CUDA_ERROR_LAUNCH_FAILED" in text


def test_every_timing_flag_the_gpu_sets_is_explained():
    """'- flag: rechecked' and '- flag: host_stalls' reached the model bare, and 'reduced_iterations' claimed
    '10 + 150 timed calls' whatever the evaluation asked for."""
    import re
    from pathlib import Path

    from ptxbench.agent.loop.feedback import FLAG_MEANINGS

    root = Path(__file__).parents[2]
    set_by_gpu = set()
    for name in ("runner.py", "timing_stats.py", "ceilings.py"):  # the timing record's flags and the roofline's
        set_by_gpu |= set(re.findall(r'\.append\("([a-z_]+)"\)', (root / "tools" / "gpu" / name).read_text()))
    assert {"rechecked", "host_stalls", "reduced_iterations", "slow_candidate"} <= set_by_gpu
    assert set_by_gpu <= set(FLAG_MEANINGS), set_by_gpu - set(FLAG_MEANINGS)
    assert "150" not in FLAG_MEANINGS["reduced_iterations"]


def test_host_stalls_says_how_many_timed_calls_waited_for_the_host():
    """'- flag: host_stalls' read the same whether one timed call of 300 waited for the host or 200 did: the count
    the record keeps is quoted. A record written before the count existed still reads, with the flag's plain meaning."""
    from ptxbench.agent.loop.feedback import FLAG_MEANINGS
    from ptxbench.tools.results import Timing, TimingStat

    stat = TimingStat(median_ms=0.75, ci_low_ms=0.749, ci_high_ms=0.752, n=150)
    timing = Timing(candidate=stat, baselines={"cublas": stat}, primary_baseline="cublas", speedup=1.0,
                    flags=["host_stalls"], host_stalls=3)
    text = render_eval(EvalResult(workload=WL, status="PASSED", timing=timing), 1, False)
    line = next(ln for ln in text.splitlines() if ln.startswith("- flag: host_stalls"))
    assert "3 of the timed calls" in line and "their time may be a little long" in line
    one = render_eval(EvalResult(workload=WL, status="PASSED", timing=timing.model_copy(update={"host_stalls": 1})),
                      1, False)
    assert "1 of the timed calls" in one and "its time may be" in one
    old = Timing.model_validate(timing.model_dump(exclude={"host_stalls"}))
    assert old.host_stalls is None
    text = render_eval(EvalResult(workload=WL, status="PASSED", timing=old), 1, False)
    assert f"- flag: host_stalls ({FLAG_MEANINGS['host_stalls']})" in text
    assert timing.flag_labels() == ["host_stalls (3 timed calls)"] and old.flag_labels() == ["host_stalls"]


def test_a_turns_outcome_says_each_error_once():
    """The one line the summary context keeps of an older turn (200 characters) read "the kernel failed:
    CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", and a
    plan error's issues twice."""
    from ptxbench.agent.loop.graph import _outcome_message

    fault = EvalResult(workload=WL, status="RUNTIME_ERROR", runtime_error="CUDA_ERROR_LAUNCH_FAILED: unspecified launch "
                       "failure", message="the kernel failed: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure")
    assert _outcome_message(fault, "") == "the kernel failed: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure"
    plan = EvalResult(workload=WL, status="PLAN_ERROR", plan_errors=["line 13: box too wide"],
                      message="the solution file has problems: line 13: box too wide")
    assert _outcome_message(plan, "") == "the solution file has problems: line 13: box too wide"
    hang = EvalResult(workload=WL, status="TIMEOUT", runtime_error="TIMEOUT after 5 s (run phase)",
                      message="the kernel did not finish within 5 s (run phase)")
    assert _outcome_message(hang, "").endswith("TIMEOUT after 5 s (run phase)")  # words the message lacks stay


def test_a_wrong_output_is_described_once():
    """The synthetic zeroed-accumulator GEMM: 'C is wrong in run 0: 5.830% of elements match, ...' and then 'trial 0
    C: FAIL, ... 5.83% elements match, ...', the same figures twice; another failing trial is still listed."""
    bad = TrialStats(trial=0, tensor="C", passed=False, max_abs_err=51.3, rel_fro_err=0.112, frac_matched=0.05715,
                     worst_index=[4835, 2141], worst_value=27.125, worst_expected=78.4739)
    message = ("C is wrong in run 0: 5.715% of elements match, max abs error 51.3, relative Frobenius error 0.112, "
               "0 NaN, 0 Inf at index [4835, 2141]: got 27.125, expected 78.4739")
    one = render_eval(EvalResult(workload=WL, status="INCORRECT_NUMERICAL", correctness=[bad], message=message), 1, False)
    assert one.count("[4835, 2141]") == 1 and "Correctness:" not in one
    # the message says "trial" now, as the trial lines do ("run 0" beside "trial 0" named one thing twice)
    now = render_eval(EvalResult(workload=WL, status="INCORRECT_NUMERICAL", correctness=[bad],
                                 message=message.replace("in run 0", "in trial 0")), 1, False)
    assert now.count("[4835, 2141]") == 1 and "Correctness:" not in now and "run 0" not in now
    other = bad.model_copy(update={"trial": 1})
    two = render_eval(EvalResult(workload=WL, status="INCORRECT_NUMERICAL", correctness=[bad, other], message=message),
                      1, False)
    assert "- trial 1 C: FAIL" in two and "- trial 0 C" not in two


def test_a_compile_only_result_says_once_that_it_did_not_run():
    """A --no-gpu turn said it three times: the heading, the no-GPU note and the message."""
    r = EvalResult(workload=WL, status="COMPILED", gpu_evaluated=False,
                   message="compiled cleanly; not run on a GPU (no-GPU mode): correctness and speed unknown")
    text = render_eval(r, 1, False)
    assert text.startswith("## Turn 1: COMPILED (not run on a GPU: correctness and speed unknown)")
    assert "compiled cleanly" not in text
