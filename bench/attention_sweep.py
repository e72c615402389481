"""Points of the attention forward's template (workloads/solutions/attention_template.py) through the real
evaluator on a GPU: status, speedup over cuDNN with its interval, and the prediction made before the run.

Ordered for a short device call: cheap smoke-shape screens of each new code path first (ping-pong, TMA-store
epilogue, key tail, three consumers, longest-first order), then the main shapes. A point whose non-default
features include those of a point that TIMED OUT (a hang) is skipped, and nothing new starts after the
deadline (default 420 s), so one bad barrier cannot eat the call. No ncu profile (profile_on_pass=False).

    python3 bench/attention_sweep.py OUT.json [--deadline 420] [--only WORKLOAD_SUBSTRING] [--round 2[,3...]] [--trials 3]
"""
from __future__ import annotations

import argparse
import json
import time

from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

# (workload, changes from the workload's default point, predicted speedup over cuDNN; None = a screen)
POINTS: list[tuple[str, dict, float | None]] = [
    ("smoke_mha_fwd_d64", {"schedule": "pingpong"}, None),
    ("smoke_mha_fwd_d64", {"schedule": "pingpong", "epilogue": "tma"}, None),
    ("smoke_mha_fwd_d64_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 2}, None),
    ("smoke_mha_fwd_d64", {"consumers": 3, "bn": 96, "schedule": "pingpong"}, None),  # ragged query and key tiles
    ("smoke_mha_fwd_d64_causal", {"bn": 176, "schedule": "pingpong"}, None),
    ("smoke_mha_fwd_d64_gqa_h4_kv2", {"schedule": "pingpong", "epilogue": "tma"}, None),
    # D = 128
    ("mha_fwd_d128", {}, 1.02),
    ("mha_fwd_d128", {"schedule": "pingpong"}, 1.06),
    ("mha_fwd_d128", {"epilogue": "tma"}, 1.03),
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma"}, 1.07),
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma", "stages": 3}, 1.07),
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma", "bn": 160}, 1.05),
    ("mha_fwd_d128", {"schedule": "pingpong", "bn": 96}, 0.95),
    # FA3's 128 x 176 tile (ping-pong assembles clean up to 32 registers to spare): 24 instead of 32 key tiles, the
    # last one masked (4,224 keys of work for 4,096: +3%), about what the fewer per-tile overheads win
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma", "bn": 176}, 1.07),
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma", "bn": 192}, 1.06),
    ("mha_fwd_d128", {"consumers": 1, "bn": 64}, 0.55),  # the tuner's weak start
    ("mha_fwd_d128_causal", {}, 0.99),
    ("mha_fwd_d128_causal", {"schedule": "pingpong"}, 1.03),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma"}, 1.04),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4}, 1.05),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 8}, 1.04),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "bn": 64}, 0.90),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "bn": 160, "lpt_group": 4}, 1.00),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "bn": 176, "lpt_group": 4}, 1.00),
    # D = 64
    ("mha_fwd_d64", {}, 0.91),
    ("mha_fwd_d64", {"schedule": "pingpong"}, 0.95),
    ("mha_fwd_d64", {"schedule": "pingpong", "epilogue": "tma"}, 0.97),
    ("mha_fwd_d64", {"schedule": "pingpong", "epilogue": "tma", "bn": 192}, 1.00),
    ("mha_fwd_d64", {"schedule": "pingpong", "epilogue": "tma", "bn": 176}, 0.99),
    ("mha_fwd_d64", {"consumers": 3, "bn": 96, "schedule": "pingpong", "epilogue": "tma"}, 0.93),
    ("mha_fwd_d64_causal", {}, 0.90),
    ("mha_fwd_d64_causal", {"schedule": "pingpong", "epilogue": "tma"}, 0.95),
    ("mha_fwd_d64_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4}, 0.96),
    ("mha_fwd_d64_causal", {"schedule": "pingpong", "epilogue": "tma", "bn": 192, "lpt_group": 4}, 0.97),
    ("mha_fwd_d64_causal", {"consumers": 3, "bn": 96, "schedule": "pingpong", "lpt_group": 4}, 0.92),
    # D = 96: two slabs, the second half zero-filled; P V at N = 128 (a third more tensor work than needed)
    ("mha_fwd_d96", {}, 0.88),
    ("mha_fwd_d96", {"schedule": "pingpong"}, 0.92),
    ("mha_fwd_d96", {"schedule": "pingpong", "epilogue": "tma"}, 0.93),
    ("mha_fwd_d96", {"schedule": "pingpong", "epilogue": "tma", "bn": 160}, 0.92),
    ("mha_fwd_d96_causal", {}, 0.87),
    ("mha_fwd_d96_causal", {"schedule": "pingpong", "epilogue": "tma"}, 0.91),
    ("mha_fwd_d96_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4}, 0.92),
    # GQA (regression of the checked-in kernel, and the best guess)
    ("mha_fwd_d128_gqa_h32_kv8", {}, 1.02),
    ("mha_fwd_d128_gqa_h32_kv8", {"schedule": "pingpong", "epilogue": "tma"}, 1.06),
    ("mha_fwd_d128_gqa_h32_kv8", {"schedule": "pingpong", "epilogue": "tma", "bn": 176}, 1.06),
    # causal GQA (registered since; the library's time includes expanding K / V to H heads, as without the mask)
    ("mha_fwd_d128_gqa_h32_kv8_causal", {}, 1.00),
    ("mha_fwd_d128_gqa_h32_kv8_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4}, 1.05),
]
# Round 2 (--round 2), written after round 1 (bench/results/attention_template.md, 2026-12-01) and before running:
# its best points again at 3 trials, and their neighbours (round 1's best: d128 cooperative + TMA store 1.050,
# causal ping-pong + TMA + lpt 8 1.079, d64 3 consumers x bn 96 ping-pong + TMA 1.042, d64 causal the default 0.962).
POINTS_2: list[tuple[str, dict, float | None]] = [
    ("mha_fwd_d128", {}, 1.04),
    ("mha_fwd_d128", {"epilogue": "tma"}, 1.05),
    ("mha_fwd_d128", {"epilogue": "tma", "stages": 3}, 1.05),
    ("mha_fwd_d128", {"epilogue": "tma", "bn": 160}, 1.03),
    ("mha_fwd_d128", {"schedule": "pingpong", "bn": 192}, 1.04),
    ("mha_fwd_d128", {"schedule": "pingpong", "epilogue": "tma", "bn": 192, "stages": 2}, 1.04),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 8}, 1.08),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "lpt_group": 8}, 1.08),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 8, "bn": 192}, 1.06),
    ("mha_fwd_d128_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 8, "stages": 3}, 1.08),
    ("mha_fwd_d128_causal", {"epilogue": "tma", "lpt_group": 8}, 1.04),
    ("mha_fwd_d64", {"consumers": 3, "bn": 96, "schedule": "pingpong", "epilogue": "tma"}, 1.04),
    ("mha_fwd_d64", {"consumers": 3, "bn": 96, "schedule": "pingpong"}, 1.03),
    ("mha_fwd_d64", {"consumers": 3, "bn": 128, "schedule": "pingpong", "epilogue": "tma"}, 1.03),
    ("mha_fwd_d64", {"consumers": 3, "bn": 96, "epilogue": "tma"}, 1.00),
    ("mha_fwd_d64_causal", {}, 0.96),
    ("mha_fwd_d64_causal", {"lpt_group": 8}, 0.99),
    ("mha_fwd_d64_causal", {"epilogue": "tma", "lpt_group": 8}, 1.00),
    ("mha_fwd_d64_causal", {"consumers": 3, "bn": 96, "schedule": "pingpong", "epilogue": "tma"}, 1.00),
    ("mha_fwd_d64_causal", {"consumers": 3, "bn": 96, "schedule": "pingpong", "epilogue": "tma", "lpt_group": 8}, 1.02),
    ("mha_fwd_d96", {"schedule": "pingpong", "epilogue": "tma"}, 1.10),
    ("mha_fwd_d96_causal", {}, 1.08),
    ("mha_fwd_d96_causal", {"lpt_group": 8}, 1.10),
    ("mha_fwd_d128_gqa_h32_kv8", {"schedule": "pingpong", "epilogue": "tma"}, 1.08),
    ("mha_fwd_d128_gqa_h32_kv8_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 4}, 1.11),
    ("mha_fwd_d128_gqa_h32_kv8_causal", {"schedule": "pingpong", "epilogue": "tma", "lpt_group": 8}, 1.12),
]
# Round 3, after round 2 (3 trials): d64's best was 3 consumers x bn 128 ping-pong + TMA store (1.165x), d128's and
# causal d128's the cooperative TMA store (1.055x, with lpt 8 when causal); their neighbours on the other shapes.
POINTS_3: list[tuple[str, dict, float | None]] = [
    ("mha_fwd_d64", {"consumers": 3, "bn": 128, "schedule": "pingpong", "epilogue": "tma"}, 1.16),
    ("mha_fwd_d64", {"consumers": 3, "bn": 128, "schedule": "pingpong", "epilogue": "tma", "stages": 3}, 1.15),
    ("mha_fwd_d64_causal", {"consumers": 3, "bn": 128, "schedule": "pingpong", "epilogue": "tma"}, 1.10),
    ("mha_fwd_d64_causal", {"consumers": 3, "bn": 128, "schedule": "pingpong", "epilogue": "tma", "lpt_group": 8}, 1.12),
    ("mha_fwd_d128", {"epilogue": "tma"}, 1.055),
    ("mha_fwd_d128", {"consumers": 3, "bn": 64, "schedule": "pingpong", "epilogue": "tma"}, 1.00),
    ("mha_fwd_d128_causal", {"epilogue": "tma", "lpt_group": 8}, 1.055),
    ("mha_fwd_d128_causal", {"epilogue": "tma", "lpt_group": 4}, 1.05),
    ("mha_fwd_d128_causal", {"epilogue": "tma"}, 1.02),
    ("mha_fwd_d96", {"epilogue": "tma"}, 1.09),
    ("mha_fwd_d96_causal", {"epilogue": "tma", "lpt_group": 8}, 1.08),
    ("mha_fwd_d128_gqa_h32_kv8", {"epilogue": "tma"}, 1.06),
    ("mha_fwd_d128_gqa_h32_kv8_causal", {"epilogue": "tma", "lpt_group": 8}, 1.09),
]
# Round 4: rescale="lazy" (FlashAttention-4's conditional rescale, an OPTION_SPACE option) on each main problem's
# reference point (attention_template.TUNED), each beside the reference point itself in the same round, compared by
# kernel time. Predicted before running (bench/results/attention_template.md, round 4): +1-2% at D = 128 and 96,
# +1-3% at D = 64 (a smoke screen of the new code path first).
def _without(changes: dict, *names: str) -> dict:
    """A TUNED point without the options `names` (a round measures the points they were chosen from)."""
    return {k: v for k, v in changes.items() if k not in names}


def _swap(point: dict, old: str | None, new: str) -> dict:
    """A TUNED point with option `new` set in place of `old` (None: added)."""
    return {**(_without(point, old) if old else point), new: True}


def _between(wid: str, outer: dict, inner: list[dict]) -> list[tuple[str, dict, None]]:
    """`inner`'s points with `outer` read before and after them (the second reading shows the drift)."""
    return [(wid, dict(outer), None), *((wid, ch, None) for ch in inner), (wid, dict(outer), None)]


def _eager(changes: dict) -> dict:
    """A TUNED point without its rescale, uniform and early_pack choices (rounds 4-6 measured the points they were made
    from)."""
    return _without(changes, "rescale", "uniform", "early_pack")


# TUNED as round 27 measured it: D = 96 without the early_pack it gained after the round
TUNED_ROUND_27 = {problem: dict(point) for problem, point in at.TUNED.items()}
TUNED_ROUND_27[(96, False, False)] = _without(at.TUNED[(96, False, False)], "early_pack")
# TUNED as rounds 25-26 measured it, before the splits at D = 128 (split_rows for split_max) and causal (split_max for
# split_rows) changed places: the base of every snapshot below
TUNED_ROUND_25 = {problem: dict(point) for problem, point in TUNED_ROUND_27.items()}
TUNED_ROUND_25[(128, False, False)] = _swap(TUNED_ROUND_27[(128, False, False)], "split_rows", "split_max")
TUNED_ROUND_25[(128, True, False)] = _swap(TUNED_ROUND_27[(128, True, False)], "split_max", "split_rows")
# TUNED before round 22 put the persistent walk in it (at.WALK, and q_regs at D = 96 and GQA): the base of every
# earlier round's points
TUNED_BEFORE_22 = {problem: _without(point, *at.WALK) for problem, point in TUNED_ROUND_25.items()}
for _problem in ((96, False, False), (128, False, True)):
    del TUNED_BEFORE_22[_problem]["q_regs"]  # these gained q_regs with the walk
# TUNED before round 24 put producer_fn in it (rounds 23-24 measured against it)
TUNED_BEFORE_24 = {problem: _without(point, "producer_fn") for problem, point in TUNED_ROUND_25.items()}
# the five cooperative problems rounds 23-24 measure, with a workload each
_COOPERATIVE = (("mha_fwd_d128", (128, False, False)), ("mha_fwd_d128_causal", (128, True, False)),
                ("mha_fwd_d96", (96, False, False)), ("mha_fwd_d96_causal", (96, True, False)),
                ("mha_fwd_d128_gqa_h32_kv8", (128, False, True)))
# TUNED as rounds 4-9 knew it: split_rows joined it after round 10 (q_regs and split_max after round 13)
_BEFORE_10 = {problem: _without(point, "split_rows", "q_regs", "split_max") for problem, point in TUNED_BEFORE_22.items()}
# TUNED as rounds 10-13 knew it
_BEFORE_13 = {problem: _without(point, "q_regs", "split_max") for problem, point in TUNED_BEFORE_22.items()}


_TUNED_4 = {wid: _eager(_BEFORE_10[problem]) for wid, problem in (("mha_fwd_d128", (128, False, False)),
                                                          ("mha_fwd_d128_causal", (128, True, False)),
                                                          ("mha_fwd_d64", (64, False, False)),
                                                          ("mha_fwd_d96", (96, False, False)))}
_REF_4 = {"mha_fwd_d128": 1.048, "mha_fwd_d128_causal": 1.041, "mha_fwd_d64": 1.165, "mha_fwd_d96": 1.126}
_GAIN_4 = {"mha_fwd_d128": 1.015, "mha_fwd_d128_causal": 1.015, "mha_fwd_d64": 1.02, "mha_fwd_d96": 1.015}
POINTS_4: list[tuple[str, dict, float | None]] = [("smoke_mha_fwd_d64", {"rescale": "lazy"}, None)] + [
    point for wid, ref in _TUNED_4.items()
    for point in ((wid, ref, _REF_4[wid]), (wid, {**ref, "rescale": "lazy"}, round(_REF_4[wid] * _GAIN_4[wid], 3)))]
# Round 5, after round 4 (lazy: kernel time -0.8% / -0.9% / -1.8% at D = 128 / causal / 96, +3.5% at D = 64 under
# three-consumer ping-pong; promoted into TUNED for the first three): lazy on the problems round 4 left out, each
# beside its eager point, and D = 128's pair again (does its -0.8% repeat?). Predicted before running
# (bench/results/attention_template.md, round 5), by kernel time: the cooperative points (D = 96 causal, GQA) -0.5 to
# -2% as D = 128 / 96 did; the ping-pong points (GQA causal, D = 64 causal) 0 to +3% slower, as D = 64 was.
_ROUND_5 = (("mha_fwd_d128", (128, False, False), 1.044, 0.992), ("mha_fwd_d96_causal", (96, True, False), 1.090, 0.99),
            ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.041, 0.993),
            ("mha_fwd_d128_gqa_h32_kv8_causal", (128, True, True), 1.095, 1.015),
            ("mha_fwd_d64_causal", (64, True, False), 1.010, 1.015))  # (workload, problem, eager speedup, time ratio)
