"""Shared and local memory cleared before every call, so that neither carries a result from one call to the next.

Both outlive a kernel. Shared memory is not cleared when a CTA starts: a CTA finds what the last CTA on its SM left
there. Local memory (a thread's stack and spill space) lives in device memory the driver reserves per warp slot,
reused by whichever warp runs in that slot next. A kernel could keep its output in either and, when a later call
found it there, copy it instead of computing: on an H200 shared memory is 132 x 227 KB, more than a decode GEMM's
whole output, and local memory is (bytes per thread) x 2048 threads x 132 SMs, 277 MB at the default 1 KB stack.
Every other place a kernel can reach is restored, poisoned or compared by the protocol (docs/timing-integrity.md);
these two have no buffer, so two harness kernels overwrite them:

- `scrub_shared`: one CTA per SM (each asks for all the dynamic shared memory a CTA may have, so no SM holds two),
  every byte set to 0xFF, the CTA's reserved shared memory too (1 KB per CTA on sm_90, which a kernel can address
  through %reserved_smem_offset_begin: 1 KB per SM the dynamic area does not cover);
- `scrub_local`: every warp slot of every SM occupied at once (blocks of 1024 threads held to 32 registers, two per
  SM), each thread writing 0xFF over a frame as large as the candidate's kernels' local size, the context's stack
  limit or the frame the worker has reserved (runner.py), whichever is largest: what any thread of the candidate
  could address. A CUDA kernel's frame lies below the stack pointer at the top of the thread's local window, the
  scrub's too (bench/results/run33), so a small frame's neighbours below it are within the scrub's; the 928 bytes
  between the stack pointer and the window's top, which keep what a kernel leaves there too (run 34), each thread
  writes after its frame, through their generic address, as far as `isspacep.local` says they are local.

They run in the preparation of every call, the library's too, before the L2 flush, so their stores are written back
outside the timed interval. The PTX is the harness's own text, assembled by the driver once per worker (the local
one once per frame size).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

# Every byte 0xFF: as a float or bf16 a NaN, as an integer -1, never a pointer into memory.
SHARED_PTX = """\
.version 8.0
.target sm_90
.address_size 64

.extern .shared .align 16 .b8 scrub_smem[];

.visible .entry scrub_shared(.param .u32 nbytes)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    ld.param.u32 %r1, [nbytes];
    mov.u32 %r2, %tid.x;
    shl.b32 %r2, %r2, 4;
    mov.u32 %r3, %ntid.x;
    shl.b32 %r3, %r3, 4;
    mov.u32 %r4, scrub_smem;
    mov.b32 %r5, -1;
LOOP:
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    add.u32 %r6, %r4, %r2;
    st.volatile.shared.v4.b32 [%r6], {%r5, %r5, %r5, %r5};
    add.u32 %r2, %r2, %r3;
    bra LOOP;
DONE:
    // the CTA's reserved shared memory (1 KB on sm_90, below the dynamic area): a kernel may address its own
    mov.u32 %r2, %reserved_smem_offset_begin;
    mov.u32 %r3, %reserved_smem_offset_end;
    mov.u32 %r7, %tid.x;
    shl.b32 %r7, %r7, 2;
    add.u32 %r2, %r2, %r7;
    setp.ge.u32 %p1, %r2, %r3;
    @%p1 bra END;
    st.volatile.shared.b32 [%r2], %r5;
END:
    ret;
}
"""

# The frame is written whole, each 16 bytes with `fill` plus their offset (fill = -1 - frame: every word negative,
# none a pointer), and a load at a runtime offset (never taken: probe >= frame) reads one back: with one value
# everywhere the assembler proves what any load returns and drops every store (it did, at 1 KB).
LOCAL_PTX = """\
.version 8.0
.target sm_90
.address_size 64

