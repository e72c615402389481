"""Where a kernel's parameters lie in its generic address space, and whether another launch's lie there too (GPU).

`cvta.param` gives the generic address of a kernel parameter (the TMA kernels pass a `__grid_constant__` tensor map
that way), and of any number a kernel converts: `cvta.param.u64 %rd, 0` compiles. So what lies past a parameter is
as reachable as module data was (tests/data/cheats/attacks/param_tail_stash.cu keeps its outputs 64 KiB past one).
This probe launches one PTX kernel six times from two modules, each launch writing (thread 0 of block 0) its
parameter's param-space and generic addresses, the generic address of param-space 0, and which state space
`isspacep` names there (1 param, 4 global, 8 const); the host asks the driver which allocation holds the address
and the one 64 KiB past it (cuMemGetAddressRange). The same generic address at every launch means a window a kernel
can name by number, whatever a compile-time rule on `cvta.param` says; a last launch reads the word 64 KiB past
(it may fault: it runs last, in this process of its own).

    python3 bench/param_address_probe.py [--json PATH]
"""
from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_probe import json_args, primary_context  # noqa: E402

PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry where(.param .u64 out, .param .u32 read, .param .align 64 .b8 blob[128])
{
    .reg .pred %p<5>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<12>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r3, %r1, %r2;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    ld.param.u64 %rd5, [out];
    cvta.to.global.u64 %rd5, %rd5;
    mov.u64 %rd1, blob;
    cvta.param.u64 %rd2, %rd1;
    mov.u64 %rd3, 0;
    cvta.param.u64 %rd4, %rd3;
    isspacep.param %p2, %rd2;
    isspacep.global %p3, %rd2;
    selp.u64 %rd6, 1, 0, %p2;
    selp.u64 %rd7, 4, 0, %p3;
    or.b64 %rd6, %rd6, %rd7;
    isspacep.const %p2, %rd2;
    selp.u64 %rd7, 8, 0, %p2;
    or.b64 %rd6, %rd6, %rd7;
    st.global.u64 [%rd5], %rd1;
    st.global.u64 [%rd5+8], %rd2;
    st.global.u64 [%rd5+16], %rd4;
    st.global.u64 [%rd5+24], %rd6;
    ld.param.u32 %r4, [read];
    setp.eq.u32 %p4, %r4, 0;
    @%p4 bra DONE;
    ld.volatile.u64 %rd8, [%rd2+65536];
    st.global.u64 [%rd5+32], %rd8;
DONE:
    ret;
}
"""

TAIL = 64 << 10


class Blob(ctypes.Structure):
    _fields_ = [("words", ctypes.c_uint64 * 16)]


def launch(fn, out: int, read: int, stream: int, tag: int) -> None:
    from ptxbench.tools.gpu.launch import launch_1d

    blob = Blob()
    for i in range(16):
        blob.words[i] = (tag << 32) | i
    launch_1d(fn, 132, 128, 0, stream, [ctypes.c_uint64(out), ctypes.c_uint32(read), blob])


def address_range(cu, addr: int) -> dict:
    err, base, size = cu.cuMemGetAddressRange(cu.CUdeviceptr(addr))
    return {"error": err.name, "base": int(base) if err == 0 else None, "size": int(size) if err == 0 else None}


def main(argv: list[str] | None = None) -> int:
    args = json_args(__doc__, argv)
    import torch

    from ptxbench.tools.gpu.launch import get_function, load_module

    cu = primary_context()
    stream = torch.cuda.current_stream().cuda_stream
    fns = [get_function(load_module(PTX.encode() + b"\0"), "where") for _ in range(2)]
    out = torch.zeros(5, dtype=torch.int64, device="cuda")
    rows = []
    for i, module in enumerate((0, 0, 1, 0, 1, 0)):
        out.zero_()
        launch(fns[module], out.data_ptr(), 0, stream, i)
        torch.cuda.synchronize()
        v = [int(x) & (2**64 - 1) for x in out.tolist()]
        row = {"launch": i, "module": module, "param_space": v[0], "generic": v[1], "generic_of_zero": v[2],
               "spaces": v[3], "range": address_range(cu, v[1]), "range_past": address_range(cu, v[1] + TAIL)}
        rows.append(row)
        print(f"launch {i} (module {module}): param-space {v[0]:#x} generic {v[1]:#x} generic(0) {v[2]:#x} "
              f"spaces {v[3]} (1 param 4 global 8 const) range {row['range']} past 64 KiB {row['range_past']}")
    same = len({r["generic"] for r in rows}) == 1
    print(f"one generic address at every launch: {same}")
    found = {"launches": rows, "same_generic_address": same}
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    out.zero_()
    launch(fns[0], out.data_ptr(), 1, stream, 99)  # last: a read 64 KiB past may fault
    err = cu.cuCtxSynchronize()[0]
    found["read_past"] = {"error": err.name, "word": int(out[4].item()) & (2**64 - 1) if err == 0 else None}
    print(f"read 64 KiB past the parameter: {found['read_past']}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0 if err == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