POINTS_5: list[tuple[str, dict, float | None]] = [
    point for wid, problem, ref, ratio in _ROUND_5
    for point in ((wid, _eager(_BEFORE_10[problem]), ref),
                  (wid, {**_eager(_BEFORE_10[problem]), "rescale": "lazy"}, round(ref / ratio, 3)))]
# Round 6, after round 5 and a look at the SASS: with the lazy rescale's vote ptxas waits for the previous P V product
# before all 64 exponentials (cooperative; 54 of 66 run under it with "always"), so lazy's 0.7-1.8% came with the
# softmax / P V overlap lost. rescale="lazy_max" (the threshold alone, O rescaled every tile) keeps the overlap
# and skips nothing. Each point's three builds side by side; predicted before running (attention_template.md, round
# 6), by kernel time against always: lazy_max within 0.5% of always, lazy 0.7-1.8% faster as in rounds 4-5.
# Measured: lazy_max 1.3-1.7% slower than always, lazy 1.0-1.9% faster, lazy + uniform a further 1.2-2.1%; lazy_max
# was deleted from the template, so its three points are no longer in this list (their figures are recorded).
_ROUND_6 = (("mha_fwd_d128", (128, False, False), 1.044), ("mha_fwd_d96", (96, False, False), 1.122),
            ("mha_fwd_d128_causal", (128, True, False), 1.032))
