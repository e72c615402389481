"""LocalEvaluator's parent side without a GPU: a fake worker answers like the real one, so the job it
receives and the EvalResult built from its answer are checked on the CPU."""
from __future__ import annotations

import json

import time

import pytest

from ptxbench.tools.evaluate import LocalEvaluator, _format_status, _message
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.tools.solution.plan import FormatIssue, ResolvedPlan
from ptxbench.workloads.solutions.faults import load_corpus

from fake_workers import AnswerWorker

WORKLOAD, CORPUS = load_corpus()
TIMING = {"candidate": {"median_ms": 2.0, "ci_low_ms": 1.9, "ci_high_ms": 2.1, "n": 150},
          "baselines": {"cublas": {"median_ms": 1.0, "ci_low_ms": 0.99, "ci_high_ms": 1.01, "n": 150}},
          "primary_baseline": "cublas", "speedup": 0.5, "speedup_ci": [0.48, 0.52], "tflops": 0.03, "sol_pct": 1.2,
          "ceilings": {"tflops_bf16": 700.0, "hbm_gbps": 4000.0}, "flags": []}
STATS = {"trial": 0, "tensor": "C", "passed": True, "max_abs_err": 0.01, "max_rel_err": 0.002, "rel_fro_err": 0.003,
         "frac_matched": 1.0, "n_nan": 0, "n_inf": 0, "worst_index": [1, 2], "worst_value": 1.0, "worst_expected": 1.01}


SKETCH = {"key": 2**61 + 5, "values": {"C": [1.0, -2.0, 3.0, 0.0, 0.5, -0.5, 0.9, 0.01]}}


class AnsweringWorker(AnswerWorker):
    """Answers every evaluation as a worker that ran it: a phase message, then PASSED with STATS and TIMING."""

    def __init__(self, device, config):
        super().__init__(device, "PASSED")

    def send(self, msg):
        if msg.get("type") != "evaluate":
            return
        self.jobs.append(msg)
        self.replies.append({"type": "phase", "id": msg["id"], "phase": "run", "limit_s": 5})
        self.replies.append({"type": "result", "id": msg["id"], "replace": False, "result": {
            "status": "PASSED", "correctness": [STATS], "timing": TIMING, "plan_errors": [], "runtime_error": "",
            "seconds": {"correctness": 0.1, "timing": 0.3}, "verified_sketch": SKETCH}})


def test_evaluate_sends_a_complete_job_and_builds_the_result():
    workers = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: workers.append(AnsweringWorker(d, c)) or workers[-1])
    ev = LocalEvaluator(pool)
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=2, seed=7, timeout_s=9, iters=20))
    job = workers[0].jobs[0]
    assert job["cubin"][:4] == b"\x7fELF" and job["trials"] == 2 and job["seed"] == 7 and job["iters"] == 20
    assert job["timeout_s"] == 9 and job["workload"] == WORKLOAD
    plan = ResolvedPlan.model_validate(job["plan"])
    assert plan.num_sms == 132 and plan.launches[0].grid == (2, 256, 1)
    assert r.status == "PASSED" and r.gpu_evaluated and r.timing.speedup == 0.5
    assert r.launched == [launch.kernel for launch in plan.launches]  # what the feedback lists first
    assert r.fingerprint.gpu == "NVIDIA H200" and r.fingerprint.ptxas and r.fingerprint.jail in ("bwrap", "unshare", "limits")
    assert {"parse", "compile", "gpu", "gpu.timing"} <= set(r.seconds)
    assert "speedup 0.500x" in r.message and "[0.480, 0.520]" in r.message
    ev.close()


def test_format_status_and_failure_message():
    plan = FormatIssue(line=3, kind="plan", message='language must be "ptx" or "cuda", got \'triton\'')
    source = FormatIssue(line=9, kind="source", message="kernel launches (<<< >>>) are not allowed: the launch plan says what runs")
    reply = FormatIssue(line=None, kind="format", message="no code block found")
    # the kind decides, not the words: a plan issue naming no plan word, a source issue naming the plan
    assert _format_status([plan]) == _format_status([source, plan]) == "PLAN_ERROR"
    assert _format_status([source]) == _format_status([source, reply]) == "COMPILE_ERROR"
    assert _format_status([reply]) == "FORMAT_ERROR"
    bad = dict(STATS, passed=False, frac_matched=0.5, note="constant output (every element is 1)")
    text = _message({"status": "INCORRECT_NUMERICAL", "correctness": [bad]})
    assert "C is wrong in trial 0" in text and "50.000%" in text and "[1, 2]" in text and "constant output" in text


