"""One candidate on the worker's GPU: load -> plan checks -> checked calls -> timed calls -> final checks.

Every call goes through the call protocol (calls.py): the same restored state, flush and events, and a
verified output, whether it is checked or timed. The checked call of each input set is judged by the
referee process (referee.py), which alone holds the expected outputs. Inputs come from seeds drawn per
evaluation (or the job's seed, to replay a verdict). A result faster than the device can go is timed again
under a changed schedule and, if it stands, is TIMING_SUSPECT.

Returns a plain dict (the fields of EvalResult that the GPU decides) and whether the worker must
be replaced (a sticky CUDA error poisons the context). Every kernel failure is a status here;
only harness bugs escape as exceptions, and the worker turns those into INFRA_ERROR.
"""
from __future__ import annotations

import secrets
import time

import numpy as np
import torch

from ...workloads.baselines import make_baseline
from ...workloads.inputs import make_inputs
from ...workloads.registry import get_workload
from ...workloads.schema import Workload
from ..solution.plan import ResolvedPlan
from ..results import Timing, TrialStats
from .ceilings import IMPLAUSIBLE_SPEEDUP, suspicious
from .buffers import BufferSet, allocate_set
from .calls import CandidateCalls, InputSet, Sketch, SketchSpace, sketch_tensors
from .seeds import check_seed_offset, evaluation_seeds, input_sets
from .correctness import output_digest, replay_note
from .launch import HARDWARE_FAULTS, CudaError, get_function, launch_config, launch_kernel, load_module, pack_params, \
    set_dynamic_smem, stack_limit, sync_stream, unload_module
from .limits import LOCAL_KEEP_BYTES, check_function, check_memory, check_plan, local_reservation, plan_bytes
from .messages import GpuJob, GpuOutcome
from .module_state import ModuleState, module_globals
from .referee import RefereeClient, RefereeError, input_digest
from .scrub import frame_bytes
from .unowned import clear_unowned
from .state import WorkerState, changed_inputs
from .tensormap import encode
from .timing import SLOW_FACTOR, L2Flush, Side, evaluation_flush, plan_iterations, time_interleaved, time_sides
from .timing_stats import note_host_stalls, summarize_durations, timing_record
from .verdict import Failed, status_of
from .watchdog import CandidateWatch, Phase, workload_roofline_ms


