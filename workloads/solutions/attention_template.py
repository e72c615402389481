"""The Hopper attention forward's parameter space and renderer (TMA + wgmma, FlashAttention-3 layout).

`render(params)` returns one solution file (language `cuda`, plan in the header comment) built from
attention_template.cu.in: a producer warpgroup streaming K / V through a TMA + mbarrier ring and
`consumers` wgmma warpgroups of 64 query rows each, cooperative or ping-pong. A point carries the problem
it is built for (head_dim, causal, gqa: `params_for(workload)` sets them) and the searched parameters
(PARAM_SPACE). builtin/tuner searches PARAM_SPACE as it does the GEMM template's; `validate(params, shape)`
says why a combination cannot be built or cannot run a workload. The checked-in attention_fwd_wgmma.cu is
`render(default_params())`, and `fast_solution` (attention.py) renders `default_params(workload)`: each
problem's fastest measured point (TUNED), changes from its plain cooperative point (plain_params).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from .attention_softmax import EARLY_PACK, LAZY_EDITS, SPLIT_MAX, SPLIT_ROWS, lazy_rescale  # noqa: F401  (LAZY_EDITS: read by tests)
from .attention_persistent import persistent_body
from .attention_qregs import q_regs_edits
from .attention_stagger import STAGGER_EDITS
from .register_split import consumer_regs
from .template_text import replace_counted, uniform_index_edit, without_default_options

BODY = Path(__file__).with_name("attention_template.cu.in")
KERNEL = "attn_fwd_wgmma"  # + _d64 / _d96, _causal, _gqa: kernel_name()
SMEM_LIMIT = 232448  # bytes of dynamic shared memory a block may opt into on sm_90a
SPARE_REGS = 48  # what a consumer needs beyond S, P and O (addresses, softmax state, loop counters)
# More for causal + cooperative past 128 keys: ptxas 13.5 spilled 8-16 bytes at bn=160, D >= 96 (ping-pong did not).
# At 128 keys the causal points assemble clean with Q's fragments in registers too (q_regs: R237 the highest at D = 96
# and 128, tests/workloads/test_attention_q_regs.py), so the extra spare is asked past 128 keys only.
CAUSAL_COOP_SPARE = 16
# Ping-pong needs fewer: its 72 points at bn 160-192 (D = 96 / 128, plain, causal, GQA, both epilogues, producer
# registers 24 / 40) assembled clean with 32 or more to spare and spilled with C7512 at 24 (ptxas 13.5).
PINGPONG_SPARE = 32
# persistent=True (attention_persistent.py): its producer walks the tiles and spilled 8-28 bytes at 24 registers
# (ptxas 13.5, the five cooperative points); at 40 the consumers get 232 and assembled clean with S, P, O and Q's
# fragments (192) taking all but 40 of them.
PERSISTENT_PRODUCER_REGS = 40
PERSISTENT_SPARE = 40
# rescale="lazy" (its thresholds and vote) takes key tiles up to LAZY_MAX_BN: its boundary points
# (bench/attention_template_compile.py, ptxas 13.5) spilled 4-12 bytes at 160-192 keys (D = 64 bn 192 and D = 96 / 128
# bn 160 cooperative, D = 96 / 128 bn 160-176 under ping-pong, non-causal), and key tiles over 128 did not pay anyway
# (bench/results/attention_template.md, round 1); every measured lazy point has 128.
LAZY_MAX_BN = 128
PROBLEM = ("head_dim", "causal", "gqa")  # fixed by the workload, never searched


class AttnParams(BaseModel):
    """One point: the problem it is built for, then the searched parameters (see PARAM_SPACE)."""

    # an unknown name (a misspelt option, or one deleted after its measurement) is an error, never a silent default
    model_config = ConfigDict(extra="forbid")

    head_dim: int = Field(128, description="D: 64, 96 (padded to two 64-wide slabs) or 128")
    causal: bool = Field(False, description="top-left aligned mask, key j <= query i")
    gqa: bool = Field(False, description="K / V have HKV heads; query head h reads KV head h // (H // HKV)")
    consumers: int = Field(2, description="consumer warpgroups, 64 query rows each: the query tile is 64 x consumers")
    bn: int = Field(128, description="keys per K / V tile = wgmma N of S = Q K^T (multiple of 16)")
    stages: int = Field(2, description="depth of the K / V ring (each stage one K and one V tile)")
    schedule: str = Field("cooperative", description="'cooperative' (consumers issue freely) or 'pingpong' "
                                                     "(they take turns on named barriers: one's softmax under the "
                                                     "other's GEMMs)")
    lpt_group: int = Field(0, description="causal tile order: 0 = each head's longest query tiles first (2-D grid); "
                                          "g = longest first across groups of g heads (1-D grid)")
    epilogue: str = Field("direct", description="'direct' register->global stores or 'tma' (staged in the consumer's "
                                                "Q rows, TMA store)")
    producer_regs: int = Field(24, description="setmaxnreg for the producer warpgroup")
    # Options added after the first measured points (OPTION_SPACE): at their defaults a point dumps and renders
    # exactly as before they existed. Once the GPU has measured one it joins PARAM_SPACE too (all below have).
    rescale: str = Field("always", description="'always' (the running max follows every tile's and O is rescaled "
                         "each time) or 'lazy' (FlashAttention-4's conditional rescale: the max moves only when a "
                         "tile's exceeds it by more than LAZY_THRESHOLD, and a warp skips the O rescale when none "
                         "of its rows moved)")
    uniform: bool = Field(False, description="the consumer index broadcast from lane 0 (__shfl_sync), so ptxas knows it "
                          "is warp-uniform and builds the Q descriptors in uniform registers (36 -> 1 R2UR at D = 128)")
    early_pack: bool = Field(False, description="with rescale='lazy': P packed for the next P V product right after "
                             "the previous one is waited for, before the O rescale's branch, so the exponentials have "
                             "their use ahead of the branch and ptxas keeps them under that product (11 -> 44 of 66 "
                             "at D = 128)")
    split_rows: bool = Field(False, description="each row's max and sum as four independent chains joined by a two-"
                             "level tree (chains of SN / 16 + 2 instead of SN / 4): the softmax's fixed-latency waits "
                             "with only two consumer warps per SM sub-partition to hide them")
    split_max: bool = Field(False, description="split_rows' four max chains without its split sums, which cost the "
                            "exponentials' overlap with the previous P V product (44 -> 16-20 of 66 under it)")
    q_regs: bool = Field(False, description="each consumer's Q rows loaded once into registers as wgmma A fragments "
                         "(ldmatrix), S = Q K^T issued with A from registers: no Q bytes read from shared memory per "
                         "key tile (4 x D / 16 registers)")
    stagger: bool = Field(False, description="consumer 1 issues its first S once consumer 0's is done, so consumer 0's "
                          "first softmax runs under consumer 1's S instead of with the tensor pipe idle (cooperative, two "
                          "consumers)")
    persistent: bool = Field(False, description="one CTA per SM taking query tiles from an atomic counter (launch order, "
                             "so causal stays longest first); each consumer issues a tile's last P V product with the "
                             "next tile's first S and writes the epilogue under the other consumer's work (cooperative, "
                             "TMA epilogue, q_regs)")
    q_ahead: bool = Field(False, description="with persistent: the producer loads the next tile's Q as soon as the "
                          "consumers hold the current one in registers (after the tile's second key tile's loads), a "
                          "whole tile ahead, not after the tile's last loads")
    producer_fn: bool = Field(False, description="with persistent: the producer's walk compiled as a function of its "
                              "own (__noinline__), so its code does not move ptxas's schedule of the consumers' "
                              "key-tile loop")

    @model_serializer(mode="wrap")
    def _without_default_options(self, handler):
        return without_default_options(self, handler(self), OPTION_SPACE)

    @property
    def bm(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def slabs(self) -> int:
        return (self.head_dim + 63) // 64

    @property
    def consumer_regs(self) -> int:
        """What the consumers can take after the producer gives registers back (multiple of 8, <= 240), from the
        CTA's register pool (register_split.py)."""
        return consumer_regs(self.producer_regs, self.consumers)

    @property
    def live_regs(self) -> int:
        """Registers a consumer thread holds across the loop: S (bn / 2), P (bn / 4 bf16 pairs), O, and with q_regs
        Q's A fragments (head_dim / 4)."""
        return self.bn // 2 + self.bn // 4 + 64 * self.slabs // 2 + (self.head_dim // 4 if self.q_regs else 0)

    @property
    def q_bytes(self) -> int:
        return self.slabs * self.bm * 128

    @property
    def kv_bytes(self) -> int:
        return self.slabs * self.bn * 128

    @property
    def smem_bytes(self) -> int:  # alignment slack, Q (persistent: and the O staging), ring, barriers
        return 1024 + (2 if self.persistent else 1) * self.q_bytes + 2 * self.stages * self.kv_bytes + 256