POINTS_6: list[tuple[str, dict, float | None]] = [
    (wid, {**_eager(_BEFORE_10[problem]), **({"rescale": r} if r != "always" else {})},
     round(ref * gain, 3))
    for wid, problem, ref in _ROUND_6 for r, gain in (("always", 1.0), ("lazy", 1.012))] + [
    # and lazy with the consumer index warp-uniform to ptxas (uniform=True: its Q descriptors in uniform registers,
    # 36 -> 1 R2UR at D = 128): predicted 0-1% on top of lazy
    (wid, {**_eager(_BEFORE_10[problem]), "rescale": "lazy", "uniform": True}, round(ref * 1.017, 3))
    for wid, problem, ref in _ROUND_6]
# Round 7, after round 6 (uniform=True: kernel time -2.0% / -2.1% / -1.2% at D = 128 / 96 / 128 causal, promoted into
# TUNED there): uniform on the other five problems' TUNED points, each beside the point without it. Predicted before
# running (attention_template.md, round 7), by kernel time: -1 to -2% on the cooperative points (D = 96 causal, GQA),
# -0.5 to -1.5% under ping-pong (GQA causal, D = 64 and its causal: one index per consumer, fewer k-steps per tile).
_ROUND_7 = (("mha_fwd_d96_causal", (96, True, False), 1.09, 1.015),
            ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.047, 1.015),
            ("mha_fwd_d128_gqa_h32_kv8_causal", (128, True, True), 1.069, 1.01),
            ("mha_fwd_d64", (64, False, False), 1.165, 1.01),
            ("mha_fwd_d64_causal", (64, True, False), 1.010, 1.01))  # (workload, problem, speedup, predicted gain)
