"""Where a kernel's parameters lie in its generic address space, and whether what a kernel writes there stays (GPU).

`cvta.param` gives the generic address of a kernel parameter (the TMA kernels pass a `__grid_constant__` tensor map
that way), and of any number a kernel converts: `cvta.param.u64 %rd, 0` assembles. tools/param_reach.py refuses at
compile time every write an address `cvta.param` makes reaches (tests/data/cheats/attacks/param_tail_stash.cu kept
its outputs 64 KiB past a parameter). What it cannot see is an address written as a number, so this probe asks the
hardware, each part in a process of its own (a fault ends only its part):

- `addresses`: one PTX kernel launched six times from two modules, each launch writing (thread 0 of block 0) its
  parameter's param-space and generic addresses, the generic address of param-space 0, and which state space
  `isspacep` names there (1 param, 4 global, 8 const); the host asks the driver which allocation holds the address
  and the one 64 KiB past it (cuMemGetAddressRange). One generic address at every launch is a window a kernel can
  name by number;
- `read`: a launch that reads the word 64 KiB past its parameter;
- `stash`: a launch that writes a magic word 64 KiB past its parameter, other launches (of another module, and
  torch's), then a launch that reads the same generic address given as a number: the magic found there is a place
  that keeps a result from one call to the next whatever the compile-time rule says.

    python3 bench/param_address_probe.py [--json PATH] [--part addresses|read|stash]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_probe import primary_context  # noqa: E402

# Each kernel's opening: thread 0 of block 0 alone goes on, with `out` (its first parameter) as a global address in %rd5
HEAD = """.version 8.0
.target sm_90a
.address_size 64
"""
THREAD0 = """{
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
"""

PTX = HEAD + ".visible .entry where(.param .u64 out, .param .u32 read, .param .align 64 .b8 blob[128])\n" + THREAD0 + """    mov.u64 %rd1, blob;
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

# poke(out, at, magic, write): the address `at`, or when 0 the one 64 KiB past its own parameter; writes `magic` there
# when `write`; out[0] the address, out[1] the word read there after
POKE = HEAD + ".visible .entry poke(.param .u64 out, .param .u64 at, .param .u64 magic, .param .u32 write)\n" + THREAD0 + """    ld.param.u64 %rd2, [at];
    setp.ne.u64 %p2, %rd2, 0;
    @%p2 bra CHOSEN;
    mov.u64 %rd1, out;
    cvta.param.u64 %rd2, %rd1;
    add.u64 %rd2, %rd2, 65536;
CHOSEN:
    ld.param.u32 %r4, [write];
    setp.eq.u32 %p3, %r4, 0;
    @%p3 bra READ;
    ld.param.u64 %rd3, [magic];
    st.volatile.u64 [%rd2], %rd3;
READ:
    ld.volatile.u64 %rd4, [%rd2];
    st.global.u64 [%rd5], %rd2;
    st.global.u64 [%rd5+8], %rd4;
DONE:
    ret;
}
"""

TAIL = 64 << 10
MAGIC = 0x5A17_7A11_C0FF_EE01
PARTS = ("addresses", "read", "stash")


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


def addresses(cu, stream: int) -> dict:
    import torch

    from ptxbench.tools.gpu.launch import get_function, load_module

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
    return {"launches": rows, "same_generic_address": same}


def read_past(cu, stream: int) -> dict:
    import torch

    from ptxbench.tools.gpu.launch import get_function, load_module

    fn = get_function(load_module(PTX.encode() + b"\0"), "where")
    out = torch.zeros(5, dtype=torch.int64, device="cuda")
    launch(fn, out.data_ptr(), 1, stream, 99)
    err = cu.cuCtxSynchronize()[0]
    found = {"error": err.name, "word": int(out[4].item()) & (2**64 - 1) if err == 0 else None}
    print(f"read 64 KiB past the parameter: {found}")
    return found


def stash(cu, stream: int) -> dict:
    """A magic word written 64 KiB past a parameter, then read at that generic address, as a number, after other
    launches: found, it is a place that keeps a result between calls."""
    import torch

    from ptxbench.tools.gpu.launch import get_function, launch_1d, load_module

    pokes = [get_function(load_module(POKE.encode() + b"\0"), "poke") for _ in range(2)]
    out = torch.zeros(2, dtype=torch.int64, device="cuda")

    def poke(fn, at: int, write: int) -> tuple[str, int, int]:
        out.zero_()
        launch_1d(fn, 132, 128, 0, stream, [ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(at),
                                             ctypes.c_uint64(MAGIC), ctypes.c_uint32(write)])
        err = cu.cuCtxSynchronize()[0]
        addr, word = (int(x) & (2**64 - 1) for x in out.tolist())
        return err.name, addr, word

    err, addr, word = poke(pokes[0], 0, 1)
    found = {"write": {"error": err, "address": addr, "word_after": word}}
    print(f"wrote 64 KiB past the parameter: {found['write']}")
    if err != "CUDA_SUCCESS":
        return found
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):  # other launches between: torch's, and the other module's at its own parameter's tail
        (a @ a).sum().item()
        poke(pokes[1], 0, 0)
    err, _, word = poke(pokes[0], addr, 0)
    found["read_back"] = {"error": err, "word": word, "magic_found": word == MAGIC}
    print(f"read back at {addr:#x} after other launches: {found['read_back']}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the findings here")
    ap.add_argument("--part", choices=PARTS, help="one part in this process (default: each in a process of its own)")
    args = ap.parse_args(argv)
    if args.part is None:
        found, rc = {}, 0
        for part in PARTS:
            tmp = (args.json or Path("/tmp/param_address.json")).with_suffix(f".{part}.json")
            done = subprocess.run([sys.executable, __file__, "--part", part, "--json", str(tmp)])
            rc |= done.returncode
            found[part] = json.loads(tmp.read_text()) if tmp.is_file() else {"exit": done.returncode}
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        return rc
    import torch

    cu = primary_context()
    stream = torch.cuda.current_stream().cuda_stream
    found = {"addresses": addresses, "read": read_past, "stash": stash}[args.part](cu, stream)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