PARAM_SPACE: dict[str, list] = {
    "consumers": [1, 2, 3],
    "bn": [64, 96, 128, 160, 176, 192],
    "stages": [2, 3, 4, 5, 6],
    "schedule": ["cooperative", "pingpong"],
    "lpt_group": [0, 2, 4, 8],
    "epilogue": ["direct", "tma"],
    "producer_regs": [24, 40],
    "rescale": ["always", "lazy"],  # measured in bench/attention_sweep.py rounds 4-5: searched since
    # measured faster on the H200 at some problems (rounds 6-27, OPTION_SPACE's comments and TUNED's): searched since
    "uniform": [False, True], "early_pack": [False, True], "split_rows": [False, True], "split_max": [False, True],
    "q_regs": [False, True], "stagger": [False, True], "persistent": [False, True], "q_ahead": [False, True],
    "producer_fn": [False, True],
}
# Options a point may set that were added after the first measured points: a dump leaves them out at their
# defaults and render() leaves such a point byte for byte as before; builtin/tuner searches one only once it is
# also in PARAM_SPACE (after the GPU measured it: every one below has). validate() checks them.
OPTION_SPACE: dict[str, list] = {"rescale": ["always", "lazy"],
                                  "uniform": [False, True],  # measured faster (round 6): TUNED sets it
                                  "early_pack": [False, True],  # round 8: -0.5 to -1.3%, TUNED sets it (not D = 96)
                                  "split_rows": [False, True],  # round 10: -0.7 to -1.0% at three points, TUNED sets it there
                                  "split_max": [False, True],  # rounds 11, 13: with q_regs -1.2 to -1.6% at D = 128
                                  "q_regs": [False, True],  # round 13: -0.6 to -1.4% at the causal points, in TUNED
                                  "stagger": [False, True],  # round 19: -0.1 to -0.7% at the five cooperative points, in TUNED
                                  "persistent": [False, True],  # rounds 21-22: level alone, in TUNED with q_ahead
                                  "q_ahead": [False, True],  # round 22: -0.4 to -1.2% at the cooperative points, in TUNED
                                  "producer_fn": [False, True]}  # round 24: -0.2 to -1.2% at the five points, in TUNED