# Measured (first three problems; the D = 64 pair ran past the step's deadline): D = 96 causal -2.5%, GQA -2.2%,
# GQA causal +1.1% (promoted into TUNED for the first two).
_PLAIN_INDEX = {problem: _without(_BEFORE_10[problem], "uniform", "early_pack") for _, problem, *_ in _ROUND_7}
POINTS_7: list[tuple[str, dict, float | None]] = [
    point for wid, problem, ref, gain in _ROUND_7
    for point in ((wid, _PLAIN_INDEX[problem], ref), (wid, {**_PLAIN_INDEX[problem], "uniform": True}, round(ref * gain, 3)))]
# Round 8, after round 7 and a look at the SASS (2026-12-01, written before its run): with lazy's branch after the wait
# for the previous P V product, ptxas sinks the exponentials below that wait (11 of 66 under the product against 46
# with "always"); packing P right after the wait, ahead of the branch (early_pack), keeps 44 of 66 under it with the
# same instructions. Each cooperative lazy point of TUNED beside itself with early_pack (ping-pong has no such
# overlap to regain: 0 either way). Predicted by kernel time: -0.5 to -2% (round 6: the skipped rescale and the overlap
# each worth about 1-2%; lazy had the first, this adds the second).
_ROUND_8 = (("mha_fwd_d128", (128, False, False), 1.061), ("mha_fwd_d96", (96, False, False), 1.134),
            ("mha_fwd_d128_causal", (128, True, False), 1.047), ("mha_fwd_d96_causal", (96, True, False), 1.129),
            ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.071))  # (workload, problem, round 6-7 speedup)
# Measured: early_pack -0.9% at D = 128, -1.3% causal, -0.5% D = 96 causal, -0.8% GQA (promoted into TUNED there),
# +0.2% at D = 96 (level: TUNED keeps it off).
_LATE_PACK = {problem: _without(_BEFORE_10[problem], "early_pack") for _, problem, _ in _ROUND_8}
POINTS_8: list[tuple[str, dict, float | None]] = [
    point for wid, problem, ref in _ROUND_8
    for point in ((wid, _LATE_PACK[problem], ref), (wid, {**_LATE_PACK[problem], "early_pack": True}, round(ref * 1.012, 3)))]