def test_a_passing_candidate_gets_a_runtime_verdict_and_the_gpu_is_held_only_for_the_replay(monkeypatch):
    import ptxbench.tools.evaluate as evaluate_module

    workers = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: workers.append(AnsweringWorker(d, c)) or workers[-1])
    seen = []
    real_attach = evaluate_module.attach

    def watching_attach(*args, **kwargs):
        seen.append((pool.free.qsize(), kwargs["level"], kwargs["device"]))  # 1: the GPU is free while ncu starts
        return real_attach(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "attach", watching_attach)
    monkeypatch.setattr("ptxbench.tools.profile.runner.find_ncu", lambda: None)
    r = LocalEvaluator(pool).evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert r.status == "PASSED" and seen == [(1, "verdict", 0)] and pool.free.qsize() == 1
    assert r.profile_level == "verdict" and "runtime target check" in r.profile_reason
    # No Nsight Compute here: each family's runtime verdict is 'unknown' with the reason, never a pass.
    assert r.targets_runtime and all(t.verdict == "unknown" and t.reason for t in r.targets_runtime.values())
    r2 = LocalEvaluator(pool).evaluate(WORKLOAD, CORPUS["control_correct"]["source"],
                                       EvalOptions(trials=1, profile_on_pass=False))
    assert not r2.targets_runtime and len(seen) == 1 and r2.profile_level == "none"


def _profiled(result, level: str):
    """What a stand-in for attach() returns: a profile at `level` with wgmma executed."""
    from ptxbench.tools.results import RuntimeTarget

    result.profile_level = level
    result.targets_runtime = {"wgmma": RuntimeTarget(verdict="executed", executed_warp_insts=320)}
    result.profile, result.feedback = {"ok": True}, "compute-bound"
    return result


def test_a_resubmitted_identical_cubin_reuses_its_profile(monkeypatch):
    import ptxbench.tools.evaluate as evaluate_module

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: AnsweringWorker(d, c))
    calls = []

    def fake_attach(result, options, source, comp, language, device=None, level="none", **kwargs):
        calls.append(device)
        if level == "none":  # a sanitizer-only call
            return result
        return _profiled(result, level)

    monkeypatch.setattr(evaluate_module, "attach", fake_attach)
    ev = LocalEvaluator(pool)
    source = CORPUS["control_correct"]["source"]
    first = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile=True))
    second = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1))  # the same kernel, resubmitted: a verdict asked
    assert calls == [0]  # one profile for two submissions of the same binary: the full one serves the verdict
    assert second.targets_runtime["wgmma"].executed_warp_insts == 320 and second.feedback == "compute-bound"
    assert second.profile["reused_from_identical_cubin"] and "reused_from_identical_cubin" not in first.profile
    assert second.profile_level == "full" and "reused" in second.profile_reason
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, sanitize=["memcheck"]))
    assert calls == [0, None]  # sanitizer runs are never reused (their GPU comes from the pool's hold, not ahead)
    fresh = LocalEvaluator(pool)
    verdict = fresh.evaluate(WORKLOAD, source, EvalOptions(trials=1))
    again = fresh.evaluate(WORKLOAD, source, EvalOptions(trials=1))
    assert calls == [0, None, 0] and again.profile_level == "verdict"  # a verdict serves a verdict, rebuilt for this timing
    assert "Where it stands" in again.feedback and "not taken this turn" in again.feedback and verdict.feedback
    fresh.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile=True))
    assert calls == [0, None, 0, 0]  # ... but not a full profile


def test_a_missing_toolchain_is_an_infra_error_not_the_models(monkeypatch):
    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.tools.toolchain import ToolchainError

    def no_ptxas(*args, **kwargs):
        raise ToolchainError("no ptxas that supports sm_90a was found")

    monkeypatch.setattr(evaluate_module, "compile_source", no_ptxas)
    r = LocalEvaluator().evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(no_gpu=True))
    assert r.status == "INFRA_ERROR" and "no ptxas" in r.message and not r.gpu_evaluated