# Each option's default (what a dump leaves out): builtin/tuner reads an option a point does not carry as this.
OPTION_DEFAULTS: dict[str, Any] = {name: AttnParams.model_fields[name].default for name in OPTION_SPACE}
# diag_half (consumer 0's causal diagonal tile halved) and dead_tile (D = 64 causal's wholly masked tile skipped)
# measured +1.4-2.3% and +9.5% slower (rounds 12-14) and were deleted; so was tail_split (the last wave's tiles cut
# over their key tiles, merged by each tile's last piece: +0.7 to +3.6%, round 16) and exp_poly (one exponential in 8
# or 4 on the FMA pipe as 2^n times a cubic, FlashAttention-4's split: +3.2 to +8.0%, round 17); store_wait="read"
# (the TMA epilogue's last wait for O's staging rows to be read, not for its writes) measured level (-0.1 to +0.2%,
# round 18) and was deleted too.
# Round 9's persistent=True (one CTA per SM walking the query tiles in a fixed order, each tile's start and end still
# alone) lost at every point (attention_template.md) and was deleted; round 21's persistent is another design
# (attention_persistent.py). prefetch_next (the next wave's Q and first K / V tiles prefetched into L2 by the
# producer) measured level, -0.7 to +0.5% (round 20), and was deleted.
HEAD_DIMS = (64, 96, 128)
# The measured reference kernels (bench/results/attention_wgmma.md) per head dim: D = 64's tiles are half as
# long to compute, so its ring is deeper.
DEFAULT_STAGES = {64: 4, 96: 2, 128: 2}


# builtin/tuner (agent/models/tuner_rules.py): role -> (parameter, favoured value or None). The roles key_tile,
# schedule, lpt and producer are the attention forward's; warps, ring and epilogue share the GEMM's rules. lpt's goal is
# 8 heads: round 25 measured 4 instead of 8 +0.8% at D = 128 causal under the walk, and the causal TUNED points use 8.
TUNER_LEVERS: dict[str, tuple[str, Any]] = {
    "warps": ("consumers", None), "key_tile": ("bn", None), "schedule": ("schedule", "pingpong"),
    "ring": ("stages", None), "epilogue": ("epilogue", "tma"), "lpt": ("lpt_group", 8),
    "producer": ("producer_regs", None), "rescale": ("rescale", "lazy"), "uniform": ("uniform", True),
    "early_pack": ("early_pack", True), "split_rows": ("split_rows", True), "split_max": ("split_max", True),
    "q_regs": ("q_regs", True), "stagger": ("stagger", True),
}
# No TUNER_ENERGY (builtin/tuner's energy rule): under Nsight Compute on randn, each move taken back from the D = 128
# reference moved the SM clock only with its cycles (0.15-0.36 of them, the same sign), none at the same cycles
# (bench/results/attention_template.md round 28, bench/attention_energy.py).
# Regions of the rendered file the profile's hot lines are matched to (substrings of the source lines).
TUNER_LINES: dict[str, tuple[str, ...]] = {
    "stage_wait": ("mbar_wait(&w.fullK", "mbar_wait(&w.fullV", "mbar_wait(&fullK", "mbar_wait(&fullV"),
    "softmax": ("ex2(fmaf(", "ex2(m0 - n0)", "ex2(m1 - n1)", "__shfl_xor_sync(0xffffffffu, x", "fmaxf(x0, fmaxf(",
                "fmaxf(x1, fmaxf(", "sum0 += s[j]", "sum1 += s[j"),
    "epilogue": ("*reinterpret_cast<uint32_t*>(o0", "*reinterpret_cast<uint32_t*>(o1",
                 "*reinterpret_cast<uint32_t*>(dst", "tma_store_wait<0>()"),
    "mma_issue": ("issue_qk(", "issue_pv(", "wgmma_m64k16_bf16<BN>", "wgmma_rs(o, p["),
}


def _consumers_worth(old: int, new: int, params: Mapping[str, Any]) -> float:
    return 0.10 if old <= 1 else 0.003  # one 64-row consumer cannot keep the tensor pipe busy; a third splits registers


def _key_tile_worth(old: int, new: int, params: Mapping[str, Any]) -> float:
    return 0.10 if new <= 128 else 0.005  # up to 128 keys a tile: the measured default; wider ones predicted level or worse


# What a move is worth before any evidence (fraction of the time), measured on the H200 by bench/attention_sweep.py
# (bench/results/attention_template.md, kernel times): the weak point 0.648 of the plain point's speed, 64-key tiles
# -14%, the TMA-store epilogue +0.5-2%, ping-pong -1.7% at D = 128 and -5% at D = 64 with two consumers (+0.5%
# causal), a third stage level at D = 128, longest first across 4-8 heads +0.4-1% (causal). Ping-pong keeps a
# small worth: it pays where the softmax's share is large (causal GQA, D = 64 with a third consumer).
def _schedule_worth(old: str, new: str, params: Mapping[str, Any]) -> float:
    # ping-pong measured slower with two consumers on every non-causal problem (D = 128 +1.7%, D = 96 +1.5%, D = 64
    # +5%): worth nothing there; 1% where it paid or was level (causal, GQA causal, D = 64 with a third consumer)
    return 0.01 if params.get("causal") or params.get("consumers", 2) >= 3 else 0.0


