"""Where the driver places a module's global beside another module's, by the global's size (GPU).

For each size, a module of one zero-filled global of that size is loaded, then a module with one 16-byte global, then
another of that size; the three addresses are printed with the gaps between them. It answers whether a harness module
loaded before and after a candidate's borders the candidate's data in the driver's pool (bench/results/run32: globals
are packed 256-byte aligned, and a 16 MiB one was not placed beside them).

    python3 bench/module_pool_layout.py [--json PATH]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_probe import json_args, primary_context  # noqa: E402

PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .global .align 256 .b8 g[{n}];
"""


def main(argv: list[str] | None = None) -> int:
    args = json_args(__doc__, argv)
    from ptxbench.tools.gpu.launch import check, load_module

    cu = primary_context()

    def place(n: int) -> int:
        module = load_module(PTX.format(n=n).encode() + b"\0")
        return int(check(cu.cuModuleGetGlobal(module, b"g"), "cuModuleGetGlobal")[0])

    rows = []
    for size in (256, 4096, 64 << 10, 1 << 20, 2 << 20, 16 << 20):
        a, b, c = place(size), place(16), place(size)
        rows.append({"fence_bytes": size, "before": a, "data": b, "after": c,
                     "gap_before": b - (a + size), "gap_after": c - (b + 16)})
        print(f"{size:>9}: before {a:#x}  data {b:#x}  after {c:#x}  gaps {b - (a + size)} / {c - (b + 16)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
