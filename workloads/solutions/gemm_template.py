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

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from .gemm_body import replace_function, swap
from .gemm_chunk32 import chunk32_body
from .gemm_epilogues import STMATRIX_STORE_TILE, defer_body
from .gemm_l2_hints import l2_hints_body
from .gemm_pingpong import PINGPONG_BARRIERS, pingpong_body  # noqa: F401  (PINGPONG_BARRIERS: read by tests)
from .gemm_streamk import STREAMK_HELPERS, streamk_body  # noqa: F401  (STREAMK_HELPERS: read by tests)
from .gemm_tile_order import HILBERT_TILE_COORDS
from .register_split import consumer_regs
from .template_text import uniform_index_edit, without_default_options

BODY = Path(__file__).with_name("gemm_template.cu.in")
KERNEL = "gemm_bf16_tn"
SMEM_LIMIT = 232448  # bytes of dynamic shared memory a block may opt into on sm_90a


class GemmParams(BaseModel):
    """One point of the search space (see PARAM_SPACE for the values the tuner tries)."""

    # an unknown name (a misspelt option, or one deleted after its measurement) is an error, never a silent default
    model_config = ConfigDict(extra="forbid")

    bm: int = Field(128, description="tile rows (CONSUMERS x multiples of 64)")
    bn: int = Field(256, description="tile columns = wgmma N (multiple of 16, <= 256)")
    bk: int = Field(64, description="K per pipeline stage: a multiple of 64 (128B swizzle chunks of 64 elements), or 32 "
                    "(one 64B-swizzled chunk: the same ring bytes in twice the slots, cooperative schedule only; "
                    "+1.6 to +4.9% on the main GEMM at 8 stages, gemm_sweep.md rounds 9 and 11)")
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
                           "matrices per instruction) instead of two st.shared.b32 per 8-column group; with defer, "
                           "the deferred slabs' staging, inside the k-loop")
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
    l2_hints: bool = Field(False, description="L2 eviction priorities on the TMA copies (gemm_l2_hints.py): A's loads "
                           "evict_last (the next round re-reads its strips), B's loads and C's stores evict_first")

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
        """What the consumers can take after the producer gives registers back (multiple of 8, <= 240), from the
        CTA's register pool (register_split.py)."""
        return consumer_regs(self.producer_regs, self.consumers)

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
    "bn": [56, 64, 96, 128, 160, 192, 224, 256],  # 56: 128 tiles over N = 7168 (the M = 64 decode GEMM)
    "bk": [32, 64, 128],
    "stages": [2, 3, 4, 5, 6, 7, 8],
    "consumers": [1, 2, 3],
    "persistent": [True, False],
    "group_m": [1, 4, 8, 16],
    "cluster_m": [1, 2],
    "epilogue": ["direct", "tma"],
    "producer_regs": [24, 40],
    "max_ctas": [0, 128, 120, 112],
    "defer": [False, True],  # an option (left out of dumps at False) searched since the H200 measured it (rounds 4-5)
    "l2_hints": [False, True],  # likewise since round 14 (-0.6% under defer and group_m 16)
}


# Options a point may set, not searched by builtin/tuner (its space is PARAM_SPACE) until the GPU measured them faster
# (defer has: it is in PARAM_SPACE too, its lever `overlap`): fast.cu's Hilbert tile
# order, stmatrix staging, the ping-pong schedule (CUTLASS's KernelTmaWarpSpecializedPingpong), a stream-K tail and
# a warp-uniform consumer index (on by default: measured faster, gemm_sweep.md round 2). validate() checks them.
OPTION_SPACE: dict[str, list] = {
    "order": ["grouped", "hilbert"],
    "stmatrix": [False, True],
    "schedule": ["cooperative", "pingpong"],
    "tail": ["none", "streamk"],
    "uniform": [False, True],
    "defer": [False, True],  # -1.1% / -1.2% on the main GEMM (gemm_sweep.md rounds 4-5): default_params() sets it
    "l2_hints": [False, True],  # -0.63% on the main GEMM (gemm_sweep.md round 14): default_params() sets it
}
OPTION_NAMES = ("order", "stmatrix", "schedule", "tail", "uniform", "defer", "l2_hints")  # GemmParams' serializer leaves these out at their defaults
assert set(OPTION_SPACE) == set(OPTION_NAMES)
# The options' defaults: builtin/tuner reads a searched option a dump leaves out (defer, l2_hints) at its default
OPTION_DEFAULTS: dict[str, object] = {name: GemmParams.model_fields[name].default for name in OPTION_NAMES}