# Round 9 (written before its run, attention_template.md round 9): persistent=True, one CTA per SM walking the query
# tiles with Q double-buffered and the K / V ring running on across tiles, against each cooperative TUNED point.
# Predicted by kernel time: -2 to -4% non-causal (a CTA's start and end, a few microseconds of its ~48 us at D = 128,
# no longer idle the SM), -3 to -6% causal (shorter CTAs, the same per-CTA cost).
_ROUND_9 = (("mha_fwd_d128", (128, False, False), 1.079), ("mha_fwd_d128_causal", (128, True, False), 1.062),
            ("mha_fwd_d96", (96, False, False), 1.136), ("mha_fwd_d96_causal", (96, True, False), 1.173),
            ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.082))  # (workload, problem, round 8 speedup)
# Measured: persistent lost everywhere (d128 1.091x vs 1.115x, causal 0.974x vs 1.095x, D = 96 1.131x vs 1.137x, D = 96
# causal 1.043x vs 1.162x, GQA 1.047x vs 1.078x): deleted from the template; its points are no longer in this list
# (figures in attention_template.md round 9)
POINTS_9: list[tuple[str, dict, float | None]] = [(wid, dict(_BEFORE_10[problem]), ref) for wid, problem, ref in _ROUND_9]
# Round 10 (written before its run, attention_template.md round 10): split_rows, each row's max and sum as four
# independent chains, against every problem's TUNED point. The reference's profile had "wait" (fixed-latency
# dependencies) as the top stall at the row max (5.6% of samples) and the row sum (4.1%), chains of SN / 4 = 16
# dependent instructions per row at 128-key tiles with two consumer warps per SM sub-partition to hide them.
# Predicted by kernel time: -1 to -3% at the cooperative points (the chains' share of the stalls, partly hidden by
# the P V product in flight), -0.5 to -1.5% under ping-pong (the other consumer's GEMMs already cover its softmax).
_ROUND_10 = (("mha_fwd_d128", (128, False, False), 1.115, 0.98), ("mha_fwd_d128_causal", (128, True, False), 1.095, 0.98),
             ("mha_fwd_d96", (96, False, False), 1.137, 0.98), ("mha_fwd_d96_causal", (96, True, False), 1.162, 0.98),
             ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.078, 0.98),
             ("mha_fwd_d64", (64, False, False), 1.119, 0.99), ("mha_fwd_d64_causal", (64, True, False), 1.035, 0.99),
             ("mha_fwd_d128_gqa_h32_kv8_causal", (128, True, True), 1.103, 0.99))  # (workload, problem, last speedup, time ratio)
# Measured (twice at D = 128 and GQA): -0.7% at D = 128 causal, -1.0% at D = 96 causal and GQA (promoted into TUNED
# there), +1.1% at D = 128, +0.8% at D = 96, +0.7% GQA causal, level at D = 64. The pairs are built from TUNED
# as it was before (_BEFORE_10), so the round reruns as it ran.
POINTS_10: list[tuple[str, dict, float | None]] = [
    point for wid, problem, ref, ratio in _ROUND_10
    for point in ((wid, _BEFORE_10[problem], ref), (wid, {**_BEFORE_10[problem], "split_rows": True}, round(ref / ratio, 3)))]
# Round 11 (written before its run, attention_template.md round 11): split_max, split_rows' max chains without its
# split sums (which cost early_pack's overlap: 44 -> 16-20 exponentials under the P V product; split_max keeps 44),
# against TUNED at the four cooperative D = 128 / 96 points round 10 gained or lost most at. Predicted by kernel time:
# -0.5 to -1.5% at D = 128 (the shorter max chain without the lost overlap), and at the causal, D = 96 causal and GQA
# points level to -0.5% against split_rows (the same max, the overlap back, the sum's chain long again).
_ROUND_11 = (("mha_fwd_d128", (128, False, False), 1.073, 0.99), ("mha_fwd_d128_causal", (128, True, False), 1.068, 0.997),
             ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.091, 0.997),
             ("mha_fwd_d96_causal", (96, True, False), 1.146, 0.997))  # (workload, problem, round 10 speedup, time ratio)
POINTS_11: list[tuple[str, dict, float | None]] = [
    point for wid, problem, ref, ratio in _ROUND_11
    for point in ((wid, dict(_BEFORE_13[problem]), ref),
                  (wid, {**_BEFORE_10[problem], "split_max": True}, round(ref / ratio, 3)))]
# Round 12 (diag_half) and round 14 (dead_tile) measured slower (attention_template.md) and were deleted with the
# options.
# Round 13 (written before its run, attention_template.md round 13): q_regs, Q's A fragments in registers and S by
# register-A wgmma (no Q bytes read from shared memory per key tile), against TUNED where the registers fit. Predicted by
# kernel time: level to -1.5% (the S products' shared-memory reads fall by 1 / 3 at D = 128; how much of the time is
# shared-memory contention is not known), level at D = 64 causal (a third of the bytes, 3 consumers); the causal D = 128 /
# 96 points with 3 of their 240 registers to spare (R237).
_ROUND_13 = (("mha_fwd_d128", 1.079, 0.99), ("mha_fwd_d96", 1.134, 0.99), ("mha_fwd_d128_gqa_h32_kv8", 1.091, 0.99),
             ("mha_fwd_d128_gqa_h32_kv8_causal", 1.069, 0.99), ("mha_fwd_d64_causal", 1.010, 1.0),
             ("mha_fwd_d128_causal", 1.067, 0.99), ("mha_fwd_d96_causal", 1.146, 0.99))