class Candidate:
    """A loaded module and the launches of its plan, bound to one buffer set at a time."""

    def __init__(self, cubin: bytes, plan: ResolvedPlan, state: WorkerState, wl: Workload):
        self.plan, self.wl = plan, wl
        try:
            self.module = load_module(cubin)
        except CudaError as e:
            raise Failed("RUNTIME_ERROR", f"the driver could not load the cubin: {e}", runtime_error=str(e),
                         replace=e.sticky) from None
        self.functions = {}
        errors = []
        for i, launch in enumerate(plan.launches):
            if launch.kernel not in self.functions:
                try:
                    self.functions[launch.kernel] = get_function(self.module, launch.kernel)
                except CudaError as e:
                    errors.append(f"launch {i + 1}: no kernel named {launch.kernel!r} in the module ({e.name})")
                    continue
            f = self.functions[launch.kernel]
            errors += check_function(launch, i, f.registers, f.static_smem, f.max_threads, f.param_sizes, state.limits)
        if errors:
            raise Failed("PLAN_ERROR", "the launch plan does not fit the kernels or the device", plan_errors=errors)
        most: dict[str, int] = {}  # the attribute is per kernel: the largest of its launches, so none is refused
        for launch in plan.launches:
            most[launch.kernel] = max(most.get(launch.kernel, 0), launch.smem)
        for kernel, smem in most.items():
            if smem > 0:
                try:
                    set_dynamic_smem(self.functions[kernel], smem)
                except CudaError as e:
                    raise Failed("PLAN_ERROR", str(e), plan_errors=[f"{kernel}: dynamic shared memory "
                                                                    f"{smem} bytes refused: {e}"]) from None
        self.stream = torch.cuda.current_stream().cuda_stream
        self.globals = ModuleState(self.module, cubin)
        make_scrub = getattr(state, "on_chip_scrub", None)  # a one-launch replay (the profile's) passes limits only
        self.scrub = make_scrub() if make_scrub else None
        self.frame = frame_bytes(max((f.local_bytes for f in self.functions.values()), default=0), stack_limit())
        # What the scrub overwrites: the frame the context has reserved (WorkerState.reserved_frame), not this
        # candidate's alone: a kernel with a small frame reaches below it, into what an earlier one's larger frame
        # left (tests/data/cheats/attacks/local_below_frame_stash.cu kept an output there from call to call)
        self.scrub_frame = max(int(self.frame), int(getattr(state, "reserved_frame", 0)))

    def bind(self, bufs: BufferSet) -> list:
        """The launches of the plan with this buffer set's pointers and tensor maps, packed once."""
        pointers = bufs.pointers()
        tmaps = {}
        for t in self.plan.tmaps:
            try:
                tmaps[t.name] = encode(t, pointers[t.tensor])
            except CudaError as e:
                raise Failed("PLAN_ERROR", f"tensor map {t.name} was refused by the driver",
                             plan_errors=[f"tmap {t.name}: {e}"]) from None
        return [(launch_config(launch, self.stream), self.functions[launch.kernel], pack_params(launch, pointers, tmaps))
                for launch in self.plan.launches]

    def launch(self, binding: list) -> None:
        """Enqueue the plan's launches; a launch the driver refuses is PLAN_ERROR (the context is fine). The launches
        enqueued before it are waited for first, under the caller's watchdog, so none of them is still running (or
        hung) when the next job comes to this worker: a hang there is the candidate's TIMEOUT, a fault its error."""
        enqueued = 0
        try:
            for cfg, fn, params in binding:
                launch_kernel(cfg, fn, params)
                enqueued += 1
        except CudaError as e:
            if not e.sticky and e.what.startswith("cuLaunchKernelEx"):
                if enqueued:
                    sync_stream(self.stream)
                raise Failed("PLAN_ERROR", f"the driver refused the launch: {e}", plan_errors=[str(e)]) from None
            raise

    def restore_globals(self) -> None:
        self.globals.restore(self.stream)

    def clear_unowned(self) -> None:
        """What no buffer of the protocol holds, overwritten: shared memory of every SM and local memory of every warp
        slot (scrub.py), and the device memory the allocator maps but no live tensor asked for (unowned.py). Nothing
        of one call is there for the next."""
        if self.scrub is not None:
            self.scrub.run(self.stream, self.scrub_frame)
            clear_unowned(self.stream)

    def close(self) -> None:
        unload_module(self.module)


def suspect_message(t: Timing) -> str:
    """Why a correct kernel's timing is not trusted. Above the roofline, the GPU cannot do the work that fast; an
    implausible speedup alone (the library not overhead-bound) is the same verdict, but the kernel's own rate may be
    possible, and a library that read slow in this process (an outlier of its own) gives it too: say which."""
    lib = t.baselines.get(t.primary_baseline)
    head = (f"correct on every checked call, but timed at {t.speedup:.3f}x the library ({t.sol_pct:.0f}% of the "
            f"measured roofline; flags: {', '.join(t.flags)}) and again at {t.recheck_speedup:.3f}x under a changed "
            f"schedule: ")
    if "above_roofline" in t.flags:
        why = "faster than this GPU can compute the workload"
    else:
        why = (f"more than {IMPLAUSIBLE_SPEEDUP:g}x a library that is not overhead-bound"
               + (f" ({t.primary_baseline} {lib.median_ms:.4f} ms against the kernel's {t.candidate.median_ms:.4f})"
                  if lib else "") + ": either the kernel skips work when timed or the library read slow in this "
               "evaluation; evaluate it again")
    return head + why + ", so the timing cannot be trusted and the kernel is not counted as correct"


def new_buffers(wl: Workload, plan: ResolvedPlan) -> BufferSet:
    tensors = [(t.name, wl.shape(t.name), t.dtype, t.role) for t in wl.tensors]
    scratch = [(s.name, s.shape, s.dtype, s.zero) for s in plan.scratch]
    return allocate_set(tensors, scratch)


