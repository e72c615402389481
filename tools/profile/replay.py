"""The replay program that Nsight Compute and compute-sanitizer run: one candidate, its plan, ONCE.

    python -m ptxbench.tools.profile.replay --workload W --source FILE --cubin CUBIN [--seed N] [--exact] [--handshake DIR]
                                            [--judge FILE [--expect SKETCH]]

It loads the cubin, builds the workload's inputs, and launches the plan's kernels once inside the
NVTX range `ptxbench` (so ncu profiles exactly those launches). Loading, plan checks, buffers and
launches are the GPU worker's own code (tools/gpu/runner.Candidate), so what is profiled is what
was timed. `--exact` gives every buffer its own exact-size allocation instead of the worker's
guard zones, so compute-sanitizer's memcheck sees a write one element past the end (run it with
PYTORCH_NO_CUDA_MEMORY_CACHING=1). `--handshake DIR` (handshake.py): everything that runs no kernel
(imports, plan, context, cubin load) first, then `ready`, wait for `go`, then inputs and the launch,
then `done`; the evaluator holds the GPU only between go and done. `--judge FILE`: after the launch (before `done`),
the output is judged and the verdict written to FILE as JSON ({"passed": true | false | null, "status", "note",
"method", "seconds"}): a profiled call that computed something else than the evaluated ones is not credited with their
target instructions (candidate.py). With `--expect SKETCH` (the evaluation's verified sketch of these inputs and its
sign key, read only after the call: the evaluator may write it while the replay waits at `ready`) the output is
compared as a timed call's is (tools/gpu/calls.py: a few passes over it); without it, or when it never came, the
referee's rule judges it against a reference computed then (seconds of GPU time for the large workloads). Exit status: 0 ran, 2 the
candidate failed (message on stderr), 3 the solution or plan was refused, 4 no `go` came.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

NVTX_RANGE = "ptxbench"


def _nvtx():
    try:
        import nvtx

        return nvtx.push_range, nvtx.pop_range
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def exact_buffers(wl, plan):
    """A BufferSet whose buffers are plain exact-size allocations (no guard zones)."""
    import torch

    from ..gpu.buffers import BufferSet, Guarded, torch_dtype

    def one(name, shape, dtype):
        t = torch.empty(tuple(shape), dtype=torch_dtype(dtype), device="cuda")
        return Guarded(name, t, t)

    tensors = {t.name: one(t.name, wl.shape(t.name), t.dtype) for t in wl.tensors}
    scratch = {s.name: one(s.name, s.shape, s.dtype) for s in plan.scratch}
    bufs = BufferSet(tensors, scratch, [s.name for s in plan.scratch if s.zero], [t.name for t in wl.outputs])
    bufs.reset()
    return bufs


def sketched_output(bufs, expected: dict) -> dict:
    """The output against the evaluation's verified sketch of the same inputs (`expected`: {'key', 'values'}), as the
    protocol checks a timed call: the same signs, the verified output's squashing scales, SKETCH_TOLERANCE."""
    from ..gpu.calls import Sketch, sketch_tensors, to_sketch

    verified = Sketch({str(n): tuple(float(x) for x in v) for n, v in expected["values"].items()})
    outputs = {n: bufs.tensors[n].data for n in bufs.outputs}
    if set(outputs) != set(verified.values):
        raise ValueError(f"the sketch names {sorted(verified.values)}, the workload's outputs are {sorted(outputs)}")
    parts = sketch_tensors(outputs, int(expected["key"]), scales=verified.scales())
    differs = to_sketch(list(outputs), [float(p) for p in parts]).differs(verified)
    status = "PASSED" if not differs else "INCORRECT_NAN" if "NaN/Inf" in differs else "INCORRECT_NUMERICAL"
    return {"passed": not differs, "status": status, "note": differs, "method": "sketch"}


def refereed_output(wl, seed: int, dist: str, bufs, device: str) -> dict:
    """The output by the referee's rule against a reference drawn only now, after the call (so the kernel never had it
    within reach): outputs, and the inputs left untouched."""
    from ..gpu.referee import RefereeCore
    from ..gpu.verdict import status_of
    from ..results import TrialStats

    core = RefereeCore(device)
    core.prepare(wl.id, seed, dist)
    inputs = core.data[(wl.id, seed, dist)].inputs
    stats = [TrialStats.model_validate(s) for s in core.judge(
        wl.id, seed, dist, 0, {n: bufs.tensors[n].data for n in bufs.outputs}, {n: bufs.tensors[n].data for n in inputs})]
    status = status_of(stats)
    wrong = [f"{s.tensor}: relative Frobenius error {s.rel_fro_err:.3g}" if s.rel_fro_err is not None else s.tensor
             for s in stats if not s.passed]
    notes = [s.note for s in stats if not s.passed and s.note]
    return {"passed": status == "PASSED", "status": status, "note": "; ".join(wrong + notes), "method": "referee"}


