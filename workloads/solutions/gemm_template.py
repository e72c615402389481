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
    max_ctas: int = Field(0, description="persistent grid cap below num_sms (0 = num_sms); clusters may not all fit at once")
    # Options outside PARAM_SPACE (OPTION_SPACE: builtin/tuner does not search them until measured); at their
    # defaults the render is byte-identical to the template without them.
    order: str = Field("grouped", description="tile order: 'grouped' (GROUP_M tile rows walked column by column) or "
                       "'hilbert' (a generalized Hilbert curve over the cluster-tile grid, fast.cu's order)")
    stmatrix: bool = Field(False, description="TMA epilogue: write the swizzled staging with stmatrix.x4 (four 8x8 "
                           "matrices per instruction) instead of two st.shared.b32 per 8-column group")

    @model_serializer(mode="wrap")
    def _without_default_options(self, handler):
        """Options (OPTION_SPACE) at their defaults are left out of dumps: the default point dumps, renders and
        keys (builtin/tuner's points, recorded trajectories) exactly as before the options existed."""
        data = handler(self)
        for name in ("order", "stmatrix"):
            if data.get(name) == type(self).model_fields[name].default:
                del data[name]
        return data

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def consumer_regs(self) -> int:
        """What the consumers can take after the producer gives registers back (multiple of 8, <= 240)."""
        free = (REGS_PER_SM - 128 * self.producer_regs) // (128 * self.consumers)
        return min(240, free // 8 * 8)

    @property
    def acc_regs(self) -> int:
        return (self.bm // self.consumers // 64) * (self.bn // 2)

    @property
    def smem_bytes(self) -> int:
        stage = (self.bm + self.bn) * self.bk * 2
        epi = 2 * self.bm * 128 if self.epilogue == "tma" else 0
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
# order and stmatrix staging. validate() checks them; render() leaves the default point's text unchanged.
OPTION_SPACE: dict[str, list] = {
    "order": ["grouped", "hilbert"],
    "stmatrix": [False, True],
}
assert set(OPTION_SPACE) == {"order", "stmatrix"}  # GemmParams' serializer leaves these out at their defaults


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
    if p.bm % (64 * p.consumers):
        bad.append(f"bm={p.bm} must be a multiple of 64 x consumers ({64 * p.consumers}): each consumer runs m64 wgmmas")
    if p.bn % 16 or not 16 <= p.bn <= 256:
        bad.append(f"bn={p.bn} must be a multiple of 16 in [16, 256] (wgmma N)")
    if p.bk % 64:
        bad.append(f"bk={p.bk} must be a multiple of 64 (128B swizzle chunks)")
    if p.acc_regs > p.consumer_regs - 40:
        bad.append(f"{p.acc_regs} accumulator registers per thread do not fit the consumers' {p.consumer_regs} "
                   "(need about 40 spare): lower bm/bn or add consumers")
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


def _grid(p: GemmParams) -> str:
    c = p.cluster_m
    rows = f"cdiv(M, {p.bm})" if c == 1 else f"cdiv(cdiv(M, {p.bm}), {c}) * {c}"  # whole clusters
    tiles = f"{rows} * cdiv(N, {p.bn})"
    if not p.persistent:
        return tiles
    ctas = f"min(num_sms, {p.max_ctas})" if p.max_ctas else "num_sms"
    return f"min({ctas}, {tiles})" if c == 1 else f"min({ctas} // {c} * {c}, {tiles})"


def plan_toml(p: GemmParams) -> str:
    cluster = f"cluster = [{p.cluster_m}, 1, 1]\n" if p.cluster_m > 1 else ""
    return (
        '/* ptxbench\nlanguage = "cuda"\n\n[[launch]]\n'
        f'kernel = "{KERNEL}"\n'
        f'grid = ["{_grid(p)}", 1, 1]\n'
        f"block = [{p.threads}, 1, 1]\n"
        f"{cluster}"
        f"smem = {p.smem_bytes}\n"
        'args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K"]\n\n'
        f'[tmap.A_map]\ntensor = "A"\nbox = [64, {p.bm}]\nswizzle = "128B"\nl2_promotion = "256B"\n\n'
        f'[tmap.B_map]\ntensor = "B"\nbox = [64, {p.bn // p.cluster_m}]\nswizzle = "128B"\nl2_promotion = "256B"\n\n'
        f'[tmap.C_map]\ntensor = "C"\nbox = [64, {p.bm // p.consumers}]\nswizzle = "128B"\n'
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
    header = (  # options at their defaults are not in model_dump(): the default point's text is what it always was
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
    return body


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