def _rescale_worth(old: str, new: str, params: Mapping[str, Any]) -> float:
    # rounds 4-5 (kernel time): lazy -0.7% to -1.8% at every D >= 96, +3.5% / +4.3% at D = 64 (three consumers)
    return 0.01 if params.get("head_dim", 128) >= 96 else 0.0


# The options measured after rounds 4-5 (kernel time, the same point without the option; TUNED's comments). Each is
# worth what it measured where it measured faster, nothing where it was level or slower.
def _uniform_worth(old: bool, new: bool, params: Mapping[str, Any]) -> float:
    # rounds 6-7: D = 128 -2.0%, D = 96 -2.1%, causal -1.2%, D = 96 causal -2.5%, GQA -2.2%; +1.1% under GQA causal's
    # ping-pong; D = 64 not measured
    if params.get("schedule") == "pingpong" or params.get("head_dim", 128) < 96:
        return 0.0
    return 0.012 if params.get("causal") and params.get("head_dim", 128) == 128 else 0.02


def _early_pack_worth(old: bool, new: bool, params: Mapping[str, Any]) -> float:
    # round 8: -0.5 to -1.3% at D = 128 and the causal / GQA points, none at D = 96 on one tile; -0.2% there under the
    # walk (round 27). It needs the lazy rescale, worth nothing at D = 64.
    d = params.get("head_dim", 128)
    if d < 96:
        return 0.0
    if d == 96 and not params.get("causal"):
        return 0.002 if params.get("persistent") else 0.0
    return 0.009


def _split_rows_worth(old: bool, new: bool, params: Mapping[str, Any]) -> float:
    # round 10: -0.7% D = 128 causal, -1.0% D = 96 causal and GQA; +1.1% D = 128, +0.8% D = 96, +0.7% GQA causal, level
    # at D = 64. Under the walk (rounds 25-26) D = 128 gains it (-1.1 to -1.3% against split_max) and its causal point
    # prefers split_max (split_rows +0.8%).
    d, causal, gqa, walk = (params.get("head_dim", 128), bool(params.get("causal")), bool(params.get("gqa")),
                            bool(params.get("persistent")))
    if d == 64 or (gqa and causal) or (d == 96 and not causal):
        return 0.0
    if d == 128 and not causal and not gqa:
        return 0.012 if walk else 0.0
    if d == 128 and causal:
        return 0.0 if walk else 0.007
    return 0.01  # D = 96 causal, GQA


def _split_max_worth(old: bool, new: bool, params: Mapping[str, Any]) -> float:
    # rounds 11 and 13: with q_regs -1.2 to -1.6% at D = 128 (neither gained alone); under the walk the causal point
    # keeps it (-0.8% against split_rows) and D = 128 takes split_rows instead; D = 96 and GQA +0.7 to +1.0%
    if params.get("head_dim", 128) != 128 or params.get("gqa") or not params.get("q_regs"):
        return 0.0
    return 0.003 if params.get("persistent") and not params.get("causal") else 0.012


def _q_regs_worth(old: bool, new: bool, params: Mapping[str, Any]) -> float:
    # round 13: causal -1.3 / -1.4% (D = 128), -0.6% (D = 96), -0.8 / -0.9% (D = 64); -1.2 to -1.6% with split_max at
    # D = 128; level or +0.3-0.8% alone at D = 128 and 96, GQA and GQA causal (the walk, which needs it, sets it too)
    if params.get("gqa"):
        return 0.0
    if params.get("causal"):
        return 0.01
    return 0.014 if params.get("head_dim", 128) == 128 and params.get("split_max") else 0.0


def _walk_worth(old: Any, new: Any, params: Mapping[str, Any]) -> float:
    # round 22 (the walk with q_ahead against the same point without it) plus round 24 (producer_fn against the walk
    # inline): D = 128 -0.4 / -0.23%, causal -1.2 / -1.21%, D = 96 -0.7 / -0.66%, D = 96 causal -0.9 / -1.04%, GQA
    # -1.0 / -0.38%; the walk alone was level (rounds 21-22). Not measured at D = 64 or GQA causal (ping-pong points).
    return {(128, False, False): 0.006, (128, True, False): 0.024, (96, False, False): 0.014,
            (96, True, False): 0.019, (128, False, True): 0.014}.get(
        (params.get("head_dim", 128), bool(params.get("causal")), bool(params.get("gqa"))), 0.0)


TUNER_PRIORS: dict[str, Any] = {
    "warps": _consumers_worth, "key_tile": _key_tile_worth, "schedule": _schedule_worth, "epilogue": 0.02, "ring": 0.005,
    "lpt": 0.007, "producer": 0.002, "rescale": _rescale_worth, "uniform": _uniform_worth,
    "early_pack": _early_pack_worth, "split_rows": _split_rows_worth, "split_max": _split_max_worth,
    "q_regs": _q_regs_worth, "stagger": 0.004,  # stagger: round 19, -0.1 to -0.7% at the five cooperative points
    "persistent": _walk_worth,
}
def _consumers_words(params: Mapping[str, Any]) -> str:
    n = int(params["consumers"])
    return (f"{n} consumer warpgroup{'s' if n > 1 else ''} (a {64 * n}-row query tile: each K / V tile feeds "
            f"{64 * n} query rows of math)")