def make_sets(wl: Workload, plan: ResolvedPlan, seeds: list[int], dist: str) -> list[InputSet]:
    """One buffer set per seed, each with its own pristine inputs (distinct addresses for every set)."""
    sets = []
    for k, seed in enumerate(seeds):
        pristine = make_inputs(wl, seed, dist, "cuda")
        bufs = new_buffers(wl, plan)
        bufs.load_inputs(pristine)
        sets.append(InputSet(k, seed, bufs, pristine))
    return sets


def judged_call(calls: CandidateCalls, referee: RefereeClient, wl: Workload, k: int, trial: int, dist: str,
                job: GpuJob, phase: Phase, flush: L2Flush, watch: CandidateWatch) -> tuple[float, list]:
    """A checked call on set k: the protocol's call, then the referee judges the outputs it left (and the inputs
    the kernel saw). Returns (kernel ms, TrialStats)."""
    s = calls.sets[k]
    watch.before_checked_call()  # the candidate's limit (watchdog.py) covers the call and its protocol only
    ms, sketch = calls.checked_call(k, flush)
    watch.after_checked_call()
    phase("check", job.prepare_timeout_s)
    raw = referee.judge(wl.id, s.seed, dist, trial, {n: s.bufs.tensors[n].data for n in s.bufs.outputs},
                        {n: s.bufs.tensors[n].data for n in s.pristine})
    # The referee's draw, from the prepare sent before the call (its reply is read with the judge's): a set judged
    # without one had nothing to compare, and a divergent draw read as the kernel's "modified its input(s)"
    drawn = referee.digests.pop((wl.id, s.seed, dist), None)
    if drawn is None:
        raise RefereeError(f"input set {k} (seed {s.seed}, {dist!r}) was judged without the referee's prepare")
    if drawn != input_digest(s.pristine):
        raise RefereeError(f"the worker and the referee drew different inputs from seed {s.seed}")
    stats = [TrialStats.model_validate(r) for r in raw]
    if status_of(stats) == "PASSED":
        calls.verified[k] = sketch
    return ms, stats


def outputs_digest(s) -> tuple:
    """The fingerprints of an input set's outputs as its last call left them (equal: the same bits)."""
    return tuple(output_digest(s.bufs.tensors[n].data) for n in s.bufs.outputs)


def correctness(calls: CandidateCalls, referee: RefereeClient, wl: Workload, job: GpuJob, phase: Phase,
                seconds: dict, flush: L2Flush, watch: CandidateWatch) -> tuple[list, dict]:
    """The checked call of every input set, in order; stops at the first failing one. Also returns each checked set's
    output digest (new_inputs_check compares against them)."""
    dist = job.dist
    all_stats, digests = [], {}
    for k, s in enumerate(calls.sets):
        ms, stats = judged_call(calls, referee, wl, k, k, dist, job, phase, flush, watch)
        seconds.setdefault("first_run", ms / 1000)
        if k + 1 < len(calls.sets):
            referee.prepare_async(wl.id, calls.sets[k + 1].seed, dist)  # the next reference, while this set is checked
        digest = outputs_digest(s)
        note = replay_note(digest, digests)
        if note:
            for st in stats:
                st.passed, st.note = False, "; ".join(filter(None, [st.note, note]))
        digests[k] = digest
        all_stats += stats
        if status_of(stats) != "PASSED":
            break
    return all_stats, digests


def fresh_inputs_call(calls: CandidateCalls, referee: RefereeClient, wl: Workload, job: GpuJob, phase: Phase,
                      flush: L2Flush, watch: CandidateWatch, dist: str, trial: int) -> list:
    """Set 0's buffers refilled with inputs of `dist` that no call has seen (its seed moved past every set's), and
    one checked call on them, judged: the final checks' common step. The referee is asked to prepare them first, as
    for every set: it computes their reference while the candidate runs, and its draw is compared with the worker's
    (judged_call). Returns its TrialStats."""
    s = calls.sets[0]
    phase("prepare", job.prepare_timeout_s)
    s.seed = s.seed + check_seed_offset(len(calls.sets))
    referee.prepare_async(wl.id, s.seed, dist)
    calls.set_pristine(0, make_inputs(wl, s.seed, dist, "cuda"))
    calls.verified.pop(0, None)
    return judged_call(calls, referee, wl, 0, trial, dist, job, phase, flush, watch)[1]