def default_params() -> GemmParams:
    """The reference point of the main GEMM: GemmParams' defaults with defer=True, group_m=16 and l2_hints=True.
    defer: -1.1% / -1.2% kernel time on the main GEMM and -1.0% / -1.1% on the square one (gemm_sweep.md rounds 4-5);
    it stays off in GemmParams itself, since it needs the TMA epilogue and the cooperative schedule, which a point's
    other changes may drop. group_m 16: the 128 CTAs in flight cover 16 x 8 tiles (21 MB of A and 21 MB of B a wave
    instead of 10 + 42 MB at 8 x 16), -0.31% kernel time with defer in 5 of 5 paired evaluations, level on the square
    GEMM (gemm_sweep.md round 13). l2_hints: A's strips kept in L2 for the next round, B and C streamed, -0.63%
    kernel time in 5 of 5 paired evaluations, level on the square GEMM (round 14)."""
    return GemmParams(defer=True, group_m=16, l2_hints=True)


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
    "order": ("group_m", 16), "multicast": ("cluster_m", 2), "overlap": ("defer", True), "cache": ("l2_hints", True),
}


def _order_worth(old: int, new: int, params: dict) -> float:
    """A grouped tile order is worth 5% over the row-by-row walk (B re-read from DRAM for every tile row); from one
    grouped order to another it measured -0.1 to -0.3% on the H200 (gemm_sweep.md rounds 9 and 13)."""
    return 0.05 if old <= 1 else 0.003


# Under the power limit (the profiled SM clock under 90% of the top: the main GEMM on randn runs 1,600-1,650 of 1,980
# MHz), what a move did to the clock at the same cycles, traced on the H200 by %clock64 over %globaltimer against the
# reference (bench/results/gemm_sweep.md round 28): builtin/tuner ranks the move up or down by it.
TUNER_ENERGY: dict[str, tuple[float, str]] = {
    "cache": (+0.006, "without L2 eviction priorities the main GEMM ran the same cycles at a 0.6% lower clock "
                      "(more energy a cycle)"),
    "multicast": (-0.021, "a 2-CTA cluster multicasting B ran the main GEMM's cycles at a 2.1% lower clock (more "
                          "energy a cycle)"),
}


# Prior worths (fractions of the time) where the generic Hopper figures of tuner_rules.prior do not fit this template.
TUNER_PRIORS: dict[str, object] = {"order": _order_worth}

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
        if p.epilogue != "tma":
            bad.append("defer=True stores the packed tile through the TMA epilogue's staging: it needs epilogue='tma'")
        if p.pingpong or p.streamk:
            bad.append("defer=True stores a tile under the same consumer's next tile: it needs schedule='cooperative' "
                       "and tail='none'")
        if p.acc_regs * 3 // 2 > p.consumer_regs - 40:
            bad.append(f"defer=True keeps the packed tile ({p.acc_regs // 2} registers) beside the accumulators "
                       f"({p.acc_regs}): more than the consumers' {p.consumer_regs} allow (about 40 spare)")
    if p.l2_hints and p.pingpong:
        bad.append("l2_hints=True marks the cooperative kernel's copies: it needs schedule='cooperative'")
    if p.bn % 8 or not 16 <= p.bn <= 256:
        bad.append(f"bn={p.bn} must be a multiple of 8 in [16, 256] (wgmma N)")
    if p.bk % 64 and p.bk != 32:
        bad.append(f"bk={p.bk} must be 32 (64B swizzle) or a multiple of 64 (128B swizzle chunks)")
    if p.bk == 32 and p.pingpong:
        bad.append("bk=32 (64B-swizzled chunks) is built for the cooperative consumers' loop: it needs "
                   "schedule='cooperative'")
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
    chunk = min(p.bk, 64)  # K elements of a TMA box row: 64 (128B swizzle) or 32 (64B)
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
        f'[tmap.A_map]\ntensor = "A"\nbox = [{chunk}, {p.bm}]\nswizzle = "{2 * chunk}B"\nl2_promotion = "256B"\n\n'
        f'[tmap.B_map]\ntensor = "B"\nbox = [{chunk}, {p.bn // p.cluster_m}]\nswizzle = "{2 * chunk}B"\nl2_promotion = "256B"\n\n'
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


def body_text(p: GemmParams) -> str:
    """The kernel body for these parameters: gemm_template.cu.in with the options' functions swapped in."""
    body = BODY.read_text()
    if p.order == "hilbert":
        body = replace_function(body, "void tile_coords(", HILBERT_TILE_COORDS)
    if p.stmatrix:
        body = replace_function(body, "void store_tile_tma(", STMATRIX_STORE_TILE)
    if p.pingpong:
        body = pingpong_body(body)
    if p.streamk:
        body = streamk_body(body)
    if p.defer:
        body = defer_body(body, stmatrix=p.stmatrix)
    if p.bn % 16:  # a tile of 8-multiple width (bn = 56: its own wgmma shape in the wrapper header)
        body = swap(body, 'static_assert(BN % 16 == 0 && BN <= 256, "wgmma N");',
                    'static_assert(BN % 8 == 0 && BN <= 256, "wgmma N");')
    if p.uniform:
        body = swap(body, *uniform_index_edit("consumer"))  # the consumer's A descriptors in uniform registers
    if p.bk == 32:
        body = chunk32_body(body)
    if p.l2_hints:
        body = l2_hints_body(body)
    return body
