"""What the tensor core gives per wgmma shape and operand layout on this GPU (MACs per cycle per SM), the question a
kernel design meets first: is m64n80 as fast per MAC as m64n64 / n128, does an MN-major (transposed) A or B cost
anything, does an A from registers.

    source bench/gpu_env.sh && python3 bench/wgmma_rates.py [--json OUT.json] [--iters 4000]   (a GPU; ~10 s)
    python3 bench/wgmma_rates.py --dry-run                                                     (CPU: builds and lists)

One CTA per SM, two warpgroups each issuing its own chain: per loop pass 4 k16 steps into one accumulator, committed
as a group, with one group left in flight (wait_group 1), over operands in shared memory filled with bf16 values
near 1 (the data the tensor core sees changes its power, and so the clock). Each variant is timed over 3 launches
after a warm-up (median, with the spread); the SM clock during the runs comes from nvidia-smi.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

WGS = 2           # consumer warpgroups per CTA
KSTEPS = 4        # k16 steps per committed group
# name -> (N, A: "k" K-major in shared memory / "mn" MN-major in shared memory / "r" registers, B: "k" / "mn")
VARIANTS = {
    **{f"ss_n{n}": (n, "k", "k") for n in (64, 80, 128, 256)},
    **{f"ss_amn_n{n}": (n, "mn", "k") for n in (64, 80, 128)},
    **{f"ss_bmn_n{n}": (n, "k", "mn") for n in (64, 128)},
    "ss_tt_n64": (64, "mn", "mn"),
    **{f"rs_n{n}": (n, "r", "k") for n in (64, 80, 128, 256)},
    **{f"rs_bmn_n{n}": (n, "r", "mn") for n in (64, 128)},
}


def _kernel(name: str, n: int, a: str, b: str) -> str:
    acc = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    ta, tb = int(a == "mn"), int(b == "mn")
    if a == "r":
        k = n // 2
        mma = (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 5}, 0;\\n'
               f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{acc}}}, {{%{k}, %{k + 1}, %{k + 2}, %{k + 3}}}, '
               f'%{k + 4}, p, 1, 1, {tb};\\n}}" : {outs} : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), '
               f'"l"(db + (uint64_t)(B_STEP * kk)), "r"(1));')
    else:
        k = n // 2
        mma = (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 2}, 0;\\n'
               f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{acc}}}, %{k}, %{k + 1}, p, 1, 1, {ta}, {tb};\\n}}" '
               f': {outs} : "l"(da + (uint64_t)(A_STEP * kk)), "l"(db + (uint64_t)(B_STEP * kk)), "r"(1));')
    # a k16 step: K-major +32 bytes in the 128-byte row (+2 in 16-byte units); MN-major +16 rows of 128 bytes (+128)
    a_step, b_step = (128 if a == "mn" else 2), (128 if b == "mn" else 2)
    return f"""