def new_inputs_check(calls: CandidateCalls, referee: RefereeClient, wl: Workload, job: GpuJob, phase: Phase,
                     flush: L2Flush, watch: CandidateWatch, earlier: dict) -> list:
    """Last: set 0's buffers get inputs no call has seen (a kernel that keyed a cache on pointers would replay). The
    replay is named only when it happened (the output bit-identical to an earlier set's, `earlier`: their digests);
    any other failure here is judged and worded as on the other sets."""
    stats = fresh_inputs_call(calls, referee, wl, job, phase, flush, watch, job.dist, len(calls.sets))
    note = replay_note(outputs_digest(calls.sets[0]), earlier)
    if note:
        for st in stats:
            st.passed, st.note = False, "; ".join(filter(None, [f"new inputs in buffers used before: {note}", st.note]))
    return stats


def declared_dists_check(calls: CandidateCalls, referee: RefereeClient, wl: Workload, job: GpuJob, phase: Phase,
                         flush: L2Flush, watch: CandidateWatch) -> list:
    """Last of all: one checked call on set 0 with fresh inputs of each distribution the workload declares besides the
    evaluation's own (the backward's `spiky`: one element in a thousand ten times larger). Every set and the timing
    stay on the evaluation's distribution; a kernel exact on it that breaks on the heavy tails its workload says it
    must take (a quantization scaled for normal inputs) fails here instead of passing every default evaluation."""
    stats = []
    for i, dist in enumerate(d for d in wl.input_dist if d != job.dist):
        # A fault, stray write or hang here only: its message says on which inputs (the evaluation's never showed it);
        # a hang's through the watchdog's phase text, which the pool's TIMEOUT message quotes, the rest through
        # evaluate_job's note_inputs.
        where = watch.inputs = f"on {dist!r} inputs, which this workload declares"
        try:
            found = fresh_inputs_call(calls, referee, wl, job, phase, flush, watch, dist, len(calls.sets) + 1 + i)
        except Exception as e:
            e.inputs_note = where
            raise
        finally:
            watch.inputs = ""
        for st in found:
            if not st.passed:
                st.note = "; ".join(filter(None, [where, st.note]))
        stats += found
        if status_of(found) != "PASSED":
            break
    return stats


def pristine_check(calls: CandidateCalls, referee: RefereeClient, wl: Workload, dist: str) -> None:
    """The pristine copies every call restored inputs from are still the referee's inputs (no stash hidden there)."""
    for s in calls.sets:
        changed = referee.changed_inputs(wl.id, s.seed, dist, s.pristine)
        if changed:
            raise Failed("RUNTIME_ERROR", f"out-of-bounds write: the kernel wrote into the harness's copy of input set "
                                          f"{s.index} ({', '.join(changed)})",
                         runtime_error="OUT_OF_BOUNDS_WRITE: harness input copies")


def library_check(calls: CandidateCalls, wl: Workload, dist: str) -> None:
    """After the timed calls: the library's inputs, live and pristine, are still what their seeds draw (a kernel that
    wrote both alike passed every compare between them, and would have timed the library on data of its choosing)."""
    changed = [f"{name} of library instance {i}" for i, entry in enumerate(calls.library)
               for name in changed_inputs(entry, wl, dist)]
    if changed:
        raise Failed("RUNTIME_ERROR", f"out-of-bounds write: the kernel wrote into the library's inputs and into the "
                                      f"harness's copy of them ({', '.join(changed)})",
                     runtime_error="OUT_OF_BOUNDS_WRITE: library baseline inputs")


