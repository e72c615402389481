"""st_conv: the attention backward's postprocess spread through the main kernel (edits on st_walk's text).

attn_bwd_post converts the fp32 dQ accumulator to bf16 after the main kernel: 148 us of 7.27 ms at D = 128 under ncu
(attention_bwd.md v12), 805 MB read back from DRAM. dq_fused (v12) moved that work to the last CTA of each KV head,
which converted the whole head alone while the grid drained, and lost 5-27%. Here the unit is small and the work
happens as the kernel runs:
- a unit is one consumer's reduction target of one query block (64 rows x its column half at D = 96 / 128; at D = 64
  its 64 of the block's 128 rows, all 64 columns), counted in the zeroed scratch dQcnt;
- consumer thread 0, before issuing its block's reduction, waits for the previous block's to be complete
  (`cp.async.bulk.wait_group 0`: issued a block earlier, so it normally is) and announces it to its converter warp:
  conv_done_block[c] = it - 1 in shared memory, a store with release (the last block after the loop);
- converter warp 1 + c of the producer warpgroup (warp 0 is the producer thread's; warps 1-3 zero the CTA's first two
  slices together as in st_walk, since its first block waits for them, then warp 3 walks on alone) counts each
  announced block on its unit (a gpu fence, atomicAdd, a gpu fence), and the
  count that completes the unit (the number of key blocks that add into it) converts it: 64 rows x W floats read from
  L2 (`ld.global.cg`), scaled, written as bf16 dQ rows with attn_bwd_post's index mapping;
- the plans lose the postprocess launch.
No consumer ever waits for a converter (conv_done_block[c] only rises), and a converter waits only for its consumer's
announcements, so there is no cycle. The release chain per block: the bulk group's completion and a proxy fence in
thread 0, conv_done_block[c] (release / acquire, CTA), the converter's gpu fence and count (release),
the completing converter's count and gpu fence (acquire) before its reads: dq_fused's chain (every CTA's reductions
complete, fenced and counted before the last one read them), which held on every backward workload on the H200.
"""
from __future__ import annotations

from ..template_text import replace_counted

CONV_HELPERS = r"""__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// st_conv: consumer c's reductions of blocks 0..e are complete (waited for above): published to the generic proxy and
// announced to its converter warp in conv_done_block[c] (only ever raised; the converter reads it with acquire). Static
// shared memory: its address is a constant, so the consumers' loop spends no register on it.
__shared__ int conv_done_block[2];
__shared__ int walk_claimed;  // st_conv: the walk's claim, read by the warps that zero the slice
constexpr int JOINT_SLICES = 2;  // slices each CTA's walk zeroes with three warps before two of them turn to converting
__device__ __forceinline__ void conv_publish(int c, int e) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("st.release.cta.shared.s32 [%0], %1;" :: "r"(smem_u32(&conv_done_block[c])), "r"(e) : "memory");
}
__device__ __forceinline__ int conv_done(int c) {
  int v;
  asm volatile("ld.acquire.cta.shared.s32 %0, [%1];" : "=r"(v) : "r"(smem_u32(&conv_done_block[c])) : "memory");
  return v;
}

// st_conv: one unit of the accumulator as bf16 dQ = scale * acc, by one warp (attn_bwd_post's mapping): the unit's 64
// rows (from `row` of all B * H * S) of W floats each in the accumulator's tile layout (32-byte group g of row rr at
// g ^ (rr % (W / 8))), to dQ columns col..col + W - 1. 32-bit element offsets (B * H * S * D < 2^31 on every
// backward workload): the loop keeps no 64-bit pointers in the producer warpgroup's 24 registers.
template <int HD, int DC, int W>
__device__ __forceinline__ void convert_unit(const float* __restrict__ dQacc, __nv_bfloat16* __restrict__ dQ,
                                             int row, int col, float scale, int lane) {
  const int src = row * DC + (HD == 64 ? 0 : 64 * col);  // the unit's tile: 64 rows of W floats
#pragma unroll 1
  for (int k = lane; k < 16 * W; k += 32) {  // 64 rows x W / 4 float4 steps
    const int rr = k / (W / 4), d = 4 * (k % (W / 4));
    const float4 v = __ldcg(reinterpret_cast<const float4*>(dQacc + src + rr * W + 8 * ((d / 8) ^ (rr & (W / 8 - 1))) +
                                                            d % 8));
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(dQ + (row + rr) * DC + col + d);
    o[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
    o[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
  }
}
"""