# What a move is, in the tuner's reply: a phrase, or a function of the point moved to (the count a move sets).
TUNER_WORDS: dict[str, Any] = {
    "warps": _consumers_words,
    "key_tile": "a longer key tile (each wgmma of S = Q K^T and O += P V runs longer per barrier round-trip)",
    "schedule": "the ping-pong schedule (one consumer's softmax runs under the other's GEMMs)",
    "ring": "a deeper K / V ring (more TMA loads in flight ahead of the math)",
    "epilogue": "the TMA-store epilogue (O staged in shared memory, one bulk store per slab)",
    "lpt": "longest query tiles first across groups of heads (causal rows differ in length; the heads in flight "
           "share K / V in L2)",
    "producer": "a different producer register budget (what the consumers can take changes with it)",
    "rescale": "the lazy rescale (the running max moves only when a tile's exceeds it by more than 8 in log2 units; a "
               "warp skips the O rescale when none of its rows moved)",
    "uniform": "the consumer index broadcast from lane 0 (warp-uniform to ptxas: the Q descriptors in uniform "
               "registers, not rebuilt by R2UR before each wgmma)",
    "early_pack": "P packed ahead of the lazy rescale's branch (the exponentials run under the previous P V product)",
    "split_rows": "each row's max and sum as four independent chains (shorter fixed-latency chains in the softmax)",
    "split_max": "each row's max as four independent chains (the sums kept whole, so the exponentials keep their "
                 "overlap with the P V product)",
    "q_regs": "Q's rows held in registers as wgmma A fragments (S = Q K^T reads no Q bytes from shared memory per key "
              "tile)",
    "stagger": "consumer 1's first S issued after consumer 0's (the first softmax runs under tensor work)",
    "persistent": "the persistent walk as one move (one CTA per SM taking tiles from a counter, each tile's last P V "
                  "under the next tile's first S, the epilogue under the other consumer's work; the producer with 40 "
                  "registers, loading the next tile's Q a tile ahead, compiled as a function of its own): its parts "
                  "only paid together",
}


def problem_of(workload: Any | None) -> dict[str, Any]:
    """The problem a point is built for, from a workload (head dim, causal, GQA; empty without one)."""
    if workload is None:
        return {}
    sym = workload.symbols
    return {"head_dim": int(sym["D"]), "causal": bool(workload.causal), "gqa": "HKV" in sym}


# Each problem's fastest point on the H200, as changes from plain_params: (head_dim, causal, gqa) -> changes.
# Chosen by the kernel's own median time, averaged over bench/attention_sweep.py's rounds 1-3 (2026-12-01; within
# 0.5% the point measured more often): cuDNN's time moved 4.5-8% between points of one workload while the kernels'
# repeated within 1.5%, so the speedups of different points differ by more than the kernels do
# (bench/results/attention_template.md). Comments: mean kernel ms, mean speedup; (r4) / (r5): rounds 4 and 5, where
# rescale="lazy" beat the same point without it by kernel time at every D >= 96 (-0.7% to -1.8%: D = 128 twice, causal,
# D = 96 and its causal, GQA and GQA causal) and lost at D = 64 (+3.5%, causal +4.3%), which keeps it off there.
# (r6) / (r7): uniform=True beat the same lazy point by kernel time: D = 128 -2.0%, D = 96 -2.1%, causal -1.2% (round
# 6), D = 96 causal -2.5%, GQA -2.2% (round 7); it lost 1.1% under GQA causal's ping-pong, which keeps the plain index.
# (r10): split_rows beat the same point by kernel time at D = 128 causal (-0.7%, twice), D = 96 causal (-1.0%) and GQA
# (-1.0%, twice); it lost at D = 128 (+1.1%, twice), D = 96 (+0.8%) and GQA causal (+0.7%, twice), level at D = 64.
# (r13): q_regs (Q's A fragments in registers) beat the same point by kernel time at D = 128 causal (-1.3%, -1.4%), D = 96
# causal (-0.6%, twice) and D = 64 causal (-0.8%, -0.9%), and at D = 128 with split_max (-1.2%, -1.6%), where neither
# gained alone; level or +0.3-0.8% at D = 128 and D = 96 alone, GQA and GQA causal, which keep their points.
# Unlisted problems keep the plain point.
# (r22): persistent=True with q_ahead (one CTA per SM walking the tiles from an atomic counter, the next tile's Q loaded
# a tile ahead) beat the same point without the walk by kernel time at the five cooperative points: D = 128 -0.4%,
# causal -1.2%, D = 96 -0.7%, D = 96 causal -0.9%, GQA -1.0% (persistent alone level: rounds 21-22); it needs q_regs and
# 40 producer registers, which the D = 96 and GQA points gain with it (q_regs: True there). WALK: the walk's changes.
# (r24): producer_fn, the walk compiled as a function of its own, beat the same point with the walk inline at all five:
# D = 128 -0.23%, causal -1.21%, D = 96 -0.66%, D = 96 causal -1.04%, GQA -0.38% (both orders); it also gives D = 128's
# key-tile loop back the 46 exponentials under the P V product that q_ahead's inline producer cost it (17).
# (r25-26): under the walk the splits change places. D = 128 with split_rows for split_max -1.14% / -1.33%, causal with
# split_max for split_rows -0.85% / -0.80% (rounds 25 and 26, both orders); at D = 96 (neither: +0.8% split_rows, +1.0%
# split_max), D = 96 causal and GQA (split_max for split_rows: +0.7%, +1.0%) the points stay. The count of exponentials
# under the P V product (D = 128: 15 with split_rows, 46 with split_max) no longer predicts which is faster.
# (r27): early_pack, off at D = 96 since round 8, beat it there under the walk by -0.20% (both orders); the eager
# rescale lost to the lazy one by 2.75% at D = 128 and 1.33% causal.
WALK = {"persistent": True, "producer_regs": 40, "q_ahead": True, "producer_fn": True}
# builtin/tuner: moves that set several parameters at once (role -> values), for changes that measured faster only as a
# whole; validate() says what else a point needs (the walk: q_regs, the TMA epilogue), which the move's repair sets.
TUNER_BUNDLES: dict[str, dict[str, Any]] = {"persistent": WALK}
TUNED: dict[tuple[int, bool, bool], dict[str, Any]] = {
    (128, False, False): {"epilogue": "tma", "rescale": "lazy", "uniform": True,
                          "early_pack": True, "split_rows": True, "q_regs": True,
                          "stagger": True, **WALK},                                           # 2.189 ms, 1.111x (r26)
    (128, True, False): {"epilogue": "tma", "lpt_group": 8, "rescale": "lazy", "uniform": True,
                         "early_pack": True, "split_max": True, "q_regs": True,
                         "stagger": True, **WALK},                                           # 1.213 ms, 1.116x (r26)
    (64, False, False): {"consumers": 3, "schedule": "pingpong", "epilogue": "tma"},         # 1.533 ms, 1.165x
    (64, True, False): {"consumers": 3, "bn": 96, "schedule": "pingpong", "epilogue": "tma",
                        "lpt_group": 8, "q_regs": True},                                     # -0.8% (r13)
    (96, False, False): {"epilogue": "tma", "rescale": "lazy", "uniform": True, "early_pack": True,
                         "stagger": True, "q_regs": True, **WALK},                            # 2.016 ms, 1.17x (r27)
    (96, True, False): {"epilogue": "tma", "lpt_group": 8, "rescale": "lazy", "uniform": True,
                        "early_pack": True, "split_rows": True, "q_regs": True,
                        "stagger": True, **WALK},                                            # 1.101 ms, 1.177x (r24)
    (128, False, True): {"epilogue": "tma", "rescale": "lazy", "uniform": True,
                         "early_pack": True, "split_rows": True, "stagger": True, "q_regs": True,
                         **WALK},                                                            # 1.470 ms, 1.110x (r24)
    (128, True, True): {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4,
                        "rescale": "lazy"},                                                  # 0.872 ms, 1.069x (r5)
}