def audit(calls: CandidateCalls, state: WorkerState, wl: Workload, dist: str, pristine: bool = True) -> None:
    """Every copy the harness keeps on the device, checked against what its seed draws: the candidate's pristine
    inputs (by the referee), the library's inputs of this evaluation, and every cached library instance of any
    workload. A kernel that kept a result in one between its calls, and wrote both copies alike where the protocol
    compares two, passes every per-call check. Run once at a random call of the timing (a kernel cannot clean up
    before it) and once after (`pristine=False` there: the caller's final checks ask the referee next)."""
    if pristine and state.referee is not None:
        pristine_check(calls, state.referee, wl, dist)
    library_check(calls, wl, dist)
    tampered = state.tampered_baselines(checked=calls.library)  # this evaluation's instances: compared just above
    torch.cuda.empty_cache()  # the inputs drawn again to compare with: unmapped, not left for the clear of every call
    if tampered:
        raise Failed("RUNTIME_ERROR", "out-of-bounds write: the kernel wrote into the harness's cached library inputs "
                                      f"of {', '.join(sorted({k[1] for k in tampered}))}",
                     runtime_error="OUT_OF_BOUNDS_WRITE: cached library inputs")


def time_candidate(calls: CandidateCalls, state: WorkerState, wl: Workload, job: GpuJob, phase: Phase, first_run_s: float,
                   flush: L2Flush, watch: CandidateWatch, seconds: dict | None = None) -> dict:
    """The timing record; `seconds` gets `audit`: the audits' own time (both, inside the timing's), so every evaluation
    says what checking every cached library instance cost it."""
    dist = job.dist
    seconds = {} if seconds is None else seconds

    def timed_audit(pristine: bool = True) -> None:
        start = time.perf_counter()
        try:
            audit(calls, state, wl, dist, pristine=pristine)
        finally:
            seconds["audit"] = seconds.get("audit", 0.0) + time.perf_counter() - start

    primary = wl.primary_baseline.name
    phase("prepare", job.prepare_timeout_s)
    calls.attach_library([state.trusted_baseline(wl, primary, dist, i) for i in range(len(calls.sets))])
    ceil = state.get_ceilings()
    others = {}
    for b in wl.baselines:
        if b.name != primary:
            stats = state.measured_stats(wl, b.name, dist)
            if stats is None:  # timed once per worker: built (a backward's forward pass and all) only then
                entry = state.baseline(wl, b.name, dist)
                stats = entry.stats = summarize_durations(time_interleaved([entry.fn], flush=flush, warmup=3,
                                                                           iters=20, trials=1)[0])
            others[b.name] = stats
    state.release_idle(keep=calls.library)  # other instances' outputs and derived tensors: freed, then cleared
    torch.cuda.empty_cache()  # no freed block of the harness's stays mapped for a kernel to hide a result in
    # Both sides of a pair get the same preparation (every set of both restored), flush and checks: the library
    # rotates among as many input sets as the candidate, so neither side's call sees a different GPU history.
    cand_side = Side(calls.call, calls.prepare, calls.check)
    base_side = Side(calls.library_call, calls.library_prepare, calls.library_check)
    watch.before_timing("the timing probe", 2, None)
    t0 = time.perf_counter()
    cand_probe, base_probe = time_sides([cand_side, base_side], flush=flush, warmup=0, iters=2, trials=1)
    cycle_ms = (time.perf_counter() - t0) * 1000 / 4
    slow = float(np.median(cand_probe)) > SLOW_FACTOR * float(np.median(base_probe))
    per_pair_ms = max(first_run_s * 1000, 2 * cycle_ms)
    warmup, iters, trials, reduced = plan_iterations(job, per_pair_ms, slow)

    def first_chunk(what: str) -> None:  # the warm-up and the first trial come before the first on_trial
        watch.before_timing(f"{what}: warm-up and trial 1 of {trials}", warmup + iters, per_pair_ms)

    def keep_alive(trial: int) -> None:
        if trial + 1 < trials:
            watch.before_timing(f"timing trial {trial + 2} of {trials}", iters, per_pair_ms)
        else:  # every timed call has finished: what follows (statistics, final checks) is the harness's work
            phase("check", job.prepare_timeout_s)

    first_chunk("timing")

    def mid_audit() -> None:  # its own limit, then the rest of the trial's
        phase("check", job.prepare_timeout_s)
        timed_audit()
        watch.before_timing("the timing after its audit", warmup + iters, per_pair_ms)

    at = secrets.randbelow(2 * (warmup + iters * trials))  # which call the audit follows: drawn here, never sent
    gates: dict = {}
    cand_ms, base_ms = time_sides([cand_side, base_side], flush=flush, warmup=warmup, iters=iters,
                                  trials=trials, on_trial=keep_alive, audit=(at, mid_audit), report=gates)
    # a call whose gate gave up on the host: its interval may hold the host's latency
    record = note_host_stalls(timing_record(wl, cand_ms, base_ms, primary, others, ceil, state.limits.name, reduced,
                                            slow), gates.get("gate_stalls", 0))
    if suspicious(record["flags"]):
        # Timed again under a changed schedule: the library first in each pair, new set order; if it stands, it is
        # not a kernel this device can run that fast, whatever the checks said.
        calls.order = np.random.default_rng(calls.key + 1)
        first_chunk("the re-check's timing")
        gates2: dict = {}  # the re-check's own stalls: when its timing is the one kept, they are the ones that count
        base_ms2, cand_ms2 = time_sides([base_side, cand_side], flush=flush, warmup=warmup, iters=iters,
                                        trials=trials, on_trial=keep_alive, report=gates2)
        again = note_host_stalls(timing_record(wl, cand_ms2, base_ms2, primary, others, ceil, state.limits.name,
                                               reduced, slow), gates2.get("gate_stalls", 0))
        record["recheck_speedup"], record["recheck_speedup_ci"] = again["speedup"], again["speedup_ci"]
        if not suspicious(again["flags"]):
            again["flags"].append("rechecked")
            again["recheck_speedup"], again["recheck_speedup_ci"] = record["speedup"], record["speedup_ci"]
            record = again
    timed_audit(pristine=False)
    record["input_sets"] = len(calls.sets)
    record["verified_calls"] = calls.calls
    record["l2_flush"] = flush.mode
    return record