# Before issuing its block's reduction, consumer thread 0 waits for the previous block's to be complete (issued a
# block earlier, so it normally is) and announces it (it - 1 = -1 for the first block: no change, and no branch).
HANDOFF = """    bulk_wait_all();  // st_conv: the previous block's reduction is complete: to the converter
    conv_publish(c, it - 1);
"""

WALKER_AND_CONVERTERS = r"""    } else if (t >= 32) {  // st_walk, then (st_conv) warps 1 and 2 convert
      // The walk: this CTA's slices in the order its blocks need them. The first JOINT_SLICES by warps 1-3 together
      // (every CTA's first block waits for its first slice), the rest by warp 3 alone while warps 1-2 convert.
      constexpr int SPB = HD == 64 ? 1 : 2;  // query blocks a slice holds
      for (int it = 0; it < n_iter; it += SPB) {  // a slice per SPB blocks (q_first is a multiple of SPB)
        const bool joint = it < JOINT_SLICES * SPB;
        if (!joint && t < 96) break;
        const int lead = joint ? 32 : 96;
        const int slice = ((GQA ? bkv * group : bkv) + it / per_head) * (S / BN) + (q_first + it % per_head) / SPB;
        if (t == lead) walk_claimed = atomicCAS(dQflag + slice, 0, 1) == 0;
        if (joint) named_barrier_sync(6, 96); else __syncwarp();
        const bool mine = *reinterpret_cast<volatile int*>(&walk_claimed) != 0;
        if (mine) {
          float4* v = reinterpret_cast<float4*>(dQacc + static_cast<size_t>(slice) * BN * DC);
#pragma unroll 1  // the producer warpgroup's 24 registers
          for (int i = t - lead; i < 32 * DC; i += joint ? 96 : 32) v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
          asm volatile("fence.proxy.async.global;" ::: "memory");  // the zeros before the bulk reduce-adds (async proxy)
          __threadfence();
        }
        if (joint) named_barrier_sync(6, 96); else __syncwarp();  // the zeros are published; walk_claimed is free
        if (t == lead && mine) store_release(dQflag + slice, 2);
      }
    }
    if (t >= 32 && t < 96) {  // st_conv: warp 1 + c counts consumer c's completed blocks and converts each unit it completes
      const int c = t / 32 - 1, lane = t % 32;
      for (int it = 0; it < n_iter; ++it) {
        while (conv_done(c) < it) __nanosleep(32);  // consumer c's reduction of block it is complete
        const int head = (GQA ? bkv * group : bkv) + it / per_head, qb = q_first + it % per_head;
        const int need = CAUSAL ? (HD == 64 ? qb + 1 : qb / 2 + 1) : S / BN;  // key blocks that add into the unit
        int last = 0;
        if (lane == 0) {
          __threadfence();  // the consumer's completed reduction (acquired through conv_done_block) before the count
          last = atomicAdd(dQcnt + (head * (S / QR) + qb) * 2 + c, 1) == need - 1;
          __threadfence();  // every other counted reduction before the reads
        }
        if (__shfl_sync(0xffffffffu, last, 0)) {  // the unit's first row of all B * H * S, and its first column
          const int row = head * S + (HD == 64 ? 128 * qb + 64 * c : 64 * qb), col = HD == 64 ? 0 : 64 * c;
          if (HD == 64 || c == 0) convert_unit<HD, DC, 64>(dQacc, dQ, row, col, scale, lane);
          else convert_unit<HD, DC, (HD == 64 ? 64 : DC - 64)>(dQacc, dQ, row, col, scale, lane);
        }
        __syncwarp();
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();"""