def single_tile(params: AttnParams) -> AttnParams:
    """A point without the persistent walk (WALK): one CTA per query tile, as every point was before round 22. The
    key-tile loop's own options are studied on it (their tests read its SASS)."""
    return params.model_copy(update={name: AttnParams.model_fields[name].default for name in WALK})


def plain_params(workload: Any | None = None) -> AttnParams:
    """The plain point of a problem: cooperative, 128 x 128 tiles, direct stores (the sweep's base)."""
    prob = problem_of(workload)
    return AttnParams(**prob, stages=DEFAULT_STAGES[prob.get("head_dim", 128)])


def default_params(workload: Any | None = None) -> AttnParams:
    """The reference point for a workload: its problem's TUNED point (without a workload: mha_fwd_d128's, the
    checked-in file)."""
    plain = plain_params(workload)
    return plain.model_copy(update=TUNED.get((plain.head_dim, plain.causal, plain.gqa), {}))


def weak_params(workload: Any | None = None) -> AttnParams:
    """A deliberately poor point for a tuner to climb from: one 64-row consumer, 64-key tiles, a 2-deep ring."""
    return AttnParams(**problem_of(workload), consumers=1, bn=64, stages=2)


def params_for(workload: Any, **changes: Any) -> AttnParams:
    """plain_params(workload) with some searched parameters changed (the sweep's points are written this way)."""
    return plain_params(workload).model_copy(update=changes)


def _coerce(params: AttnParams | Mapping[str, Any]) -> AttnParams:
    return params if isinstance(params, AttnParams) else AttnParams(**params)


def _shape_problems(p: AttnParams, shape: Any) -> list[str]:
    """What a workload (or its symbols) asks that this build cannot do."""
    sym = shape.symbols if hasattr(shape, "symbols") else shape
    bad: list[str] = []
    s, d = int(sym.get("S", 0)), int(sym.get("D", 0))
    if d != p.head_dim:
        bad.append(f"the workload's D={d} is not this build's head_dim={p.head_dim}")
    if s <= 0 or s % 64:
        bad.append(f"S={s} must be a positive multiple of 64 (each consumer's 64 query rows lie wholly inside S)")
    elif p.bn & (p.bn - 1) == 0 and s % p.bn:
        bad.append(f"S={s} must be a multiple of bn={p.bn} (a power-of-two key tile has no masked tail step)")
    if ("HKV" in sym) != p.gqa:
        bad.append(f"gqa={p.gqa} does not match the workload ({'GQA' if 'HKV' in sym else 'no GQA'})")
    elif p.gqa and (int(sym["HKV"]) < 1 or int(sym["H"]) % int(sym["HKV"])):
        bad.append(f"H={sym['H']} must be a multiple of HKV={sym['HKV']}")
    if hasattr(shape, "causal") and bool(shape.causal) != p.causal:
        bad.append(f"causal={p.causal} does not match the workload")
    return bad