POINTS_13: list[tuple[str, dict, float | None]] = [
    point for wid, ref, ratio in _ROUND_13
    for tuned in [dict(_BEFORE_13.get(tuple(at.problem_of(get_workload(wid)).values()), {}))]
    for point in ((wid, tuned, ref), (wid, {**tuned, "q_regs": True}, round(ref / ratio, 3)))]
# and at D = 128 q_regs with round 11's split_max (the max chains alone: 44 exponentials still under P V with both)
POINTS_13 += [("mha_fwd_d128", {**_BEFORE_13[(128, False, False)], "q_regs": True, "split_max": True}, round(1.079 / 0.98, 3))]
# Round 15 (written before its run, attention_template.md round 15): with q_regs in TUNED no Q bytes are read from shared
# memory per key tile, so two choices measured before it are re-opened at D = 128 and its causal twin: a third K / V
# stage (level at D = 128 when S read Q from shared memory) and ping-pong (slower then at D = 128: the cooperative
# consumers' products overlapped better); and at causal D = 128 split_max in place of split_rows (at D = 128 q_regs
# gained only beside split_max, which keeps the 44 exponentials under P V that split_rows' sums give up). Predicted by
# kernel time: a third stage level to -0.5%, ping-pong level to +1.5%, split_max level to -0.7%.
_ROUND_15 = (("mha_fwd_d128", (128, False, False), 1.10, ({"stages": 3}, 0.997), ({"schedule": "pingpong"}, 1.007)),
             ("mha_fwd_d128_causal", (128, True, False), 1.10, ({"stages": 3}, 0.997), ({"schedule": "pingpong"}, 1.007),
              ({"split_rows": False, "split_max": True}, 0.996)))


def _against_tuned(spec, tuned=TUNED_BEFORE_22) -> list[tuple[str, dict, float | None]]:
    """Each (workload, problem, TUNED's speedup, *(changes, predicted time ratio)): TUNED's point, then each change."""
    return [point for wid, problem, ref, *moves in spec
            for point in [(wid, dict(tuned[problem]), ref)]
            + [(wid, {**tuned[problem], **ch}, round(ref / ratio, 3)) for ch, ratio in moves]]


POINTS_15 = _against_tuned(_ROUND_15)
# Round 16 (tail_split: the last wave's tiles cut over their key tiles) measured +0.7 to +3.6% and was deleted with the
# option (attention_template.md, "Round 16 measured").
# Round 17 (exp_poly: one exponential in 8 or 4 on the FMA pipe as 2^n times a cubic) measured +3.2 to +8.0% and was
# deleted with the option (attention_template.md, "Round 17 measured").
# Round 18 (store_wait="read": the TMA epilogue's last wait for O's staging rows to be read) measured level, -0.1 to
# +0.2% at its four points, and was deleted with the option (attention_template.md, "Round 18 measured").
# Round 19 (written before its run, attention_template.md round 19): stagger, consumer 1's first S issued once consumer
# 0's is done, so consumer 0's first softmax runs under consumer 1's S instead of with the tensor pipe idle, against
# every cooperative TUNED point (the key-tile loop's SASS is TUNED's); first the new barrier at the smoke shapes
# (cooperative 64-key tiles). Predicted by kernel time: -0.6 to -1.0% plain (about 0.45 us of each CTA's 47 us),
# -1.0 to -1.7% causal (26 us CTAs).
_SMOKE_19 = {"consumers": 2, "bn": 64, "epilogue": "tma", "rescale": "lazy", "uniform": True, "stagger": True}
_ROUND_19 = (("mha_fwd_d128", (128, False, False), 1.09, ({"stagger": True}, 0.992)),
             ("mha_fwd_d128_causal", (128, True, False), 1.08, ({"stagger": True}, 0.986)),
             ("mha_fwd_d96", (96, False, False), 1.14, ({"stagger": True}, 0.992)),
             ("mha_fwd_d96_causal", (96, True, False), 1.16, ({"stagger": True}, 0.986)),
             ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.09, ({"stagger": True}, 0.992)))
# TUNED as round 19 knew it (stagger joined it after the round): each pair is that point without and with it
_BEFORE_19 = {problem: _without(point, "stagger") for problem, point in TUNED_BEFORE_22.items()}
POINTS_19 = [(wid, _SMOKE_19, None) for wid in ("smoke_mha_fwd_d64", "smoke_mha_fwd_d64_causal", "smoke_mha_fwd_d64_gqa_h4_kv2")] + [
    point for wid, problem, ref, (change, ratio) in _ROUND_19
    for point in ((wid, _BEFORE_19[problem], ref), (wid, {**_BEFORE_19[problem], **change}, round(ref / ratio, 3)))]
# Round 20 (prefetch_next: the next wave's Q and first K / V tiles prefetched into L2 by the producer) measured level,
# -0.7 to +0.5% at its six points, and was deleted with the option (attention_template.md, "Round 20 measured").
# Round 21 (written before its run, attention_template.md round 21): persistent=True (attention_persistent.py), one
# CTA per SM taking tiles from an atomic counter, each consumer issuing a tile's last P V product with the next tile's
# first S and writing the epilogue under the other consumer's work, against every cooperative TUNED point (with q_regs
# and 40 producer registers, which it needs). Its key-tile loop keeps TUNED's exponentials under the P V product (46 of
# 66 at D = 128, 14 causal: tests/workloads/test_attention_persistent.py). Predicted by kernel time: -2% plain (the 4%
# fixed cost mostly covered, less the counter and the ring's arithmetic), -4% causal (a fixed cost twice the share).
PERSISTENT = {"q_regs": True, "persistent": True, "producer_regs": 40}
_ROUND_21 = (("mha_fwd_d128", (128, False, False), 1.09, ({**PERSISTENT}, 0.98)),
             ("mha_fwd_d128_causal", (128, True, False), 1.09, ({**PERSISTENT}, 0.96)),
             ("mha_fwd_d96", (96, False, False), 1.14, ({**PERSISTENT}, 0.98)),
             ("mha_fwd_d96_causal", (96, True, False), 1.16, ({**PERSISTENT}, 0.96)),
             ("mha_fwd_d128_gqa_h32_kv8", (128, False, True), 1.10, ({**PERSISTENT}, 0.98)))