def test_one_binary_under_another_launch_plan_is_profiled_again(monkeypatch):
    """The profile cache was keyed by the cubin alone: the same binary launched with another grid (one whose blocks
    take another branch) would be credited with the instructions the first plan's run executed."""
    import ptxbench.tools.evaluate as evaluate_module

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: AnsweringWorker(d, c))
    calls, compiled = [], []
    real_compile = evaluate_module.compile_source

    def one_binary(source, *args, **kwargs):  # as if the cubin did not embed the plan's text
        comp = real_compile(source, *args, **kwargs)
        compiled.append(comp)
        return comp.model_copy(update={"cubin_path": compiled[0].cubin_path})

    def fake_attach(result, options, source, comp, language, device=None, level="none", **kwargs):
        calls.append(device)
        return _profiled(result, level)

    monkeypatch.setattr(evaluate_module, "compile_source", one_binary)
    monkeypatch.setattr(evaluate_module, "attach", fake_attach)
    ev = LocalEvaluator(pool)
    source = CORPUS["control_correct"]["source"]
    wide = source.replace('grid = ["cdiv(N, 128)", "M"]\nblock = [128]', 'grid = ["cdiv(N, 256)", "M"]\nblock = [256]')
    assert wide != source
    first = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1))
    again = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1))
    other = ev.evaluate(WORKLOAD, wide, EvalOptions(trials=1))
    assert calls == [0, 0], calls  # the resubmission reused its profile; the other plan got its own
    assert again.profile["reused_from_identical_cubin"] and not other.profile.get("reused_from_identical_cubin")
    assert first.status == other.status == "PASSED"


def test_a_valid_solution_without_a_gpu_is_compiled_not_passed():
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: (_ for _ in ()).throw(AssertionError("no GPU use")))
    r = LocalEvaluator(pool).evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(no_gpu=True))
    assert r.status == "COMPILED" and not r.passed and not r.gpu_evaluated
    assert r.compile.status == "ok" and r.correctness == [] and r.timing is None and r.speedup is None
    assert r.message == "compiled cleanly; not run on a GPU (no-GPU mode): correctness and speed unknown"


def _with_static_flag(dynamic_smem: int) -> str:
    """control_correct with a static __shared__ flag beside a 1024-aligned dynamic area of `dynamic_smem` bytes."""
    src = CORPUS["control_correct"]["source"]
    src = src.replace('block = [128]\n', f'block = [128]\nsmem = "{dynamic_smem}"\n', 1)
    src = src.replace("  float acc = 0.f;\n",
                      "  extern __shared__ __align__(1024) uint8_t dyn[];\n  __shared__ int flag;\n"
                      "  if (threadIdx.x == 0) { flag = K; dyn[0] = 1; }\n  __syncthreads();\n"
                      "  float acc = (flag - K) * dyn[0];\n", 1)
    assert "__shared__ int flag" in src and "smem = " in src
    return src


def test_static_shared_memory_past_the_opt_in_limit_is_a_plan_error_without_a_gpu():
    # the static flag costs the 1024 bytes that align the dynamic area: 232,448 - 512 dynamic bytes fit alone, not with it
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: (_ for _ in ()).throw(AssertionError("no GPU use")))
    r = LocalEvaluator(pool).evaluate(WORKLOAD, _with_static_flag(232448 - 512), EvalOptions(no_gpu=True))
    assert r.status == "PLAN_ERROR" and not r.gpu_evaluated, r.message
    assert r.compile.kernels["gemm"].smem_static == 1024
    assert r.plan_errors == ["launch 1 (gemm): static (1024) + dynamic (231936) shared memory = 232960 bytes exceeds "
                             "the opt-in limit of 232448 bytes"]
    ok = LocalEvaluator(pool).evaluate(WORKLOAD, _with_static_flag(232448 - 1024), EvalOptions(no_gpu=True))
    assert ok.status == "COMPILED" and ok.plan_errors == [], ok.message