def driver_error(cand: Candidate | None) -> str:
    """'NAME: text' of the context's sticky error, as the driver reports it ('' when it reports none)."""
    if cand is None:
        return ""
    try:
        sync_stream(cand.stream)
    except CudaError as e:
        return f"{e.name}: {e.text}"
    return ""


def note_inputs(out: GpuOutcome, e: Exception) -> None:
    """The message of a verdict `e` raised says on which inputs, when they were not the evaluation's own."""
    where = getattr(e, "inputs_note", "")
    if where and out.status != "INFRA_ERROR":  # a hardware fault is the machine's, whatever the inputs
        out.message = f"{out.message} ({where})"


def fault_verdict(name: str, text: str) -> tuple[str, str, str]:
    """(status, message, runtime_error) of a CUDA error after a launch: the kernel's RUNTIME_ERROR, unless the GPU
    itself reports a hardware fault (an uncorrectable ECC or NVLink error), which no kernel causes: INFRA_ERROR."""
    detail = text if text.startswith(name) else f"{name}: {text}"
    if name in HARDWARE_FAULTS:
        return "INFRA_ERROR", f"the GPU reported a hardware fault during the evaluation: {detail}", detail
    return "RUNTIME_ERROR", f"the kernel failed: {detail}", detail


def reserve_local_frame(state: WorkerState, cand: Candidate) -> None:
    """The driver reserves a frame larger than the worker's so far (WorkerState.reserved_frame) at the first launch
    that needs it (the scrub's, before the first call), outside torch's allocator, whose cached free blocks it cannot
    take (earlier evaluations' sets leave many): they are released first, and the worker's cached library instances
    once if that was not enough. The plan's memory, frame included, was found
    to fit the candidate's share, so a reservation that still fails is this worker's: INFRA_ERROR and a fresh one
    (it was the kernel's RUNTIME_ERROR, 'out of memory' at the scrub's launch)."""
    if cand.scrub is None:  # a one-launch replay (the profile's) runs no scrub
        return
    frame = int(cand.frame)
    for attempt in range(2):
        if attempt:
            state.cache.clear()
        torch.cuda.empty_cache()
        try:
            cand.scrub.run(cand.stream, frame)
            sync_stream(cand.stream)
            state.reserved_frame = frame
            return
        except CudaError as e:
            if e.name != "CUDA_ERROR_OUT_OF_MEMORY":
                raise
            error = e
    raise Failed("INFRA_ERROR", f"the worker could not reserve the kernels' local memory ({frame} bytes a thread "
                 f"for every thread the GPU holds) that the plan was found to have room for: {error}",
                 runtime_error=f"{error.name}: {error.text}", replace=True)


