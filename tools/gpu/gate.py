"""The launch gate: the GPU waits for the host to have enqueued a timed call before it records the start event.

A timed call is measured by two CUDA events. If the GPU reaches the start event before the host has enqueued the
call behind it, the host's launch latency lands inside the interval. A fixed spin before the start event (100 us,
what timing.py used first) hides it only while the host is quick: a library call goes through Python, torch's
dispatch and the library's own host code, and on a loaded machine (evaluations in flight beside Nsight Compute runs)
that took longer than the spin. The library's calls then read slow at random (run 17, the M = 64 decode GEMM:
cuBLAS at its usual 0.022 ms as its minimum, 0.06-0.09 ms in most calls of some evaluations) while a candidate,
launched through one driver call with its arguments packed in advance, did not: its speedups read high.

So each timed call is preceded by one harness kernel, `launch_gate`, a single thread that polls a word of pinned
host memory until it holds the call's ticket. The host enqueues gate -> start event -> call -> end event, then writes
the ticket: the start event follows the gate at once, and whatever the host's pace, the call is already queued
behind it (nvbench's blocking kernel does the same). A gate that waits longer than LIMIT_NS gives up, so a host
that stalls, or a call that blocks on the device, cannot hang the worker; it counts the give-ups (`stalls`), and
the timing says how many calls it measured so.
"""
from __future__ import annotations

import ctypes
import secrets

# Far above any host's enqueue of one call; short enough that a call which waits on the device itself (an
# allocation that must free memory first) costs this once instead of hanging.
LIMIT_NS = 50_000_000

GATE_PTX = """\
.version 8.0
.target sm_90
.address_size 64

.visible .entry launch_gate(.param .u64 flag, .param .u32 ticket, .param .u64 limit_ns, .param .u64 stalls)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [flag];
    ld.param.u32 %r1, [ticket];
    ld.param.u64 %rd2, [limit_ns];
    mov.u64 %rd4, %globaltimer;
WAIT:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    nanosleep.u32 200;
    mov.u64 %rd5, %globaltimer;
    sub.u64 %rd6, %rd5, %rd4;
    setp.lt.u64 %p2, %rd6, %rd2;
    @%p2 bra WAIT;
    ld.param.u64 %rd3, [stalls];
    cvta.to.global.u64 %rd3, %rd3;
    atom.global.add.u32 %r3, [%rd3], 1;
DONE:
    ret;
}
"""


class LaunchGate:
    """One per device and process (`launch_gate()`): the gate kernel, its pinned ticket word and a device stall counter."""

    def __init__(self):
        import torch
        from cuda.bindings import driver as cu

        from .launch import check, get_function, load_module

        torch.zeros(1, device="cuda")  # torch's context current on this thread, as the timed calls use it
        check(cu.cuInit(0), "cuInit")
        self._module = load_module(GATE_PTX.encode() + b"\0")
        self.kernel = get_function(self._module, "launch_gate")
        self._flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)  # page-locked: the GPU reads it over the bus
        self._word = ctypes.c_uint32.from_address(self._flag.data_ptr())
        self._device_flag = int(check(cu.cuMemHostGetDevicePointer(self._flag.data_ptr(), 0),
                                      "cuMemHostGetDevicePointer(gate)"))
        self._stalls = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.ticket = 0

    def close(self, stream: int) -> int:
        """Enqueue a gate on `stream` that opens on the next ticket; returns the ticket for `open`."""
        from .launch import launch_1d

        # Drawn, not counted: a kernel that found the word (it is mapped into the device's address space) could not
        # open the next call's gate early, the library's say, and put the host's latency into its interval.
        self.ticket = secrets.randbits(32)
        while self.ticket in (0, self._word.value):  # never the word's value already (0 before any open)
            self.ticket = secrets.randbits(32)
        launch_1d(self.kernel, 1, 1, 0, stream, [ctypes.c_uint64(self._device_flag), ctypes.c_uint32(self.ticket),
                                                 ctypes.c_uint64(LIMIT_NS), ctypes.c_uint64(self._stalls.data_ptr())])
        return self.ticket

    def open(self, ticket: int) -> None:
        self._word.value = ticket

    def stalls(self) -> int:
        """Gates that gave up waiting since the worker started (their calls may hold host latency)."""
        return int(self._stalls.item())


_GATES: dict[int, LaunchGate] = {}


def launch_gate() -> LaunchGate:
    """The gate of the current device, made on first use (its module lives in that device's context)."""
    import torch

    device = torch.cuda.current_device()
    if device not in _GATES:
        _GATES[device] = LaunchGate()
    return _GATES[device]
