"""Whether a kernel in a CUDA context of its own can reach what the harness keeps in its context, and what that would cost.

The candidate runs in the worker's primary context today, beside the harness's pristine inputs and the library's
instances; the audits (runner.audit) check those copies, they do not keep them out of the kernel's reach. A candidate
in a context of its own would map only its own buffers if the GPU's page tables are per context. Each question runs
in a fresh process, so a fault in one cannot reach the next:

  far_read       a kernel in a second context reads words torch allocated in the primary context (their address
                 passed as a parameter): the error it gets, or how many of them it read; the allocator they came
                 from (memory torch maps per device, expandable segments or cudaMallocAsync, may answer otherwise)
  far_write      the same kernel writes them: the error, and how many of the primary's words changed
  pinned_read    it reads pinned host memory the primary allocated (torch's pin_memory; documented as mapped into
                 every context under unified addressing)
  pageable_read  it reads plain host memory of the process (reachable only where the device accesses pageable
                 memory, HMM: the device's attribute is recorded, and whether MPS is on)
  after_fault    after a kernel of the second context faulted: whether the return to the primary held, whether the
                 primary's work is still right, and a third context made, loaded and used (seconds for each step)
  shared_across  what a kernel of one context left in shared memory, a kernel of the other finds (both ways; the
                 same context for comparison), and whether a write from the primary reaches what the second left:
                 where the scrub (tools/gpu/scrub.py) must run
  local_across   the same for local memory (a 4 KB frame)
  costs          a context made, loaded and destroyed; a cross-context copy of the main GEMM's inputs (157 MB,
                 what a per-call restore would move) against the same copy within one context; a call in either
                 context and the two alternating (the penalty of alternating, and a push and pop alone); one
                 kernel's event-timed time in either context; whether a second context's buffer exports a CUDA IPC
                 handle (the referee maps the worker's outputs that way)

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/context_isolation.py [--only far_read,costs] [--json F]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ("far_read", "far_write", "pinned_read", "pageable_read", "after_fault", "shared_across", "local_across",
             "costs")
MARK = 0x5A17C0DE
WORDS = 1 << 20  # the far words: 4 MB
GEMM_INPUT_BYTES = (8192 + 7168) * 5120 * 2  # the main GEMM's A and B in bf16
# Plain kernels beside the leftover probe's (tests/data/kernels/leftover.cu): a copy and a fill over raw addresses.
FAR_CU = r"""
extern "C" __global__ void copy_words(const unsigned* src, unsigned* dst, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}
extern "C" __global__ void fill_words(unsigned* dst, unsigned n, unsigned value) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = value;
}
"""
KERNELS = ("copy_words", "fill_words", "leave_shared", "find_shared", "leave_local", "find_local")


def probe_source() -> str:
    return "#define FRAME 4096\n" + (ROOT / "tests" / "data" / "kernels" / "leftover.cu").read_text() + FAR_CU


def compile_probe() -> str:
    from ptxbench.tools.compile import compile_source

    comp = compile_source(probe_source(), "cuda", "sm_90a")
    if comp.status != "ok":
        raise SystemExit(f"the probe does not compile: {comp.errors}")
    return comp.cubin_path


# ---- one question, in a process of its own ----

class Probe:
    """The primary context (torch's), the probe module loaded in it, and second contexts made on demand."""

    def __init__(self, cubin: str):
        import torch
        from cuda.bindings import driver as cu

        from ptxbench.tools.gpu.launch import check

        self.torch, self.cu, self.check = torch, cu, check
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")  # the primary context
        check(cu.cuInit(0), "cuInit")
        self.device = check(cu.cuDeviceGet(0), "cuDeviceGet")
        self.primary = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        self.cubin = Path(cubin).read_bytes()
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.smem = self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self.fns = self.load()
        self.popped: str | None = None

    def attribute(self, name: str) -> int:
        """The device's CU_DEVICE_ATTRIBUTE_<name>."""
        return int(self.check(self.cu.cuDeviceGetAttribute(getattr(self.cu.CUdevice_attribute,
                                                                   f"CU_DEVICE_ATTRIBUTE_{name}"), self.device), name))

    def load(self) -> dict:
        """The probe's kernels in the current context (their dynamic shared memory opted in)."""
        from ptxbench.tools.gpu.launch import get_function, load_module, set_dynamic_smem

        module = load_module(self.cubin)
        fns = {n: get_function(module, n) for n in KERNELS}
        for n in ("leave_shared", "find_shared"):
            set_dynamic_smem(fns[n], self.smem)
        return fns

    def new_context(self):
        """A second context on the same GPU, left current (cuCtxCreate pushes it)."""
        cu = self.cu
        try:  # cuda.bindings 13: (params, flags, device); 12: (flags, device)
            ctx = self.check(cu.cuCtxCreate(None, 0, self.device), "cuCtxCreate")
        except TypeError:
            ctx = self.check(cu.cuCtxCreate(0, self.device), "cuCtxCreate")
        return ctx

    def second_context(self):
        """A second context, made and left (torch's primary current again): used through `inside`."""
        ctx = self.new_context()
        self.back_to_primary()
        return ctx

    def read_from(self, address: int) -> tuple[str | None, int | None]:
        """A kernel of a fresh second context copies WORDS words from `address` into its own buffer: the error it got,
        or how many of them were MARK."""
        with self.inside(self.second_context()):
            fns = self.load()
            dst = self.alloc(WORDS * 4)
            self.check(self.cu.cuMemsetD32(dst, 0, WORDS), "cuMemsetD32")
            self.launch(fns, "copy_words", 264, 256, 0, [_u64(address), _u64(dst), _u32(WORDS)])
            error = self.sync()
            return error, None if error else int((self.read_words(dst, WORDS) == MARK).sum())

    def back_to_primary(self) -> str | None:
        """Pop the current context and make sure torch's primary is current again (after a fault too: otherwise the
        next torch call would run in the faulted context and blame the primary). None, or what went wrong."""
        err = self.error(self.cu.cuCtxPopCurrent())
        current = self.check(self.cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) != int(self.primary):
            self.cu.cuCtxSetCurrent(self.primary)
            return f"pop {err or 'ok'} left another context current"
        return err

    @contextmanager
    def inside(self, ctx):
        """`ctx` current for the block; torch's primary again after it (no torch call inside: the runtime would use
        whatever context is current). `self.popped` keeps what the last return to the primary said."""
        self.check(self.cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self.popped = self.back_to_primary()

    def launch(self, fns: dict, name: str, grid: int, block: int, smem: int, values: list, stream: int = 0) -> None:
        from ptxbench.tools.gpu.launch import launch_1d

        launch_1d(fns[name], grid, block, smem, stream, values)

    def error(self, result) -> str | None:
        """A driver call's result: None on success, else the error's name."""
        err = result[0] if isinstance(result, tuple) else result
        return None if err == self.cu.CUresult.CUDA_SUCCESS else err.name

    def sync(self) -> str | None:
        """Synchronize the current context: None, or the error's name."""
        return self.error(self.cu.cuCtxSynchronize())

    def alloc(self, nbytes: int) -> int:
        return int(self.check(self.cu.cuMemAlloc(nbytes), "cuMemAlloc"))

    def read_words(self, ptr: int, n: int):
        import numpy as np

        host = np.zeros(n, dtype=np.uint32)
        self.check(self.cu.cuMemcpyDtoH(host.ctypes.data, ptr, n * 4), "cuMemcpyDtoH")
        return host


def _u64(v: int):
    return ctypes.c_uint64(v)


def _u32(v: int):
    return ctypes.c_uint32(v & 0xFFFFFFFF)


def far_access(p: Probe, write: bool) -> dict:
    torch = p.torch
    secret = torch.full((WORDS,), MARK, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    if write:
        with p.inside(p.second_context()):
            p.launch(p.load(), "fill_words", 264, 256, 0, [_u64(secret.data_ptr()), _u32(WORDS), _u32(~MARK)])
            error = p.sync()
    else:
        error, read = p.read_from(secret.data_ptr())
    row = {"error": error, "words": WORDS, "pop_after": p.popped or "ok",
           # memory torch maps per device (expandable segments, cudaMallocAsync) may be reachable where cudaMalloc's
           # is not: the allocator the answer holds for
           "allocator": torch.cuda.get_allocator_backend(), "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    try:  # the primary context after the second one's fault
        changed = int((secret != MARK).sum().item())
        row["primary_after"] = "ok"
    except RuntimeError as e:
        changed, row["primary_after"] = None, str(e).splitlines()[0][:200]
    row["primary_words_changed" if write else "words_read"] = changed if write else read
    return row


def host_read(p: Probe, pinned: bool) -> dict:
    """A kernel of a second context reads host memory of this process by its address: pinned by torch (cudaHostAlloc:
    documented as mapped into every context under unified addressing) or plain pageable memory (reachable only where
    the device can access pageable memory, HMM)."""
    import numpy as np

    if pinned:
        held = p.torch.full((WORDS,), MARK, dtype=p.torch.int32, pin_memory=True)
        address = held.data_ptr()
    else:
        held = np.full(WORDS, MARK, dtype=np.uint32)
        address = held.ctypes.data
    error, read = p.read_from(address)
    return {"error": error, "words": WORDS, "words_read": read,
            "pageable_memory_access": p.attribute("PAGEABLE_MEMORY_ACCESS"), "mps_enabled": p.attribute("MPS_ENABLED")}


def after_fault(p: Probe) -> dict:
    torch = p.torch
    ctx = p.second_context()
    with p.inside(ctx):
        fns = p.load()
        p.launch(fns, "fill_words", 1, 32, 0, [_u64(64), _u32(32), _u32(1)])  # the null page: a sure fault
        error = p.sync()
    row = {"fault": error, "pop_after_fault": p.popped or "ok"}

    def primary_right() -> tuple[bool, str | None]:
        try:
            a = torch.randn(512, 512, device="cuda")
            got = (a @ a).cpu()
            torch.cuda.synchronize()
            return bool(torch.allclose(got, a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-2)), None
        except RuntimeError as e:  # the fault reached the primary context
            return False, str(e).splitlines()[0][:200]

    row["primary_right"], row["primary_error"] = primary_right()
    t0 = time.perf_counter()
    row["destroy_after_fault"] = p.error(p.cu.cuCtxDestroy(ctx)) or "ok"
    t1 = time.perf_counter()
    try:
        third = p.new_context()
        t2 = time.perf_counter()
        fns = p.load()
        t3 = time.perf_counter()
        buf = p.alloc(1024 * 4)
        p.launch(fns, "fill_words", 4, 256, 0, [_u64(buf), _u32(1024), _u32(MARK)])
        third_error = p.sync()
        row["third_context_right"] = third_error is None and int((p.read_words(buf, 1024) == MARK).sum()) == 1024
        row["third_context_error"] = third_error
        p.back_to_primary()
        p.cu.cuCtxDestroy(third)
        row.update(destroy_s=round(t1 - t0, 4), create_s=round(t2 - t1, 4), load_s=round(t3 - t2, 4))
    except RuntimeError as e:  # CudaError included
        row["third_context_right"], row["third_context_error"] = False, str(e)[:200]
        p.back_to_primary()
    row["primary_right_at_end"], _ = primary_right()
    return row


def across(p: Probe, kind: str) -> dict:
    """Tags left by a kernel of one context, counted by a kernel of another (and of the same, for comparison)."""
    import secrets

    torch = p.torch
    words = p.smem // 4
    ctx = p.second_context()
    with p.inside(ctx):
        second = p.load()
        hits2 = p.alloc(4)
    hits1 = torch.zeros(1, dtype=torch.int32, device="cuda")

    def leave(fns, tag):
        if kind == "shared":
            p.launch(fns, "leave_shared", p.sms, 1024, p.smem, [_u32(tag), _u32(words)])
        else:
            p.launch(fns, "leave_local", 2 * p.sms, 1024, 0, [_u32(tag)])

    def find(fns, hits: int, tag) -> None:
        if kind == "shared":
            p.launch(fns, "find_shared", p.sms, 1024, p.smem, [_u64(hits), _u32(tag), _u32(words)])
        else:
            p.launch(fns, "find_local", 2 * p.sms, 1024, 0, [_u64(hits), _u32(tag), ctypes.c_int32(0)])

    def left_by_primary(tag) -> None:
        leave(p.fns, tag)
        torch.cuda.synchronize()

    def left_by_second(tag) -> None:
        with p.inside(ctx):
            leave(second, tag)
            p.check(p.cu.cuCtxSynchronize(), "leave in the second context")

    def found_by_primary(tag) -> int:
        hits1.zero_()
        find(p.fns, hits1.data_ptr(), tag)
        torch.cuda.synchronize()
        return int(hits1.item())

    def found_by_second(tag) -> int:
        with p.inside(ctx):
            p.check(p.cu.cuMemsetD32(hits2, 0, 1), "cuMemsetD32")
            find(second, hits2, tag)
            p.check(p.cu.cuCtxSynchronize(), "find in the second context")
            return int(p.read_words(hits2, 1)[0])

    def found(left, by, overwrite=None) -> int:
        """Tags `left` by one context, counted `by` one, after `overwrite` wrote the same space with other values."""
        tag = secrets.randbits(31) | 1
        left(tag)
        if overwrite is not None:
            overwrite(tag ^ 0x55555555)
        return by(tag)

    possible = p.sms * words if kind == "shared" else 2 * p.sms * 1024 * 1024  # 4 KB frames of 1,024 words
    # second_kept_past_primary_write: none when a scrub run from the primary reaches the second's memory, all of it
    # when the scrub must run in the second
    return {"same_context": found(left_by_primary, found_by_primary),
            "primary_to_second": found(left_by_primary, found_by_second),
            "second_to_primary": found(left_by_second, found_by_primary),
            "second_kept_past_primary_write": found(left_by_second, found_by_second, overwrite=left_by_primary),
            "possible": possible}


def _median_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def costs(p: Probe) -> dict:
    torch, cu = p.torch, p.cu
    made = []
    for _ in range(5):
        t0 = time.perf_counter()
        ctx = p.new_context()
        p.load()
        t1 = time.perf_counter()
        p.back_to_primary()
        cu.cuCtxDestroy(ctx)
        made.append((t1 - t0, time.perf_counter() - t1))
    ctx = p.new_context()
    second = p.load()
    dst = p.alloc(GEMM_INPUT_BYTES)
    small = p.alloc(4096)
    ipc = p.error(cu.cuIpcGetMemHandle(dst)) or "ok"
    p.back_to_primary()
    src = torch.empty(GEMM_INPUT_BYTES, dtype=torch.uint8, device="cuda")
    same = torch.empty_like(src)
    torch.cuda.synchronize()

    def peer_copy():  # a device-to-device copy returns before it is done: both contexts synchronized
        p.check(cu.cuMemcpyPeer(dst, ctx, src.data_ptr(), p.primary, GEMM_INPUT_BYTES), "cuMemcpyPeer")
        p.check(cu.cuCtxSynchronize(), "the peer copy (primary)")
        with p.inside(ctx):
            p.check(cu.cuCtxSynchronize(), "the peer copy (second)")

    def same_copy():  # the same bytes within the primary, for comparison
        same.copy_(src)
        torch.cuda.synchronize()

    peer_copy(), same_copy()  # warm-up
    peer_us, same_us = _median_us(peer_copy, 7), _median_us(same_copy, 7)

    # The host's side of a call in either context, by the same path (a driver launch and a context sync), and the
    # two alternating, as a context per candidate would alternate with the library's calls.
    tiny = torch.zeros(1024, dtype=torch.int32, device="cuda")

    def primary_call():
        p.launch(p.fns, "fill_words", 4, 256, 0, [_u64(tiny.data_ptr()), _u32(1024), _u32(MARK)])
        p.check(cu.cuCtxSynchronize(), "primary call")

    def second_call():
        with p.inside(ctx):
            p.launch(second, "fill_words", 4, 256, 0, [_u64(small), _u32(1024), _u32(MARK)])
            p.check(cu.cuCtxSynchronize(), "second call")

    def both():
        primary_call()
        second_call()

    def push_pop():
        cu.cuCtxPushCurrent(ctx)
        cu.cuCtxPopCurrent()

    rounds = [(_median_us(primary_call, 200), _median_us(second_call, 200), _median_us(both, 200)) for _ in range(3)]
    a, b, ab = (statistics.median(r[i] for r in rounds) for i in range(3))
    push_pop_us = _median_us(push_pop, 2000)
    # One kernel's event-timed time in each context: 64 M words copied (256 MB each way), after one untimed launch.
    n = 1 << 26
    big_src, big_dst = torch.empty(n, dtype=torch.int32, device="cuda"), torch.empty(n, dtype=torch.int32, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream().cuda_stream
    big = [_u64(big_src.data_ptr()), _u64(big_dst.data_ptr()), _u32(n)]
    p.launch(p.fns, "copy_words", 4 * p.sms, 1024, 0, big, stream)
    in_primary = []
    for _ in range(20):
        start.record()
        p.launch(p.fns, "copy_words", 4 * p.sms, 1024, 0, big, stream)
        end.record()
        end.synchronize()
        in_primary.append(start.elapsed_time(end))
    in_second = []
    with p.inside(ctx):
        s2, d2 = p.alloc(n * 4), p.alloc(n * 4)
        e0 = p.check(cu.cuEventCreate(0), "cuEventCreate")
        e1 = p.check(cu.cuEventCreate(0), "cuEventCreate")
        p.launch(second, "copy_words", 4 * p.sms, 1024, 0, [_u64(s2), _u64(d2), _u32(n)])
        for _ in range(20):
            p.check(cu.cuEventRecord(e0, cu.CUstream(0)), "cuEventRecord")
            p.launch(second, "copy_words", 4 * p.sms, 1024, 0, [_u64(s2), _u64(d2), _u32(n)])
            p.check(cu.cuEventRecord(e1, cu.CUstream(0)), "cuEventRecord")
            p.check(cu.cuEventSynchronize(e1), "cuEventSynchronize")
            in_second.append(float(p.check(cu.cuEventElapsedTime(e0, e1), "cuEventElapsedTime")))
        # Last, since a fault here would end the second context: the same bytes by a plain device-to-device copy
        # with the second context current. "ok" shows the copy engine resolves the primary's address through unified
        # addressing, not that a kernel of the second context can (far_read says that).
        plain = p.error(cu.cuMemcpyDtoD(dst, src.data_ptr(), GEMM_INPUT_BYTES)) or p.sync() or "ok"
    return {"create_and_load_s": round(statistics.median(m[0] for m in made), 4),
            "destroy_s": round(statistics.median(m[1] for m in made), 4),
            "peer_copy_bytes": GEMM_INPUT_BYTES, "peer_copy_ms": round(peer_us / 1e3, 4),
            "peer_copy_GBps": round(GEMM_INPUT_BYTES / peer_us / 1e3, 1),
            "same_context_copy_ms": round(same_us / 1e3, 4), "plain_copy_across": plain,
            "primary_call_us": round(a, 1), "second_call_us": round(b, 1), "alternating_pair_us": round(ab, 1),
            "alternation_penalty_us": round(ab - a - b, 1), "push_pop_us": round(push_pop_us, 2),
            "kernel_ms_primary": round(statistics.median(in_primary), 4),
            "kernel_ms_second": round(statistics.median(in_second), 4),
            "kernel_spread_pct": [round(100 * (max(v) - min(v)) / statistics.median(v), 2) for v in (in_primary, in_second)],
            "ipc_export": ipc}


def answer(question: str, cubin: str) -> dict:
    p = Probe(cubin)
    if question in ("far_read", "far_write"):
        return far_access(p, write=question == "far_write")
    if question in ("pinned_read", "pageable_read"):
        return host_read(p, pinned=question == "pinned_read")
    if question == "after_fault":
        return after_fault(p)
    if question in ("shared_across", "local_across"):
        return across(p, question.split("_")[0])
    return costs(p)


# ---- the parent: one process per question, then the table ----

def run_question(question: str, cubin: str, timeout: float = 120.0) -> dict:
    try:
        out = subprocess.run([sys.executable, __file__, "--one", question, "--cubin", cubin], capture_output=True,
                             text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"question": question, "process": f"timed out after {timeout:.0f} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"question": question, "process": f"exit {out.returncode}: {tail[:300]}"}
    # an answer printed before a failing exit (a faulted context's teardown) still stands
    return {"question": question, **json.loads(lines[-1]), **({"exit": out.returncode} if out.returncode else {})}


def table(rows: list[dict]) -> str:
    lines = ["| question | answer |", "|---|---|"]
    for r in rows:
        rest = ", ".join(f"{k} {v}" for k, v in r.items() if k != "question")
        lines.append(f"| {r['question']} | {rest} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(QUESTIONS))
    ap.add_argument("--json", default="")
    ap.add_argument("--one", choices=QUESTIONS, help=argparse.SUPPRESS)
    ap.add_argument("--cubin", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(answer(args.one, args.cubin)), flush=True)
        os._exit(0)  # no teardown of contexts a fault may have left: the answer is out
    unknown = [q for q in args.only.split(",") if q not in QUESTIONS]
    if unknown:
        raise SystemExit(f"unknown question(s) {unknown}; choose from {', '.join(QUESTIONS)}")
    cubin = compile_probe()
    rows = []
    for q in args.only.split(","):
        rows.append(run_question(q, cubin))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
