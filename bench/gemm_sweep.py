"""Points of the reference GEMM's template (workloads/solutions/gemm_template.py) through the real evaluator on a
GPU: status, speedup over cuBLAS with its interval, next to the prediction written before the run.

The main GEMM first (points aimed at 1.03x cuBLAS: the ping-pong schedule, whose consumers each own whole
tiles so one's epilogue runs under the other's mainloop; 2-CTA clusters with B multicast, Hilbert tile order,
stmatrix staging, ring depth, group size), then the decode GEMMs (M = 64, 128: the default 128 x 256 tile
leaves 28 tiles for 132 SMs) and the square 4096 GEMM. Every point is compiled first, in parallel, through the
evaluator's own compile path (so the timed loop only hits the compile cache); an evaluation costs about 3 s
(main GEMM) or 1-2 s (the others) with profile_on_pass=False. Nothing new starts after --deadline; a point
that uses an option of a point that TIMED OUT is skipped. JSON is rewritten after every point.

    source bench/gpu_env.sh && python3 bench/gemm_sweep.py OUT.json [--deadline 400] [--only SUBSTRING]
    python3 bench/gemm_sweep.py --dry-run [--only SUBSTRING]   # CPU: render, validate, compile, resources
    ... [--round 2]                                            # round 2's points (the uniform descriptors)

The template's only split-K is the stream-K tail (tail="streamk": the last partial wave's k-blocks split over all
CTAs; with fewer tiles than SMs, as in the decode shapes, every tile is split). Results: bench/results/gemm_sweep.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import time

MAIN = "gemm_bf16_m8192_n7168_k5120"
M64 = "gemm_bf16_m64_n7168_k5120"
M128 = "gemm_bf16_m128_n7168_k5120"
SQ = "gemm_bf16_m4096_n4096_k4096"
C2 = {"cluster_m": 2}
HIL = {"order": "hilbert"}
STM = {"stmatrix": True}
PP = {"schedule": "pingpong", "bn": 128, "stages": 5}  # ping-pong, 128 x 128 per consumer (2 x m64n128: 128 regs)
PP64 = {"schedule": "pingpong", "bm": 64, "bn": 256, "stages": 4}  # ping-pong, 64 x 256 per consumer (m64n256)
SK = {"tail": "streamk"}  # stream-K tail: full waves one tile per CTA, the rest's k-blocks split over all CTAs

# (workload, changes from default_params(), predicted speedup over cuBLAS, why). Predictions made before any of
# these ran; the default point measured 0.984-0.987x on the main GEMM (bench/results/timing_integrity.md).
POINTS: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 0.985, "control: the checked-in reference"),
    # ping-pong (2026-12-01, predicted before any run): 3584 tiles of 128 x 128 = 27.15 per CTA -> 28, the same
    # 3% tail as 13.58 -> 14; the epilogue (about 3%) hides under the other consumer's mainloop. Without the
    # cluster a 128 x 128 tile moves 33% more bytes L2 -> SMEM per MAC than 128 x 256 (32 KB vs 48 KB per
    # k-block for half the MACs); B multicast (cluster_m=2) brings it back to the cooperative tile's 24 KB/MMAC.
    (MAIN, PP | C2 | STM, 1.025, "ping-pong 128x128 + B multicast + stmatrix: epilogue hidden, cooperative's L2 "
                                 "bytes per MAC"),
    (MAIN, PP | C2, 1.02, "ping-pong 128x128 + B multicast"),
    (MAIN, PP, 1.0, "ping-pong 128x128 alone: the hidden epilogue (+3%) against 33% more L2 -> SMEM traffic"),
    (MAIN, PP | STM, 1.005, "ping-pong 128x128 + stmatrix, no cluster"),
    (MAIN, PP | C2 | STM | HIL, 1.025, "ping-pong + cluster + stmatrix + Hilbert over the 32 x 56 cluster tiles"),
    (MAIN, PP | C2 | STM | {"stages": 4}, 1.015, "ping-pong + cluster + stmatrix, a 4-deep ring (160 -> 128 KB)"),
    (MAIN, PP | C2 | {"epilogue": "direct", "stages": 7}, 1.015, "ping-pong + cluster, direct stores (hidden "
                                                                "anyway) for a 7-deep ring"),
    (MAIN, PP64 | C2 | STM, 1.0, "ping-pong 64x256 (m64n256, half the A rows per B): multicast needed just to "
                                 "match the cooperative tile's L2 traffic"),
    (MAIN, PP64, 0.97, "ping-pong 64x256 alone: 40 KB per k-block for 1 MMAC (67% over the cooperative tile)"),
    (MAIN, STM, 0.99, "stmatrix.x4: 4x fewer shared stores in the (not overlapped) epilogue"),
    (MAIN, HIL, 0.985, "Hilbert order: per wave it loads more tile rows+cols than group_m=16 (5139 vs 4718 "
                       "rows of 5120), about as group_m=8 (5760); L2 was never the limit"),
    (MAIN, C2, 0.99, "B multicast: half the B bytes per CTA from L2 (run 3: level with the default)"),
    (MAIN, C2 | HIL, 0.99, "cluster + Hilbert over the 32 x 28 cluster-tile grid"),
    (MAIN, C2 | STM, 0.995, "cluster + stmatrix"),
    (MAIN, C2 | HIL | STM, 0.995, "fast.cu's full set (128x256, 2-CTA multicast, Hilbert, TMA store, stmatrix)"),
    (MAIN, HIL | STM, 0.99, "Hilbert + stmatrix without the cluster"),
    (MAIN, C2 | STM | {"group_m": 16}, 0.99, "cluster + stmatrix, 16-row groups"),
    (MAIN, STM | {"stages": 3}, 0.98, "a shallower ring: the loads are 4 stages ahead for a reason"),
    (MAIN, C2 | STM | {"bk": 128, "stages": 2}, 0.975, "two 128-deep stages: half the barrier round trips, but "
                                                       "only one stage of look-ahead"),
    (MAIN, C2 | HIL | STM | {"max_ctas": 128}, 0.985, "128 CTAs = 64 clusters: 1792 tiles in exactly 14 waves, "
                                                      "but no shorter than 132 CTAs' 13.6 -> 14"),
    # stream-K tail (2026-12-01, predicted before any run): 13 full waves, then 76 tiles x 80 k-blocks over 132 CTAs =
    # 46.1 k-blocks each instead of a 14th wave of 80; each contributor of a tail tile writes a 128 KB fp32 partial
    # (unless it is last), the last reads the others' (1-2) and stores: about 4-5 k-block times of fixup, and the
    # harness's zero fill of the 1 KB ticket buffer (a memset launch) is inside the timed call. 80 - 46 - 5 = ~29
    # of ~1120 k-block times: +2.6% on the cooperative default, nothing on its epilogue (not overlapped).
    (MAIN, SK, 1.01, "stream-K tail: 13 waves + 46.1 of 80 k-blocks per CTA, ~5 k-blocks of fixup"),
    (MAIN, SK | STM, 1.015, "stream-K tail + stmatrix"),
    (MAIN, SK | STM | {"group_m": 16}, 1.01, "stream-K tail + stmatrix, 16-row groups"),
    (MAIN, SK | {"epilogue": "direct"}, 0.99, "stream-K tail, direct stores (the epilogue not overlapped)"),
    # decode: M = 64 (the default's 128-row tile wastes half of each wgmma; 28 tiles for 132 SMs)
    (M64, {}, 0.40, "default 128x256: 28 CTAs, each 128x256x5120 of wgmma work (~45 us)"),
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 0.95, "params_for(M=64): 112 CTAs streaming B, 8 stages"),
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "bk": 128, "stages": 4}, 0.93, "same bytes in flight, half the barriers"),
    (M64, {"bm": 64, "bn": 128, "consumers": 1, "stages": 6}, 0.75, "56 CTAs: fewer SMs pulling B"),
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8, "epilogue": "direct"}, 0.95, "8 KB of C: the epilogue "
                                                                                          "hardly matters"),
    (M64, SK, 0.75, "default tile, stream-K: 28 x 80 k-blocks over 132 CTAs (17 each, 4-5 contributors a tile); "
                    "half of each m64 wgmma still wasted, the last contributor reads ~4 x 128 KB"),
    (M64, SK | {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 1.0, "params_for(M=64) + stream-K: 112 tiles < "
                                                                       "132 CTAs, all split: every SM streams B"),
    # decode: M = 128
    (M128, {}, 0.45, "default: 28 CTAs"),
    (M128, {"bm": 128, "bn": 64, "consumers": 2, "stages": 8}, 0.93, "params_for(M=128): 112 CTAs, two consumers"),
    (M128, {"bm": 64, "bn": 128, "consumers": 1, "stages": 6}, 0.85, "112 tiles of 64x128, B read by both tile rows "
                                                                    "(group order keeps them together in L2)"),
    (M128, {"bm": 128, "bn": 128, "consumers": 2, "stages": 6}, 0.70, "56 CTAs"),
    (M128, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 0.80, "224 tiles on 132 persistent CTAs: 1.7 waves"),
    (M128, SK | {"bm": 128, "bn": 64, "consumers": 2, "stages": 8}, 0.98, "params_for(M=128) + stream-K: 112 tiles "
                                                                          "split over 132 CTAs (67.9 k-blocks each)"),
    (M128, SK | {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 0.93, "224 tiles of 64x64: 1 wave + 92 tiles' "
                                                                         "k-blocks split (55.8 each) instead of 1.7"),
    # square 4096: 512 tiles of 128x256 = 3.9 waves
    (SQ, {}, 0.97, "default: 3.88 waves -> 4"),
    (SQ, C2, 0.975, "B multicast"),
    (SQ, C2 | HIL | STM, 0.98, "fast.cu's full set"),
    (SQ, STM | {"group_m": 16}, 0.97, "stmatrix, 16-row groups"),
    (SQ, {"bn": 128, "stages": 6}, 0.93, "128x128: 1024 tiles = 7.8 waves, lower intensity per stage"),
    (SQ, SK, 0.985, "stream-K: 3 waves + 116 tiles x 64 k-blocks over 132 CTAs (56.2 each) instead of a 4th wave"),
    (SQ, SK | STM, 0.99, "stream-K + stmatrix"),
    (SQ, PP | C2 | STM, 1.0, "ping-pong 128x128 + cluster + stmatrix: 7.76 tiles per CTA -> 8 (the same tail), "
                             "the epilogue hidden (a larger share at K = 4096)"),
]
# Round 2 (--round 2), written 2026-12-01 before any run: the consumer index made warp-uniform to ptxas (uniform=True).
# In the default's SASS each k-step's A descriptor is a 64-bit add in ordinary registers and two R2UR before its HGMMA
# (48 R2UR, 1,008 instructions; with uniform 17 and 936). An m64n256k16 runs about 145 cycles at the measured rate,
# far longer than that chain, so most of it was hidden already: predicted +0-1% on the main GEMM, beside this session's
# control and best point (stmatrix, 3 stages).
UNI = {"uniform": True}
POINTS_2: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 0.986, "control: the checked-in reference"),
    (MAIN, UNI, 0.99, "uniform descriptors"),
    (MAIN, STM | {"stages": 3}, 0.991, "round 1's best point"),
    (MAIN, STM | {"stages": 3} | UNI, 0.995, "round 1's best point, uniform descriptors"),
    (MAIN, C2 | STM | UNI, 0.992, "cluster + stmatrix, uniform (the cluster rank keeps 97 R2UR)"),
    (M128, {"bm": 128, "bn": 64, "consumers": 2, "stages": 8}, 1.013, "params_for(M=128), control"),
    (M128, {"bm": 128, "bn": 64, "consumers": 2, "stages": 8} | UNI, 1.02, "params_for(M=128), uniform"),
    (SQ, {}, 1.054, "control"),
    (SQ, UNI, 1.06, "uniform descriptors"),
]
# Round 3, after round 2 (uniform: 0.992x -> 1.001x on the main GEMM, -0.75% kernel time; 1.001x -> 1.005x square;
# on by default since): the tuner's own neighbours of the new default, each a lever builtin/tuner pulls, so a climb's
# last turns are measured from here, and the M = 64 decode tile with uniform. Predicted before running
# (gemm_sweep.md round 3): all within +-0.5% of the control; none reaches 1.03x.
POINTS_3: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 1.0, "control: the new default (uniform)"),
    (MAIN, {"group_m": 16}, 1.003, "group_m 16 (the climb's turn 7)"),
    (MAIN, {"producer_regs": 24}, 1.0, "producer 24 registers: consumers 240 instead of 232"),
    (MAIN, {"max_ctas": 128}, 0.995, "128 CTAs: 14 full waves, 4 SMs idle"),
    (MAIN, STM, 0.998, "stmatrix staging"),
    (MAIN, C2 | {"group_m": 16}, 0.995, "cluster + group_m 16 (the climb's turn 8)"),
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 0.98, "params_for(M=64), uniform"),
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8, "uniform": False}, 0.978, "params_for(M=64), plain"),
]
# Round 4 (written before its run, gemm_sweep.md round 4): defer=True, the tile's bf16 result kept in registers and
# its four slabs stored under the next tile's first four k-blocks, against the default (1.011x, 0.7375 ms in round 3).
# By count the cooperative epilogue (4 slabs, 8 named barriers, the staging's TMA reads) runs with the tensor pipe
# idle between tiles, about 1-3% of a tile's 80 k-blocks. Predicted: -1 to -2.5% kernel time on the main GEMM, -1 to
# -3% on the square one (its tiles have 64 k-blocks), level on the M = 128 decode tile (one tile per CTA: its only
# slabs are the last tile's, after the loop, as before).
POINTS_4: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 1.011, "control: the default"),
    (MAIN, {"defer": True}, 1.028, "defer: the epilogue under the next tile's wgmmas"),
    (MAIN, {"defer": True, "stages": 3}, 1.02, "defer, 3 stages (the ring the packed tile's registers leave)"),
    (MAIN, {"defer": True, "group_m": 16}, 1.028, "defer, group_m 16"),
    (SQ, {}, 1.005, "control"),
    (SQ, {"defer": True}, 1.025, "defer"),
    (M128, {"bm": 128, "bn": 64, "consumers": 2, "stages": 8}, 1.02, "params_for(M=128), control"),
    (M128, {"bm": 128, "bn": 64, "consumers": 2, "stages": 8, "defer": True}, 1.02, "params_for(M=128), defer"),
    # the decode GEMMs' 56-column tile: 128 tiles over N = 7168 (112 at 64 columns), direct epilogue (the TMA one
    # stores 64-column slabs). Round 1 measured the 64-column tile's direct epilogue 1.7% slower than its TMA one at
    # M = 64 (0.961x / 0.978x); 14% more SMs streaming B, if the decode GEMM is bound by the bytes in flight per SM
    # (2.4 TB/s of DRAM, half the H200's), give more: predicted +3 to +8% over the 64-column tile.
    (M64, {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}, 0.978, "params_for(M=64), control"),
    (M64, {"bm": 64, "bn": 56, "consumers": 1, "stages": 8, "epilogue": "direct"}, 1.03, "56-column tile: 128 CTAs"),
    (M128, {"bm": 128, "bn": 56, "consumers": 2, "stages": 8, "epilogue": "direct"}, 1.05, "56-column tile: 128 CTAs"),
]
# Round 5 (written before its run, gemm_sweep.md round 5): defer's neighbours. Round 4 measured defer at 1.029x
# [1.026, 1.035] against the default's 1.019x in the same run (-1.2% kernel time, 0.7411 ms), defer + group_m 16
# 1.027x. Its slab stores now share the k-loop with the loads, so the L2-facing levers may move again: the Hilbert
# order and 2-CTA multicast (both level without defer, rounds 1-2) halve or reorder B's traffic; 132 CTAs instead of
# 128 (128 won by 1.2% when the epilogue was exposed: the last round's tiles ended together); 24 producer registers
# (more for the packed tile). Predicted: each within +-0.5% of defer, except max_ctas 0: -0.5 to +1% (the tail's
# shape changes with the hidden epilogue).
POINTS_5: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 1.015, "control: the default"),
    (MAIN, {"defer": True}, 1.029, "defer (round 4: 1.029x)"),
    (MAIN, {"defer": True, "order": "hilbert"}, 1.029, "defer, Hilbert tile order"),
    (MAIN, {"defer": True, "cluster_m": 2}, 1.029, "defer, 2-CTA clusters with B multicast"),
    (MAIN, {"defer": True, "max_ctas": 0}, 1.03, "defer, one CTA per SM (132)"),
    (MAIN, {"defer": True, "producer_regs": 24}, 1.029, "defer, 24 producer registers"),
    (MAIN, {"defer": True, "group_m": 4}, 1.029, "defer, group_m 4"),
    (SQ, {}, 1.01, "control"),
    (SQ, {"defer": True}, 1.025, "defer (round 4: 1.029x)"),
]
# Round 6 (written before its run, gemm_sweep.md round 6): the reference (defer) with its slabs' staging written by
# stmatrix.x4. Under defer the slabs are written inside the k-loop, beside the wgmmas' shared-memory operand reads
# (the 128 x 256 tile runs near the shared memory's 128 bytes a cycle); stmatrix writes the same bytes in a quarter of
# the instructions (STS 192 -> STSM 48 in the kernel, 264 instructions fewer). stmatrix alone was level when the
# epilogue ran between tiles (round 1: 0.998). Predicted by kernel time: -0.3 to -1% on the main and square GEMMs.
POINTS_6: list[tuple[str, dict, float, str]] = [
    (MAIN, {}, 1.022, "control: the reference (defer)"),
    (MAIN, {"stmatrix": True}, 1.03, "defer, slabs by stmatrix"),
    (SQ, {}, 1.023, "control"),
    (SQ, {"stmatrix": True}, 1.03, "defer, slabs by stmatrix"),
    (MAIN, {}, 1.022, "control again"),
    (MAIN, {"stmatrix": True}, 1.03, "defer, slabs by stmatrix, again"),
]
# Round 21 (written before its run, gemm_sweep.md round 21): the decode GEMMs' shared memory given to
# B's bytes in flight. At M = 64 and 128 the kernels run at 60% of the DRAM roof (0.029-0.030 ms for 73 MB of B). Every
# earlier decode point is consistent with a kernel bound by the bytes of B it keeps in flight across the chip (Little's
# law at about 2 us of loaded DRAM latency): 112 CTAs x 6 free stages x 8 KB = 5.4 MB, and the 56-column tile (128 x 6
# x 7 KB) and bk 128 with 4 stages (112 x 3 x 16 KB), both 5.4 MB, ran level, bn 128 (56 x 5 x 16 KB = 4.5 MB) 7%
# slower. So: deeper rings than PARAM_SPACE's 8 (the 64 x 64 tile's stage is 16 KB: up to 13 stages with the TMA
# epilogue, 14 without), and wide tiles split over every SM by the stream-K path (bn 224 / 256: B is 78-80% of each
# stage). Points are params_for's (defer, group_m 16 and l2_hints off) with the changes shown.
P64 = {"bm": 64, "bn": 64, "consumers": 1, "stages": 8}
P128 = {"bm": 128, "bn": 64, "consumers": 2, "stages": 8}
DIRECT = {"epilogue": "direct"}
POINTS_21: list[tuple[str, dict, float, str]] = [
    (M64, P64, 0.98, "params_for(M=64), control (0.983-0.987x on 2026-12-03)"),
    (M64, P64 | {"stages": 10}, 1.2, "10 stages: 7.2 MB of B in flight"),
    (M64, P64 | {"stages": 12}, 1.35, "12 stages: 9.0 MB in flight"),
    (M64, P64 | {"stages": 13}, 1.35, "13 stages: the most the TMA epilogue leaves room for"),
    (M64, P64 | DIRECT | {"stages": 14}, 1.35, "14 stages, direct epilogue (1.7% slower at 8 stages)"),
    (M64, P64 | {"stages": 13, "tail": "streamk", "max_ctas": 0}, 1.3, "13 stages, every SM (stream-K: 67.9 "
                                                                     "k-blocks each; 0.805x at 8 stages)"),
    (M64, P64 | DIRECT | {"bn": 224, "stages": 6, "tail": "streamk"}, 1.35, "64 x 224 tiles split 4 ways over 128 "
                                                                          "CTAs: 18 MB in flight"),
    (M64, P64 | {"bn": 256, "stages": 5, "tail": "streamk"}, 1.35, "64 x 256 tiles over 128 CTAs (17.5 k-blocks "
                                                                  "each): 16 MB in flight"),
    (M128, P128, 1.03, "params_for(M=128), control (1.029x on 2026-12-03)"),
    (M128, P128 | DIRECT | {"stages": 9}, 1.1, "9 stages, direct epilogue: 7.2 MB in flight"),
    (M128, P128 | DIRECT | {"bn": 128, "stages": 7, "tail": "streamk", "max_ctas": 0}, 1.35,
     "128 x 128 tiles over every SM (33.9 k-blocks each): 12.7 MB in flight"),
    (M128, P128 | {"bn": 256, "stages": 4, "tail": "streamk"}, 1.35, "128 x 256 tiles over 128 CTAs: 12.6 MB in flight"),
    (M64, P64, 0.98, "control again"),
    (M128, P128, 1.03, "control again"),
]
# Round 22 (written before its run, gemm_sweep.md round 22): round 21 measured the decode GEMMs level with 10-14
# stages (0.0290-0.0292 ms against 0.0294) and slower split over every SM: not the bytes in flight. What each CTA reads
# of B is 128 bytes of 64 rows 10 KB apart per box (promoted to 256-byte L2 fills); the next guess is the DRAM's access
# pattern, so: deeper k-blocks (bk 128 / 192 / 256: 2-4 boxes of one row's consecutive bytes per stage), and B's L2
# promotion at 128B / none (a control for what the promotion adds now).
POINTS_22: list[tuple[str, dict, float, str]] = [
    (M64, P64, 0.98, "params_for(M=64), control"),
    (M64, P64 | {"bk": 128, "stages": 6}, 1.1, "bk 128, 6 stages (192 KB ring): 256 contiguous bytes a row a stage"),
    (M64, P64 | {"bk": 192, "stages": 4}, 1.2, "bk 192, 4 stages: 384 bytes"),
    (M64, P64 | {"bk": 256, "stages": 3}, 1.25, "bk 256, 3 stages: 512 bytes"),
    (M64, P64 | {"promo_b": "128B"}, 0.95, "B's L2 promotion 128B (the fill is the box's row piece)"),
    (M64, P64 | {"promo_b": "none"}, 0.95, "B's L2 promotion none"),
    (M64, P64 | {"bk": 256, "stages": 3, "promo_b": "none"}, 1.2, "bk 256 without B's promotion"),
    (M128, P128, 1.03, "params_for(M=128), control"),
    (M128, P128 | {"bk": 128, "stages": 4, "epilogue": "direct"}, 1.1, "bk 128, 4 stages: 256 bytes"),
    (M128, P128 | {"bk": 256, "stages": 2, "epilogue": "direct"}, 1.1, "bk 256, 2 stages: 512 bytes, a short ring"),
    (M64, P64, 0.98, "control again"),
    (M128, P128, 1.03, "control again"),
]
# Values past PARAM_SPACE that rounds 21-22 measure (deep rings, deep k-blocks), allowed for their run (space_of).
WIDER_SPACE = {"stages": [9, 10, 11, 12, 13, 14], "bk": [192, 256]}
WIDER_ROUNDS = (21, 22)
# Round 7 (tail="launch": the full waves on every SM, the rest split by k-blocks in a second launch) measured +1.8% on
# the main GEMM and +11.6% square and was deleted with the option (gemm_sweep.md, "Round 7 measured"); its points ran
# at commit 2f2ac3e.
# Each round as it ran: rounds 1-2 before uniform and 128 CTAs became the defaults, round 3 before 128 CTAs did,
# rounds 1-5 before the reference deferred its epilogue, all of them before it took group_m 16 (gemm_sweep.md round 13)
# and the L2 eviction priorities (round 14); a point that sets any of them keeps its own value.
_BEFORE_13 = {"group_m": 8, "l2_hints": False}
AS_RUN = {r: _BEFORE_13 | changes for r, changes in {
    1: {"uniform": False, "max_ctas": 0, "defer": False}, 2: {"uniform": False, "max_ctas": 0, "defer": False},
    3: {"max_ctas": 0, "defer": False}, 4: {"defer": False}, 5: {"defer": False}, 6: {},
    21: {"defer": False}, 22: {"defer": False}}.items()}
ROUNDS = {r: [(w, AS_RUN[r] | ch, *rest) for w, ch, *rest in pts] for r, pts in ((1, POINTS), (2, POINTS_2),
                                                                                  (3, POINTS_3), (4, POINTS_4),
                                                                                  (5, POINTS_5), (6, POINTS_6),
                                                                                  (21, POINTS_21), (22, POINTS_22))}
OPTIONS = ("cluster_m", "order", "stmatrix", "max_ctas", "schedule", "tail", "uniform", "defer", "l2_hints")  # code paths whose hang skips the points that share them


@contextlib.contextmanager
def space_of(round_: int):
    """gemm_template.PARAM_SPACE as round `round_` ran: with WIDER_SPACE's values added for WIDER_ROUNDS (validate()'s
    other checks stand), put back on exit."""
    from ptxbench.workloads.solutions import gemm_template as gt
    saved = {name: gt.PARAM_SPACE[name] for name in WIDER_SPACE}
    if round_ in WIDER_ROUNDS:
        for name, extra in WIDER_SPACE.items():
            gt.PARAM_SPACE[name] = sorted(set(saved[name]) | set(extra))
    try:
        yield
    finally:
        gt.PARAM_SPACE.update(saved)


def features(changes: dict) -> set[tuple]:
    return {(k, json.dumps(v)) for k, v in changes.items() if k in OPTIONS}


def params_of(changes: dict):
    from ptxbench.workloads.solutions import gemm_template as gt
    return gt.default_params().model_copy(update={k: v for k, v in changes.items() if k not in TEXT_CHANGES})


# Changes a point may name that are not GemmParams: edits of the rendered text, for what the template has no option
# for yet (round 22: B's tensor map's L2 promotion, "256B" in every render). name -> f(source, value) -> source.
def _promo_b(src: str, value: str) -> str:
    edited, n = re.subn(r'(\[tmap\.B_map\]\ntensor = "B"\nbox = \[\d+, \d+\]\nswizzle = "\d+B"\nl2_promotion = )"256B"',
                        rf'\1"{value}"', src)
    if n != 1:
        raise ValueError(f"promo_b: B's tensor map found {n} times in the render")
    return edited


TEXT_CHANGES = {"promo_b": _promo_b}


def source_of(changes: dict) -> str:
    """The rendered point, with its text changes (TEXT_CHANGES) applied."""
    from ptxbench.workloads.solutions import gemm_template as gt
    src = gt.render(params_of(changes))
    for name, value in changes.items():
        if name in TEXT_CHANGES:
            src = TEXT_CHANGES[name](src, value)
    return src


def shape_notes(wid: str, p, num_sms: int = 132) -> str:
    """Tiles, CTAs and waves of this point on this workload (what the dry run prints)."""
    from ptxbench.workloads.registry import get_workload
    s = get_workload(wid).symbols
    m, n = int(s["M"]), int(s["N"])
    rows = -(-m // (p.bm * p.cluster_m)) * p.cluster_m
    tiles = rows * -(-n // p.bn)
    if not p.persistent:
        return f"{tiles} tiles, one CTA each"
    if p.tail == "streamk":  # every SM (or max_ctas): full waves, then the rest's k-blocks split evenly
        ctas = min(num_sms, p.max_ctas) if p.max_ctas else num_sms
        k_iters = -(-int(s["K"]) // p.bk)
        return (f"{tiles} tiles on {ctas} CTAs ({tiles // ctas} waves + {tiles % ctas} tiles' k-blocks split: "
                f"{tiles % ctas * k_iters / ctas:.1f} of {k_iters} per CTA)")
    ctas = min(num_sms if not p.max_ctas else min(num_sms, p.max_ctas), tiles)
    ctas = ctas // p.cluster_m * p.cluster_m
    per = "per CTA" if p.schedule == "pingpong" else "waves"  # ping-pong: a CTA's mainloops run one by one
    return f"{tiles} tiles on {ctas} CTAs ({tiles / ctas:.2f} {per})"


def compile_all(points, ev) -> dict[int, object]:
    """Validate every point, then compile the valid ones in parallel through the evaluator's compile-only path
    (compile_first.py): index -> its EvalResult, or why it cannot be built."""
    from compile_first import compile_first
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions import gemm_template as gt

    out: dict[int, object] = {}
    jobs = []
    for i, (wid, changes, _, _) in enumerate(points):
        p = params_of(changes)
        s = get_workload(wid).symbols
        problems = gt.validate(p, shape=(int(s["M"]), int(s["N"]), int(s["K"])))
        if problems:
            out[i] = "; ".join(problems)
        else:
            jobs.append((i, wid, source_of(changes)))
    for (i, _, _), result in zip(jobs, compile_first(ev, [(wid, src) for _, wid, src in jobs], "points")):
        out[i] = result
    return dict(sorted(out.items()))


def resources(r) -> dict:
    if isinstance(r, str) or r.compile is None or not r.compile.kernels:
        return {}
    k = next(iter(r.compile.kernels.values()))
    ops = k.sass_opcodes
    return {"regs": k.registers, "spills": k.spill_stores + k.spill_loads,
            **{op: ops.get(op, 0) for op in ("HGMMA", "UTMALDG", "UTMASTG", "STSM", "STS")}}


def table(rows: list[dict], measured: bool) -> str:
    head = "| workload | changes from default_params() | predicted | "
    head += "measured [95% CI] | ms (cuBLAS ms) | status |" if measured else "regs | spills | HGMMA/UTMALDG/UTMASTG/STSM | tiles |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ch = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "(default)"
        line = f"| {r['workload']} | {ch} | {r['predicted']:.3f} | "
        if measured:
            sp = f"{r['speedup']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r.get("speedup") and r.get("ci") else "-"
            ms = f"{r['kernel_ms']:.4f} ({r['cublas_ms']:.4f})" if r.get("kernel_ms") and r.get("cublas_ms") else "-"
            line += f"{sp} | {ms} | {r['status']} |"
        else:
            res = r.get("resources") or {}
            ops = "/".join(str(res.get(o, "-")) for o in ("HGMMA", "UTMALDG", "UTMASTG", "STSM"))
            line += f"{res.get('regs', '-')} | {res.get('spills', '-')} | {ops} | {r.get('tiles', '')} |"
        out.append(line)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="gemm_sweep.json", help="JSON file to write")
    ap.add_argument("--deadline", type=float, default=400.0, help="seconds after start when no new evaluation starts")
    ap.add_argument("--only", default="", help="only the workloads whose id contains this")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: render, validate, compile; print resources")
    ap.add_argument("--round", type=int, default=1, choices=sorted(ROUNDS), help="which list of points")
    args = ap.parse_args()
    with space_of(args.round):  # rounds 21-22: values past the searched space, for the whole run
        sweep(args)


def sweep(args: argparse.Namespace) -> None:
    """The run main() parses arguments for: compile every point, then evaluate each (or, with --dry-run, print)."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    t0 = time.time()
    points = [pt for pt in ROUNDS[args.round] if args.only in pt[0]]
    ev = LocalEvaluator()
    compiled = compile_all(points, ev)
    print(f"compiled {len(points)} points in {time.time() - t0:.0f} s", flush=True)
    rows: list[dict] = []
    hung: list[set] = []
    for i, (wid, changes, predicted, why) in enumerate(points):
        p = params_of(changes)
        row = {"workload": wid, "changes": changes, "predicted": predicted, "why": why, "params": p.model_dump(),
               "tiles": shape_notes(wid, p)}
        c = compiled[i]
        row["resources"] = resources(c)
        if isinstance(c, str):
            row |= {"status": "INVALID", "message": c}
        elif c.status != "COMPILED":
            row |= {"status": c.status, "message": (c.message or "")[:300]}
        elif row["resources"].get("spills"):
            row |= {"status": "SPILLS", "message": f"{row['resources']['spills']} spill instructions"}
        elif args.dry_run:
            row |= {"status": "COMPILED"}
        elif time.time() - t0 > args.deadline:
            row |= {"status": "SKIPPED", "message": "past the deadline"}
        elif any(h and h <= features(changes) for h in hung):
            row |= {"status": "SKIPPED", "message": "shares the options of a point that timed out"}
        else:
            t1 = time.time()
            r = ev.evaluate(wid, source_of(changes), EvalOptions(timeout_s=40, profile_on_pass=False))
            t = r.timing
            row |= {"status": r.status, "message": (r.message or "")[:300], "wall_s": round(time.time() - t1, 1),
                    "speedup": t.speedup if t else None, "ci": list(t.speedup_ci) if t and t.speedup_ci else None,
                    "kernel_ms": t.candidate.median_ms if t else None,
                    "cublas_ms": t.baselines[t.primary_baseline].median_ms if t else None}
            if r.status == "TIMEOUT":
                hung.append(features(changes))
        rows.append(row)
        if args.dry_run:
            res = row["resources"]
            print(f"{wid:28s} {json.dumps(changes):70s} {row['status']:9s} regs {res.get('regs', '-')} spills "
                  f"{res.get('spills', '-')} HGMMA {res.get('HGMMA', '-')} UTMALDG {res.get('UTMALDG', '-')} UTMASTG "
                  f"{res.get('UTMASTG', '-')} STSM {res.get('STSM', '-')} | {row['tiles']} | predicted {predicted}",
                  flush=True)
        else:
            sp = f"{row['speedup']:.3f}x {row['ci']}" if row.get("speedup") else "-"
            print(f"[{time.time() - t0:6.1f}s] {wid:28s} {json.dumps(changes):60s} {row['status']:14s} {sp:32s} "
                  f"predicted {predicted}  {row.get('message', '')[:160] if row['status'] != 'PASSED' else ''}",
                  flush=True)
            with open(args.out, "w") as f:  # after every point: a killed call keeps what it measured
                json.dump(rows, f, indent=1)
    ev.close()
    print()
    print(table(rows, measured=not args.dry_run))
    if not args.dry_run:
        print(f"\ndone in {time.time() - t0:.0f} s: {sum(r['status'] == 'PASSED' for r in rows)} passed of {len(rows)}")


if __name__ == "__main__":
    main()