WARM_ELEMENTS = 4096


def warm_sketch(wl, device: str = "cuda") -> bool:
    """A sketch of a few harness elements per output dtype, so that the judgment's own sketch finds its kernels loaded:
    a kernel's first launch loads it, which in a fresh process took 0.43-0.58 s of the first sketch of the main GEMM's
    output against 4-16 ms warm (bench/sketch_cost.py; in the GPU-held window it cost every verdict about 0.47 s, 12%
    of the evaluations an hour). About twenty launches of microseconds before `ready`, on memory no candidate sees:
    beside an evaluation's timing (the early profile starts then) they can touch a timed call or two of its hundreds,
    on both sides alike, which the median does not follow. Only a saving: False when it failed, and the judgment then
    loads its kernels itself."""
    import torch

    from ..gpu.buffers import torch_dtype
    from ..gpu.calls import SketchSpace, sketch_tensors

    try:
        dtypes = sorted({t.dtype for t in wl.outputs})
        outputs = {f"warm{i}": torch.zeros(WARM_ELEMENTS, dtype=torch_dtype(d), device=device) for i, d in enumerate(dtypes)}
        space = SketchSpace(torch.device(device), WARM_ELEMENTS)
        [float(p) for p in sketch_tensors(outputs, 0, space, scales=dict.fromkeys(outputs, 1.0))]
        return True
    except Exception as e:  # noqa: BLE001 - never the replay's failure
        print(f"sketch warm-up skipped: {type(e).__name__}: {e}", file=sys.stderr)
        return False


def read_expected(path: str | Path | None) -> dict | None:
    """The verified sketch the evaluator wrote for this replay, or None (no file, or not one it wrote whole)."""
    if path is None:
        return None
    try:
        expected = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return expected if isinstance(expected, dict) and "key" in expected and isinstance(expected.get("values"), dict) else None


def judged_output(wl, seed: int, dist: str, bufs, device: str = "cuda", expected: dict | None = None) -> dict:
    """The profiled call's output, judged after the call: guards first, then against `expected` (the verified
    sketch) when given, else by the referee's rule. Never raises: a harness failure is `passed: null`. `seconds`: the
    time it took, inside the GPU-held window."""
    from ..gpu.verdict import Failed, check_guards

    start = time.perf_counter()
    try:
        check_guards(bufs)
        verdict = sketched_output(bufs, expected) if expected is not None else refereed_output(wl, seed, dist, bufs, device)
    except Failed as f:
        verdict = {"passed": False, "status": f.status, "note": f.message, "method": "guards"}
    except Exception as e:  # noqa: BLE001 - the judgment is the profile's extra, never its failure
        verdict = {"passed": None, "status": "", "note": f"not judged: {type(e).__name__}: {e}", "method": ""}
    return verdict | {"seconds": round(time.perf_counter() - start, 3)}