def _with_local_array(floats: int) -> str:
    """control_correct with a per-thread array of `floats` floats the kernel indexes at run time: a stack frame."""
    src = CORPUS["control_correct"]["source"].replace(
        "  float acc = 0.f;\n", f"  volatile float big[{floats}];\n  big[threadIdx.x % 7] = 1.f;\n"
        "  float acc = big[(threadIdx.x + 3) % 7] - 1.f;\n", 1)
    assert f"big[{floats}]" in src
    return src


def test_a_local_frame_no_hopper_gpu_holds_is_a_plan_error_without_a_gpu():
    """On a GPU the worker refuses a frame whose reservation (frame x every thread the GPU holds) passes the candidate's
    share (tools/gpu/runner.py); without a GPU the same source was COMPILED, so a --no-gpu run scored it clean. Which
    Hopper runs it is unknown, so the bound is the largest Hopper's share (72 GiB), as for the buffers: a frame past an
    H100's share (40 GiB) that an H200's worker runs was refused. Past the bound, one message, the frame's."""
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: (_ for _ in ()).throw(AssertionError("no GPU use")))
    fits = LocalEvaluator(pool).evaluate(WORKLOAD, _with_local_array(61440), EvalOptions(no_gpu=True))  # 61.9 GiB
    assert fits.compile.kernels["gemm"].stack >= 61440 * 4, fits.compile.kernels
    assert fits.status == "COMPILED" and fits.plan_errors == [], (fits.status, fits.plan_errors)
    r = LocalEvaluator(pool).evaluate(WORKLOAD, _with_local_array(80000), EvalOptions(no_gpu=True))  # 82.5 GiB
    assert r.compile.kernels["gemm"].stack >= 80000 * 4, r.compile.kernels
    assert r.status == "PLAN_ERROR" and not r.gpu_evaluated, r.message
    assert len(r.plan_errors) == 1 and "local memory" in r.plan_errors[0] and "327680 bytes a thread" in r.plan_errors[0]
    assert "82.5 GiB, more than the 72.0 GiB a candidate may take on the largest Hopper GPU (144 GiB)" in r.plan_errors[0]


class FailingWorker(AnsweringWorker):
    def send(self, msg):
        super().send(msg)
        if msg.get("type") == "evaluate":
            self.replies[-1]["result"].update(status="INCORRECT_NUMERICAL", timing=None)


def _fake_measure(calls: list):
    from ptxbench.tools.profile.summary import ProfileSummary

    def measure(workload, source, cubin_path, *, full=True, hold=None, **kwargs):
        call = {"full": full, "started": time.monotonic(), "seed": kwargs.get("seed"),  # its own record: early runs
                "dist": kwargs.get("dist")}  # may be in flight side by side
        calls.append(call)
        try:
            with hold():
                call["held"] = time.monotonic()
                expected = kwargs.get("expected")  # what its replay reads after the call: there once the GPU is held
                call["expected"] = expected.read_text() if expected is not None and expected.exists() else None
        except Exception as exc:  # noqa: BLE001 - what gated.py does: a hold that fails ends the run
            call["refused"] = type(exc).__name__
            return ProfileSummary(ok=False, mode="full" if full else "verdict", error=str(exc))
        return ProfileSummary(ok=False, mode="full" if full else "verdict", error="no counters in this test")
    return measure


def test_the_profile_started_beside_the_timing_serves_the_level_the_pass_asks_for(monkeypatch):
    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: AnsweringWorker(d, c))
    ev = LocalEvaluator(pool)
    done = []
    real_submit = ev._submit
    monkeypatch.setattr(ev, "_submit", lambda *a: (real_submit(*a), done.append(time.monotonic()))[0])
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert r.status == "PASSED" and r.profile_level == "verdict"
    assert len(calls) == 1 and not calls[0]["full"]  # one ncu run, started before the timing, not a second one after
    assert calls[0]["held"] >= done[0] and "refused" not in calls[0]  # the GPU taken once the timing was done
    assert json.loads(calls[0]["expected"]) == SKETCH  # the verified sketch, written before the replay's `go`
    assert r.targets_runtime and all(t.verdict == "unknown" for t in r.targets_runtime.values())


