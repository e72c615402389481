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

from pydantic import BaseModel, Field

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


def default_params() -> GemmParams:
    return GemmParams()


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
    for name, values in PARAM_SPACE.items():
        if getattr(p, name) not in values:
            bad.append(f"{name}={getattr(p, name)!r} is not one of {values}")
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
    header = (
        f"// Reference GEMM rendered by workloads/solutions/gemm_template.py with {p.model_dump()}\n"
        "#include <cuda.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n"
        '#include "ptxbench/wgmma.cuh"\n#include "ptxbench/tma.cuh"\n#include "ptxbench/mbarrier.cuh"\n\n'
        "using namespace ptxbench;\n\n"
    )
    return plan_toml(p) + header + consts + "\n" + BODY.read_text()
