"""LocalEvaluator: the Evaluator of tools/evaluator.py on this machine's GPUs.

parse the solution (plan + source policy) -> compile + SASS (cached by content) -> resolve the plan
for the GPU's SM count -> the worker pool (correctness, timing, repeat-call check) -> EvalResult.
With options.no_gpu it stops after compile + SASS (status COMPILED when that much is clean,
gpu_evaluated=False: it never ran, so it is not PASSED). The pool starts on the first GPU evaluation, so compile-only use never
touches CUDA. A kernel's failure is a status in the result; a missing GPU is INFRA_ERROR with a
message that names what is missing. The profile a passing kernel would get is started beside its timing
and kept only if the evaluation then asks for that level (tools/profile/early.py).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ..workloads.registry import get_workload
from .compile import compile_source
from .toolchain import ToolchainError
from .evaluator import EvalOptions, serves
from .gpu.hangs import HangMemo, job_key, reused_message
from .gpu.limits import (CANDIDATE_MEMORY_SHARE, LARGEST_HOPPER_MEMORY, LOCAL_KEEP_BYTES, DeviceLimits, check_compiled,
                         check_memory, local_reservation, plan_bytes)
from .gpu.messages import GpuJob, GpuOutcome
from .gpu.pool import GpuPool, NoGpuError, PoolConfig
from .gpu.priority import QueuePriority
from .gpu.scrub import MIN_FRAME, frame_bytes
from .gpu.seeds import draw_base_seed, input_sets
from .solution.plan import FormatIssue
from .profile import attach
from .profile.early import EarlyChoice, EarlyProfile
from .profile.inflight import InFlightProfiles
from .regpool import POOL_WARNING, plan_pool_notes
from .results import CompileIssue, CompileResult, EvalResult, Fingerprint, RuntimeTarget
from .solution.parse import PlanError, parse_solution, resolve_plan

def _format_status(issues: list[FormatIssue]) -> str:
    """The status of a file the checks refuse, from the kind each check gave its issue: any plan issue is
    PLAN_ERROR, else COMPILE_ERROR (the source policy, the file's size); issues that are all about the reply
    (no kernel file in it) are FORMAT_ERROR, the loop's word for such a turn."""
    if any(i.kind == "plan" for i in issues):
        return "PLAN_ERROR"
    return "FORMAT_ERROR" if issues and all(i.kind == "format" for i in issues) else "COMPILE_ERROR"


def error_summary(errors, limit: int = 12) -> str:
    """Every distinct compile error once, in the order the compiler gave them (the full list is in the feedback)."""
    seen: list[str] = []
    for e in errors:
        text = f"line {e.line}: {e.message}" if e.line else str(e.message)
        if text not in seen:
            seen.append(text)
    more = f"; and {len(seen) - limit} more" if len(seen) > limit else ""
    return "; ".join(seen[:limit]) + more


def _message(result: GpuOutcome | dict) -> str:
    """One paragraph for the model: the worker's own message, else how it did (or the first wrong output)."""
    r = result if isinstance(result, GpuOutcome) else GpuOutcome.model_validate(result)
    if r.message:
        return r.message
    stats = r.correctness
    if r.status == "PASSED":
        worst = max((s.rel_fro_err or 0.0 for s in stats), default=0.0)
        text = f"correct on {len({s.trial for s in stats})} runs with fresh inputs (worst relative Frobenius error {worst:.2e})"
        calibrated = [s for s in stats if s.rule != "element"]
        if calibrated:
            text += (f"; {len(calibrated)} of {len(stats)} outputs judged by rule {calibrated[0].rule}: the library itself "
                     f"misses (or nearly misses) the element rule on these inputs, so they were held to a multiple of "
                     f"its own error")
        t = r.timing
        if t:
            lo, hi = t.speedup_ci
            text += (f"; {t.candidate.median_ms:.4f} ms vs {t.primary_baseline} "
                     f"{t.baselines[t.primary_baseline].median_ms:.4f} ms: speedup {t.speedup:.3f}x "
                     f"[{lo:.3f}, {hi:.3f}], {t.sol_pct:.1f}% of roofline")
            if t.flags:
                text += f"; flags: {', '.join(t.flags)}"
        return text
    bad = next((s for s in stats if not s.passed), None)
    if bad is None:
        return r.status
    where = f" at index {bad.worst_index}: got {bad.worst_value:g}, expected {bad.worst_expected:g}" if bad.worst_index else ""
    return (f"{bad.tensor} is wrong in trial {bad.trial}: {bad.frac_matched * 100:.3f}% of elements match, max abs error "
            f"{bad.max_abs_err:.3g}, relative Frobenius error {bad.rel_fro_err:.3g}, {bad.n_nan} NaN, {bad.n_inf} Inf{where}"
            + (f". {bad.note}" if bad.note else ""))


def _plan_issues_without_gpu(plan, wl, arch: str, comp, n_sets: int) -> tuple[list[str], object | None]:
    """What the worker would refuse before launching, checked without a GPU (no-GPU mode, `ptxbench compile
    --workload`): the plan resolved for Hopper's defaults (DeviceLimits), its device limits, and each launch's
    static + dynamic shared memory from ptxas's figures. Limits needing the loaded function (parameter sizes, threads
    per block at the register count) stay with the worker; memory is judged against the largest Hopper's (`n_sets`:
    the input sets an evaluation makes). Also the resolved plan (None where it does not resolve)."""
    lim = DeviceLimits()
    try:
        resolved = resolve_plan(plan, wl, lim.sm_count, arch)
    except PlanError as e:
        return [str(i) for i in getattr(e, "issues", [])] or [str(e)], None
    issues = check_compiled(resolved, {k: r.smem_static for k, r in comp.kernels.items()}, lim)
    try:  # read once for both cubin checks; no cubin path, or an unreadable file, leaves them to the worker
        cubin = Path(comp.cubin_path).read_bytes()
    except (OSError, TypeError):
        cubin = None
    frame = _local_frame_issues(comp)
    return (_missing_kernels(resolved, cubin) + issues + frame
            + _memory_issues(resolved, wl, comp, cubin, n_sets, count_local=not frame), resolved)


def _largest_hopper() -> DeviceLimits:
    """What no-GPU mode judges memory against: which Hopper runs the candidate is unknown, so only what the largest
    could not hold is sure to be refused by every worker."""
    return DeviceLimits(total_memory=LARGEST_HOPPER_MEMORY)


def _local_reservation(comp, lim: DeviceLimits) -> tuple[int, int, int]:
    """(the module's largest stack, the frame the scrub rounds it to, that frame reserved for every thread)."""
    stack = max((k.stack for k in comp.kernels.values()), default=0)
    frame = frame_bytes(stack, MIN_FRAME)
    return stack, frame, local_reservation(frame, lim)


def _memory_issues(resolved, wl, comp, cubin: bytes | None, n_sets: int, count_local: bool = True) -> list[str]:
    """The worker's check_memory (tools/gpu/runner.py: every input set's tensors and scratch buffers, the pristine
    inputs, the module's globals, a local frame past what a worker keeps) against the largest Hopper's memory: only
    what no Hopper GPU could hold is a PLAN_ERROR here (64 scratch buffers of 32 GiB each read as COMPILED).
    `count_local` False: a frame already refused alone (_local_frame_issues) is not told a second time."""
    from .gpu.module_state import module_globals

    sizes = plan_bytes({t.name: (t.dtype, wl.shape(t.name)) for t in wl.tensors}, resolved)
    try:
        module = sum(g.size for g in module_globals(cubin)) if cubin is not None else 0
    except Exception:  # noqa: BLE001 - an unparsable cubin leaves the globals to the worker, as the kernels' check does
        module = 0
    lim = _largest_hopper()
    local = _local_reservation(comp, lim)[2] if count_local else 0
    return check_memory(sizes, sum(sizes[t.name] for t in wl.inputs), n_sets, lim, module_bytes=module,
                        local_bytes=local if local > LOCAL_KEEP_BYTES else 0, gpu="the largest Hopper GPU")


def _missing_kernels(resolved, cubin: bytes | None) -> list[str]:
    """Launches of a kernel the module does not define, as the worker's cuModuleGetFunction would find them (the
    source's scan takes a kernel hidden by `#if 0` or spelled in a string for one): read from the cubin's symbols."""
    from .cubin_symbols import entry_kernels

    if cubin is None:
        return []
    try:
        defined = entry_kernels(cubin)
    except Exception:  # noqa: BLE001 - an unparsable cubin leaves the check to the worker, as before
        return []
    shown = ", ".join(sorted(defined)[:8]) or "none"
    return [f"launch {i + 1}: no kernel named {launch.kernel!r} in the module (the compiled module defines: {shown})"
            for i, launch in enumerate(resolved.launches) if launch.kernel not in defined]


def _local_frame_issues(comp) -> list[str]:
    """The local memory the worker would refuse before any buffer is made (tools/gpu/runner.py): the module's largest
    stack frame, as the scrub rounds it, reserved for every thread the GPU holds, alone past the candidate's share of
    the largest Hopper's memory, so only a frame that no Hopper GPU could hold beside the harness is a PLAN_ERROR (it
    was an H100's 80 GiB: a frame an H200's worker runs was refused without a GPU). Told apart from the buffers'
    check for its advice."""
    lim = _largest_hopper()
    stack, frame, local = _local_reservation(comp, lim)
    allowed = int(lim.total_memory * CANDIDATE_MEMORY_SHARE)
    if local <= allowed:
        return []
    return [f"the kernels' local memory: a {stack}-byte stack frame is reserved for every thread the GPU holds "
            f"({lim.max_threads_per_sm} per SM on {lim.sm_count} SMs, rounded up to {frame} bytes a thread), "
            f"{local / 2**30:.1f} GiB, more than the {allowed / 2**30:.1f} GiB a candidate may take on the largest "
            f"Hopper GPU ({lim.total_memory / 2**30:.0f} GiB); "
            "keep large per-thread arrays in shared memory or registers"]


def _with_pool_notes(comp, plan):
    """The compile result with a warning for each launched kernel whose setmaxnreg moves the CTA's register pool
    cannot meet (tools/regpool.py): ptxas cannot see it, and on the GPU it is a hang with no message; or, for a kernel
    short of registers, how far the pool lets its consumers go. A copy: the cached result is shared by every plan that
    launches the same text."""
    notes = plan_pool_notes(plan.launches, comp)
    if not notes:
        return comp
    return comp.model_copy(update={"warnings": comp.warnings + [CompileIssue(message=n, severity="warning")
                                                                 for n in notes]})


def read_cubin(comp: CompileResult, compile_again: Callable[[], CompileResult]
                ) -> tuple[bytes | None, CompileResult, str]:
    """(the cubin's bytes or None, the compile they come from, why they could not be read). A cubin gone from the
    compile cache since the compile (a prune renaming its entry aside for the microseconds it takes to see the entry
    in use and put it back, `ptxbench cache --clear`, a hand's rm) is compiled once more: a hit on the entry put
    back, or a fresh compile into the cache."""
    why = ""
    for attempt in range(2):
        if attempt:
            try:
                comp = compile_again()
            except ToolchainError as e:
                return None, comp, f"{why}; compiling it again failed: {e}"
            if comp.status != "ok" or not comp.cubin_path:
                return None, comp, f"{why}; compiling it again gave no cubin"
        try:
            with open(comp.cubin_path, "rb") as f:
                return f.read(), comp, ""
        except OSError as e:
            why = str(e.strerror or e)
    return None, comp, why


def gpu_job(workload_id: str, cubin: bytes, plan: dict, options: EvalOptions) -> GpuJob:
    """What the GPU worker is asked: the evaluation's options that the GPU side carries out. Without a seed in the
    options the first set's seed is drawn here, so the profile started beside the timing replays the same inputs."""
    seed, drawn = options.seed, options.seed is None
    if drawn:
        seed = draw_base_seed(input_sets(options.trials, get_workload(workload_id).trials))
    return GpuJob(workload=workload_id, cubin=cubin, plan=plan, trials=options.trials, dist=options.dist,
                  seed=seed, seed_drawn=drawn, time=options.time, timeout_s=options.timeout_s, l2_flush=options.l2_flush,
                  **{k: getattr(options, k) for k in ("warmup", "iters", "timing_trials")
                     if getattr(options, k, None) is not None})


class LocalEvaluator:
    """Evaluate solutions on the local GPUs (one worker process per GPU, started on first use)."""

    # The profile a pass would get starts beside the timing (tools/profile/early.py); PTXBENCH_EARLY_PROFILE=0 turns
    # it off (a comparison, or a machine short of CPU).
    early_profiles = os.environ.get("PTXBENCH_EARLY_PROFILE", "1") != "0"
    # At most this many early runs per GPU at once: each costs an interpreter and ncu's start-up in CPU time, wasted
    # when its kernel then fails (a repair track's broken kernels mostly do); beyond it, profiles start after the timing.
    early_per_gpu = 2

    def __init__(self, pool: GpuPool | None = None, pool_config: PoolConfig | None = None):
        self._pool = pool
        self._pool_config = pool_config
        self._pool_lock = threading.Lock()
        self._closed = False
        self._profiles: dict[tuple, dict] = {}
        self._profiling = InFlightProfiles()  # identical cubins passing at once: one ncu run (profile/inflight.py)
        self._hangs = HangMemo()  # identical binaries that timed out: not run again (gpu/hangs.py)
        self._priority = QueuePriority()  # the GPU queue's order: most GPU work left behind first (gpu/priority.py)
        self._early_keys: dict[tuple, str] = {}  # cubin -> the level of its early profile running: an identical one starts none
        self._early_slots: threading.BoundedSemaphore | None = None
        self._early_running = 0  # early runs started and not yet ended
        self._early_lock = threading.Lock()

    @property
    def pool(self) -> GpuPool:
        with self._pool_lock:
            if self._closed:
                raise NoGpuError("the evaluator was closed")
            if self._pool is None:
                self._pool = GpuPool(self._pool_config)
            pool = self._pool
        return pool.start()

    @property
    def no_worker(self) -> str:
        """Why no GPU can take an evaluation ('' while one can): the pool's, which the bench stops on."""
        pool = self._pool
        return getattr(pool, "no_worker", "") if pool is not None else ""

    def start_in_background(self) -> threading.Thread:
        """Start the GPU workers on a thread of their own, so the first turns' model calls and compiles run
        meanwhile; the first evaluation that needs a GPU waits for them (or gets INFRA_ERROR naming why they could
        not start)."""
        def start() -> None:
            try:
                self.pool
            except NoGpuError:
                pass  # kept by the pool: every evaluation reports it

        thread = threading.Thread(target=start, name="ptxbench-pool-start", daemon=True)
        thread.start()
        return thread

    def evaluate(self, workload_id: str, source: str, options: EvalOptions | None = None) -> EvalResult:
        options = options or EvalOptions()
        wl = get_workload(workload_id)
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        solution = parse_solution(source, wl, options.arch)
        seconds["parse"] = time.perf_counter() - t0
        if isinstance(solution, list):
            return EvalResult(workload=wl.id, status=_format_status(solution), plan_errors=[str(i) for i in solution],
                              message="the solution file has problems: " + "; ".join(str(i) for i in solution),
                              seconds=seconds)
        t0 = time.perf_counter()
        try:
            comp = compile_source(solution.source, solution.language, options.arch, wl)
        except ToolchainError as e:  # no ptxas / nvcc / host compiler, or one killed from outside twice: not the model's doing
            return EvalResult(workload=wl.id, status="INFRA_ERROR", message=f"cannot compile here: {e}", seconds=seconds)
        seconds["compile"] = time.perf_counter() - t0
        base = dict(workload=wl.id, compile=comp, targets_static=comp.targets, seconds=seconds,
                    launched=list(dict.fromkeys(launch.kernel for launch in solution.plan.launches)))
        if comp.status != "ok":
            return EvalResult(status="COMPILE_ERROR", message=error_summary(comp.errors), **base)
        if options.no_gpu:
            issues, resolved = _plan_issues_without_gpu(solution.plan, wl, options.arch, comp,
                                                        input_sets(options.trials, wl.trials))
            if resolved is not None:
                base.update(compile=_with_pool_notes(comp, resolved))
            if issues:
                return EvalResult(status="PLAN_ERROR", plan_errors=issues, gpu_evaluated=False,
                                  message="the launch plan cannot run on a Hopper GPU: " + "; ".join(issues), **base)
            return EvalResult(status="COMPILED", gpu_evaluated=False,
                              message="compiled cleanly; not run on a GPU (no-GPU mode): correctness and speed unknown",
                              **base)
        try:
            pool = self.pool
            limits = pool.limits
        except NoGpuError as e:
            return EvalResult(status="INFRA_ERROR", message=f"cannot evaluate on a GPU: {e}", **base)
        try:
            capacity = {int(k): int(v) for k, v in (limits.get("cluster_capacity") or {}).items()}
            plan = resolve_plan(solution.plan, wl, int(limits["sm_count"]), options.arch, cluster_capacity=capacity)
        except PlanError as e:
            issues = getattr(e, "issues", [])
            return EvalResult(status="PLAN_ERROR", plan_errors=[str(i) for i in issues] or [str(e)],
                              message="the launch plan cannot run on this GPU: " + "; ".join(str(i) for i in issues), **base)
        comp = _with_pool_notes(comp, plan)

        def compile_again():
            t0 = time.perf_counter()
            again = compile_source(solution.source, solution.language, options.arch, wl)
            seconds["compile"] += time.perf_counter() - t0
            return _with_pool_notes(again, plan)

        cubin, comp, gone = read_cubin(comp, compile_again)
        base.update(compile=comp)
        if cubin is None:  # its cache entry was cleared since the compile, twice (tools/cache.py): not the kernel's doing
            return EvalResult(status="INFRA_ERROR", message=f"the compiled cubin is gone from the compile cache "
                              f"({gone}); evaluate again to compile it anew", **base)
        job = gpu_job(wl.id, cubin, plan.model_dump(), options)
        # the profile cache's key: the binary and the plan it runs with (a cubin embeds its plan's text today, but a
        # profile reused for the same binary under another grid would credit instructions the new plan never runs)
        cubin_sha = hashlib.sha256(cubin + json.dumps(job.plan, sort_keys=True, default=str).encode()).hexdigest()
        priority = self._priority.of(wl.id, options.turns_left)
        early = self._early_profile(pool, options, wl.id, solution.source, comp, cubin_sha, job.seed, priority)
        try:
            result = self._run_and_profile(pool, job, options, solution, comp, cubin_sha, base, seconds, early, priority)
        finally:
            if early is not None:
                early.drop()  # whatever happened, an early run nobody claimed is killed at its gate
                shutil.rmtree(early.expect_path.parent, ignore_errors=True)
        if options.time and result.status != "TIMEOUT":  # a scored turn's cost (a tool's quick test or a hang is not)
            self._priority.learn(wl.id, result.seconds.get("gpu.gpu_total", 0.0) + result.seconds.get("profile.gpu_held", 0.0))
        return result

    def _run_and_profile(self, pool: GpuPool, job: GpuJob, options: EvalOptions, solution, comp, cubin_sha: str,
                         base: dict, seconds: dict, early: EarlyProfile | EarlyChoice | None,
                         priority: float = 0.0) -> EvalResult:
        t0 = time.perf_counter()
        result = self._submit(pool, job, priority)
        seconds["gpu"] = time.perf_counter() - t0
        if early is not None and result.verified_sketch is not None:  # before the claim: its replay reads it after `go`
            early.expect_path.write_text(json.dumps(result.verified_sketch))
        seconds.update({f"gpu.{k}": v for k, v in result.seconds.items()})
        fp = Fingerprint.model_validate({**pool.fingerprint, "ptxas": comp.tools.get("ptxas", ""), "jail": comp.jail})
        message = _message(result)
        if result.status == "TIMEOUT" and (pool := next((w.message for w in comp.warnings if POOL_WARNING in w.message),
                                                        None)):
            message += f". Likely cause, from the compile warnings: {pool}"
        evaluated = EvalResult(
            status=result.status, message=message, plan_errors=result.plan_errors,
            runtime_error=result.runtime_error, correctness=result.correctness, timing=result.timing,
            fingerprint=fp, gpu_evaluated=True, input_seed=result.input_seed, **base)
        level, why = options.profile_level(evaluated.passed, evaluated.speedup, evaluated.kernel_ms)
        if evaluated.status == "TIMEOUT" and level != "none":  # ncu would replay the hang until its own time limit
            level, evaluated.profile_reason = "none", f"not profiled: the kernel hung ({why or 'profile asked for'})"
        if level != "none" or options.sanitize:
            evaluated = self._attach_profile(evaluated, options, level, why, solution, comp, cubin_sha, early, priority,
                                             expected=result.verified_sketch)
        return evaluated

    def _cached_profile(self, cubin_sha: str, workload: str, arch: str, level: str) -> dict | None:
        """The profile of an identical cubin taken at `level` or a stronger one, if any."""
        cached = self._profiles.get((cubin_sha, workload, arch)) if level != "none" else None
        return cached if cached is not None and serves(cached["level"], level) else None

    def _early_profile(self, pool: GpuPool, options: EvalOptions, workload: str, source: str, comp,
                       cubin_sha: str, seed: int, priority: float = 0.0) -> EarlyProfile | EarlyChoice | None:
        """Start the profile a passing kernel would get, beside its timing (tools/profile/early.py); None when a
        pass would take none, the profile cache already holds it, an identical cubin's profile is being taken (or
        started early: on several GPUs identical kernels pass at once, and one ncu run serves both), or early starts
        are switched off. Under the new-best policy, with slots to spare, the full profile a new best would get
        starts beside the verdict (an EarlyChoice): which one the pass wants, only its timing tells."""
        level, _ = options.profile_level(True, None)
        if level == "none" or not self.early_profiles or not comp.cubin_path:
            return None
        device = functools.cache(pool.pick_device)  # one device for both runs, picked when the first starts
        # where the evaluation's verified sketch goes once the timing is in: the replay checks its output against it
        expect = Path(tempfile.mkdtemp(prefix="ptxbench-expect-")) / "expected.json"
        runs: list[EarlyProfile] = []
        try:
            first = self._start_early(pool, options, workload, source, comp, cubin_sha, level, device, seed, expect,
                                      priority)
            runs += [first] if first is not None else []
            best_level, _ = options.profile_level(True, math.inf, 0.0)  # what a new best would get
            if best_level != level and (not runs or self._early_spare(pool) >= 2):  # one left for another evaluation
                extra = self._start_early(pool, options, workload, source, comp, cubin_sha, best_level, device, seed,
                                          expect, priority)
                runs += [extra] if extra is not None else []
        except BaseException:  # no run left waiting at its gate, no folder left behind
            for run in runs:
                run.drop()
            shutil.rmtree(expect.parent, ignore_errors=True)
            raise
        if not runs:
            shutil.rmtree(expect.parent, ignore_errors=True)
            return None
        early = runs[0] if len(runs) == 1 else EarlyChoice(runs)
        early.expect_path = expect
        return early

    def _early_spare(self, pool: GpuPool) -> int:
        with self._early_lock:
            return self.early_per_gpu * max(1, len(pool.slots)) - self._early_running

    def _start_early(self, pool: GpuPool, options: EvalOptions, workload: str, source: str, comp, cubin_sha: str,
                     level: str, device_for: Callable[[], int], seed: int, expect: Path,
                     priority: float) -> EarlyProfile | None:
        """One early run at `level` on the evaluation's first inputs (`seed`), unless its profile is cached, being taken
        or started early, or no slot is free."""
        key = (cubin_sha, workload, options.arch)
        if self._cached_profile(cubin_sha, workload, options.arch, level) or self._profiling.running(key, level):
            return None
        from .profile.candidate import measure_candidate

        device = device_for()
        with self._early_lock:
            if self._early_slots is None:
                self._early_slots = threading.BoundedSemaphore(self.early_per_gpu * max(1, len(pool.slots)))
            if key in self._early_keys and serves(self._early_keys[key], level):
                return None
            if not self._early_slots.acquire(blocking=False):
                return None
            self._early_keys[key] = level
            self._early_running += 1

        def ended() -> None:
            with self._early_lock:
                if self._early_keys.get(key) == level:
                    del self._early_keys[key]
                self._early_running -= 1
            self._early_slots.release()

        return EarlyProfile(lambda hold: measure_candidate(workload, source, comp.cubin_path, arch=options.arch,
                                                           full=level == "full", seed=seed, device=device,
                                                           hold=hold, expected=expect, dist=options.dist),
                            level, hold=lambda: pool.exclusive(device, priority, workload), device=device, on_end=ended)

    def _submit(self, pool: GpuPool, job: GpuJob, priority: float = 0.0) -> GpuOutcome:
        """The pool's verdict, or the remembered TIMEOUT of an identical job (the hang is not paid again)."""
        key = job_key(job)
        hang, owner = self._hangs.claim(key, gpu_free=lambda: pool.free.qsize() > 0)
        if hang is not None:
            return hang.outcome.model_copy(update={"message": reused_message(hang), "seconds": {}})
        result = None
        try:
            result = pool.submit(job, priority)
            return result
        finally:
            if owner:
                self._hangs.release(key, result)

    def _attach_profile(self, result: EvalResult, options: EvalOptions, level: str, why: str, solution, comp,
                        cubin_sha: str, early: EarlyProfile | EarlyChoice | None = None, priority: float = 0.0,
                        expected: dict | None = None) -> EvalResult:
        """Profile / sanitize the candidate. The counts of one binary on one GPU do not change between submissions, so
        a profile of the same cubin (a model resubmitting a kernel) at the level asked for or above is reused instead
        of replayed under ncu again, and one being taken for an identical cubin is waited for (profile/inflight.py).
        ncu's replay holds its GPU only while it replays the launches (the pool's
        exclusive(device) between the replay's ready and done); the sanitizer holds one for its whole run."""
        key = (cubin_sha, result.workload, options.arch)
        t0 = time.perf_counter()
        _, registered = (self._profiling.acquire(key, level, lambda: self._cached_profile(*key, level) is not None)
                         if level != "none" else (False, False))
        if not registered and level != "none":  # it waited (or found the cache filled meanwhile): the time says which
            result.seconds["profile.identical_wait"] = time.perf_counter() - t0
        try:
            return self._profile_or_reuse(result, options, level, why, solution, comp, key, early, priority, expected)
        finally:
            if registered:
                self._profiling.release(key)

    def _profile_or_reuse(self, result: EvalResult, options: EvalOptions, level: str, why: str, solution, comp,
                          key: tuple, early: EarlyProfile | EarlyChoice | None, priority: float = 0.0,
                          expected: dict | None = None) -> EvalResult:
        cached = self._cached_profile(*key, level)
        if cached is not None:
            result.targets_runtime = {k: RuntimeTarget.model_validate(v) for k, v in cached["targets_runtime"].items()}
            result.profile = {**(cached["profile"] or {}), "reused_from_identical_cubin": True}
            result.feedback = cached["feedback"]
            result.profile_level, result.profile_reason = cached["level"], f"{why} (reused: an identical cubin was profiled)"
            if cached["level"] == "verdict":  # its lines are about this evaluation: this timing, this turn's reason
                from .profile.brief import verdict_feedback
                from .profile.summary import ProfileSummary

                result.feedback = verdict_feedback(ProfileSummary.model_validate(cached["profile"]), result.targets_runtime,
                                                   get_workload(result.workload), result.timing, arch=options.arch, note=why)
            result.seconds["profile"] = 0.0
            level = "none"
        measured = early.claim(level) if early is not None else None  # the early run, when it is at this level
        if level == "none" and not options.sanitize:
            return result
        pool = self.pool
        device = (early.device if measured is not None else pool.pick_device()) if level != "none" else None
        result = attach(result, options, solution.source, comp, solution.language, device=device, level=level, why=why,
                        hold=lambda: pool.exclusive(device, priority, result.workload), sanitize_hold=pool.exclusive,
                        measured=measured, expected=expected)
        # Never kept: a profile whose call computed something else (a failing kernel keeps those verdicts, scoring
        # nothing; reused, they would credit the same binary's next pass without a profiled call of its own)
        if (level != "none" and result.targets_runtime and all(t.verdict != "unknown" for t in result.targets_runtime.values())
                and (result.profile or {}).get("output_passed") is not False):
            self._profiles[key] = {"targets_runtime": {k: v.model_dump() for k, v in result.targets_runtime.items()},
                                   "profile": result.profile, "feedback": result.feedback, "level": level}
        return result

    def close(self) -> None:
        """Stop the workers (a start still in progress on its own thread ends first); the evaluator takes no more
        GPU work after this."""
        with self._pool_lock:
            self._closed, pool, self._pool = True, self._pool, None
        if pool is not None:
            pool.close()