def test_the_early_profile_replays_the_inputs_the_evaluation_drew(monkeypatch):
    """The profile started beside the timing replayed seed 0 when no --seed was given: inputs no evaluated call had and
    every kernel could know by their values, so a kernel could run its target instructions there only. The evaluator
    now draws the first seed itself and both get it; a fresh draw each evaluation, which the hang memo ignores."""
    from ptxbench.tools.gpu.hangs import job_key
    from ptxbench.tools.gpu.messages import GpuJob

    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    workers = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: workers.append(AnsweringWorker(d, c)) or workers[-1])
    ev = LocalEvaluator(pool)
    for _ in range(2):
        ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    jobs = workers[0].jobs
    assert [c["seed"] for c in calls] == [j["seed"] for j in jobs] and all(j["seed_drawn"] for j in jobs)
    assert jobs[0]["seed"] != jobs[1]["seed"]  # drawn per evaluation (one chance in 2**31 of a tie)
    same = [GpuJob.model_validate(j) for j in jobs]
    assert job_key(same[0]) == job_key(same[1])  # a hang is remembered whatever seed was drawn
    given = [GpuJob.model_validate({**j, "seed_drawn": False}) for j in jobs]
    assert job_key(given[0]) != job_key(given[1])  # a --seed the user gave is part of the job
    ev.close()


def test_the_early_profile_replays_the_evaluations_input_distribution(monkeypatch):
    """--dist spiky: set 0's inputs (and its verified sketch) are spiky, so the profile started beside the timing must
    draw spiky ones too (it drew normal ones: an honest kernel's profiled output was 'wrong' and not credited)."""
    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    workers = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: workers.append(AnsweringWorker(d, c)) or workers[-1])
    ev = LocalEvaluator(pool)
    ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1, dist="spiky"))
    assert workers[0].jobs[0]["dist"] == "spiky" and [c["dist"] for c in calls] == ["spiky"]
    ev.close()


def test_a_kernel_that_fails_kills_its_early_profile_without_the_gpu(monkeypatch):
    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FailingWorker(d, c))
    r = LocalEvaluator(pool).evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert r.status == "INCORRECT_NUMERICAL" and r.profile_level == "none"
    for _ in range(200):  # the early run ends in the background
        if calls and "refused" in calls[0]:
            break
        time.sleep(0.01)
    assert calls and calls[0]["refused"] == "ProfileNotWanted" and "held" not in calls[0]
    assert pool.free.qsize() == 1


def test_early_profiles_are_bounded_per_gpu_and_their_slots_come_back(monkeypatch):
    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FailingWorker(d, c))
    ev = LocalEvaluator(pool)
    ev.early_per_gpu = 1
    ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert ev._early_slots.acquire(timeout=5)  # the failed kernel's early run ended and gave its slot back
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))  # no slot: no early run
    assert r.status == "INCORRECT_NUMERICAL" and len(calls) == 1
    ev._early_slots.release()


class ScriptedWorker(AnsweringWorker):
    """Answers its evaluations with the statuses of `script` in turn (then PASSED)."""

    def __init__(self, device, config, script):
        super().__init__(device, config)
        self.script = list(script)

    def send(self, msg):
        super().send(msg)
        if msg.get("type") == "evaluate" and self.script:
            self.replies[-1]["result"]["status"] = self.script.pop(0)


def test_a_profile_whose_call_computed_something_else_is_never_reused(monkeypatch):
    """A failing kernel keeps the verdicts its profiled call's counters give, even when that call's output was wrong
    (it scores nothing). Cached for its cubin, they were handed to the same binary's next submission when that one
    passed, without a profiled call of its own: a kernel that fails now and then (a clock bit) and runs its target
    instructions only under the profiler was credited with them."""
    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.tools.profile.candidate import ProfileOutcome
    from ptxbench.tools.profile.summary import ProfileSummary
    from ptxbench.tools.results import RuntimeTarget

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: ScriptedWorker(d, c, ["INCORRECT_NUMERICAL"]))
    calls = []

    def wrong_output_attach(result, options, source, comp, language, device=None, level="none", **kwargs):
        calls.append(level)
        summary = ProfileSummary(ok=True, mode=level, output_passed=False, output_status="INCORRECT_NUMERICAL",
                                 output_method="sketch")
        targets = {"wgmma": RuntimeTarget(verdict="executed", executed_warp_insts=320)}
        return ProfileOutcome(ok=True, targets_runtime=targets, summary=summary, feedback="compute-bound").apply_to(result)

    monkeypatch.setattr(evaluate_module, "attach", wrong_output_attach)
    ev = LocalEvaluator(pool)
    ev.early_profiles = False
    source = CORPUS["control_correct"]["source"]
    failed = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile=True))
    assert failed.status == "INCORRECT_NUMERICAL" and failed.targets_runtime["wgmma"].verdict == "executed"
    passed = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1))
    assert passed.status == "PASSED" and calls == ["full", "verdict"]  # profiled afresh, not reused
    assert not passed.profile.get("reused_from_identical_cubin") and not passed.target_executed
    assert passed.targets_runtime["wgmma"].verdict == "unknown" and "profile_output_wrong" in passed.timing.flags
    ev.close()