extern "C" __global__ void __launch_bounds__({128 * WGS}, 1) {name}(float* sink, int iters) {{
  constexpr int A_STEP = {a_step}, B_STEP = {b_step};
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  fill(smem, SMEM_BYTES);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  uint8_t* sa = smem + wg * A_BYTES;            // this warpgroup's A: 64 x 64 bf16 (8 KiB)
  uint8_t* sb = smem + {WGS} * A_BYTES;         // B: N x 64 bf16, shared
  const uint64_t da = desc(sa, {ta}, 64 * 128), db = desc(sb, {tb}, 64 * 128);
  uint32_t ra[4];
  for (int i = 0; i < 4; ++i) ra[i] = 0x3F803F80u ^ (threadIdx.x * 0x00010001u * (i + 1) & 0x007F007Fu);
  float d[{n // 2}];
  for (int i = 0; i < {n // 2}; ++i) d[i] = 0.f;
  for (int it = 0; it < iters; ++it) {{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < {KSTEPS}; ++kk) {{
      {mma}
    }}
    wgmma_commit();
    wgmma_wait<1>();
  }}
  wgmma_wait<0>();
  float s = 0.f;
  for (int i = 0; i < {n // 2}; ++i) s += d[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the products live; never true for these operands
}}
"""


def source() -> str:
    head = r"""#include <stdint.h>
#include "ptxbench/wgmma.cuh"
using namespace ptxbench;
constexpr int A_BYTES = 64 * 128;
constexpr int SMEM_BYTES = 2 * A_BYTES + 256 * 128;
// bf16 values near 1 (exponent of 1, varying mantissa) in every byte of the operands
__device__ __forceinline__ void fill(uint8_t* p, int bytes) {
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(p)[i] = 0x3F803F80u | ((i * 2654435761u >> 9) & 0x007F007Fu);
}
// 128B-swizzled descriptor: K-major (SBO = one 8-row atom) or MN-major (LBO = bytes between 64-wide slabs)
__device__ __forceinline__ uint64_t desc(const void* p, int mn, uint32_t lbo) {
  uint64_t d = static_cast<uint64_t>((static_cast<uint32_t>(__cvta_generic_to_shared(p)) & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(mn ? lbo >> 4 : 1) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}
"""
    return head + "".join(_kernel(name, *spec) for name, spec in VARIANTS.items())


def build():
    from ptxbench.tools.compile import compile_source

    r = compile_source(source(), "cuda", "sm_90a")
    if r.status != "ok":
        sys.exit("\n".join(str(e.message) for e in r.errors) or r.log)
    return r


def sm_clock_mhz() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return float(out.splitlines()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def measure(cubin: str, iters: int) -> list[dict]:
    import cupy as cp

    mod = cp.RawModule(path=cubin)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    sink = cp.zeros(128 * WGS, dtype=cp.float32)
    smem = 1024 + 2 * 64 * 128 + 256 * 128
    rows = []
    for name, (n, a, b) in VARIANTS.items():
        fn = mod.get_function(name)
        fn.max_dynamic_shared_size_bytes = smem
        fn((sms,), (128 * WGS,), (sink, cp.int32(max(1, iters // 10))), shared_mem=smem)  # warm-up
        times = []
        for _ in range(3):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn((sms,), (128 * WGS,), (sink, cp.int32(iters)), shared_mem=smem)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        clock = sm_clock_mhz()
        macs = 64 * n * 16 * KSTEPS * iters * WGS * sms
        t = statistics.median(times)
        rows.append({"variant": name, "n": n, "a": a, "b": b, "seconds": t, "spread_pct": 100 * (max(times) - min(times)) / t,
                     "tflops": 2 * macs / t / 1e12, "sm_clock_mhz": clock,
                     "macs_per_clk_per_sm": macs / sms / (t * clock * 1e6) if clock else None})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=4000, help="loop passes per launch (4 wgmma each per warpgroup)")
    ap.add_argument("--json", default="")
    ap.add_argument("--dry-run", action="store_true", help="build only: registers, spills and HGMMA per variant")
    args = ap.parse_args()
    r = build()
    if args.dry_run:
        for name in VARIANTS:
            k = r.kernels[name]
            print(f"{name}: {k.registers} registers, spills {k.spill_stores}/{k.spill_loads}, "
                  f"HGMMA {k.sass_opcodes.get('HGMMA')}")
        return
    rows = measure(r.cubin_path, args.iters)
    base = {row["n"]: row["tflops"] for row in rows if row["a"] == "k" and row["b"] == "k"}
    print("\n| variant | N | A | B | TFLOP/s | MAC/clk/SM | vs K-major SS, same N | spread |\n|---|---|---|---|---|---|---|---|")
    for row in rows:
        per = f"{row['macs_per_clk_per_sm']:.0f}" if row["macs_per_clk_per_sm"] else "-"
        print(f"| {row['variant']} | {row['n']} | {row['a']} | {row['b']} | {row['tflops']:.0f} | {per} | "
              f"{row['tflops'] / base[row['n']]:.3f} | {row['spread_pct']:.1f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