def sets_in_memory(state: WorkerState, wl: Workload, plan: ResolvedPlan, seeds: list[int], dist: str) -> list[InputSet]:
    """The input sets, made again once with the worker's cached library instances released when the GPU runs out
    of memory (a plan within the candidate's share must not fail for what earlier evaluations left cached); out of
    memory then, the plan's own size is to blame: PLAN_ERROR."""
    for attempt in range(2):
        try:
            return make_sets(wl, plan, seeds, dist)
        except torch.cuda.OutOfMemoryError:
            pass
        if attempt == 0:  # outside the handler, so the failed attempt's tensors are no longer referenced
            state.cache.clear()
        torch.cuda.empty_cache()
    raise Failed("PLAN_ERROR", "the GPU ran out of memory allocating the plan's buffers",
                 plan_errors=[f"out of GPU memory allocating {len(seeds)} input sets of the plan's tensors and scratch "
                              f"buffers"])


def evaluate_job(state: WorkerState, job: GpuJob, phase: Phase) -> tuple[GpuOutcome, bool]:
    """The worker's answer to one 'evaluate' request: (result fields, replace this worker)."""
    seconds: dict[str, float] = {}
    t_start = time.perf_counter()
    wl = get_workload(job.workload)
    plan = ResolvedPlan.model_validate(job.plan)
    dist = job.dist
    n_sets = input_sets(job.trials, wl.trials)
    seeds = evaluation_seeds(job.seed, n_sets)
    out = GpuOutcome(status="PASSED", input_seed=seeds[0])
    referee = state.referee
    cand = sets = calls = None
    grown = False  # the candidate's local frame grew the context's local memory past what a worker keeps
    watch = CandidateWatch(phase, job.timeout_s, workload_roofline_ms(wl.flops, wl.min_bytes, state.ceilings,
                                                                      state.limits.name))
    flush = evaluation_flush(state.limits.l2_bytes, job.l2_flush)
    try:
        sizes = plan_bytes({t.name: (t.dtype, wl.shape(t.name)) for t in wl.tensors}, plan)  # as no-GPU mode sizes them
        input_bytes, module_bytes = sum(sizes[t.name] for t in wl.inputs), sum(g.size for g in module_globals(job.cubin))
        errors = check_plan(plan, state.limits, sizes)
        errors += check_memory(sizes, input_bytes, n_sets, state.limits, module_bytes=module_bytes)
        if errors:
            raise Failed("PLAN_ERROR", "the launch plan exceeds the device's limits", plan_errors=errors)
        phase("prepare", job.prepare_timeout_s)
        referee.prepare_async(wl.id, seeds[0], dist)
        phase("load", job.prepare_timeout_s)
        cand = Candidate(job.cubin, plan, state, wl)
        # The local memory of the scrub's frame (the candidate's own, or the stack limit) is reserved for every thread
        # the GPU holds at the first launch, before any buffer of the harness's is made, and kept while the context
        # lives: it counts against the candidate's share, and a worker that reserved much is not kept for the next one.
        local = local_reservation(cand.frame, state.limits)
        if local > LOCAL_KEEP_BYTES:
            errors = check_memory(sizes, input_bytes, n_sets, state.limits, module_bytes=module_bytes, local_bytes=local)
            if errors:
                raise Failed("PLAN_ERROR", "the kernels' local memory and the plan's buffers exceed the GPU's memory",
                             plan_errors=errors)
            grown = True
        if int(cand.frame) > state.reserved_frame:
            reserve_local_frame(state, cand)
        cand.scrub_frame = max(int(cand.frame), state.reserved_frame)
        phase("prepare", job.prepare_timeout_s)
        sets = sets_in_memory(state, wl, plan, seeds, dist)
        calls = CandidateCalls(cand, sets, secrets.randbits(62))
        t0 = time.perf_counter()
        stats, digests = correctness(calls, referee, wl, job, phase, seconds, flush, watch)
        if isinstance(first := calls.verified.get(0), Sketch):  # the profile replays set 0's inputs (input_seed) and
            out.verified_sketch = {"key": calls.key, "values": {n: list(v) for n, v in first.values.items()}}  # checks them
        out.correctness = list(stats)
        out.status = status_of(stats)
        seconds["correctness"] = time.perf_counter() - t0
        if out.status == "PASSED" and job.time:
            t0 = time.perf_counter()
            out.timing = Timing.model_validate(time_candidate(calls, state, wl, job, phase, seconds.get("first_run", 0.0),
                                                              flush, watch, seconds))
            seconds["timing"] = time.perf_counter() - t0
        if out.status == "PASSED":
            t0 = time.perf_counter()
            pristine_check(calls, referee, wl, dist)
            extra = new_inputs_check(calls, referee, wl, job, phase, flush, watch, digests)
            if status_of(extra) == "PASSED":
                extra += declared_dists_check(calls, referee, wl, job, phase, flush, watch)
            out.correctness += extra
            out.status = status_of(extra)
            seconds["final_checks"] = time.perf_counter() - t0
        if out.status == "PASSED" and out.timing and suspicious(out.timing.flags):
            t = out.timing
            out.status = "TIMING_SUSPECT"
            out.message = suspect_message(t)
        replace = False
    except Failed as f:
        out.status, out.message, out.plan_errors, out.runtime_error = f.status, f.message, f.plan_errors, f.runtime_error
        note_inputs(out, f)
        replace = f.replace
        if f.runtime_error.startswith("OUT_OF_BOUNDS_WRITE"):
            # The stray write was found in memory the protocol checks; where else it landed (the harness's scalars,
            # a library's workspace, the scrub's code) no check covers: a fresh worker, and the cached instances go.
            state.cache.clear()
            replace = True
    except CudaError as e:  # a fault surfacing in the protocol's own driver calls after a launch
        out.status, out.message, out.runtime_error = fault_verdict(e.name, e.text)
        note_inputs(out, e)
        replace = True
    except RuntimeError as e:  # torch saw the fault first (an event or a protocol op): ask the driver for its name
        if isinstance(e, RefereeError) or "CUDA error" not in str(e):
            raise
        text = driver_error(cand) or str(e).splitlines()[0]
        out.status, out.message, out.runtime_error = fault_verdict(text.split(":")[0], text)
        note_inputs(out, e)
        replace = True
    finally:
        calls = sets = None
        if cand is not None:
            try:
                cand.close()
            except Exception:  # noqa: BLE001 - a poisoned context cannot unload; the worker is replaced anyway
                pass
    seconds["gpu_total"] = time.perf_counter() - t_start
    out.seconds = seconds
    return out, replace or grown