def test_identical_cubins_passing_at_once_take_one_profile(monkeypatch):
    """Two trajectories pass the same binary on two GPUs at once: one ncu run, the other waits and reuses it."""
    import threading

    import ptxbench.tools.evaluate as evaluate_module

    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=lambda d, c: AnsweringWorker(d, c))
    calls = []

    def slow_attach(result, options, source, comp, language, device=None, level="none", **kwargs):
        calls.append(level)
        time.sleep(0.3)  # ncu's start-up, replay and report
        return _profiled(result, level)

    monkeypatch.setattr(evaluate_module, "attach", slow_attach)
    ev = LocalEvaluator(pool)
    ev.early_profiles = False
    source = CORPUS["control_correct"]["source"]
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile_on_pass=False))  # compile cache and pool warm
    results = []
    threads = [threading.Thread(target=lambda: results.append(ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile=True))))
               for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert calls == ["full"] and [r.status for r in results] == ["PASSED", "PASSED"]
    reused = [r for r in results if r.profile.get("reused_from_identical_cubin")]
    assert len(reused) == 1 and reused[0].targets_runtime["wgmma"].verdict == "executed"
    assert reused[0].seconds["profile.identical_wait"] > 0.1  # it waited for the run in flight
    ev.close()


def test_an_identical_cubin_starts_no_second_early_profile_while_one_runs(monkeypatch):
    """On two GPUs identical kernels (two trajectories of one deterministic model) pass at once: one early ncu run,
    not two; once it has ended, the next identical submission may start one again."""
    from types import SimpleNamespace

    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure([]))
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=lambda d, c: AnsweringWorker(d, c)).start()
    ev = LocalEvaluator(pool)
    comp = SimpleNamespace(cubin_path="/nonexistent.cubin")
    first = ev._early_profile(pool, EvalOptions(), WORKLOAD, "src", comp, "sha", 5)
    assert first is not None
    assert ev._early_profile(pool, EvalOptions(), WORKLOAD, "src", comp, "sha", 5) is None  # the same cubin: none
    other = ev._early_profile(pool, EvalOptions(), WORKLOAD, "src", comp, "another sha", 5)  # another kernel: its own
    assert other is not None
    full = ev._early_profile(pool, EvalOptions(profile_on_pass="new_best"), WORKLOAD, "src", comp, "sha", 5)
    assert full is not None  # a stronger level than the verdict run in flight: it starts its own
    for early in (first, other, full):
        early.drop()
    for _ in range(200):  # the dropped runs end in the background and clear their keys
        if not ev._early_keys:
            break
        time.sleep(0.01)
    assert not ev._early_keys
    again = ev._early_profile(pool, EvalOptions(), WORKLOAD, "src", comp, "sha", 5)
    assert again is not None
    again.drop()
    ev.close()


def test_workers_started_in_the_background_serve_the_first_evaluation():
    """optimize / bench start the pool beside the first model call; the first evaluation waits for it."""
    class SlowHello(AnsweringWorker):
        def recv(self, timeout):
            if self.hello is None:
                time.sleep(0.2)  # the worker's CUDA context and warm-up
            return super().recv(timeout)

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: SlowHello(d, c))
    ev = LocalEvaluator(pool)
    ev.early_profiles = False
    thread = ev.start_in_background()
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1, profile_on_pass=False))
    thread.join(5)
    assert r.status == "PASSED" and len(pool.startup) == 1  # started once, by whichever thread came first
    ev.close()