.visible .entry scrub_local(.param .u64 sink, .param .u32 probe, .param .u32 fill)
.maxnreg 32
{{
    .local .align 16 .b8 frame[{frame}];
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<10>;
    mov.u64 %rd1, frame;
    ld.param.u32 %r5, [fill];
    mov.u32 %r1, 0;
LOOP:
    .pragma "nounroll";
    add.u32 %r2, %r5, %r1;
    cvt.u64.u32 %rd2, %r1;
    add.u64 %rd3, %rd1, %rd2;
    st.local.v4.b32 [%rd3], {{%r2, %r2, %r2, %r2}};
    add.u32 %r1, %r1, 16;
    setp.lt.u32 %p1, %r1, {frame};
    @%p1 bra LOOP;
    // above the frame, up to the top of the thread's local window (and no further than it is local): the stack
    // pointer a kernel starts from lies below the top, and what lies between them is no frame's
    add.u64 %rd7, %rd1, {frame};
ABOVE:
    .pragma "nounroll";
    setp.ge.u64 %p3, %rd7, {top};
    @%p3 bra ABOVE_DONE;
    cvta.local.u64 %rd8, %rd7;
    isspacep.local %p3, %rd8;
    @!%p3 bra ABOVE_DONE;
    st.volatile.v4.b32 [%rd8], {{%r5, %r5, %r5, %r5}};
    add.u64 %rd7, %rd7, 16;
    bra ABOVE;
ABOVE_DONE:
    ld.param.u32 %r3, [probe];
    setp.ge.u32 %p2, %r3, {frame};
    @%p2 bra DONE;
    and.b32 %r3, %r3, -16;
    cvt.u64.u32 %rd4, %r3;
    add.u64 %rd5, %rd1, %rd4;
    ld.local.b32 %r4, [%rd5];
    ld.param.u64 %rd6, [sink];
    cvta.to.global.u64 %rd6, %rd6;
    st.global.b32 [%rd6], %r4;
DONE:
    ret;
}}
"""

LOCAL_BLOCK = 1024
# The top of a thread's local window: 16 MiB, the stack pointer a CUDA kernel starts from 928 bytes below it
# (bench/local_slot_probe.py, run 33: 0xfffc60), and the memory between them keeps what a kernel leaves there from one
# launch to the next (local_above_frame_stash.cu replayed a stash there in run 34)
LOCAL_WINDOW_TOP = 1 << 24
MIN_FRAME = 1024  # the CUDA default stack size: what a kernel with no frame of its own can still address


def frame_bytes(local_bytes: int, stack_limit: int) -> int:
    """The frame each scrub thread writes: the larger of the candidate's local size and the context's stack limit
    (at least MIN_FRAME), rounded up to a step of at most an eighth of it, so a worker builds few variants (eight
    an octave) while the local memory the driver reserves for the frame, frame x every thread the GPU holds, grows
    by at most 12.5% over the candidate's own (a power of two nearly doubled it: 130 KB became 256 KB, 69 GB)."""
    need = max(int(local_bytes), int(stack_limit), MIN_FRAME)
    step = max(16, 1 << (need.bit_length() - 4))
    return -(-need // step) * step


def local_fill(frame: int) -> int:
    """The first word scrub_local writes (as u32): -1 - frame, so fill + offset stays negative over the frame."""
    return (-1 - frame) & 0xFFFF_FFFF


def local_ptx(frame: int, above_frame: bool = True) -> str:
    """The local scrub for `frame` bytes; without `above_frame` the pass above the frame stops where it starts (its
    bound 0), which compute-sanitizer needs: memcheck takes a thread's frame for all of its local memory and reports
    every store above it as an invalid __local__ write, aborting the replay before the candidate runs (run 36)."""
    if frame % 16 or frame <= 0:
        raise ValueError(f"a scrub frame is a positive multiple of 16 bytes, not {frame}")
    return LOCAL_PTX.format(frame=frame, top=LOCAL_WINDOW_TOP if above_frame else 0)


@dataclass(frozen=True)
class ScrubShape:
    """Grids that occupy every SM's shared memory (one CTA each) and every warp slot (two 1024-thread CTAs each)."""

    sm_count: int
    threads_per_sm: int
    smem_bytes: int
    above_frame: bool = True  # False only under compute-sanitizer (local_ptx), a replay that is never timed or credited

    @property
    def shared_grid(self) -> int:
        return self.sm_count

    @property
    def local_grid(self) -> int:
        return self.sm_count * max(1, self.threads_per_sm // LOCAL_BLOCK)

    def local_bytes_written(self, frame: int) -> int:
        return self.local_grid * LOCAL_BLOCK * frame


class OnChipScrub:
    """The two scrub kernels of one worker, launched on a stream before every call (CandidateCalls.restore)."""

    def __init__(self, shape: ScrubShape):
        from cuda.bindings import driver as cu

        from .launch import check, get_function, load_module, set_dynamic_smem

        self.shape = shape
        self._shared_module = load_module(SHARED_PTX.encode() + b"\0")
        self.shared = get_function(self._shared_module, "scrub_shared")
        set_dynamic_smem(self.shared, shape.smem_bytes)
        self._locals: dict[int, tuple] = {}
        self._sink = check(cu.cuMemAlloc(16), "cuMemAlloc(scrub sink)")

    def local(self, frame: int):
        from .launch import get_function, load_module

        if frame not in self._locals:
            module = load_module(local_ptx(frame, self.shape.above_frame).encode() + b"\0")
            self._locals[frame] = (module, get_function(module, "scrub_local"))
        return self._locals[frame][1]

    def run(self, stream: int, frame: int) -> None:
        from .launch import launch_1d  # cuda.bindings: loaded only where a GPU is

        launch_1d(self.shared, self.shape.shared_grid, 1024, self.shape.smem_bytes, stream,
                  [ctypes.c_uint32(self.shape.smem_bytes)])
        launch_1d(self.local(frame), self.shape.local_grid, LOCAL_BLOCK, 0, stream,
                  [ctypes.c_uint64(int(self._sink)), ctypes.c_uint32(frame), ctypes.c_uint32(local_fill(frame))])