POINTS_21 = _against_tuned(_ROUND_21)
# Round 22 (written before its run, attention_template.md "Round 22"): round 21's pairs in the other order, and
# q_ahead (the producer loads the next tile's Q a whole tile ahead, not about two key tiles before the consumers need
# it). In round 21 cuDNN read 0.5-3.2% slower beside the second point of every pair, so the speedups favoured it; by
# kernel time the pairs were level (-0.7 to +0.7%). Order per workload: q_ahead, persistent, TUNED. Predicted by
# kernel time: persistent level against TUNED again; q_ahead -0.5 to -1% against persistent where its key-tile loop
# keeps persistent's exponentials under the P V product (causal, D = 96, GQA) and level at D = 128, where ptxas 13.5
# leaves 17 of 66 under it instead of 46 (tests/workloads/test_attention_persistent.py).
POINTS_22 = [pt for i in range(0, len(POINTS_21), 2)
             for pt in ((POINTS_21[i + 1][0], {**POINTS_21[i + 1][1], "q_ahead": True}, POINTS_21[i + 1][2]),
                        POINTS_21[i + 1], POINTS_21[i])]
# Round 23 (written before its run, attention_template.md round 23): round 22's q_ahead pairs read again with the
# point before the walk first, the order of round 21. Predicted by kernel time: -0.4 to -1.2% again.
POINTS_23 = [pt for wid, problem in _COOPERATIVE
             for pt in ((wid, TUNED_BEFORE_22[problem], None), (wid, TUNED_BEFORE_24[problem], None))]
# Round 24 (written before its run, attention_template.md round 24): producer_fn, the walk's producer compiled as a
# function of its own (attention_persistent.py), against TUNED as round 23 left it, each pair in both orders. Its
# key-tile loop keeps 46 of 66 exponentials under the P V product at D = 128 (17 with q_ahead inline), 14 causal (17),
# 36 at D = 96 (36), 19 at D = 96 causal (17), 15 GQA (15). Predicted by kernel time: D = 128 -0.5 to -1%, the other
# four level (-0.3 to +0.3%).
POINTS_24 = ([pt for wid, problem in _COOPERATIVE
              for pt in ((wid, TUNED_BEFORE_24[problem], None), (wid, dict(TUNED_ROUND_25[problem]), None))]
             + [pt for wid, problem in _COOPERATIVE
                for pt in ((wid, dict(TUNED_ROUND_25[problem]), None), (wid, TUNED_BEFORE_24[problem], None))])
# Round 25 (written before its run, attention_template.md round 25): TUNED at D = 128 and D = 128 causal with one of its
# loop options taken out or swapped, each beside TUNED. Those options were chosen before the walk (rounds 8-19), when
# the producer's inline code still moved the key-tile loop's schedule; with producer_fn the loop is scheduled by the
# consumers' code alone, so each is measured again under the walk. TUNED first and last (drift).
_D128, _CAUSAL = TUNED_ROUND_25[(128, False, False)], TUNED_ROUND_25[(128, True, False)]
POINTS_25 = (_between("mha_fwd_d128", _D128, [_without(_D128, "stagger"), _without(_D128, "split_max"),
                                              _swap(_D128, "split_max", "split_rows"), _without(_D128, "early_pack")])
             + _between("mha_fwd_d128_causal", _CAUSAL, [_without(_CAUSAL, "stagger"),
                                                         _swap(_CAUSAL, "split_rows", "split_max"),
                                                         _without(_CAUSAL, "early_pack"), {**_CAUSAL, "lpt_group": 4}]))
# Round 26 (written before its run, attention_template.md round 26): round 25's two gains in the other order (D = 128
# with split_rows for split_max, -1.1%; causal with split_max for split_rows, -0.9%), each between two readings of the
# other, and the same swaps at the other three cooperative points (D = 96 has neither: both tried).
_T = TUNED_ROUND_25
POINTS_26 = (_between("mha_fwd_d128", _swap(_D128, "split_max", "split_rows"), [_D128])
             + _between("mha_fwd_d128_causal", _swap(_CAUSAL, "split_rows", "split_max"), [_CAUSAL])
             + _between("mha_fwd_d96", _T[(96, False, False)], [_swap(_T[(96, False, False)], None, "split_rows"),
                                                                  _swap(_T[(96, False, False)], None, "split_max")])
             + _between("mha_fwd_d96_causal", _T[(96, True, False)], [_swap(_T[(96, True, False)], "split_rows", "split_max")])
             + _between("mha_fwd_d128_gqa_h32_kv8", _T[(128, False, True)],
                        [_swap(_T[(128, False, True)], "split_rows", "split_max")]))
