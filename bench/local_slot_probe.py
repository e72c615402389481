"""Where a kernel's local frame lies in a thread's local window, before and after a larger frame was reserved (GPU).

tests/data/cheats/attacks/local_below_frame_stash.cu (a 16-byte frame) kept a result 2 KiB below its frame after a
3 KiB-frame kernel ran on the same context, and stayed 28% faster than its twin even when the scrub wrote 3 KiB
(bench/results/run32). The scrub writes its own frame (scrub.py); whether that frame covers the bytes below a small
one depends on where each frame starts. This probe launches kernels of frames 16 B, 1 KiB and 3 KiB, each writing the
local address of its frame and its generic address (thread 0 of block 0), in the order small, large, small, large's
size as the scrub would be built, and prints them: a small frame whose start moves up once a large frame is reserved
lies above the scrub's, so what lies below it is no scrub's.

The PTX kernels read local address 0 on an H100 (run 33) because ptxas drops their dead frames; the second part is the
one that answers. A kernel compiled from CUDA as the cheat is (a 16-byte volatile frame, nvcc's stack pointer), before
and after a 3 KiB CUDA frame, reports its frame's local and generic addresses and, for the address 2 KiB below and 1
byte below, which state space `isspacep` names (local, shared, global); the host asks the driver which allocation holds
it (cuMemGetAddressRange). Run 33: the frames lie below the stack pointer at the top of a 16 MiB window (0xfffc50 and
0xfff060), and below the small one is still local, within the frame the scrub of the reserved frame writes.

    python3 bench/local_slot_probe.py [--json PATH]
"""
from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_probe import json_args, primary_context  # noqa: E402

PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry where(.param .u64 out)
{{
    .local .align 16 .b8 frame[{frame}];
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r3, %r1, %r2;
    mov.u64 %rd1, frame;
    cvta.local.u64 %rd2, %rd1;
    st.local.u32 [%rd1], %r1;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    ld.param.u64 %rd3, [out];
    cvta.to.global.u64 %rd3, %rd3;
    st.global.u64 [%rd3], %rd1;
    st.global.u64 [%rd3+8], %rd2;
DONE:
    ret;
}}
"""


def ptx(frame: int) -> str:
    return PTX.format(frame=frame)


# out[0] frame's local address, [1] its generic one, then per probe offset (2 KiB below, 1 byte below):
# [2 + 3i] isspacep bits (1 local, 2 shared, 4 global), [3 + 3i] its local address when local, [4 + 3i] the word there
ANCHOR_CUDA = r"""
extern "C" __global__ void anchor(unsigned long long* out, int never) {
  volatile unsigned frame[4];
  frame[never & 3] = never;
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long g = (unsigned long long)(frame);
  out[0] = __cvta_generic_to_local((const void*)frame);
  out[1] = g;
  const unsigned long long below[2] = {g - 2048, g - 1};
  for (int i = 0; i < 2; ++i) {
    const void* p = (const void*)below[i];
    const unsigned bits = (__isLocal(p) ? 1u : 0u) | (__isShared(p) ? 2u : 0u) | (__isGlobal(p) ? 4u : 0u);
    out[2 + 3 * i] = bits;
    out[3 + 3 * i] = __isLocal(p) ? __cvta_generic_to_local(p) : 0ull;
    out[4 + 3 * i] = 0xFFFFull;  // not read: a read there faulted on an H100 after PTX frames of 3 KiB (run 33)
  }
}

extern "C" __global__ void grow(unsigned long long* out, int never) {  // local_frame_grower.cu's frame: 3 KiB
  volatile unsigned frame[768];
  frame[never % 768] = never;
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  out[0] = __cvta_generic_to_local((const void*)frame);
  out[1] = (unsigned long long)(frame);
}
"""


def anchor_rows(cu, stream: int) -> list[dict]:
    """The CUDA anchor before and after the 3 KiB PTX frame; each row with the driver's view of the address below."""
    import torch

    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.gpu.launch import check, get_function, launch_1d, load_module

    built = compile_source(ANCHOR_CUDA, "cuda", "sm_90a", use_cache=False)
    if built.status != "ok":
        return [{"error": f"the anchor kernel did not compile: {built.errors}"}]
    module = load_module(Path(built.cubin_path).read_bytes())
    fn, grow = get_function(module, "anchor"), get_function(module, "grow")
    out = torch.zeros(8, dtype=torch.int64, device="cuda")
    rows = []
    for step in ("anchor", "grow", "anchor"):
        if step != "anchor":
            out.zero_()
            launch_1d(grow, 132 * 16, 128, 0, stream, [ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(0)])
            torch.cuda.synchronize()
            local, generic = (int(x) & (2**64 - 1) for x in out.tolist()[:2])
            rows.append({"grow_3072": True, "local": local, "generic": generic})
            print(f"CUDA 3 KiB frame: local {local:#x} generic {generic:#x}")
            continue
        out.zero_()
        launch_1d(fn, 132 * 16, 128, 0, stream, [ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(0)])
        torch.cuda.synchronize()
        v = [int(x) & (2**64 - 1) for x in out.tolist()]
        row = {"after_3072": bool(rows), "local": v[0], "generic": v[1], "below": []}
        for i, off in enumerate((2048, 1)):
            addr = v[1] - off
            rng = cu.cuMemGetAddressRange(cu.CUdeviceptr(addr))
            err = rng[0]
            entry = {"offset": -off, "spaces": v[2 + 3 * i], "local": v[3 + 3 * i], "byte": v[4 + 3 * i],
                     "range": {"error": err.name, "base": int(rng[1]) if err == 0 else None,
                               "size": int(rng[2]) if err == 0 else None}}
            if err == 0:
                entry["host_memset"] = cu.cuMemsetD8(cu.CUdeviceptr(addr), 0xFF, 1)[0].name
            row["below"].append(entry)
        rows.append(row)
        print(f"CUDA anchor{' after the 3 KiB frame' if row['after_3072'] else ''}: local {v[0]:#x} generic {v[1]:#x}; "
              + "; ".join(f"{e['offset']}: spaces {e['spaces']} (1 local 2 shared 4 global) local {e['local']:#x} "
                          f"byte {e['byte']:#x} range {e['range']}" for e in row["below"]))
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = json_args(__doc__, argv)
    import torch

    from ptxbench.tools.gpu.launch import check, get_function, launch_1d, load_module

    cu = primary_context()
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    kernels = {}
    rows = []
    anchors = anchor_rows(cu, stream)  # first: before any PTX frame was reserved
    for frame in (16, 3072, 16, 1024, 3072, 16):
        if frame not in kernels:
            kernels[frame] = get_function(load_module(ptx(frame).encode() + b"\0"), "where")
        launch_1d(kernels[frame], 132 * 16, 128, 0, stream, [ctypes.c_uint64(out.data_ptr())])
        torch.cuda.synchronize()
        local, generic = (int(v) for v in out.tolist())
        rows.append({"frame": frame, "local": local, "generic": generic})
        print(f"frame {frame:>5}: local address {local:#x}  generic {generic:#x}")
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    if args.json:
        args.json.write_text(json.dumps({"frames": rows, "anchors": anchors}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
