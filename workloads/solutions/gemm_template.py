"""The reference GEMM's parameter space and renderer: C = A @ B^T (bf16, both operands K-major).

`render(params)` returns one solution file (language `cuda`, plan in the header comment) built
from gemm_template.cu.in: a producer warpgroup feeding a TMA + mbarrier ring, CONSUMERS wgmma
warpgroups, optional persistent grid, 2-CTA clusters with B multicast and a TMA-store epilogue.
builtin/tuner searches PARAM_SPACE (from default_params(), or weak_params() with builtin/tuner:weak), pulling
the TUNER_LEVERS the evaluations point at; `validate(params)` says why a combination cannot be built.
The checked-in workloads/solutions/gemm_bf16_m8192_n7168_k5120.cu is `render(default_params())`.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, model_serializer

from .template_text import replace_counted, uniform_index_edit, without_default_options

BODY = Path(__file__).with_name("gemm_template.cu.in")
KERNEL = "gemm_bf16_tn"
SMEM_LIMIT = 232448  # bytes of dynamic shared memory a block may opt into on sm_90a
REGS_PER_SM = 65536


class GemmParams(BaseModel):
    """One point of the search space (see PARAM_SPACE for the values the tuner tries)."""

    bm: int = Field(128, description="tile rows (CONSUMERS x multiples of 64)")
    bn: int = Field(256, description="tile columns = wgmma N (multiple of 16, <= 256)")
    bk: int = Field(64, description="K per pipeline stage (multiple of 64: one 128B swizzle chunk each)")
    stages: int = Field(4, description="depth of the shared-memory ring")
    consumers: int = Field(2, description="consumer warpgroups (each owns bm/consumers rows)")
    persistent: bool = Field(True, description="one CTA per SM looping over tiles, else one CTA per tile")
    group_m: int = Field(8, description="tile rows walked together (L2 reuse); 1 = row by row")
    cluster_m: int = Field(1, description="CTAs per cluster along M sharing B through TMA multicast")
    epilogue: str = Field("tma", description="'direct' register->global stores or 'tma' (smem staging + TMA store)")
    producer_regs: int = Field(40, description="setmaxnreg for the producer warpgroup")
    max_ctas: int = Field(128, description="persistent grid cap below num_sms (0 = num_sms); clusters may not all fit at "
                          "once. 128 by default: the main GEMM's 1,792 tiles take 14 rounds on 132 CTAs or on 128, and "
                          "128 ran 1.2% faster on the H200 (gemm_sweep.md round 3: fewer CTAs, same makespan)")
    # Options outside PARAM_SPACE (OPTION_SPACE: builtin/tuner does not search them until measured); at their
    # defaults the render is the template with only the uniform index's one-line edit (measured faster, so on).
    order: str = Field("grouped", description="tile order: 'grouped' (GROUP_M tile rows walked column by column) or "
                       "'hilbert' (a generalized Hilbert curve over the cluster-tile grid, fast.cu's order)")
    stmatrix: bool = Field(False, description="TMA epilogue: write the swizzled staging with stmatrix.x4 (four 8x8 "
                           "matrices per instruction) instead of two st.shared.b32 per 8-column group")
    schedule: str = Field("cooperative", description="'cooperative' (the consumers split every BM x BN tile by rows) "
                          "or 'pingpong' (two consumers each own whole BM x BN tiles, alternate tiles of the "
                          "persistent schedule, and take turns to run their mainloops: one's epilogue overlaps the "
                          "other's wgmmas)")
    tail: str = Field("none", description="'none' (the last partial wave of tiles runs as it falls) or 'streamk' "
                      "(the tiles of the full waves one CTA each as before, then the k-blocks of the remaining tiles "
                      "split evenly over all the CTAs; partial fp32 tiles in a workspace, the last contributor of a "
                      "tile adds them and stores it)")
    defer: bool = Field(False, description="TMA epilogue, cooperative: a tile's result packed to bf16 in registers "
                        "and stored one 64-column slab per k-block of the consumer's next tile, under its wgmmas, "
                        "instead of between the tiles with the tensor pipe idle (the last tile's after the loop)")
    uniform: bool = Field(True, description="the consumer index broadcast from lane 0 (__shfl_sync), so ptxas "
                          "knows it is warp-uniform and builds the A descriptors in uniform registers (48 -> 17 R2UR, "
                          "1,008 -> 936 instructions at the default point, ptxas 13.5; on the H200 -0.75% time on the "
                          "main GEMM, -0.6% on the square one: on by default since, False is the plain index)")

    @model_serializer(mode="wrap")
    def _without_default_options(self, handler):
        """Options (OPTION_SPACE) at their defaults are left out of dumps: the default point dumps, renders and
        keys (builtin/tuner's points, recorded trajectories) exactly as before the options existed."""
        return without_default_options(self, handler(self), OPTION_NAMES)

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def consumer_regs(self) -> int:
        """What the consumers can take after the producer gives registers back (multiple of 8, <= 240)."""
        free = (REGS_PER_SM - 128 * self.producer_regs) // (128 * self.consumers)
        return min(240, free // 8 * 8)

    @property
    def pingpong(self) -> bool:
        return self.schedule == "pingpong"

    @property
    def streamk(self) -> bool:
        return self.tail == "streamk"

    @property
    def wm(self) -> int:
        """Rows of C one consumer computes per tile: bm / consumers, or the whole tile with ping-pong."""
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def acc_regs(self) -> int:
        return (self.wm // 64) * (self.bn // 2)

    @property
    def smem_bytes(self) -> int:
        stage = (self.bm + self.bn) * self.bk * 2
        epi = self.consumers * 2 * self.wm * 128 if self.epilogue == "tma" else 0  # two slabs per consumer
        return self.stages * stage + epi + 2 * 8 * self.stages + 1024  # + barriers + alignment slack


PARAM_SPACE: dict[str, list] = {
    "bm": [64, 128, 192, 256],
    "bn": [64, 96, 128, 160, 192, 224, 256],
    "bk": [64, 128],
    "stages": [2, 3, 4, 5, 6, 7, 8],
    "consumers": [1, 2, 3],
    "persistent": [True, False],
    "group_m": [1, 4, 8, 16],
    "cluster_m": [1, 2],
    "epilogue": ["direct", "tma"],
    "producer_regs": [24, 40],
    "max_ctas": [0, 128, 120, 112],
}


# Options a point may set, not searched by builtin/tuner (its space is PARAM_SPACE): fast.cu's Hilbert tile
# order, stmatrix staging, the ping-pong schedule (CUTLASS's KernelTmaWarpSpecializedPingpong), a stream-K tail and
# a warp-uniform consumer index (on by default: measured faster, gemm_sweep.md round 2). validate() checks them.
OPTION_SPACE: dict[str, list] = {
    "order": ["grouped", "hilbert"],
    "stmatrix": [False, True],
    "schedule": ["cooperative", "pingpong"],
    "tail": ["none", "streamk"],
    "uniform": [False, True],
    "defer": [False, True],  # not measured yet (gemm_sweep.py round 4)
}
OPTION_NAMES = ("order", "stmatrix", "schedule", "tail", "uniform", "defer")  # GemmParams' serializer leaves these out at their defaults
assert set(OPTION_SPACE) == set(OPTION_NAMES)


def default_params() -> GemmParams:
    return GemmParams()


def _mnk(workload) -> tuple[int, int, int]:
    """(M, N, K) of a Workload, a workload id, a symbols mapping or an (M, N, K) tuple."""
    if isinstance(workload, str):
        from ptxbench.workloads.registry import get_workload
        workload = get_workload(workload)
    sym = getattr(workload, "symbols", workload)
    if isinstance(sym, dict):
        return int(sym["M"]), int(sym["N"]), int(sym["K"])
    m, n, k = sym
    return int(m), int(n), int(k)


def params_for(workload, **changes) -> GemmParams:
    """A point chosen for the workload's shape (then `changes` applied); default_params() stays the reference of
    the main GEMM. Small M (decode): with the default 128 x 256 tile an M = 64 or 128 GEMM at N = 7168 has only
    28 tiles for 132 SMs (and M = 64 wastes half of every wgmma), so the tile shrinks to 64 columns: 112 CTAs that
    stream B through a deep ring. M = 64: one 64-row consumer; M <= 128: two consumers of 64 rows. Otherwise
    default_params(). The small-M choices are predictions until bench/gemm_sweep.py measures them
    (bench/results/gemm_sweep.md)."""
    m, _, _ = _mnk(workload)
    if m <= 64:
        base = GemmParams(bm=64, bn=64, consumers=1, stages=8)
    elif m <= 128:
        base = GemmParams(bm=128, bn=64, consumers=2, stages=8)
    else:
        base = default_params()
    return base.model_copy(update=changes)


def weak_params() -> GemmParams:
    """A deliberately poor point (builtin/tuner:weak starts here so a run shows the climb): a 64 x 128 tile
    fed by one consumer warpgroup through a 2-deep ring, one CTA per tile walked row by row (B is re-read
    from DRAM for every tile row), accumulators stored straight from registers."""
    return GemmParams(bm=64, bn=128, stages=2, consumers=1, persistent=False, group_m=1, epilogue="direct")


# What builtin/tuner may pull, by role (agent/models/tuner_rules.py): role -> (parameter, the value Hopper
# GEMMs favour, or None for an ordered parameter the tuner walks up and down).
TUNER_LEVERS: dict[str, tuple[str, object]] = {
    "tile_n": ("bn", None), "tile_m": ("bm", None), "warps": ("consumers", None), "ring": ("stages", None),
    "chunk": ("bk", None), "epilogue": ("epilogue", "tma"), "persistent": ("persistent", True),
    "order": ("group_m", 8), "multicast": ("cluster_m", 2),
}
# Which lines of gemm_template.cu.in a profile's hot line belongs to (matched on the line's text).
TUNER_LINES: dict[str, tuple[str, ...]] = {
    "stage_wait": ("mbar_wait(&full",),           # consumers wait for the ring to deliver a stage
    "slot_wait": ("mbar_wait(&empty",),           # the producer waits for a free slot: the math is the limit
    "mma_wait": ("wgmma_wait",),
    "mma_issue": ("wgmma_m64k16",),
    "epilogue": ("store_tile", "__floats2bfloat162", "st.shared", "tma_store", "named_barrier_sync", "p[0] =", "p[1] ="),
}


def _coerce(params: GemmParams | dict) -> GemmParams:
    return params if isinstance(params, GemmParams) else GemmParams(**params)


def validate(params: GemmParams | dict, shape: tuple[int, int, int] | None = None) -> list[str]:
    """Reasons this combination cannot be built or run (empty when it can). `shape` = (M, N, K)."""
    p = _coerce(params)
    bad: list[str] = []
    for name, values in (PARAM_SPACE | OPTION_SPACE).items():
        if getattr(p, name) not in values:
            bad.append(f"{name}={getattr(p, name)!r} is not one of {values}")
    if p.stmatrix and p.epilogue != "tma":
        bad.append("stmatrix=True writes the TMA epilogue's staging: it needs epilogue='tma'")
    if p.pingpong:
        if p.consumers != 2:
            bad.append(f"schedule='pingpong' alternates two consumer warpgroups: consumers={p.consumers} must be 2")
        if not p.persistent:
            bad.append("schedule='pingpong' hands each consumer every other tile of a persistent CTA: it needs "
                       "persistent=True")
        if p.bm % 64:
            bad.append(f"bm={p.bm} must be a multiple of 64: with ping-pong each consumer runs the m64 wgmmas of "
                       "the whole tile")
    elif p.bm % (64 * p.consumers):
        bad.append(f"bm={p.bm} must be a multiple of 64 x consumers ({64 * p.consumers}): each consumer runs m64 wgmmas")
    if p.streamk:
        if p.pingpong:
            bad.append("tail='streamk' splits the tail tiles' k-blocks between the consumers' common tiles: it needs "
                       "schedule='cooperative'")
        if not p.persistent:
            bad.append("tail='streamk' gives every CTA a share of the last tiles' k-blocks: it needs persistent=True")
        if p.cluster_m != 1:
            bad.append(f"tail='streamk' gives each CTA its own k-range: cluster_m={p.cluster_m} must be 1 (a "
                       "multicast pair would need the same ranges)")
    if p.defer:
        if p.epilogue != "tma" or p.stmatrix:
            bad.append("defer=True stores the packed tile through the TMA epilogue's staging (st.shared): it needs "
                       "epilogue='tma' and stmatrix=False")
        if p.pingpong or p.streamk:
            bad.append("defer=True stores a tile under the same consumer's next tile: it needs schedule='cooperative' "
                       "and tail='none'")
        if p.acc_regs * 3 // 2 > p.consumer_regs - 40:
            bad.append(f"defer=True keeps the packed tile ({p.acc_regs // 2} registers) beside the accumulators "
                       f"({p.acc_regs}): more than the consumers' {p.consumer_regs} allow (about 40 spare)")
    if p.bn % 16 or not 16 <= p.bn <= 256:
        bad.append(f"bn={p.bn} must be a multiple of 16 in [16, 256] (wgmma N)")
    if p.bk % 64:
        bad.append(f"bk={p.bk} must be a multiple of 64 (128B swizzle chunks)")
    if p.acc_regs > p.consumer_regs - 40:
        bad.append(f"{p.acc_regs} accumulator registers per thread do not fit the consumers' {p.consumer_regs} "
                   "(need about 40 spare): lower bm/bn" + (" (ping-pong: one consumer holds the whole tile)"
                                                           if p.pingpong else " or add consumers"))
    if p.smem_bytes > SMEM_LIMIT:
        bad.append(f"needs {p.smem_bytes} bytes of shared memory, the limit is {SMEM_LIMIT}: fewer stages or smaller tiles")
    if p.threads > 1024:
        bad.append(f"{p.threads} threads exceed 1024")
    if p.epilogue == "tma" and p.bn % 64:
        bad.append(f"the TMA epilogue stores 64-column slabs: bn={p.bn} must be a multiple of 64")
    if p.cluster_m > 1 and (p.bn // p.cluster_m) % 8:
        bad.append(f"bn/cluster_m={p.bn // p.cluster_m} must be a multiple of 8 rows (each CTA multicasts a slice of B)")
    if shape is not None:
        m, n, k = shape
        if k % 8:
            bad.append(f"K={k} must be a multiple of 8: TMA needs 16-byte row strides")
        if p.epilogue == "tma" and n % 8:
            bad.append(f"N={n} must be a multiple of 8 for the TMA-store epilogue (16-byte row strides)")
    return bad


def _ctas(p: GemmParams) -> str:
    """The persistent grid's cap: every SM, or max_ctas of them."""
    return f"min(num_sms, {p.max_ctas})" if p.max_ctas else "num_sms"


def _grid(p: GemmParams) -> str:
    c = p.cluster_m
    rows = f"cdiv(M, {p.bm})" if c == 1 else f"cdiv(cdiv(M, {p.bm}), {c}) * {c}"  # whole clusters
    tiles = f"{rows} * cdiv(N, {p.bn})"
    if not p.persistent:
        return tiles
    ctas = _ctas(p)
    if p.streamk:  # every CTA takes a share of the tail's k-blocks, also when there are fewer tiles than CTAs
        return ctas
    return f"min({ctas}, {tiles})" if c == 1 else f"min({ctas} // {c} * {c}, {tiles})"


def plan_toml(p: GemmParams) -> str:
    cluster = f"cluster = [{p.cluster_m}, 1, 1]\n" if p.cluster_m > 1 else ""
    sk_args, sk_scratch = "", ""
    if p.streamk:  # two fp32 partial tiles per CTA (never read before written: left unzeroed), a ticket per tail
        # tile and consumer (tail tiles < CTAs; zeroed for every call, and put back to 0 by the kernel)
        sk_args = ', "scratch:sk_ws", "scratch:sk_tickets"'
        sk_scratch = (f'\n[scratch.sk_ws]\ndtype = "float32"\nshape = ["{_ctas(p)}", 2, {p.bm * p.bn}]\nzero = false\n'
                      f'\n[scratch.sk_tickets]\ndtype = "int32"\nshape = ["{_ctas(p)}", {p.consumers}]\nzero = true\n')
    return (
        '/* ptxbench\nlanguage = "cuda"\n\n[[launch]]\n'
        f'kernel = "{KERNEL}"\n'
        f'grid = ["{_grid(p)}", 1, 1]\n'
        f"block = [{p.threads}, 1, 1]\n"
        f"{cluster}"
        f"smem = {p.smem_bytes}\n"
        f'args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K"{sk_args}]\n\n'
        f'[tmap.A_map]\ntensor = "A"\nbox = [64, {p.bm}]\nswizzle = "128B"\nl2_promotion = "256B"\n\n'
        f'[tmap.B_map]\ntensor = "B"\nbox = [64, {p.bn // p.cluster_m}]\nswizzle = "128B"\nl2_promotion = "256B"\n\n'
        f'[tmap.C_map]\ntensor = "C"\nbox = [64, {p.wm}]\nswizzle = "128B"\n'
        f"{sk_scratch}"
        "*/\n"
    )


def render(params: GemmParams | dict) -> str:
    """The complete solution file for these parameters (raises ValueError when validate() objects)."""
    p = _coerce(params)
    problems = validate(p)
    if problems:
        raise ValueError("; ".join(problems))
    consts = (
        f"constexpr int BM = {p.bm};\nconstexpr int BN = {p.bn};\nconstexpr int BK = {p.bk};\n"
        f"constexpr int STAGES = {p.stages};\nconstexpr int CONSUMERS = {p.consumers};\n"
        f"constexpr bool PERSISTENT = {str(p.persistent).lower()};\nconstexpr int GROUP_M = {p.group_m};\n"
        f"constexpr int CLUSTER_M = {p.cluster_m};\nconstexpr bool EPILOGUE_TMA = {str(p.epilogue == 'tma').lower()};\n"
        f"constexpr int PRODUCER_REGS = {p.producer_regs};\nconstexpr int CONSUMER_REGS = {p.consumer_regs};\n"
    )
    header = (  # options at their defaults are not in model_dump(), so a point's header names what it changes
        f"// Reference GEMM rendered by workloads/solutions/gemm_template.py with {p.model_dump()}\n"
        "#include <cuda.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n"
        '#include "ptxbench/wgmma.cuh"\n#include "ptxbench/tma.cuh"\n#include "ptxbench/mbarrier.cuh"\n\n'
        "using namespace ptxbench;\n\n"
    )
    return plan_toml(p) + header + consts + "\n" + body_text(p)


def _replace_function(body: str, signature: str, replacement: str) -> str:
    """`body` with the function that starts at the line holding `signature` (up to its closing brace at column 0)
    replaced by `replacement`."""
    start = body.index(signature)
    start = body.rindex("\n", 0, start) + 1
    end = body.index("\n}\n", start) + 3
    return body[:start] + replacement + body[end:]


def body_text(p: GemmParams) -> str:
    """The kernel body for these parameters: gemm_template.cu.in with the options' functions swapped in."""
    body = BODY.read_text()
    if p.order == "hilbert":
        body = _replace_function(body, "void tile_coords(", HILBERT_TILE_COORDS)
    if p.stmatrix:
        body = _replace_function(body, "void store_tile_tma(", STMATRIX_STORE_TILE)
    if p.pingpong:
        body = _pingpong(body)
    if p.streamk:
        body = _streamk(body)
    if p.defer:
        body = _defer(body)
    if p.uniform:
        body = _swap(body, *uniform_index_edit("consumer"))  # the consumer's A descriptors in uniform registers
    return body


# defer=True: the tile's result packed to bf16 pairs (pk[ms][2q] row r, pk[ms][2q + 1] row r + 8, columns 8q + 2 (t % 4)
# + 0 / 1: store_tile_tma's element order) right after the main loop, and its slabs stored under the next tile's
# wgmmas, slab s after k-block s's wgmmas are issued. The slab index picks registers, so it is a template argument
# (a runtime index would put pk in local memory).
DEFER_SLAB = r"""// defer: slab S (columns 64 S..) of this consumer's packed tile through staging buffer slab_count % 2, then its TMA
// store; called with the tensor pipe busy with the next tile's wgmmas.
template <int S>
__device__ __forceinline__ void store_slab_packed(const uint32_t (&pk)[MSUB][BN / 4], uint8_t* stage_buf,
                                                  const CUtensorMap* tmC, int row0, int col0, int consumer,
                                                  uint32_t slab_count) {
  const int t = threadIdx.x % 128;
  constexpr int SLAB_BYTES = WM * 128;
  const uint32_t base = smem_u32(stage_buf) + (16 * (t / 32) + (t % 32) / 4) * 128 + (t % 4) * 4;
  const uint32_t rr = (t / 4) % 8;  // row % 8 of every element this thread holds
  const uint32_t buf = (slab_count & 1) * SLAB_BYTES;
  if (t == 0) tma_store_wait_read<1>();  // the store that last read this buffer is done with it
  named_barrier_sync(1 + consumer, 128);
#pragma unroll
  for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
    for (int q = 8 * S; q < 8 * S + 8; ++q) {
      const uint32_t addr = base + buf + ms * 64 * 128 + (((q % 8) ^ rr) << 4);
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(pk[ms][2 * q]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr + 8 * 128), "r"(pk[ms][2 * q + 1]) : "memory");
    }
  }
  fence_proxy_async();
  named_barrier_sync(1 + consumer, 128);
  if (t == 0) {
    tma_store_2d(tmC, stage_buf + buf, col0 + 64 * S, row0);
    tma_store_commit();
  }
}

// Slab s (0 <= s < BN / 64, a runtime value) by a compile-time one.
__device__ __forceinline__ void store_slab_deferred(const uint32_t (&pk)[MSUB][BN / 4], int s, uint8_t* stage_buf,
                                                   const CUtensorMap* tmC, int row0, int col0, int consumer,
                                                   uint32_t& slab_count) {
  static_assert(BN / 64 <= 4, "defer: up to 4 slabs");
  switch (s) {
    case 0: store_slab_packed<0>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    case 1: if constexpr (BN / 64 > 1) store_slab_packed<1>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    case 2: if constexpr (BN / 64 > 2) store_slab_packed<2>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    default: if constexpr (BN / 64 > 3) store_slab_packed<3>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
  }
  ++slab_count;
}

"""


def _defer(body: str) -> str:
    """defer=True (see DEFER_SLAB): the packed tile, its slabs stored in the next tile's first k-blocks."""
    body = _swap(body, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                 DEFER_SLAB + 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    body = _swap(body, """    float acc[MSUB][BN / 2];
    uint32_t slab_count = 0;""", """    float acc[MSUB][BN / 2];
    uint32_t pk[MSUB][BN / 4];  // defer: the previous tile's result, bf16 pairs
    int pm0 = -1, pn0 = 0;      // its first row (this consumer's) and column; pm0 < 0: none yet
    uint32_t slab_count = 0;""")
    body = _swap(body, """        wgmma_commit();
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back""",
                 """        wgmma_commit();
        if (pm0 >= 0 && k < BN / 64)  // defer: the previous tile's slab k, under this k-block's wgmmas
          store_slab_deferred(pk, k, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back""")
    body = _swap(body, """      if constexpr (EPILOGUE_TMA) {
        store_tile_tma(acc, epi + consumer * 2 * WM * 128, &tmC, m0 + consumer * WM, n0, consumer, slab_count);
      } else {
        store_tile_direct(acc, C, M, N, m0 + consumer * WM, n0);
      }
    }
    if constexpr (EPILOGUE_TMA) {
      if (t == 0) tma_store_wait<0>();
    }""", """      // defer: slabs of the previous tile its k-blocks did not reach (K shorter than BN / 64 k-blocks)
      for (int s = k_iters; pm0 >= 0 && s < BN / 64; ++s)
        store_slab_deferred(pk, s, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
#pragma unroll
      for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          __nv_bfloat162 lo = __floats2bfloat162_rn(acc[ms][4 * q], acc[ms][4 * q + 1]);
          __nv_bfloat162 hi = __floats2bfloat162_rn(acc[ms][4 * q + 2], acc[ms][4 * q + 3]);
          pk[ms][2 * q] = *reinterpret_cast<uint32_t*>(&lo);
          pk[ms][2 * q + 1] = *reinterpret_cast<uint32_t*>(&hi);
        }
      }
      pm0 = m0 + consumer * WM;
      pn0 = n0;
    }
    for (int s = 0; pm0 >= 0 && s < BN / 64; ++s)  // the last tile's slabs
      store_slab_deferred(pk, s, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
    if (t == 0) tma_store_wait<0>();""")
    return body


def _swap(body: str, old: str, new: str, count: int = 1) -> str:
    return replace_counted(body, old, new, "gemm_template.cu.in", count)


def _pingpong(body: str) -> str:
    """schedule="pingpong": each consumer owns whole tiles (WM = BM), the epilogue's named barriers get immediate
    ids after the two turn barriers, and the kernel is PINGPONG_KERNEL."""
    body = _swap(body, "constexpr int WM = BM / CONSUMERS;          // rows per consumer warpgroup",
                 "constexpr int WM = BM;                      // ping-pong: each consumer computes whole BM x BN tiles")
    body = _swap(body, "EPILOGUE_TMA ? 2 * BM * 128 : 0;  // two 64-column staging slabs per consumer",
                 "EPILOGUE_TMA ? CONSUMERS * 2 * WM * 128 : 0;  // two 64-column staging slabs per consumer")
    body = _swap(body, 'static_assert(BM % (64 * CONSUMERS) == 0, "each consumer owns a multiple of 64 rows");',
                 'static_assert(BM % 64 == 0 && CONSUMERS == 2, "ping-pong: two consumers, each m64 wgmmas over the tile");')
    body = _swap(body, "named_barrier_sync(1 + consumer, 128);", "epilogue_sync(consumer);", count=2)
    body = _swap(body, "__device__ __forceinline__ void store_tile_direct(",
                 PINGPONG_BARRIERS + "__device__ __forceinline__ void store_tile_direct(")
    start = body.index('extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    end = body.index("\n}\n", start) + 3
    return body[:start] + PINGPONG_KERNEL + body[end:]


def _streamk(body: str) -> str:
    """tail="streamk": the cooperative kernel walks units of work (StreamK::next: the full waves' tiles, then
    this CTA's k-range of the tail) instead of tiles, and a unit that is part of a tail tile goes through
    streamk_fixup before the epilogue."""
    body = _swap(body, "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {",
                 "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K,\n"
                 "             float* ws, int* tickets) {")
    body = _swap(body, "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M\n",
                 "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M\n"
                 "  const StreamK sk(cluster_tiles, k_iters, gridDim.x);  // the full waves' tiles, then a k-range of the tail\n")
    body = _swap(body, "for (int ct = first; ct < cluster_tiles; ct += step) {",
                 "for (int ct = first, it = sk.begin(blockIdx.x), end = sk.begin(blockIdx.x + 1), tile = 0, kb = 0, "
                 "ke = 0, r = -1; sk.next(ct, it, end, step, tile, kb, ke, r);) {", count=2)
    body = _swap(body, "tile_coords(ct, cluster_rows, tiles_n, tm, tn);", "tile_coords(tile, cluster_rows, tiles_n, tm, tn);",
                 count=2)
    body = _swap(body, "for (int k = 0; k < k_iters; ++k) {", "for (int k = kb; k < ke; ++k) {", count=2)
    body = _swap(body, "wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);",
                 "wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, ((k - kb) | kc | kk) != 0);")
    body = _swap(body, "      if constexpr (EPILOGUE_TMA) {\n        store_tile_tma(acc, epi + consumer * 2 * WM * 128,",
                 "      // a tail tile's part: publish it, or (the tile's last contributor) add the others' and store\n"
                 "      if (r >= 0 && !streamk_fixup(acc, ws, tickets, sk, r, consumer)) continue;\n"
                 "      if constexpr (EPILOGUE_TMA) {\n        store_tile_tma(acc, epi + consumer * 2 * WM * 128,")
    body = _swap(body, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                 STREAMK_HELPERS + 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    return body


# tail="streamk" (Stream-K, Osama et al. 2023; CUTLASS's data-parallel + stream-K hybrid): the device side.
# StreamK's arithmetic is compiled for the host by tests/workloads/test_gemm_streamk.py and compared with its Python
# model; the ticket protocol of streamk_fixup is played there under every interleaving of the contributors.
STREAMK_HELPERS = r"""// ---- Stream-K tail (tail="streamk") ----
// The tiles of the full waves go one per CTA as without it (tile first, first + step, ... below dp_tiles =
// tiles - tiles % ctas). The k-blocks of the remaining tiles (total = tail tiles x k_iters, tile-major) are
// split evenly over ALL the CTAs: CTA c takes [begin(c), begin(c + 1)), begin(c) = total * c / ctas. There are
// fewer tail tiles than CTAs, so a range holds at most k_iters k-blocks and touches at most two tiles: CTA c's
// partial sums of a tile go to its workspace slot 0 (the tile its range starts in) or 1 (the next one).
struct StreamK {
  int dp_tiles;  // tiles of the full waves: one CTA each
  int k_iters;
  int ctas;
  int total;     // k-blocks of the tail tiles (fewer than ctas x k_iters)
  __device__ __forceinline__ StreamK(int tiles, int k_iters_, int ctas_)
      : dp_tiles(tiles - tiles % ctas_), k_iters(k_iters_), ctas(ctas_), total(tiles % ctas_ * k_iters_) {}
  // the first k-block (of the tail's) of CTA c's range; begin(ctas) = total
  __device__ __forceinline__ int begin(int c) const {
    return static_cast<int>(static_cast<long long>(total) * c / ctas);
  }
  // the CTA whose range holds k-block x < total: the largest c with begin(c) <= x
  __device__ __forceinline__ int cta_of(int x) const {
    return static_cast<int>((static_cast<long long>(x + 1) * ctas - 1) / total);
  }
  // This CTA's next unit of work: a whole tile of the full waves (r = -1), then k-blocks [kb, ke) of tail tile
  // r (tile dp_tiles + r) while its range [it, end) lasts. False when none is left.
  __device__ __forceinline__ bool next(int& ct, int& it, int end, int step, int& tile, int& kb, int& ke,
                                       int& r) const {
    if (ct < dp_tiles) { tile = ct; kb = 0; ke = k_iters; r = -1; ct += step; return true; }
    if (it >= end) return false;
    r = it / k_iters;
    kb = it - r * k_iters;
    ke = min(k_iters, kb + (end - it));
    it += ke - kb;
    tile = dp_tiles + r;
    return true;
  }
};

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void st_relaxed_gpu(int* p, int v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ __forceinline__ void st_cg_v4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ float4 ld_cg_v4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}
// The 128 threads of consumer warpgroup c meet on its named barrier; true on all of them if `p` is on any.
__device__ __forceinline__ bool warpgroup_any(bool p, int c) {
  uint32_t r;
  asm volatile("{\n  .reg .pred pin, pout;\n  setp.ne.u32 pin, %1, 0;\n  bar.red.or.pred pout, %2, 128, pin;\n"
               "  selp.u32 %0, 1, 0, pout;\n}" : "=r"(r) : "r"(static_cast<uint32_t>(p)), "r"(1 + c) : "memory");
  return r != 0;
}

// Consumer warpgroup `consumer` has summed k-blocks [kb, ke) of tail tile r into acc (its WM rows of the tile).
// Every contributor of the tile takes a ticket (one per tile and consumer) after publishing its partial sums;
// the one that draws the last ticket adds everyone else's into acc and returns true (the caller stores the
// tile), the others return false. Ordering: each thread's workspace stores, its fence.acq_rel.gpu, the
// warpgroup's barrier, then thread 0's atom.acq_rel (release); the last contributor's thread 0 reads the final
// count with acquire (ld.acquire or its own atom), the barrier, each thread's fence, then the loads. The
// ticket goes back to 0 once all have drawn (nobody touches it again this call).
__device__ __forceinline__ bool streamk_fixup(float (&acc)[MSUB][BN / 2], float* ws, int* tickets, const StreamK& sk,
                                           int r, int consumer) {
  constexpr int V4 = MSUB * BN / 8;  // float4s of accumulators per thread
  constexpr int ROW4 = BN / 8;       // float4s per m64 slice
  const int t = threadIdx.x % 128;
  const int me = blockIdx.x;
  const int k0 = r * sk.k_iters;
  const int c_lo = sk.cta_of(k0), c_hi = sk.cta_of(k0 + sk.k_iters - 1);
  int parts = 0;  // contributors: the CTAs of c_lo..c_hi with a non-empty range
  for (int c = c_lo; c <= c_hi; ++c) parts += sk.begin(c + 1) > sk.begin(c);
  int* ticket = tickets + r * CONSUMERS + consumer;
  // CTA c's slot for tile r, this warpgroup's rows, this thread's first float4: thread-major, so each of the
  // V4 accesses of the warpgroup covers 2 KB contiguously
  auto slot = [&](int c) {
    const int seg = sk.begin(c) / sk.k_iters == r ? 0 : 1;
    return ws + (static_cast<size_t>(2 * c + seg) * BM + consumer * WM) * BN + 4 * t;
  };
  // All the others published already (the usual case for the contributor of the tile's first k-blocks, which
  // end its range): then this one is the last and stores nothing.
  bool last = warpgroup_any(t == 0 && ld_acquire_gpu(ticket) == parts - 1, consumer);
  if (!last) {
    float* p = slot(me);
#pragma unroll
    for (int i = 0; i < V4; ++i) {
      const float* a = &acc[i / ROW4][4 * (i % ROW4)];
      st_cg_v4(p + 4 * 128 * i, a[0], a[1], a[2], a[3]);
    }
    fence_acq_rel_gpu();
    last = warpgroup_any(t == 0 && atom_add_acq_rel_gpu(ticket, 1) == parts - 1, consumer);
    if (!last) return false;
  }
  fence_acq_rel_gpu();
  for (int c = c_lo; c <= c_hi; ++c) {
    if (c == me || sk.begin(c + 1) == sk.begin(c)) continue;
    const float* p = slot(c);
#pragma unroll
    for (int i = 0; i < V4; ++i) {
      const float4 v = ld_cg_v4(p + 4 * 128 * i);
      float* a = &acc[i / ROW4][4 * (i % ROW4)];
      a[0] += v.x; a[1] += v.y; a[2] += v.z; a[3] += v.w;
    }
  }
  if (t == 0) st_relaxed_gpu(ticket, 0);  // every contributor has drawn: zero for the next call
  return true;
}

"""


# order="hilbert": tile_coords as a generalized Hilbert curve ("gilbert", any rectangle) walked from d to (x, y)
# without recursion (tests/workloads/test_gemm_solution.py compiles it for the host and walks every grid).
HILBERT_TILE_COORDS = r"""__device__ __forceinline__ int sgn_i(int v) { return (v > 0) - (v < 0); }

__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn) {
  // Hilbert order (fast.cu): a generalized Hilbert curve over the tiles_m x tiles_n grid, so each wave of
  // consecutive tiles covers a compact block of tile rows and columns and the next wave starts next to it.
  // The curve is split into halves or thirds (long side first) until the part holding `tile` is one
  // tile wide; (x, y) is that part's corner, (ax, ay) its major and (bx, by) its minor axis.
  int x = 0, y = 0, cur = 0, ax, ay, bx, by;
  if (tiles_m >= tiles_n) { ax = tiles_m; ay = 0; bx = 0; by = tiles_n; } else { ax = 0; ay = tiles_n; bx = tiles_m; by = 0; }
  while (true) {
    const int w = abs(ax + ay), h = abs(bx + by);
    const int dax = sgn_i(ax), day = sgn_i(ay), dbx = sgn_i(bx), dby = sgn_i(by);
    const int di = tile - cur;
    if (h == 1) { tm = x + dax * di; tn = y + day * di; return; }
    if (w == 1) { tm = x + dbx * di; tn = y + dby * di; return; }
    int ax2 = ax / 2, ay2 = ay / 2, bx2 = bx / 2, by2 = by / 2;  // truncation toward zero
    const int w2 = abs(ax2 + ay2), h2 = abs(bx2 + by2);
    if (2 * w > 3 * h) {  // long part: two halves along the major axis
      if ((w2 % 2) && w > 2) { ax2 += dax; ay2 += day; }
      const int nxt = cur + abs((ax2 + ay2) * (bx + by));
      if (tile < nxt) { ax = ax2; ay = ay2; }
      else { cur = nxt; x += ax2; y += ay2; ax -= ax2; ay -= ay2; }
      continue;
    }
    if ((h2 % 2) && h > 2) { bx2 += dbx; by2 += dby; }
    int nxt = cur + abs((bx2 + by2) * (ax2 + ay2));  // up
    if (tile < nxt) { const int tx = ax2, ty = ay2; ax = bx2; ay = by2; bx = tx; by = ty; continue; }
    cur = nxt;
    nxt = cur + abs((ax + ay) * ((bx + by) - (bx2 + by2)));  // across
    if (tile < nxt) { x += bx2; y += by2; bx -= bx2; by -= by2; continue; }
    cur = nxt;  // down
    const int nx = x + (ax - dax) + (bx2 - dbx), ny = y + (ay - day) + (by2 - dby);
    const int nax = -bx2, nay = -by2, nbx = -(ax - ax2), nby = -(ay - ay2);
    x = nx; y = ny; ax = nax; ay = nay; bx = nbx; by = nby;
  }
}
"""

# stmatrix=True: the TMA epilogue's staging written by stmatrix.x4. The 16 x 16 block of a warp at 8-column
# groups (q0, q0 + 1) is four 8 x 8 matrices; lanes 8i..8i+7 address the rows of matrix i = (rows + 8 * (i % 2),
# group q0 + i / 2), and register i holds this thread's pair of matrix i, which is exactly the wgmma
# accumulator's layout. The same 128B-swizzled slab as the st.shared path (chunk XOR row % 8): no bank conflicts.
STMATRIX_STORE_TILE = r"""__device__ __forceinline__ void store_tile_tma(float (&acc)[MSUB][BN / 2], uint8_t* stage_buf, const CUtensorMap* tmC,
                                               int row0, int col0, int consumer, uint32_t& slab_count) {
  const int t = threadIdx.x % 128;
  const int lane = t % 32;
  const int mi = lane / 8;  // the matrix whose row this lane addresses
  constexpr int SLABS = BN / 64;
  constexpr int SLAB_BYTES = WM * 128;
  const uint32_t row = 16 * (t / 32) + 8 * (mi % 2) + lane % 8;
  const uint32_t base = smem_u32(stage_buf) + row * 128;
  const uint32_t rr = row % 8;
#pragma unroll
  for (int s = 0; s < SLABS; ++s, ++slab_count) {
    const uint32_t buf = (slab_count & 1) * SLAB_BYTES;
    if (t == 0) tma_store_wait_read<1>();  // the store that last read this buffer is done with it
    named_barrier_sync(1 + consumer, 128);
#pragma unroll
    for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
      for (int pr = 0; pr < 4; ++pr) {  // 8-column groups q0 = 8s + 2pr and q0 + 1
        const int q0 = 8 * s + 2 * pr;
        const uint32_t addr = base + buf + ms * 64 * 128 + (((2 * pr + mi / 2) ^ rr) << 4);
        __nv_bfloat162 m0 = __floats2bfloat162_rn(acc[ms][4 * q0], acc[ms][4 * q0 + 1]);
        __nv_bfloat162 m1 = __floats2bfloat162_rn(acc[ms][4 * q0 + 2], acc[ms][4 * q0 + 3]);
        __nv_bfloat162 m2 = __floats2bfloat162_rn(acc[ms][4 * q0 + 4], acc[ms][4 * q0 + 5]);
        __nv_bfloat162 m3 = __floats2bfloat162_rn(acc[ms][4 * q0 + 6], acc[ms][4 * q0 + 7]);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                     :: "r"(addr), "r"(*reinterpret_cast<uint32_t*>(&m0)), "r"(*reinterpret_cast<uint32_t*>(&m1)),
                        "r"(*reinterpret_cast<uint32_t*>(&m2)), "r"(*reinterpret_cast<uint32_t*>(&m3)) : "memory");
      }
    }
    fence_proxy_async();
    named_barrier_sync(1 + consumer, 128);
    if (t == 0) {
      tma_store_2d(tmC, stage_buf + buf, col0 + 64 * s, row0);
      tma_store_commit();
    }
  }
}
"""

# schedule="pingpong": named barriers with immediate ids (an id in a register makes ptxas reserve all 16).
# 1 + c: consumer c's turn to issue its mainloop (count 256: its 128 threads wait, the other consumer's 128 arrive);
# 3 + c: consumer c's 128 threads meet around its epilogue staging (the cooperative template's runtime 1 + consumer).
PINGPONG_BARRIERS = r"""// Ping-pong barriers, immediate ids only: 1 + c = consumer c may issue its mainloop (count 256 = the 128
// threads of c that wait + the 128 of the other consumer that arrive), 3 + c = consumer c's epilogue staging.
constexpr int BAR_TURN = 1;
constexpr int BAR_EPI = 3;

template <int ID, int COUNT>
__device__ __forceinline__ void bar_sync_imm() {
  asm volatile("bar.sync %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}
template <int ID, int COUNT>
__device__ __forceinline__ void bar_arrive_imm() {
  asm volatile("bar.arrive %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}
// Wait for consumer c's turn (the other consumer passed it after issuing its previous mainloop).
__device__ __forceinline__ void turn_wait(int c) {
  if (c == 0) bar_sync_imm<BAR_TURN, 256>();
  else bar_sync_imm<BAR_TURN + 1, 256>();
}
// Consumer c has issued its mainloop: the other consumer's turn.
__device__ __forceinline__ void turn_pass(int c) {
  if (c == 0) bar_arrive_imm<BAR_TURN + 1, 256>();
  else bar_arrive_imm<BAR_TURN, 256>();
}
__device__ __forceinline__ void epilogue_sync(int c) {
  if (c == 0) bar_sync_imm<BAR_EPI, 128>();
  else bar_sync_imm<BAR_EPI + 1, 128>();
}

"""

PINGPONG_KERNEL = r"""// Ping-pong schedule (CUTLASS's KernelTmaWarpSpecializedPingpong, FlashAttention-3's warpgroup ping-pong):
// the two consumer warpgroups each own WHOLE BM x BN tiles (WM = BM: MSUB m64nBN wgmmas per k16 step).
// Tile j of this CTA (cluster tile first + j * step, j = 0 .. n_tiles - 1) belongs to consumer j % 2. The
// producer loads the k-blocks of tile 0, then of tile 1, ... (the cooperative loop), which is the order the
// consumers take them: ring position j * k_iters + k holds k-block k of tile j, and ONE consumer (4 warps
// per CTA of the cluster) frees each stage. The mainloops take turns on named barriers 1 and 2: mainloop j
// waits for its turn (not j = 0: nobody runs before it), issues all its k-blocks, and passes the turn to the
// other consumer before waiting for its own last wgmmas (not j = n_tiles - 1: nobody runs after it), so every
// arrival meets exactly one wait whatever the consumers' tile counts (n_tiles = 2n or 2n + 1). A consumer's
// wgmma tail, bf16 conversion and TMA store then overlap the other consumer's mainloop on the tensor cores.
extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_bf16_tn(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
             const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Dynamic shared memory is only 16-byte aligned; swizzled tiles need 1024.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* epi = smem + STAGES * STAGE_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(epi + EPI_BYTES);
  uint64_t* empty = full + STAGES;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const uint32_t cta_rank = CLUSTER_M > 1 ? cluster_ctarank() : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      // one consumer takes each stage: one arrival per warp of that consumer in every CTA of the cluster
      mbar_init(&empty[s], 4 * CLUSTER_M);
    }
    mbar_fence_init();
  }
  if constexpr (CLUSTER_M > 1) cluster_sync(); else __syncthreads();

  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int k_iters = (K + BK - 1) / BK;
  // CTAs of one cluster take the CLUSTER_M neighbouring M tiles of one "cluster tile"; a cluster
  // row that overhangs M gets zero-filled loads and skipped stores.
  const int cluster_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
  const int cluster_tiles = cluster_rows * tiles_n;
  const int first = blockIdx.x / CLUSTER_M;
  const int step = gridDim.x / CLUSTER_M;  // persistent; the grid is a multiple of CLUSTER_M
  const int n_tiles = first < cluster_tiles ? (cluster_tiles - first + step - 1) / step : 0;  // this CTA's tiles

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      tma_prefetch_desc(&tmA);
      tma_prefetch_desc(&tmB);
      int stage = 0;
      uint32_t phase = 0;
      for (int j = 0; j < n_tiles; ++j) {  // every tile, in the order the two consumers take them
        int tm, tn;
        tile_coords(first + j * step, cluster_rows, tiles_n, tm, tn);
        const int m0 = (tm * CLUSTER_M + cta_rank) * BM;
        const int n0 = tn * BN;
        for (int k = 0; k < k_iters; ++k) {
          mbar_wait(&empty[stage], phase ^ 1);
          uint8_t* sA = smem + stage * STAGE_BYTES;
          uint8_t* sB = sA + A_STAGE;
          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
#pragma unroll
          for (int kc = 0; kc < KCH; ++kc) {
            const int kx = k * BK + kc * 64;
            tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);
            if constexpr (CLUSTER_M > 1) {
              tma_load_2d_multicast(sB + kc * B_CHUNK + cta_rank * B_SLICE, &tmB, &full[stage], kx,
                                    n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);
            } else {
              tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);
            }
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = wg - 1;
    float acc[MSUB][BN / 2];
    uint32_t slab_count = 0;
    for (int j = consumer; j < n_tiles; j += 2) {
      int tm, tn;
      tile_coords(first + j * step, cluster_rows, tiles_n, tm, tn);
      const int m0 = (tm * CLUSTER_M + cta_rank) * BM;
      const int n0 = tn * BN;
      // this tile's k-blocks start at ring position j * k_iters (the other consumer's tiles fill the gaps);
      // the stage's full barrier cannot be a phase behind (the other consumer issued its whole previous tile
      // before passing the turn) nor ahead (this consumer has not freed the stage yet): parity suffices
      const uint32_t pos = static_cast<uint32_t>(j) * static_cast<uint32_t>(k_iters);
      int stage = static_cast<int>(pos % STAGES);
      uint32_t phase = (pos / STAGES) & 1;
      if (j > 0) turn_wait(consumer);
      int prev = -1;
      for (int k = 0; k < k_iters; ++k) {
        mbar_wait(&full[stage], phase);
        const uint8_t* sA = smem + stage * STAGE_BYTES;
        const uint8_t* sB = smem + stage * STAGE_BYTES + A_STAGE;
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < KCH; ++kc) {
          const uint64_t db = make_desc_sw128(sB + kc * B_CHUNK);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int ms = 0; ms < MSUB; ++ms) {
              const uint64_t da = make_desc_sw128(sA + kc * A_CHUNK + ms * 64 * 128);
              wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);
            }
          }
        }
        wgmma_commit();
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back
          if (t % 32 == 0) {
            if constexpr (CLUSTER_M > 1) {
              for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);
            } else {
              mbar_arrive(&empty[prev]);
            }
          }
        }
        prev = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      if (j + 1 < n_tiles) turn_pass(consumer);  // the other consumer's mainloop runs while this one finishes
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < MSUB; ++ms) wgmma_fence_regs(acc[ms]);
      if (prev >= 0 && t % 32 == 0) {
        if constexpr (CLUSTER_M > 1) {
          for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);
        } else {
          mbar_arrive(&empty[prev]);
        }
      }
      if constexpr (EPILOGUE_TMA) {
        // own staging (two WM x 128-byte slabs per consumer); store_tile_tma waits for the TMA store that last
        // read a slab (tma_store_wait_read) before rewriting it
        store_tile_tma(acc, epi + consumer * 2 * WM * 128, &tmC, m0, n0, consumer, slab_count);
      } else {
        store_tile_direct(acc, C, M, N, m0, n0);
      }
    }
    if constexpr (EPILOGUE_TMA) {
      if (t == 0) tma_store_wait<0>();
    }
  }
  // A CTA of a cluster must not exit while others may still multicast into it or arrive on its barriers.
  if constexpr (CLUSTER_M > 1) cluster_sync();
}
"""
