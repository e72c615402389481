"""The GEMM template's 32-deep k-blocks (bk = 32): each stage one 64-byte-wide chunk of A and B under the 64B swizzle
(TMA boxes of 32 elements, wgmma descriptors of swizzle mode 2), so the same ring bytes are split into twice as many
slots and the producer runs further ahead of the consumers, which hold two slots at a time."""
from __future__ import annotations

from .gemm_body import swap

# A K-major tile of 32-element (64-byte) rows, 64B-swizzled by TMA: 16-byte chunk c of row r sits at chunk
# c XOR ((r / 2) % 4), in 8-row atoms of 512 bytes; a k16 step inside the row is +32 bytes (desc + 2), as with 128B.
DESC_SW64 = r"""// bk = 32: descriptor of a K-major, 64B-swizzled tile (rows of 32 bf16, 8-row atoms of 512 bytes) whose base is
// 512-byte aligned.
__device__ __forceinline__ uint64_t make_desc_sw64(const void* smem_ptr) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = static_cast<uint64_t>((addr & 0x3FFFF) >> 4);  // start address, 16-byte units
  desc |= static_cast<uint64_t>(1) << 16;                          // leading byte offset (unused with swizzle)
  desc |= static_cast<uint64_t>(512 >> 4) << 32;                   // stride byte offset: one 8-row atom
  desc |= static_cast<uint64_t>(2) << 62;                          // swizzle mode: 64B
  return desc;
}

"""


def chunk32_body(body: str) -> str:
    """The cooperative consumers' loop and the stage layout for bk = 32 (the producer's loads are unchanged: one
    chunk a stage at k * BK)."""
    body = swap(body, "constexpr int KCH = BK / 64;                // 64-element (128-byte) swizzle chunks per stage\n"
                      "constexpr int A_CHUNK = BM * 64 * 2;        // bytes of one A chunk (BM rows x 128 B)\n"
                      "constexpr int B_CHUNK = BN * 64 * 2;\n",
                "constexpr int KCH = 1;                      // bk = 32: one 32-element (64-byte, 64B swizzle) chunk a stage\n"
                "constexpr int A_CHUNK = BM * BK * 2;        // bytes of one A chunk (BM rows x 64 B)\n"
                "constexpr int B_CHUNK = BN * BK * 2;\n")
    kernel = 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn('
    body = swap(body, kernel, DESC_SW64 + kernel)
    body = swap(body, "smem + stage * STAGE_BYTES + consumer * WM * 128;", "smem + stage * STAGE_BYTES + consumer * WM * BK * 2;")
    body = swap(body, "make_desc_sw128(sB + kc * B_CHUNK);", "make_desc_sw64(sB + kc * B_CHUNK);")
    body = swap(body, "for (int kk = 0; kk < 4; ++kk) {", "for (int kk = 0; kk < BK / 16; ++kk) {")
    body = swap(body, "make_desc_sw128(sA + kc * A_CHUNK + ms * 64 * 128);", "make_desc_sw64(sA + kc * A_CHUNK + ms * 64 * BK * 2);")
    return body
