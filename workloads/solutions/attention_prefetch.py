"""The attention forward template's prefetch_next option, as edits of attention_template.cu.in: once the producer has
issued its CTA's last K / V loads, it asks L2 for the Q tile and the first K / V tiles of the CTA that starts about
one wave later.

A CTA's first S waits for its Q tile, which no other CTA reads, so it comes from DRAM, and for its first K / V tiles,
which come from DRAM too when it is among the first CTAs of its head. That latency is part of each CTA's fixed cost
(bench/attention_cta_cost.py: about 2.2 us a D = 128 CTA at full clock beside 1.3 us a key tile). CTAs start in
launch order as SMs free up, so when this CTA is near its end, the CTA about to start is roughly this one's launch
index plus the number of SMs (%nsmid). The producer thread issues `cp.async.bulk.prefetch.tensor` for that CTA's
tiles (the same tensor maps and boxes as its loads) while this CTA's last key tiles are computed: a hint with no
completion to wait for and no shared memory. The decode from launch index to (query tile, head) is the kernel's own,
copied from its text with blockIdx replaced (test_attention_prefetch.py checks the copy). The consumers' code is
untouched.
"""
from __future__ import annotations

DECODE_START = "  int q_tile, bh;\n  if (CAUSAL && LPT_GROUP > 0) {\n"
DECODE_END = "    bh = blockIdx.y;\n  }\n"

PREFETCH_2D = r"""// prefetch_next: a TMA box into L2 only (no shared memory, nothing to wait for)
__device__ __forceinline__ void tma_prefetch_2d(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1) : "memory");
}

"""


def decode_block(body: str) -> str:
    """The kernel's decode of its launch index into (q_tile, bh), as the body spells it."""
    a = body.index(DECODE_START)
    return body[a:body.index(DECODE_END, a) + len(DECODE_END)]


def helper(body: str) -> str:
    """prefetch_next(): the kernel's decode applied to launch index lin + %nsmid, then the prefetches."""
    decode = decode_block(body).replace("blockIdx.x", "bx").replace("blockIdx.y", "by")
    return (
        PREFETCH_2D
        + "// prefetch_next: the Q tile and first K / V tiles of the CTA about one wave after this one (launch index plus\n"
        "// the SMs), decoded as the kernel decodes its own index\n"
        "__device__ __forceinline__ void prefetch_next(const CUtensorMap* tmQ, const CUtensorMap* tmK,\n"
        "                                              const CUtensorMap* tmV, int S, int n_q, int group) {\n"
        "  unsigned nsm;\n  asm(\"mov.u32 %0, %%nsmid;\" : \"=r\"(nsm));\n"
        "  const int next = (blockIdx.y * gridDim.x + blockIdx.x) + static_cast<int>(nsm);\n"
        "  if (next >= gridDim.x * gridDim.y) return;\n"
        "  const int bx = next % gridDim.x, by = next / gridDim.x;\n"
        + decode +
        "  const int head_row = bh * S, kv_row = GQA ? (bh / group) * S : head_row;\n"
        "#pragma unroll\n"
        "  for (int s = 0; s < SLABS; ++s) {\n"
        "    tma_prefetch_2d(tmQ, 64 * s, head_row + q_tile * BM);\n"
        "    tma_prefetch_2d(tmK, 64 * s, kv_row);\n"
        "    tma_prefetch_2d(tmV, 64 * s, kv_row);\n"
        "  }\n}\n\n")


KERNEL_HEAD = "// The whole kernel. GQA:"
PRODUCER_END = ("        tma_load_tile<KV_SLAB>(sV + st * KV_BYTES, tmV, &fullV[st], row);\n      }\n    }\n"
                "  } else {\n")


def prefetch_edits(body: str) -> list[tuple[str, str]]:
    """(old, new) edits, each old occurring once in `body` (the template's text with the other options applied)."""
    return [
        (KERNEL_HEAD, helper(body) + KERNEL_HEAD),
        (PRODUCER_END,
         "        tma_load_tile<KV_SLAB>(sV + st * KV_BYTES, tmV, &fullV[st], row);\n      }\n"
         "      prefetch_next(tmQ, tmK, tmV, S, n_q, group);  // prefetch_next: the next wave's first tiles into L2\n"
         "    }\n  } else {\n"),
    ]