def st_conv(text: str) -> str:
    """st_walk's text (with its plan lines) -> st_conv's: the postprocess done by converter warps in the main kernel."""
    end = "  } else {\n    setmaxnreg_inc<CONSUMER_REGS>();"
    walker = text[text.index("    } else if (t >= 32) {  // st_walk: warps 1-3 walk"):text.index(end) + len(end)]
    reduce64 = ("  if (t == 0)\n    bulk_reduce_add(dq_rows + static_cast<size_t>(q0 + (HD == 128 ? 0 : 64 * c)) * D + "
                "(HD == 128 ? 64 * 64 * c : 0), tile,\n                    BM * W * 4);\n")
    reduce128 = "  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c, tile, BM * W * 4);\n"
    edits = [
        (walker, WALKER_AND_CONVERTERS, 1),
        ('__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }',
         CONV_HELPERS.rstrip("\n"), 1),
        (reduce64, "  if (t == 0) {\n" + HANDOFF + reduce64[len("  if (t == 0)\n"):] + "  }\n", 1),
        (reduce128, "  if (t == 0) {\n" + HANDOFF + "    " + reduce128[len("  if (t == 0) "):] + "  }\n", 1),
        ("    if (threadIdx.x == 128 || threadIdx.x == 256) bulk_wait_all();  // each consumer's last reductions are done",
         "    if (threadIdx.x == 128 || threadIdx.x == 256) {  // each consumer's last reductions are done: to the converter\n"
         "      bulk_wait_all();\n"
         "      conv_publish(c, n_iter - 1);\n"
         "    }", 1),
        # the static counters above make ptxas pad the static area to the dynamic one's 1024-byte alignment (1024
        # bytes static), so the dynamic area drops its alignment slack: 1024 + 232,192 bytes at D = 128 would pass the
        # 232,448-byte opt-in limit (measured: PLAN_ERROR on the H200, attention_bwd.md v15)
        ('smem = "1024 + 32768 * cdiv(D, 64) + ', 'smem = "32768 * cdiv(D, 64) + ', 1),
        ("# slack, K, V, STAGES x", "# K, V, STAGES x", 1),
        ("  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));",
         "  uint8_t* smem = smem_raw;  // st_conv: aligned by the static area's padding; the plan has no slack for more\n"
         "  if (reinterpret_cast<uintptr_t>(smem_raw) % 1024 != 0) asm volatile(\"trap;\");", 1),
        ("    mbar_fence_init();",
         "    conv_done_block[0] = conv_done_block[1] = -1;  // st_conv: each consumer's last complete block\n"
         "    mbar_fence_init();", 1),
        # the main kernel takes dQ and the unit counts; the plans lose the postprocess launch
        ("int* __restrict__ dQflag, int S, int D,",
         "int* __restrict__ dQflag, __nv_bfloat16* __restrict__ dQ, int* __restrict__ dQcnt, int S, int D,", 10),
        ("dQacc, dK, dV, dQflag, S, D, scale", "dQacc, dK, dV, dQflag, dQ, dQcnt, S, D, scale", 9),
        ('"scratch:dQflag", "i32:S"', '"scratch:dQflag", "dQ", "scratch:dQcnt", "i32:S"', 1),
        ('[[launch]]\nkernel = "attn_bwd_post"\ngrid = ["cdiv(B * H * S * D, 1024)"]\nblock = [256]\n'
         'args = ["scratch:dQacc", "dQ", "i32:B * H * S * D", "f32:scale", "i32:D"]\n\n', "", 1),
        ('dtype = "int32"\nshape = ["B * H", "cdiv(S, 128)"]\nzero = true\n',
         'dtype = "int32"\nshape = ["B * H", "cdiv(S, 128)"]\nzero = true\n\n'
         '[scratch.dQcnt]  # st_conv: per query block and column half (D = 64: row half), the key blocks counted\n'
         'dtype = "int32"\nshape = ["B * H", "cdiv(S, 32)"]\nzero = true\n', 1),
        ("// VARIANT st_walk (attention_bwd_variants.py): ",
         "// VARIANT st_conv (attention_bwd_variants/dq_convert.py): st_walk with the postprocess done in the main kernel (each unit of "
         "the accumulator converted by the converter warp that counts its last key block), no attn_bwd_post launch;\n"
         "// st_walk: ", 1),
    ]
    for old, new, count in edits:
        text = replace_counted(text, old, new, "variant st_conv: st_walk's text", count)
    # attn_bwd_post is no longer launched: its code goes too (convert_unit holds its mapping)
    start = text.index("// attn_bwd_post: dQ = bf16(scale * acc), four elements per thread.")
    end = text.index("\n}\n", text.index('extern "C" __global__ void __launch_bounds__(256) attn_bwd_post(', start)) + 3
    return text[:start] + text[end:].lstrip("\n")