def space_problems(point: BaseModel, space: dict[str, list], head_dims: tuple[int, ...]) -> list[str]:
    """A point's values outside its template's space, and a head dim the kernels do not have (the attention
    templates share this)."""
    bad = [f"{name}={getattr(point, name)!r} is not one of {values}" for name, values in space.items()
           if getattr(point, name) not in values]
    if point.head_dim not in head_dims:
        bad.append(f"head_dim={point.head_dim} is not one of {list(head_dims)}")
    return bad


def validate(params: AttnParams | Mapping[str, Any], shape: Any = None) -> list[str]:
    """Reasons this combination cannot be built or run (empty when it can). `shape`: a Workload or its symbols."""
    p = _coerce(params)
    bad = space_problems(p, PARAM_SPACE | OPTION_SPACE, HEAD_DIMS)
    if p.bn % 16 or not 16 <= p.bn <= 256:
        bad.append(f"bn={p.bn} must be a multiple of 16 in [16, 256] (wgmma N, TMA box)")
    if p.schedule == "pingpong" and p.consumers < 2:
        bad.append("ping-pong needs at least 2 consumers to take turns")
    if p.lpt_group and not p.causal:
        bad.append(f"lpt_group={p.lpt_group} orders causal tiles by length; without causal every tile is as long")
    spare = (PINGPONG_SPARE if p.schedule == "pingpong" else PERSISTENT_SPARE if p.persistent and p.bn <= 128 else
             SPARE_REGS + (CAUSAL_COOP_SPARE if p.causal and p.bn > 128 else 0))
    if p.rescale != "always" and p.bn > LAZY_MAX_BN:
        bad.append(f"rescale={p.rescale} is built for key tiles up to {LAZY_MAX_BN} keys (bn={p.bn}: the lazy "
                   "thresholds and vote spilled registers at 160-192 keys)")
    if p.split_max and p.split_rows:
        bad.append("split_max is split_rows without its split sums: set one of them")
    if p.early_pack and p.rescale != "lazy":
        bad.append("early_pack moves P's packing ahead of the lazy rescale's branch; without rescale='lazy' there is "
                   "no branch (the exponentials already run under the P V product)")
    if p.stagger and (p.schedule != "cooperative" or p.consumers != 2):
        bad.append("stagger offsets the second of two cooperative consumers (ping-pong's turns already order them)")
    if p.live_regs > p.consumer_regs - spare:
        bad.append(f"S, P and O take {p.live_regs} registers per consumer thread, the consumers have "
                   f"{p.consumer_regs} (about {spare} must stay spare): a smaller bn, or fewer consumers")
    if p.smem_bytes > SMEM_LIMIT:
        bad.append(f"needs {p.smem_bytes} bytes of shared memory, the limit is {SMEM_LIMIT}: fewer stages or a smaller bn")
    if 1 + 4 * p.stages > 32 or (p.persistent and 2 + 4 * p.stages >= 32):
        bad.append(f"stages={p.stages}: the mbarriers (1 + 4 x stages; persistent 2 + 4 x stages and the tile index) "
                   "must fit 256 bytes")
    if p.persistent and (p.schedule != "cooperative" or p.epilogue != "tma" or not p.q_regs):
        bad.append("persistent=True is built for the cooperative schedule, the TMA epilogue (O staged in a buffer of "
                   "its own) and q_regs (Q's buffer freed once its fragments are in registers): set all three")
    if p.producer_fn and not p.persistent:
        bad.append("producer_fn=True compiles persistent=True's producer walk as a function: set persistent=True")
    if p.q_ahead and not p.persistent:
        bad.append("q_ahead=True is a schedule of persistent=True's producer: set persistent=True")
    if p.persistent and p.producer_regs < PERSISTENT_PRODUCER_REGS:
        bad.append(f"persistent=True's producer walks the tiles: it needs producer_regs={PERSISTENT_PRODUCER_REGS} "
                   f"(it spilled at {p.producer_regs})")
    if shape is not None:
        bad += _shape_problems(p, shape)
    return bad


def kernel_name(p: AttnParams) -> str:
    """The entry point's name says the problem it was built for (D = 128 and plain attention unmarked)."""
    dim = "" if p.head_dim == 128 else f"_d{p.head_dim}"
    return KERNEL + dim + ("_causal" if p.causal else "") + ("_gqa" if p.gqa else "")


def _grid(p: AttnParams) -> str:
    if p.persistent:
        return f'grid = ["min(num_sms, cdiv(S, {p.bm}) * B * H)"]  # persistent: one CTA per SM, tiles from a counter'
    if p.causal and p.lpt_group:
        return f'grid = ["cdiv(S, {p.bm}) * B * H"]  # longest first across groups of {p.lpt_group} heads'
    return f'grid = ["cdiv(S, {p.bm})", "B * H"]'