def test_a_background_start_that_fails_is_an_infra_error_naming_why():
    class NoGpu(AnsweringWorker):
        def __init__(self, device, config):
            super().__init__(device, config)
            self.replies = [{"type": "hello", "error": "no CUDA GPU is visible to torch"}]

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: NoGpu(d, c)))
    ev.start_in_background().join(5)
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert r.status == "INFRA_ERROR" and "no CUDA GPU is visible to torch" in r.message


def _new_best_run(monkeypatch, best: float, spare_slots: int = 3):
    """One pass (speedup 0.5) under the new-best policy with `best` so far; the fake ncu runs it started."""
    calls: list = []
    monkeypatch.setattr("ptxbench.tools.profile.candidate.measure_candidate", _fake_measure(calls))
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: AnsweringWorker(d, c))
    ev = LocalEvaluator(pool)
    ev.early_per_gpu = spare_slots
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"],
                    EvalOptions(trials=1, profile_on_pass="new_best", best_speedup=best))
    for _ in range(300):  # the run not claimed ends in the background, at its gate
        if all("held" in c or "refused" in c for c in calls):
            break
        time.sleep(0.01)
    ev.close()
    return r, calls


def test_a_new_best_finds_its_full_profile_started_beside_the_timing(monkeypatch):
    """Under the new-best policy the verdict and the full profile both start beside the timing when slots are to
    spare; the pass beats the best, so the full run takes the GPU and the verdict run dies at its gate without it."""
    r, calls = _new_best_run(monkeypatch, best=0.4)
    assert r.status == "PASSED" and r.profile_level == "full" and r.profile_reason.startswith("a new best speedup")
    assert sorted(c["full"] for c in calls) == [False, True]  # both started, no third run after the timing
    full, = [c for c in calls if c["full"]]
    verdict, = [c for c in calls if not c["full"]]
    assert "held" in full and verdict.get("refused") == "ProfileNotWanted" and "held" not in verdict


def test_a_pass_below_the_best_keeps_the_verdict_run_and_kills_the_full_one(monkeypatch):
    r, calls = _new_best_run(monkeypatch, best=0.9)
    assert r.status == "PASSED" and r.profile_level == "verdict"
    full, = [c for c in calls if c["full"]]
    verdict, = [c for c in calls if not c["full"]]
    assert "held" in verdict and full.get("refused") == "ProfileNotWanted" and "held" not in full


def test_without_two_slots_to_spare_only_the_likely_level_starts_early(monkeypatch):
    """Two early slots per GPU (the default): the verdict run takes one, and the other stays for another evaluation;
    the full profile of the new best starts after the timing."""
    r, calls = _new_best_run(monkeypatch, best=0.4, spare_slots=2)
    assert r.status == "PASSED" and r.profile_level == "full"
    assert [c["full"] for c in calls] == [False, True]  # the verdict started early, the full one after the timing
    assert calls[0].get("refused") == "ProfileNotWanted" and "held" in calls[1]


def test_an_early_start_that_fails_leaves_no_run_waiting_and_no_folder(monkeypatch, tmp_path):
    """The second early run failing to start (the full profile beside the verdict) left the first waiting at its gate
    and the folder of the expected sketch behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=lambda d, c: AnsweringWorker(d, c)).start()
    ev = LocalEvaluator(pool)
    dropped, calls = [], []

    class Run:
        def drop(self):
            dropped.append(self)

    def start(*args):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("ncu would not start")
        return Run()

    monkeypatch.setattr(ev, "_start_early", start)
    monkeypatch.setattr(ev, "_early_spare", lambda pool: 2)
    # a pass gets the verdict, a new best the full profile: both start early
    monkeypatch.setattr(EvalOptions, "profile_level", lambda self, passed, speedup, *a: ("verdict" if speedup is None
                                                                                        else "full", ""))
    comp = type("Comp", (), {"cubin_path": "/nonexistent.cubin"})()
    with pytest.raises(RuntimeError, match="ncu would not start"):
        ev._early_profile(pool, EvalOptions(), WORKLOAD, "src", comp, "sha", 5)
    assert len(calls) == 2 and len(dropped) == 1 and not list(tmp_path.glob("ptxbench-expect-*"))
    ev.close()