# Round 27 (written before its run, attention_template.md round 27): two more of TUNED's older choices under the walk,
# each pair in both orders: D = 96 without early_pack (round 8 left it off there; rounds 25-26 found it worth 2% at
# D = 128 under the walk) against D = 96 with it, and the eager rescale (rescale "always", which early_pack needs off)
# against the lazy one at D = 128 and causal (rounds 4-5: lazy -0.8 / -0.9% before the walk).
_D96 = TUNED_ROUND_27[(96, False, False)]
_EAGER = {problem: {**_without(TUNED_ROUND_27[problem], "early_pack"), "rescale": "always"}
          for problem in ((128, False, False), (128, True, False))}
POINTS_27 = (_between("mha_fwd_d96", _D96, [{**_D96, "early_pack": True}] * 2)
             + _between("mha_fwd_d128", TUNED_ROUND_27[(128, False, False)], [_EAGER[(128, False, False)]])
             + _between("mha_fwd_d128_causal", TUNED_ROUND_27[(128, True, False)], [_EAGER[(128, True, False)]]))
ROUNDS = {1: POINTS, 2: POINTS_2, 3: POINTS_3, 4: POINTS_4, 5: POINTS_5, 6: POINTS_6, 7: POINTS_7, 8: POINTS_8,
          9: POINTS_9, 10: POINTS_10, 11: POINTS_11, 13: POINTS_13, 15: POINTS_15, 19: POINTS_19, 21: POINTS_21,
          22: POINTS_22, 23: POINTS_23, 24: POINTS_24, 25: POINTS_25, 26: POINTS_26, 27: POINTS_27}
DEFAULTS = {"schedule": "cooperative", "epilogue": "direct", "lpt_group": 0, "rescale": "always"}


def features(changes: dict) -> set[tuple]:
    """The non-default code paths a point takes (for skipping after a hang)."""
    out = {(k, v) for k, v in changes.items() if DEFAULTS.get(k) != v and k in DEFAULTS}
    if changes.get("bn", 128) & (changes.get("bn", 128) - 1):
        out.add(("key_tail", True))
    if changes.get("consumers") == 3:
        out.add(("consumers", 3))
    return out


def round_points(rounds: str) -> list[tuple[str, dict, float | None]]:
    """The points of the comma-separated rounds, in order (SystemExit naming the rounds there are on an unknown one)."""
    out = []
    for r in rounds.split(","):
        if not r.strip().isdigit() or int(r) not in ROUNDS:
            raise SystemExit(f"--round {r!r}: expected one or more of {sorted(ROUNDS)}, comma-separated")
        out += ROUNDS[int(r)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="JSON file to write")
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds after which no new evaluation starts")
    ap.add_argument("--only", default="", help="run only the workloads whose id contains this")
    ap.add_argument("--round", default="1", help=f"which lists of points, comma-separated, run in that order in one "
                    f"evaluator (one of {sorted(ROUNDS)} each)")
    ap.add_argument("--trials", type=int, default=1, help="timing trials per point (each interleaved with cuDNN)")
    args = ap.parse_args()

    from compile_first import compile_first
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    t0 = time.time()
    ev = LocalEvaluator()
    ev.start_in_background()  # the GPU workers start while the points compile
    points = round_points(args.round)
    chosen = [(wid, at.params_for(get_workload(wid), **changes)) for wid, changes, _ in points if args.only in wid]
    compile_first(ev, [(wid, at.render(p)) for wid, p in chosen if not at.validate(p, get_workload(wid))], "points")
    hung: list[set] = []
    rows = []
    for wid, changes, predicted in points:
        if args.only not in wid:
            continue
        w = get_workload(wid)
        params = at.params_for(w, **changes)
        row = {"workload": wid, "changes": changes, "params": params.model_dump(), "predicted": predicted}
        feats = features(changes)
        problems = at.validate(params, w)
        if problems:
            row |= {"status": "INVALID", "message": "; ".join(problems)}
        elif time.time() - t0 > args.deadline:
            row |= {"status": "SKIPPED", "message": "past the deadline"}
        elif any(h and h <= feats for h in hung):
            row |= {"status": "SKIPPED", "message": "shares the code paths of a point that timed out"}
        else:
            t1 = time.time()
            smoke = wid.startswith("smoke_")
            r = ev.evaluate(wid, at.render(params), EvalOptions(timeout_s=20 if smoke else 40, trials=args.trials,
                                                                 profile_on_pass=False))
            t = r.timing
            row |= {"status": r.status, "message": (r.message or "")[:300], "wall_s": round(time.time() - t1, 1),
                    "speedup": t.speedup if t else None, "ci": list(t.speedup_ci) if t and t.speedup_ci else None,
                    "kernel_ms": t.candidate.median_ms if t else None,
                    "cudnn_ms": t.baselines[t.primary_baseline].median_ms if t else None}
            if r.status == "TIMEOUT":
                hung.append(feats)
        rows.append(row)
        sp = f"{row['speedup']:.3f}x {row['ci']}" if row.get("speedup") else "-"
        print(f"[{time.time() - t0:6.1f}s] {wid:28s} {json.dumps(changes):75s} {row['status']:20s} {sp:30s} "
              f"predicted {predicted}  {row.get('message', '')[:120] if row['status'] != 'PASSED' else ''}", flush=True)
        with open(args.out, "w") as f:  # after every point: a killed call keeps what it measured
            json.dump(rows, f, indent=1)
    ev.close()
    print(f"done in {time.time() - t0:.0f} s: {sum(r['status'] == 'PASSED' for r in rows)} passed of {len(rows)}")


if __name__ == "__main__":
    main()