def plan_toml(p: AttnParams) -> str:
    kv_rows = "B * HKV * S" if p.gqa else "B * H * S"
    args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map"] + (["tmap:O_map"] if p.epilogue == "tma" else [])
    args += ["O", "LSE", "i32:S", "i32:D", "f32:scale"] + (["i32:H // HKV"] if p.gqa else [])
    args += ["i32:B * H", "scratch:tile_counter"] if p.persistent else []
    maps = [("Q", "Q", "B * H * S", p.bm), ("K", "K", kv_rows, p.bn), ("V", "V", kv_rows, p.bn)]
    if p.epilogue == "tma":
        maps.append(("O", "O", "B * H * S", 64))  # one consumer's 64 rows x one 64-wide d slab
    tmaps = "".join(
        f'\n[tmap.{name}_map]\ntensor = "{tensor}"\ndims = ["D", "{rows}"]\nbox = [64, {box}]\nswizzle = "128B"\n'
        + ('l2_promotion = "256B"\n' if name != "O" else "")
        for name, tensor, rows, box in maps)
    return (
        '/* ptxbench\nlanguage = "cuda"\n\n[[launch]]\n'
        f'kernel = "{kernel_name(p)}"\n'
        f"{_grid(p)}\n"
        f"block = [{p.threads}]\n"
        + (f'smem = "1024 + {p.q_bytes} * 2 + {p.kv_bytes} * {2 * p.stages} + 256"  '
           f"# 1 KiB alignment slack, Q, O staging, {p.stages} x (K, V) tiles, mbarriers and the tile index\n"
           if p.persistent else
           f'smem = "1024 + {p.q_bytes} + {p.kv_bytes} * {2 * p.stages} + 256"  '
           f"# 1 KiB alignment slack, Q, {p.stages} x (K, V) tiles, mbarriers\n")
        + f"args = [{', '.join(chr(34) + a + chr(34) for a in args)}]\n"
        f"{tmaps}"
        + ('\n[scratch.tile_counter]  # tiles handed out past the first gridDim.x (zeroed before every call)\n'
           'dtype = "int32"\nshape = [1]\nzero = true\n' if p.persistent else "")
        + "*/\n"
    )


def _entry(p: AttnParams) -> str:
    """The kernel's entry point: its parameters follow the plan's args."""
    o_map = "const __grid_constant__ CUtensorMap tmO, " if p.epilogue == "tma" else ""
    group = ", int group" if p.gqa else ""
    walk = ", int BH, int* __restrict__ tile_counter" if p.persistent else ""
    return (
        f"\n// The entry point the plan launches.\nextern \"C\" __global__ void __launch_bounds__({p.threads}, 1)\n"
        f"{kernel_name(p)}(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,\n"
        f"    const __grid_constant__ CUtensorMap tmV, {o_map}__nv_bfloat16* __restrict__ O, float* __restrict__ LSE,\n"
        f"    int S, int D, float scale{group}{walk}) {{\n"
        f"  attn_fwd(&tmQ, &tmK, &tmV, {'&tmO' if o_map else 'nullptr'}, O, LSE, S, D, scale, {'group' if group else '1'}"
        f"{', BH, tile_counter' if walk else ''});\n"
        "}\n"
    )


def render(params: AttnParams | Mapping[str, Any]) -> str:
    """The complete solution file for these parameters (raises ValueError when validate() objects)."""
    p = _coerce(params)
    problems = validate(p)
    if problems:
        raise ValueError("; ".join(problems))
    b = lambda v: str(v).lower()  # noqa: E731
    consts = (
        f"constexpr int HD = {p.head_dim};\nconstexpr bool CAUSAL = {b(p.causal)};\nconstexpr bool GQA = {b(p.gqa)};\n"
        f"constexpr int CONSUMERS = {p.consumers};\nconstexpr int BN = {p.bn};\nconstexpr int STAGES = {p.stages};\n"
        f"constexpr bool PINGPONG = {b(p.schedule == 'pingpong')};\nconstexpr int LPT_GROUP = {p.lpt_group};\n"
        f"constexpr bool EPILOGUE_TMA = {b(p.epilogue == 'tma')};\n"
        f"constexpr int PRODUCER_REGS = {p.producer_regs};\nconstexpr int CONSUMER_REGS = {p.consumer_regs};\n"
    )
    header = (
        f"// Hopper attention forward rendered by workloads/solutions/attention_template.py with {p.model_dump()}\n"
        "#include <cuda.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n"
        '#include "ptxbench/wgmma.cuh"\n#include "ptxbench/tma.cuh"\n#include "ptxbench/mbarrier.cuh"\n\n'
        "using namespace ptxbench;  // mbar_*, tma_*, make_desc_sw128, wgmma_* (prompts/include/ptxbench)\n\n"
    )
    body = BODY.read_text()
    if p.rescale != "always":
        body = lazy_rescale(body)
    if p.early_pack:  # P packed before the lazy rescale's branch
        for old, new in EARLY_PACK:
            body = replace_counted(body, old, new, "attention_template.cu.in (early_pack)")
    if p.split_rows:  # the row max and sum as four chains each
        for old, new in SPLIT_ROWS:
            body = replace_counted(body, old, new, "attention_template.cu.in (split_rows)")
    if p.split_max:  # the row max alone as four chains
        for old, new in SPLIT_MAX:
            body = replace_counted(body, old, new, "attention_template.cu.in (split_max)")
    if p.q_regs:  # Q's A fragments in registers, S by register-A wgmma
        for old, new in q_regs_edits(p.bn):
            body = replace_counted(body, old, new, "attention_template.cu.in (q_regs)")
    if p.uniform:  # the consumer's Q descriptors in uniform registers
        body = replace_counted(body, *uniform_index_edit("c"), "attention_template.cu.in (uniform)")
    if p.stagger:  # consumer 1's first S after consumer 0's
        for old, new in STAGGER_EDITS:
            body = replace_counted(body, old, new, "attention_template.cu.in (stagger)")
    if p.persistent:  # last: its kernel replaces attn_fwd as the options above left it
        body = persistent_body(body, p)
    return plan_toml(p) + header + consts + "\n" + body + _entry(p)
