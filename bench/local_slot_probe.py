"""Where a kernel's local frame lies in a thread's local window, before and after a larger frame was reserved (GPU).

tests/data/cheats/attacks/local_below_frame_stash.cu (a 16-byte frame) kept a result 2 KiB below its frame after a
3 KiB-frame kernel ran on the same context, and stayed 28% faster than its twin even when the scrub wrote 3 KiB
(bench/results/run32). The scrub writes its own frame (scrub.py); whether that frame covers the bytes below a small
one depends on where each frame starts. This probe launches kernels of frames 16 B, 1 KiB and 3 KiB, each writing the
local address of its frame and its generic address (thread 0 of block 0), in the order small, large, small, large's
size as the scrub would be built, and prints them: a small frame whose start moves up once a large frame is reserved
lies above the scrub's, so what lies below it is no scrub's.

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


def main(argv: list[str] | None = None) -> int:
    args = json_args(__doc__, argv)
    import torch

    from ptxbench.tools.gpu.launch import check, get_function, launch_1d, load_module

    cu = primary_context()
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    kernels = {}
    rows = []
    for frame in (16, 3072, 16, 1024, 3072, 16):
        if frame not in kernels:
            kernels[frame] = get_function(load_module(ptx(frame).encode() + b"\0"), "where")
        launch_1d(kernels[frame], 132 * 16, 128, 0, stream, [ctypes.c_uint64(out.data_ptr())])
        torch.cuda.synchronize()
        local, generic = (int(v) for v in out.tolist())
        rows.append({"frame": frame, "local": local, "generic": generic})
        print(f"frame {frame:>5}: local address {local:#x}  generic {generic:#x}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    return 0


if __name__ == "__main__":
    sys.exit(main())
