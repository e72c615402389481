"""builtin/tuner's rules: from what the evaluations said (an Evidence) to a ranked list of moves.

A move pulls one lever of the template (its TUNER_LEVERS: role -> parameter and favoured value; the
GEMM's names when a template declares none). Each move has a prior worth (the share of time it was
worth on Hopper GEMMs: bench/results/gemm_reference.md, shared/design/HOPPER-KERNELS.md), which the
evidence multiplies:

    DRAM bytes over the minimum / memory-bound -> grouped tile order, bigger tiles, cluster multicast, L2 eviction
        priorities (cache); a quarter of that weight when the kernel is compute-bound with its DRAM under
        DRAM_BUSY_PCT (40%) busy (the bytes move under the math), or memory-bound by L1/shared memory or L2 with its
        DRAM that idle (DRAM is not the limit; nor are other moves ranked down as if DRAM were saturated)
    compute-bound, traffic hidden, TMA epilogue on a persistent grid -> the epilogue deferred under the next tile's
        k-loop (the tensor pipe's idle share is where the epilogue runs between tiles)
    consumers waiting on stage data (hot line, else long-scoreboard stalls) -> deeper ring
    epilogue lines hot -> TMA-store epilogue, persistent grid (stores overlap the next tile); with both, the
        epilogue deferred under the next tile's k-loop (overlap)
    tensor pipe idle with one consumer warpgroup (not memory-bound: there it idles for its bytes), or latency-bound
        -> more consumers, persistence, ring; memory-bound moves (bigger tiles, tile order) only with DRAM bytes over
        the minimum to cut
    spills -> narrower tile or more consumers;  a resource failure -> shrink ring, then tiles
    compute-bound at a clock the power limit set (the profile's SM clock under 90% of the GPU's top) -> the moves the
        template's TUNER_ENERGY measured to raise that clock at the same cycles (less energy a cycle: the GEMM's L2
        eviction priorities) up, those measured to lower it (the GEMM's 2-CTA cluster) ranked down
    within 5% of the roof -> small, safe moves first (structural ones ranked down)
The attention forward's roles (workloads/solutions/attention_template.py):
    the softmax lines hot while the tensor pipe is not saturated -> ping-pong schedule (schedule; worth nothing
        with two consumers off causal, where it measured slower), the lazy rescale (rescale; worth nothing at D = 64),
        P packed ahead of its branch (early_pack), the row chains split (split_rows, split_max), stagger
    the wgmma issue lines hot -> the warp-uniform consumer index (uniform); the shared-memory queue full there
        (mio_throttle with the tensor pipe under TENSOR_FULL_PCT busy: above it, the tensor cores' own rate) ->
        Q's fragments in registers (q_regs)
    the epilogue hot or latency-bound -> the persistent walk (persistent: a TUNER_BUNDLES move, below)
    the tensor pipe under 75% busy with key tiles shorter than 128 -> a longer key tile (key_tile)
    spills -> a shorter key tile, a smaller producer register budget;  causal -> longest-first order (lpt)
The attention backward's (workloads/solutions/attention_bwd_template.py):
    the dQ reduction lines hot -> dQ by bulk reduce-adds from shared memory (dq_reduce)
    the exponentials or the consumers' barrier hot -> decoupled consumers (schedule, as the forward's ping-pong)
A template may declare TUNER_ENERGY (role -> (the SM clock's measured change under the power limit, as a fraction,
and what was measured)), TUNER_PRIORS (role -> worth, or worth(old, new, params)) and TUNER_WORDS (role -> what the move
is, or a function of the point moved to that says it) to replace the GEMM's numbers and words for its roles.
TUNER_BUNDLES (role -> {parameter: value}): a change that measured faster only as a whole, one move setting every value
(repaired as a lever move is; a loss is kept for the bundle, not its values); OPTION_DEFAULTS (option -> default):
the options a dump leaves out, read at their defaults so moves and repairs can set them (points are written back as a
dump writes them, so one point has one key).

Without a profile only the timing (roof share) and the compile resources speak, and the priors rank.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from ptxbench.tools.profile.feedback import TENSOR_FULL_PCT
from ptxbench.tools.profile.summary import traffic_hidden

from .evidence import Evidence
from .tuner_space import Params, fit, ordered

DEFAULT_LEVERS: dict[str, tuple[str, Any]] = {
    "tile_n": ("bn", None), "tile_m": ("bm", None), "warps": ("consumers", None), "ring": ("stages", None),
    "chunk": ("bk", None), "epilogue": ("epilogue", "tma"), "persistent": ("persistent", True),
    "order": ("group_m", 8), "multicast": ("cluster_m", 2), "overlap": ("defer", True),
}
DEFAULT_LINES: dict[str, tuple[str, ...]] = {"stage_wait": ("mbar_wait(&full",), "epilogue": ("store_tile",),
                                             "mma_issue": ("wgmma",)}
NEAR_ROOF_PCT = 5.0     # the profile feedback's "small, safe changes" zone
TRAFFIC_BOUND = 4.0     # DRAM bytes over the minimum from which a memory-bound kernel is starved by traffic
STRUCTURAL = {"tile_n", "tile_m", "warps", "chunk", "key_tile"}
TRAFFIC = {"order", "tile_n", "tile_m", "multicast", "cache"}  # the moves that cut DRAM bytes
COMPOUNDS = {"tile": ("tile_m", "tile_n")}  # role -> the lever roles it pulls together
SHRINK_FIRST = {"ring": 50, "tile_n": 20, "key_tile": 20, "tile_m": 10, "producer": 5}  # after a resource failure: the ring is the cheapest to give
RING_STEP = 2           # a stage per load in flight and one being consumed: +2 is the useful step
GROW_TO_MAX = {"tile_n"}  # wgmma's N: the widest that builds (256 on the GEMM) is the fast one
POW2_FIRST = {"key_tile"}  # the next power of two first: it divides S, so no masked key-tail step
KEY_TILE_FULL = 128     # key tiles shorter than this leave each wgmma short against its barrier round-trips
TENSOR_BUSY = 75.0      # below this tensor-pipe share a short key tile is the suspect
HIDDEN_TRAFFIC_WEIGHT = 0.25  # what DRAM bytes over the minimum still count for when the traffic is hidden
# Under the power limit a move's measured clock change is evidence for or against it: the one that raised the clock
# at the same cycles gains this weight, the one that lowered it keeps this share of its score.
ENERGY_WEIGHT = 1.0
ENERGY_DISCOUNT = 0.25
SOFTMAX_HOT = 8.0       # stall share (percent) of the softmax lines from which ping-pong is worth trying
MMA_ISSUE_HOT = 10.0    # stall share (percent) of the wgmma issue lines from which their descriptors' cost is the suspect
WORDS = {
    "epilogue": "staged TMA-store epilogue (~8% over register stores on the H200)",
    "persistent": "a persistent grid (one CTA per SM: a tile's stores overlap the next tile's loads, ~3%)",
    "order": "grouped tile order (the tiles in flight share A rows and B columns in L2)",
    "multicast": "a 2-CTA cluster multicasting B (each B tile leaves L2 once per cluster)",
    "ring": "a deeper ring (more TMA loads in flight ahead of the math)",
    "tile_n": "a wider tile (A re-read fewer times per FLOP)",
    "tile_m": "a taller tile (B re-read fewer times per FLOP)",
    "tile": "a bigger tile (each operand byte feeds more FLOPs: fewer re-reads of A and B)",
    "warps": "more consumer warpgroups (one alone cannot keep the tensor pipe busy)",
    "chunk": "more K per stage (fewer barrier round-trips)",
    "key_tile": "a longer key tile",
    "schedule": "the ping-pong schedule (one consumer's softmax under the other's GEMMs)",
    "lpt": "longest-first tile order across groups of heads",
    "producer": "a different producer register budget",
    "dq_reduce": "dQ by bulk reduce-adds from shared memory",
    "overlap": "the epilogue deferred under the next tile's k-loop (the tile kept as packed bf16 pairs, ~1%)",
    "cache": "L2 eviction priorities (A's strips kept for the next round, B's and C's streamed through: ~0.6%)",
}


def words_of(template: ModuleType | None) -> dict[str, Any]:
    return {**WORDS, **getattr(template, "TUNER_WORDS", {})} if template is not None else WORDS


@dataclass
class Candidate:
    params: Params
    role: str
    kind: str
    label: str
    score: float
    reasons: list[str] = field(default_factory=list)


# A move whose value this run already measured slower keeps this share of its prior worth and loses its evidence
# boost: it stays a choice (another base may suit it, and timing noise is about 1%) but no longer leads on evidence
# the measurement contradicted.
LOST_DISCOUNT = 0.2
# A move whose point failed (no build, a timeout, wrong output) keeps this share: the same values from another base
# would likely fail the same way, so every untried move comes first and it stays only as a last resort.
FAILED_DISCOUNT = 0.01


class Lesson(str):
    """What a move of this run taught (the sentence rank() gives as its reason); `failed`: its point failed, rather
    than ran slower."""

    failed: bool = False

    def __new__(cls, text: str, failed: bool = False) -> "Lesson":
        lesson = super().__new__(cls, text)
        lesson.failed = failed
        return lesson


def discount(lesson: str) -> float:
    return FAILED_DISCOUNT if getattr(lesson, "failed", False) else LOST_DISCOUNT


def energy_of(template: ModuleType) -> dict[str, tuple[float, str]]:
    """The template's TUNER_ENERGY: role -> (the SM clock's change the move measured under the power limit, at the
    same cycles, as a fraction; what was measured)."""
    return getattr(template, "TUNER_ENERGY", {})


def clock_words(ev: Evidence) -> str:
    return f"the SMs ran at {ev.sm_mhz:,.0f} of {ev.top_mhz:,.0f} MHz, a clock the power limit sets"


def levers_of(template: ModuleType) -> dict[str, tuple[str, Any]]:
    levers = getattr(template, "TUNER_LEVERS", DEFAULT_LEVERS)
    return {role: lever for role, lever in levers.items() if lever[0] in template.PARAM_SPACE}


def bundles_of(template: ModuleType) -> dict[str, dict[str, Any]]:
    """The template's TUNER_BUNDLES (role -> {parameter: value}): moves that set several parameters at once, for a
    change that measured faster only as a whole; those whose parameters are all searched."""
    bundles = getattr(template, "TUNER_BUNDLES", {})
    return {role: dict(values) for role, values in bundles.items()
            if all(name in template.PARAM_SPACE and value in template.PARAM_SPACE[name] for name, value in values.items())}


def bundle_lesson(role: str) -> tuple[str, str]:
    """The key a bundle's measured loss is kept under in rank()'s `lost` (a lever's is (parameter, value))."""
    return role, "bundle"


def compound_lesson(role: str, values: Params) -> tuple[str, Any]:
    """The key a compound move's loss is kept under in rank()'s `lost`: its role and the values it set together."""
    return role, tuple(sorted(values.items()))


def completed(template: ModuleType, params: Params) -> Params:
    """`params` with the searched options it leaves out at their defaults (a template's OPTION_DEFAULTS: a dump
    leaves an option out while it holds its default), so moves and repairs can read and change them."""
    defaults = getattr(template, "OPTION_DEFAULTS", {})
    return {**{n: v for n, v in defaults.items() if n in template.PARAM_SPACE}, **params}


def canonical(template: ModuleType, point: Params, params: Params) -> Params:
    """`point` without the options `params` left out and `point` still holds at their defaults (as a dump writes
    it: the same point keeps one key, so the tuner never submits it twice)."""
    defaults = getattr(template, "OPTION_DEFAULTS", {})
    return {n: v for n, v in point.items() if n in params or n not in defaults or v != defaults[n]}


def prior(role: str, kind: str, old: Any, new: Any, table: dict[str, Any] | None = None,
          params: Params | None = None) -> float:
    """What a move was worth (fraction of the time), before any evidence: the template's TUNER_PRIORS for its
    roles (a number, or worth(old, new, params) of the point moved from), else what it was worth on Hopper GEMMs."""
    if kind == "down":
        return 0.001
    if table and role in table:
        worth = table[role]
        return float(worth(old, new, params or {}) if callable(worth) else worth)
    if role == "ring":
        return 0.05 if old <= 2 else 0.01 if old <= 3 else 0.003
    if role == "tile_n":
        return 0.08 * math.log2(new / old)
    if role == "warps":
        return 0.10 if old <= 1 else 0.003
    if role == "tile_m":
        return 0.03 if old < 128 else 0.003  # past 128 rows the accumulators crowd out the wider N tile
    if kind == "up" and role in ("order", "multicast"):  # beyond the favoured value: level on the H200
        return 0.004
    return {"epilogue": 0.08, "persistent": 0.03, "order": 0.05, "multicast": 0.005,
            "chunk": 0.002, "overlap": 0.011, "cache": 0.006}.get(role, 0.001)


def read(ev: Evidence | None, lines: dict[str, tuple[str, ...]], params: Params,
         levers: dict[str, tuple[str, Any]], bundles: dict[str, dict[str, Any]] | None = None,
         energy: dict[str, tuple[float, str]] | None = None,
         measured: Params | None = None) -> dict[tuple[str, str], list[tuple[float, str]]]:
    """Evidence -> {(role, kind): [(weight, why)]}: which moves the evaluation points at (a bundle's role, as the
    persistent walk, is read as the lever of that role would be). `measured`: the point the profile was taken at,
    when not `params` (the base was not profiled): a figure read against a lever's value (the tensor pipe's share
    with one consumer warpgroup, with 64-key tiles) speaks only where the profiled point held that value too."""
    at = params if measured is None else measured
    boosts: dict[tuple[str, str], list[tuple[float, str]]] = {}
    bundles = bundles or {}

    def add(role: str, kind: str, weight: float, why: str) -> None:
        if (role in levers or role in bundles) and weight > 0:
            boosts.setdefault((role, kind), []).append((weight, why))

    if params.get("causal") and "lpt" in levers:  # the problem, not a measurement: causal rows differ in length
        add("lpt", "goal", 1.0, "causal: the query tiles' lengths differ (1 to S / BN key tiles)")
    if ev is None or not ev.profiled:
        return boosts
    grow_n = "up"
    ratio = ev.dram_over_min
    hidden = traffic_hidden(ev.bottleneck, ev.dram_sol_pct)
    under_math = (f"compute-bound (compute {ev.compute_sol_pct or 0:.0f}% of peak) with DRAM {ev.dram_sol_pct:.0f}% busy"
                  if hidden else "")
    # memory-bound by L1/shared memory or L2 with DRAM idle: the DRAM bytes are not the limit either
    dram_idle = ev.dram_idle_memory_bound
    if ratio is not None and ratio >= 1.5:
        w = math.log2(ratio) * (HIDDEN_TRAFFIC_WEIGHT if hidden or dram_idle else 1.0)
        why = f"DRAM moved {ratio:.1f}x the minimum bytes" + (f", but {under_math}: they move under the math"
                                                               if hidden else "")
        if dram_idle:
            why += (f", but DRAM was only {ev.dram_sol_pct:.0f}% busy: the memory limit is {ev.busiest_memory()}, "
                    "not DRAM, so these bytes are worth little")
        order_goal = levers.get("order", (None, None))[1]
        add("order", "goal" if params.get(levers.get("order", ("",))[0]) != order_goal else "up", 3 * w, why)
        add("tile_n", grow_n, w, why)
        add("tile_m", "up", w, why)
        add("multicast", "goal", w, why)
        add("cache", "goal", w, why)
    # bigger tiles and another tile order cut re-read bytes: with DRAM at its minimum bytes there are none to cut
    if ev.bottleneck == "memory" and (ratio is None or ratio >= 1.5):
        why = f"memory-bound (memory {ev.memory_sol_pct or 0:.0f}% of peak, compute {ev.compute_sol_pct or 0:.0f}%)"
        for role, kind in (("tile_n", grow_n), ("tile_m", "up"), ("order", "goal")):
            add(role, kind, 1.0, why)
    stage = _line_share(ev, lines.get("stage_wait", ()))
    # Stage data that arrive late because DRAM is saturated ask for less traffic, not a deeper ring.
    starved = _starved(ev)
    if stage[0] >= 5:
        why = f"consumers wait {stage[0]:.0f}% of stall samples for stage data ({stage[1]})"
        add("ring", "up", stage[0] / (20 if starved else 5), why + (": late because DRAM is saturated" if starved else ""))
    elif not ev.hot_lines and ev.stall_shares.get("long_scoreboard", 0) >= 0.3:
        add("ring", "up", 1.0, f"long-scoreboard waits are {100 * ev.stall_shares['long_scoreboard']:.0f}% of stalls")
    epi = _line_share(ev, lines.get("epilogue", ()))
    if epi[0] >= 3:
        why = f"the epilogue holds {epi[0]:.0f}% of stall samples ({epi[1]})"
        add("epilogue", "goal", epi[0] / 3, why)
        add("persistent", "goal", epi[0] / 6, why)
        epi_name, epi_goal = levers.get("epilogue", (None, None))
        if epi_name is not None and params.get(epi_name) == epi_goal:
            add("overlap", "goal", epi[0] / 3, why + ", with the TMA store already: it can run under the next tile")
    if hidden and "overlap" in levers and all(params.get(levers[role][0]) == levers[role][1]
                                              for role in ("epilogue", "persistent") if role in levers):
        idle = 100 - (ev.tensor_pipe_pct if ev.tensor_pipe_pct is not None else ev.compute_sol_pct or 0)
        add("overlap", "goal", 1.0, f"{under_math}: what is left is the tensor pipe's idle {idle:.0f}%, where each "
                                    "tile's epilogue runs before the next tile's math")
    issue = [h for h in ev.hot_lines if any(p in h.text for p in lines.get("mma_issue", ())) and h.reason == "mio_throttle"]
    # with the tensor pipe near its peak a wgmma waiting to issue meets the tensor cores' own rate, not a full
    # shared-memory queue (the profile feedback's at_wgmma_full: the main GEMM's wgmma line at 94% busy)
    tensor_full = ev.tensor_pipe_pct is not None and ev.tensor_pipe_pct >= TENSOR_FULL_PCT
    if issue and issue[0].share_pct >= 15 and not tensor_full:
        add("tile_n", grow_n, 1.0, f"the shared-memory queue is full at the wgmma line ({issue[0].share_pct:.0f}%)")
        add("q_regs", "goal", 1.0, f"the shared-memory queue is full at the wgmma line ({issue[0].share_pct:.0f}%): "
                                   "Q read from registers takes its bytes off that queue every key tile")
    mma = _line_share(ev, lines.get("mma_issue", ()))
    if mma[0] >= MMA_ISSUE_HOT:
        add("uniform", "goal", mma[0] / 10, f"the wgmma issue lines hold {mma[0]:.0f}% of stall samples ({mma[1]}): "
                                            "each issue rebuilds its descriptors (R2UR) while ptxas cannot tell the "
                                            "consumer index is warp-uniform")
    tensor = ev.tensor_pipe_pct
    warps_now = params.get(levers.get("warps", ("",))[0])
    # a memory-bound kernel's tensor pipe idles for its bytes (the profile feedback drops its tensor-idle item there)
    if (tensor is not None and tensor < 60 and warps_now is not None and warps_now <= 1 and ev.bottleneck != "memory"
            and at.get(levers["warps"][0]) == warps_now):
        add("warps", "up", 3.0, f"the tensor pipe is busy {tensor:.0f}% of the time with {warps_now} consumer warpgroup")
    if ev.bottleneck == "latency":
        why = f"latency-bound (compute {ev.compute_sol_pct or 0:.0f}%, memory {ev.memory_sol_pct or 0:.0f}% of peak)"
        for role, kind in (("warps", "up"), ("persistent", "goal"), ("ring", "up")):
            add(role, kind, 1.0, why)
    soft = _line_share(ev, lines.get("softmax", ()))
    if soft[0] >= SOFTMAX_HOT and (tensor is None or tensor < 90):
        busy = f", the tensor pipe busy only {tensor:.0f}% of the time" if tensor is not None else ""
        add("schedule", "goal", soft[0] / 10, f"the softmax holds {soft[0]:.0f}% of stall samples ({soft[1]}){busy}: "
                                              "the tensor pipe idles while the softmax runs")
        add("rescale", "goal", soft[0] / 10, f"the softmax holds {soft[0]:.0f}% of stall samples ({soft[1]}): "
                                             "most tiles leave the row max where it was, so their O rescale can go")
        add("early_pack", "goal", soft[0] / 10, f"the softmax holds {soft[0]:.0f}% of stall samples ({soft[1]}): "
                                                "packed ahead of the rescale's branch, its exponentials run under the "
                                                "P V product")
        chains = f"the softmax holds {soft[0]:.0f}% of stall samples ({soft[1]}): its row chains wait on fixed latency"
        add("split_rows", "goal", soft[0] / 20, chains)
        add("split_max", "goal", soft[0] / 20, chains)
        add("stagger", "goal", soft[0] / 20, f"the softmax holds {soft[0]:.0f}% of stall samples ({soft[1]}): the "
                                             "first one runs with the tensor pipe idle")
    dq = _line_share(ev, lines.get("dq_reduce", ()))
    if dq[0] >= 5:
        add("dq_reduce", "goal", dq[0] / 5, f"the dQ reductions hold {dq[0]:.0f}% of stall samples ({dq[1]})")
    key_name = levers.get("key_tile", ("",))[0]
    bn = params.get(key_name)
    if (tensor is not None and tensor < TENSOR_BUSY and isinstance(bn, int) and bn < KEY_TILE_FULL
            and at.get(key_name) == bn):
        add("key_tile", "up", 1 + (TENSOR_BUSY - tensor) / 15,
            f"the tensor pipe is busy {tensor:.0f}% of the time with {bn}-key tiles")
    if ev.power_limited:
        for role, (change, measured) in (energy or {}).items():
            if change > 0:
                add(role, "goal", ENERGY_WEIGHT, f"{clock_words(ev)}: {measured}")
    if ev.spills:
        why = f"ptxas spilled ({ev.spills} spill instructions)"
        add("tile_n", "down", 3.0, why)
        add("key_tile", "down", 3.0, why)
        add("producer", "down", 1.0, why)
        if "tile_m" in levers:  # where more consumers split the tile's rows (the GEMM); in attention they add rows
            add("warps", "up", 2.0, why)
    return boosts


def repair_names(point: Params, params: Params) -> list[str]:
    return [n for n in point if point[n] != params.get(n)]


def _starved(ev: Evidence) -> bool:
    """Memory-bound by DRAM traffic: TRAFFIC_BOUND times the minimum bytes or more, through a DRAM that is busy (one
    left idle while L1/shared memory or L2 holds the kernel is not saturated by them)."""
    return ev.bottleneck == "memory" and (ev.dram_over_min or 0) >= TRAFFIC_BOUND and not ev.dram_idle_memory_bound


def _line_share(ev: Evidence, patterns: tuple[str, ...]) -> tuple[float, str]:
    hits = [h for h in ev.hot_lines if any(p in h.text for p in patterns)]
    if not hits:
        return 0.0, ""
    top = max(hits, key=lambda h: h.share_pct)
    return sum(h.share_pct for h in hits), f"line {top.line} `{top.text[:48]}`"


def rank(template: ModuleType, params: Params, ev: Evidence | None, valid: Callable[[Params], bool], *,
         headroom: float | None = None, shrink: bool = False,
         lost: dict[tuple[str, Any], str] | None = None, measured: Params | None = None) -> list[Candidate]:
    """Every buildable one-lever move from `params`, and each of the template's bundles, best first. `lost`:
    (parameter, value) -> what happened when a move of this run set it and ran slower than the best before it (a
    bundle's: bundle_lesson(role)); a move that sets it again is ranked down. `measured`: the point `ev` was
    profiled at, where that is not `params` (read())."""
    given = params
    params = completed(template, params)
    levers = levers_of(template)
    bundles = bundles_of(template)
    lines = getattr(template, "TUNER_LINES", DEFAULT_LINES)
    table = getattr(template, "TUNER_PRIORS", None)
    space = template.PARAM_SPACE
    energy = energy_of(template)
    boosts = read(ev, lines, params, levers, bundles, energy,
                  completed(template, measured) if measured is not None else None)
    powered = ev is not None and ev.power_limited
    starved = ev is not None and _starved(ev)
    ring = levers.get("ring", (None,))[0]
    goals = {name: goal for name, goal in levers.values() if goal is not None}
    for values in bundles.values():  # a bundle the point holds whole: a repair leaves it alone if it can
        if all(params.get(n) == v for n, v in values.items()):
            goals.update(values)
    near_roof = headroom is not None and headroom <= NEAR_ROOF_PCT
    out: list[Candidate] = []
    for role, (name, goal) in levers.items():
        old = params.get(name)
        for kind, tries in _targets(role, space[name], old, goal):
            frozen = role == "ring"  # a deeper ring that does not fit is no move: never shrink the tile for it
            for new in tries:
                fitted = fit({**params, name: new}, name, {} if frozen else space, valid, ring=ring, goals=goals)
                if fitted is not None:
                    break
            if fitted is None:
                continue
            point, repair = fitted
            evidence = boosts.get((role, kind), [])
            score = prior(role, kind, old, new, table, params) * (1 + sum(w for w, _ in evidence))
            reasons = [why for _, why in evidence]
            if starved and role not in TRAFFIC:
                score *= 0.25
                reasons.append(f"ranked down while DRAM is saturated ({ev.dram_over_min:.0f}x the minimum bytes)")
            if powered and kind == "goal" and energy.get(role, (0.0, ""))[0] < 0:
                score *= ENERGY_DISCOUNT
                reasons.append(f"ranked down: {clock_words(ev)}, and {energy[role][1]}")
            if near_roof and (role in STRUCTURAL or kind == "down"):
                score *= 0.1
                where = f"within {headroom:.0f}% of the roof" if headroom >= 0.5 else "at the roof"
                reasons.append(f"{where}: a structural change ranked down")
            if shrink:
                shrinking = SHRINK_FIRST.get(role, 0) if kind == "down" else 0
                score *= shrinking or 0.1
                if shrinking:
                    reasons.append("the last try ran out of resources")
            undone = [n for n in repair_names(point, params) if n != name and n in goals and params.get(n) == goals[n]]
            if undone:
                score *= 0.2  # a repair that gives up a favoured value costs what that value was worth
            if lost and (name, point[name]) in lost:  # this run measured it: the evidence for it did not hold here
                score = prior(role, kind, old, new, table, params) * discount(lost[(name, point[name])])
                reasons = [lost[(name, point[name])]]
            label = f"{name} {old} -> {new}" + (f" (and {', '.join(repair)} so it builds)" if repair else "")
            out.append(Candidate(point, role, kind, label, score, reasons))
    out += _bundles(bundles, out, levers, params, boosts, table, space, valid, ring, goals, lost)
    out += _compounds(out, params, levers, space, valid, ring, goals, lost)
    for c in out:
        c.params = canonical(template, c.params, given)
    return sorted(out, key=lambda c: -c.score)


def _bundles(bundles: dict[str, dict[str, Any]], singles: list[Candidate], levers: dict[str, tuple[str, Any]],
             params: Params,
             boosts: dict[tuple[str, str], list[tuple[float, str]]], table: dict[str, Any] | None,
             space: dict[str, list], valid: Callable[[Params], bool], ring: str | None, goals: dict[str, Any],
             lost: dict[tuple[str, Any], str] | None) -> list[Candidate]:
    """A template's bundles (TUNER_BUNDLES) as moves: every value at once, repaired as a lever move is (validate()
    says what else the point needs), worth the bundle's prior x the evidence for its role, plus (as a compound move)
    the single moves its repair makes too (the walk's TMA epilogue, say)."""
    out = []
    for role, values in bundles.items():
        if all(params.get(n) == v for n, v in values.items()):
            continue
        fitted = fit({**params, **values}, set(values), space, valid, ring=ring, goals=goals)
        if fitted is None:
            continue
        point, repair = fitted
        evidence = boosts.get((role, "goal"), [])
        worth = prior(role, "goal", None, values, table, params)
        score = worth * (1 + sum(w for w, _ in evidence))
        reasons = [why for _, why in evidence]
        if any(n not in values and n in goals and params.get(n) == goals[n] for n in repair_names(point, params)):
            score *= 0.2
        if lost and bundle_lesson(role) in lost:
            score, reasons = worth * discount(lost[bundle_lesson(role)]), [lost[bundle_lesson(role)]]
        else:
            gain, more = _made(singles, point, levers, among=[n for n in repair_names(point, params) if n not in values])
            score += gain
            reasons = list(dict.fromkeys(reasons + more))
        label = (f"{role}: " + ", ".join(f"{n} {params.get(n)} -> {v}" for n, v in values.items() if params.get(n) != v)
                 + (f" (and {', '.join(repair)} so it builds)" if repair else ""))
        out.append(Candidate(point, role, "goal", label, score, reasons))
    return out


def _compounds(singles: list[Candidate], params: Params, levers: dict[str, tuple[str, Any]], space: dict[str, list],
               valid: Callable[[Params], bool], ring: str | None, goals: dict[str, Any],
               lost: dict[tuple[str, Any], str] | None = None) -> list[Candidate]:
    """Moves that are one idea over two levers (a bigger tile: taller and wider at once), worth both parts; one that
    this run measured slower, or whose point failed, at the same values (compound_lesson) is ranked down."""
    out = []
    for role, parts in COMPOUNDS.items():
        ups = [next((c for c in singles if c.role == r and c.kind == "up"), None) for r in parts]
        if None in ups:
            continue
        names = {levers[r][0] for r in parts}
        fitted = fit({**params, **{n: ups[i].params[n] for i, n in enumerate(levers[r][0] for r in parts)}},
                     names, space, valid, ring=ring, goals=goals)
        if fitted is None:
            continue
        point, _ = fitted
        changes = ", ".join(f"{n} {params[n]} -> {point[n]}" for n in point if point[n] != params.get(n))
        score, reasons = _made(singles, point, levers)  # its repair may add a consumer warpgroup, say
        lesson = (lost or {}).get(compound_lesson(role, {n: point[n] for n in names}))
        if lesson is not None:
            score, reasons = score * discount(lesson), [lesson]
        out.append(Candidate(point, role, "up", changes, score, list(dict.fromkeys(reasons))))
    return out


def _made(singles: list[Candidate], point: Params, levers: dict[str, tuple[str, Any]],
          among: list[str] | None = None) -> tuple[float, list[str]]:
    """The single up / goal moves that `point` (a compound's or a bundle's) makes too, credited to it: their summed
    score and their reasons, without the rank-down notes; `among`: only moves of these parameters."""
    made = [c for c in singles if c.kind in ("up", "goal") and (among is None or levers[c.role][0] in among)
            and point.get(levers[c.role][0]) == c.params.get(levers[c.role][0])]  # an option may be left out of a dump
    return sum(c.score for c in made), [r for c in made for r in c.reasons if not r.startswith(("ranked down", "within"))]


def _targets(role: str, values: list, old: Any, goal: Any) -> list[tuple[str, list]]:
    """(kind, the values to try in turn) for one lever at `old`: the first that builds is the move."""
    out: list[tuple[str, list]] = []
    if goal is not None and goal in values and old != goal:
        out.append(("goal", [goal]))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) or old not in values:
        return out
    above = [v for v in ordered(values) if v > old]
    if goal is None or goal == old:
        if role in GROW_TO_MAX:
            tries = above[::-1]  # the widest that builds
        elif role in POW2_FIRST:
            tries = list(dict.fromkeys([v for v in above if v & (v - 1) == 0][:1] + above[:1]))
        else:
            tries = above[:RING_STEP][::-1] if role == "ring" else above[:1]
        if tries:
            out.append(("up", tries))
    below = [v for v in ordered(values) if v < old]
    if goal is None and below:
        out.append(("down", below[-1:]))
    return out