def aa_job(state: WorkerState, job: GpuJob, phase: Phase) -> tuple[GpuOutcome, bool]:
    """The A/A test: the primary baseline timed as if it were the candidate, against itself."""
    wl = get_workload(job.workload)
    dist = job.dist
    phase("prepare", job.prepare_timeout_s)
    primary = wl.primary_baseline.name
    base = state.baseline(wl, primary, dist)
    twin = make_baseline(wl, primary, {t.name: base.inputs[t.name] for t in wl.inputs})  # independent, same data
    ceil = state.get_ceilings()
    phase("timing", job.timeout_s)
    flush = evaluation_flush(state.limits.l2_bytes, job.l2_flush)
    key = secrets.randbits(62)
    space = SketchSpace("cuda")

    def restore() -> None:  # what the protocol does before every call: the inputs copied back from pristine
        for name, t in base.inputs.items():
            t.copy_(base.pristine[name])

    def check(out) -> None:  # and the sketch after each call, on both sides
        torch.stack(sketch_tensors(out, key, space)).tolist()

    gates: dict = {}  # an A/A timing says how many of its calls may hold the host's latency, as an evaluation's does
    a_ms, b_ms = time_sides([Side(twin, restore, check), Side(base.fn, restore, check)], flush=flush,
                            warmup=job.warmup, iters=job.iters, trials=job.timing_trials, report=gates)
    record = note_host_stalls(timing_record(wl, a_ms, b_ms, primary, {}, ceil, state.limits.name, False),
                              gates.get("gate_stalls", 0))
    timing = Timing.model_validate(record | {"l2_flush": flush.mode})
    return GpuOutcome(status="PASSED", timing=timing), False