def replay(workload_id: str, source: str, cubin: bytes, *, arch: str = DEFAULT_ARCH, seed: int = 0, dist: str = "normal",
           exact: bool = False, nvtx: bool = True, handshake: str | Path | None = None, scrub_above: bool = True,
           judge: str | Path | None = None, expect: str | Path | None = None) -> int:
    import torch
    from cuda.bindings import driver as cu

    from ...workloads.inputs import make_inputs
    from ...workloads.registry import get_workload
    from ..gpu.launch import CudaError, sync_stream
    from ..gpu.runner import Candidate, new_buffers
    from ..gpu.verdict import Failed
    from ..gpu.worker import read_limits
    from ..solution.parse import parse_solution, resolve_plan
    from .handshake import DONE, GO, READY, Handshake

    wl = get_workload(workload_id)
    solution = parse_solution(source, wl, arch)
    if isinstance(solution, list):
        print("solution refused: " + "; ".join(str(i) for i in solution), file=sys.stderr)
        return 3
    gate = Handshake(handshake) if handshake is not None else None
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")  # the primary context, which the driver API calls then use (no kernel runs)
    cu.cuInit(0)
    limits = read_limits(0)
    try:
        plan = resolve_plan(solution.plan, wl, limits.sm_count, arch, cluster_capacity=limits.cluster_capacity)
    except Exception as e:  # PlanError: the plan does not fit this GPU
        print(f"plan refused: {e}", file=sys.stderr)
        return 3
    push, pop = _nvtx() if nvtx else (lambda _n: None, lambda: None)
    if judge is not None:  # the judgment's imports, the cuBLAS handle and the sketch's kernels, before the GPU is ours
        from ..gpu import referee  # noqa: F401

        torch.cuda.current_blas_handle()
        warm_sketch(wl)
    try:
        cand = Candidate(cubin, plan, SimpleNamespace(limits=limits, on_chip_scrub=_scrub(limits, scrub_above)), wl)
        # Up to here no kernel of the candidate's or the inputs' ran (only warm_sketch's, on a few harness elements);
        # from here on (buffers, inputs, the launch) the GPU must be ours alone.
        if gate is not None:
            gate.signal(READY)
            if not gate.wait(GO):
                print("the evaluator never said go", file=sys.stderr)
                return 4
        bufs = exact_buffers(wl, plan) if exact else new_buffers(wl, plan)
        bufs.load_inputs(make_inputs(wl, seed, dist, "cuda"))
        binding = cand.bind(bufs)
        # The state every evaluated call starts from (calls.CandidateCalls.restore), set outside the range so ncu
        # profiles the plan's kernels only: globals back, shared and local memory scrubbed, scratch zeroed. Without
        # the scrub a kernel told the profiled call from the evaluated ones (its shared memory held no scrub pattern)
        # and ran the target instructions only here.
        cand.restore_globals()
        cand.clear_unowned()
        bufs.zero_scratch_()
        torch.cuda.synchronize()
        # The range holds the plan's launches and nothing else: range replay (range_check.py) accepts only part of
        # the driver API inside a range, and waits for the range's work itself; kernel replay keeps the launches
        # enqueued inside the range, so the wait after it changes nothing there.
        push(NVTX_RANGE)
        try:
            cand.launch(binding)
        finally:
            pop()
        sync_stream(cand.stream)
        if judge is not None:  # the expected sketch is read only now, after the call
            Path(judge).write_text(json.dumps(judged_output(wl, seed, dist, bufs, expected=read_expected(expect))))
    except Failed as f:
        print(f"{f.status}: {f.message}" + (f" ({'; '.join(f.plan_errors)})" if f.plan_errors else ""), file=sys.stderr)
        return 2
    except CudaError as e:
        print(f"RUNTIME_ERROR: the kernel failed: {e.name}: {e.text}", file=sys.stderr)
        return 2
    finally:
        if gate is not None and gate.seen(GO):
            gate.signal(DONE)
    print(f"replayed {len(plan.launches)} launch(es) of {workload_id}")
    return 0


def _scrub(limits, above_frame: bool = True):
    """The evaluator's shared- and local-memory scrub (scrub.py), made for this GPU; without its pass above the frame
    under compute-sanitizer (scrub.local_ptx)."""
    from ..gpu.scrub import OnChipScrub, ScrubShape

    return lambda: OnChipScrub(ScrubShape(limits.sm_count, limits.max_threads_per_sm, limits.max_smem_optin,
                                          above_frame))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptxbench.tools.profile.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--source", required=True, help="the solution file (its plan block is read)")
    p.add_argument("--cubin", required=True)
    p.add_argument("--arch", default=DEFAULT_ARCH)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dist", default="normal")
    p.add_argument("--exact", action="store_true", help="exact-size allocations (for compute-sanitizer)")
    p.add_argument("--no-nvtx", action="store_true")
    p.add_argument("--no-scrub-above", action="store_true",
                   help="the local scrub without its pass above the frame (for compute-sanitizer: scrub.local_ptx)")
    p.add_argument("--handshake", default=None, help="folder of the ready/go/done files (handshake.py)")
    p.add_argument("--judge", default=None, help="write the output's verdict to this JSON file")
    p.add_argument("--expect", default=None, help="the evaluation's verified sketch (JSON), read after the call")
    a = p.parse_args(argv)
    return replay(a.workload, Path(a.source).read_text(), Path(a.cubin).read_bytes(), arch=a.arch, seed=a.seed,
                  dist=a.dist, exact=a.exact, nvtx=not a.no_nvtx, handshake=a.handshake, judge=a.judge, expect=a.expect,
                  scrub_above=not a.no_scrub_above)


if __name__ == "__main__":
    sys.exit(main())
