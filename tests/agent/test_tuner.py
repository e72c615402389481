"""builtin/tuner reads the feedback: evidence from a real H200 evaluation, the rule each finding fires,
the weak start, and the climb from it.

The climb tests run against tests/tuner_sim.py, a SIMULATED evaluator: a speed model fitted to the
H200's measurements of the template's variants, with synthetic profiles (no GPU, no ncu). They show
that the path from weak_params() to the default point (measured 0.98-1.01x cuBLAS) is found within 7
moves from feedback of that shape, with and without per-turn profiles; whether a real run crosses 1.0x
is measured on the H200 by bench/tuner_climb.sh.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ptxbench.agent.loop.extract import extract_solution
from ptxbench.agent.models import ModelRequest, TurnOutcome, load_model
from ptxbench.agent.models.evidence import Evidence, HotSpot, evidence_from
from ptxbench.agent.models.tuner import TunerModel, WeakTunerModel
from ptxbench.agent.models.tuner_rules import rank
from ptxbench.tools.results import EvalResult
from ptxbench.workloads.solutions import gemm_template as gt

from tuner_sim import SimulatedEvaluator, model_speedup

ROOT = Path(__file__).resolve().parents[2]
MAIN = "gemm_bf16_m8192_n7168_k5120"
RECORDED = json.loads((ROOT / "bench/results/profile_gemm_2026-11-30.json").read_text())
DEFAULT = gt.default_params().model_dump()
WEAK = gt.weak_params().model_dump()


def recorded(profiled: bool = True) -> EvalResult:
    result = EvalResult.model_validate(RECORDED)
    if not profiled:  # what a turn that took only the runtime verdict and the timing carries
        result.profile, result.feedback = None, ""
    return result


def test_evidence_from_a_real_h200_evaluation():
    ev = evidence_from(recorded())
    assert ev.profiled and ev.bottleneck == "compute" and 0.9 < ev.headroom_pct < 1.0  # 100 - sol_pct, as unprofiled
    assert 3.3 < ev.dram_over_min < 3.5 and ev.registers == 168 and ev.spills == 0
    assert ev.hot_lines[0].text.startswith("wgmma_wait") and ev.hot_lines[0].reason == "barrier"
    assert ev.targets == {"wgmma": "executed", "tma": "executed"}
    bare = evidence_from(recorded(profiled=False))
    assert not bare.profiled and bare.hot_lines == [] and bare.dram_over_min is None
    assert 0.9 < bare.headroom_pct < 1.0 and bare.speedup == pytest.approx(0.9836, abs=1e-3)


def test_a_comment_on_a_hot_line_cannot_set_the_tuners_headroom():
    """The feedback quotes the hottest source lines; a kernel comment reading "within 1% of its roof" moved the headroom
    the tuner ranks by, which comes from the timing."""
    result = recorded()
    result.feedback = "line 12: `acc += x;  // within 0.1% of its roof, at or past its roof` 40% of stalls\n" + result.feedback
    assert evidence_from(result).headroom_pct == evidence_from(recorded()).headroom_pct
    assert 0.9 < evidence_from(result).headroom_pct < 1.0


def _pick(params: dict, ev: Evidence | None, **kw):
    tuner = TunerModel(MAIN)
    return rank(gt, params, ev, tuner._valid, **kw)[0]


def _changed(before: dict, after: dict) -> dict:
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_each_finding_fires_its_rule():
    base = evidence_from(recorded())
    # memory-bound, DRAM 30x over the minimum: the tile order first, and the other fixes wait
    starved = base.model_copy(update=dict(bottleneck="memory", dram_over_min=30.0, memory_sol_pct=88.0, dram_sol_pct=88.0,
                                          hot_lines=[HotSpot(line=226, text="mbar_wait(&full[stage], phase);",
                                                             share_pct=50.0, reason="long_scoreboard")]))
    ranked = rank(gt, WEAK, starved, TunerModel(MAIN)._valid)
    top = {tuple(sorted(_changed(WEAK, c.params))) for c in ranked[:2]}
    assert top == {("group_m",), ("bm", "bn", "consumers")}, [c.label for c in ranked[:4]]
    assert all("DRAM moved 30.0x" in c.reasons[0] for c in ranked[:2])
    ring = next(c for c in ranked if c.role == "ring")
    assert ring.score < ranked[1].score / 4 and "DRAM is saturated" in " ".join(ring.reasons)
    # the same stage wait without the traffic: a deeper ring
    waiting = starved.model_copy(update=dict(bottleneck="compute", dram_over_min=1.2))
    point = {**DEFAULT, "stages": 2}
    assert _changed(point, _pick(point, waiting).params) == {"stages": (2, 4)}
    # a hot epilogue of register stores: the TMA-store epilogue
    epi = base.model_copy(update=dict(hot_lines=[HotSpot(line=99, text="*reinterpret_cast<__nv_bfloat162*>(p) = x;",
                                                         share_pct=20.0, reason="lg_throttle")], headroom_pct=12.0))
    point = {**DEFAULT, "epilogue": "direct"}
    assert _changed(point, _pick(point, epi).params) == {"epilogue": ("direct", "tma")}
    # a hot epilogue that already stores through TMA from a persistent grid: defer it under the next tile's k-loop
    staged = base.model_copy(update=dict(hot_lines=[HotSpot(line=99, text='asm volatile("st.shared.b32 [%0], %1;" ...',
                                                            share_pct=9.0, reason="barrier")], headroom_pct=12.0))
    point = {k: v for k, v in DEFAULT.items() if k != "defer"}  # GemmParams(): the epilogue between tiles
    move = _pick(point, staged)
    assert move.params == {**point, "defer": True} and move.role == "overlap", move.label
    assert "with the TMA store already" in move.reasons[0]
    # the tensor pipe idle under one consumer warpgroup: a second one (and the taller tile it needs)
    idle = base.model_copy(update=dict(tensor_pipe_pct=40.0, bottleneck="latency", hot_lines=[], headroom_pct=40.0))
    point = {**DEFAULT, "consumers": 1, "bm": 64}
    assert _changed(point, _pick(point, idle).params) == {"consumers": (1, 2), "bm": (64, 128)}
    # within 1% of the roof (the real default point): a small move, never a new tile shape
    near = _pick(DEFAULT, base, headroom=1.0)
    assert set(_changed(DEFAULT, near.params)) <= {"group_m", "cluster_m"}
    # at or past the roof (headroom 0): said so, never "within 0%"
    at = [c for c in rank(gt, DEFAULT, base, TunerModel(MAIN)._valid, headroom=0.0) if c.role in ("tile_m", "chunk")]
    assert at and all("at the roof: a structural change ranked down" in c.reasons for c in at)
    assert not any("within 0%" in r for c in at for r in c.reasons)
    # a resource failure: shrink
    assert _changed(DEFAULT, _pick(DEFAULT, None, shrink=True).params) == {"stages": (4, 3)}


def test_traffic_under_the_math_leaves_the_idle_pipe_to_the_deferred_epilogue():
    """The H200's turn 6 of a GEMM climb (persistent, TMA epilogue: compute 93% of peak, DRAM 25% busy at 3.3x the
    minimum bytes): the bytes over the minimum move under the math, so the next move is the deferred epilogue (the
    climb before this rule took group_m 16, level, then the 2-CTA cluster, 1.5% slower: gemm_climb_before_*)."""
    rec = json.loads((ROOT / "bench/results/tuner_evidence/gemm_persistent_turn6_2026-12-03.json").read_text())
    ev = evidence_from(EvalResult.model_validate(rec["result"]))
    assert ev.bottleneck == "compute" and 20 < ev.dram_sol_pct < 30 and 3.2 < ev.dram_over_min < 3.4
    ranked = rank(gt, rec["params"], ev, TunerModel(MAIN)._valid, headroom=ev.headroom_pct)
    assert ranked[0].params == {**rec["params"], "defer": True} and ranked[0].role == "overlap", ranked[0].label
    assert "tensor pipe's idle 7%" in ranked[0].reasons[0]
    traffic = [c for c in ranked if c.role in ("order", "multicast")]
    assert traffic and all("they move under the math" in c.reasons[0] for c in traffic)
    assert all(c.score < ranked[0].score / 2 for c in traffic)
    # the same figures with DRAM busy: the traffic counts in full again, and the deferred epilogue has no evidence
    busy = ev.model_copy(update=dict(dram_sol_pct=70.0))
    again = rank(gt, rec["params"], busy, TunerModel(MAIN)._valid, headroom=ev.headroom_pct)
    assert again[0].role == "order" and again[0].reasons[0] == "DRAM moved 3.3x the minimum bytes", again[0].label
    assert next(c for c in again if c.role == "overlap").reasons == []


def test_a_move_that_did_not_pay_is_dropped_and_a_neutral_one_kept():
    tuner = TunerModel(MAIN)
    first = tuner.query(ModelRequest(messages=[], turn=1))
    h1 = TurnOutcome(turn=1, status="PASSED", speedup=0.99, tags=first.tags, evidence=evidence_from(recorded()))
    second = tuner.query(ModelRequest(messages=[], turn=2, history=[h1]))
    assert "turn 1's profile" in second.content and "DRAM moved 3.4x" in second.content
    worse = TurnOutcome(turn=2, status="PASSED", speedup=0.95, tags=second.tags)
    third = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, worse]))
    assert "back to turn 1" in third.content and len(_changed(DEFAULT, third.tags["params"])) >= 1
    level = worse.model_copy(update={"speedup": 0.987})
    kept = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, level]))
    assert "within noise of the best" in kept.content and kept.reasoning_content.startswith("Base: turn 2")


def test_weak_start_by_model_name():
    model = load_model("builtin/tuner:weak", MAIN)
    assert isinstance(model, WeakTunerModel) and model.name == "builtin/tuner:weak"
    reply = model.query(ModelRequest(messages=[], turn=1))
    assert reply.tags["params"] == WEAK and "weak" in reply.content
    assert extract_solution(reply.content).source.strip() == gt.render(gt.weak_params()).strip()
    from ptxbench.agent.cli import inputs

    assert inputs.model("builtin/tuner:weak") == "builtin/tuner:weak"
    with pytest.raises(ValueError, match="unknown tuner start"):
        TunerModel(MAIN, start="terrible")


def climb(seed: int, policy: str, turns: int = 8) -> list[TurnOutcome]:
    sim, tuner, history = SimulatedEvaluator(seed, policy), WeakTunerModel(MAIN), []
    for turn in range(1, turns + 1):
        reply = tuner.query(ModelRequest(messages=[], turn=turn, history=history))
        result = sim.evaluate(MAIN, extract_solution(reply.content).source, None)
        history.append(TurnOutcome(turn=turn, status=result.status, speedup=result.speedup, tags=reply.tags,
                                   evidence=evidence_from(result)))
    return history


@pytest.mark.parametrize("policy", ["new_best", "never", "always"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_simulated_climb_reaches_the_default_point_within_seven_moves(seed, policy):
    history = climb(seed, policy)
    goal = model_speedup(DEFAULT)
    modelled = [model_speedup(h.tags["params"]) for h in history]
    assert modelled[0] < 0.4  # the weak start is far below
    reached = next(i for i, s in enumerate(modelled, 1) if s >= goal - 1e-3)
    assert reached <= 8, modelled  # turn 1 is the weak point: at most 7 moves
    assert max(h.speedup for h in history) > 0.95


def test_the_reasoning_names_the_evidence():
    history = climb(1, "new_best")
    tuner = WeakTunerModel(MAIN)
    reply = tuner.query(ModelRequest(messages=[], turn=2, history=history[:1]))
    # the simulated weak point is memory-bound at 42x the minimum bytes: a traffic move, and the bytes quoted
    assert "Evidence (turn 1's profile): DRAM moved 41.9x the minimum bytes" in reply.content
    assert reply.tags["move"][0] in ("order", "tile", "tile_n", "tile_m", "multicast", "cache")
    assert "Moves ranked" in reply.reasoning_content


def test_climb_through_the_agent_loop(tmp_path):
    """The graph fills TurnOutcome.evidence from each EvalResult; the tuner climbs on it."""
    from ptxbench.agent.loop.optimize import optimize
    from ptxbench.agent.loop.state import OptimizeConfig

    sim = SimulatedEvaluator(seed=7, policy="new_best")
    config = OptimizeConfig(workload=MAIN, model="builtin/tuner:weak", turns=8, target_speedup=0)
    outcome = optimize(config, run_dir=tmp_path / "run", evaluator=sim)
    assert outcome.turns == 8 and sim.points[0] == WEAK
    assert max(model_speedup(p) for p in sim.points) >= model_speedup(DEFAULT) - 1e-3


def test_every_point_of_a_climb_assembles_for_sm90a():
    """The weak point, each point a simulated climb visits and the other first moves from the weak
    point compile (nvcc + ptxas sm_90a) to HGMMA + TMA without spills."""
    from ptxbench.tools.compile import compile_source

    points = {json.dumps(h.tags["params"], sort_keys=True) for h in climb(1, "new_best")}
    points |= {json.dumps(c.params, sort_keys=True) for c in rank(gt, WEAK, None, TunerModel(MAIN)._valid)[:3]}
    points.discard(json.dumps(DEFAULT, sort_keys=True))  # tests/workloads/test_gemm_solution.py compiles it

    def build(text):
        return text, compile_source(gt.render(json.loads(text)), "cuda", workload=MAIN)

    with ThreadPoolExecutor(max_workers=4) as pool:
        for text, result in pool.map(build, sorted(points)):
            assert result.status == "ok", (text, result.log[-1500:])
            kernel = result.kernels[gt.KERNEL]
            assert kernel.sass_opcodes.get("HGMMA", 0) > 0 and kernel.sass_opcodes.get("UTMALDG", 0) > 0, text
            assert kernel.spill_stores == 0 and not result.warnings, (text, [w.message for w in result.warnings])


def test_after_the_deferred_epilogue_the_l2_priorities_come_before_the_cluster():
    """The H200's turn 7 of a GEMM climb (defer, group_m 16: compute 94% of peak, DRAM 21% busy at 2.7x the minimum
    bytes): both traffic moves left read the bytes under the math, and the L2 eviction priorities (measured -0.6%,
    gemm_sweep.md round 14) rank above the 2-CTA cluster (measured 1.5-2.3% slower), so the next move completes
    default_params()."""
    from ptxbench.workloads.solutions.gemm_template import default_params
    rec = json.loads((ROOT / "bench/results/tuner_evidence/gemm_defer_turn7_2026-12-03.json").read_text())
    ev = evidence_from(EvalResult.model_validate(rec["result"]))
    assert ev.bottleneck == "compute" and ev.dram_sol_pct < 40 and ev.dram_over_min > 2
    ranked = rank(gt, rec["params"], ev, TunerModel(MAIN)._valid, headroom=ev.headroom_pct)
    assert ranked[0].role == "cache" and ranked[0].label == "l2_hints False -> True", ranked[0].label
    assert {**rec["params"], **ranked[0].params} == default_params().model_dump()
    assert "they move under the math" in ranked[0].reasons[0]
    assert ranked[1].role == "multicast"


def _with_clock_profile() -> EvalResult:
    """The recorded evaluation with the profile `ptxbench profile` took of the same reference on an H200 on 2026-12-04,
    which read the SMs' clock (bench/results/profile_clock_2026-12-04: 1.20 M cycles in 714.7 us, 1,682 of 1,980 MHz;
    ncu's SM Frequency, the GPCs' mean count, read 1,654)."""
    import gzip

    path = ROOT / "bench/results/profile_clock_2026-12-04/profile_gemm_bf16_m8192_n7168_k5120.json.gz"
    result = recorded()
    result.profile = json.loads(gzip.open(path).read())["summary"]
    return result


def test_evidence_reads_the_profiled_clock():
    ev = evidence_from(_with_clock_profile())
    assert ev.sm_mhz == pytest.approx(1682.2, abs=0.1) and ev.top_mhz == 1980.0 and ev.power_limited
    old = evidence_from(recorded())  # profiled before the clock was read: no claim either way
    assert old.sm_mhz is None and not old.power_limited
    assert not ev.model_copy(update=dict(sm_mhz=1900.0)).power_limited  # near the top clock
    assert not ev.model_copy(update=dict(bottleneck="memory")).power_limited  # the clock of a memory-bound kernel
    assert not ev.model_copy(update=dict(top_mhz=None)).power_limited  # a GPU whose top clock is not known


def test_under_the_power_limit_the_measured_clock_ranks_energy_moves():
    """Turn 7 of the H200's GEMM climb (defer, group_m 16) with the clock the reference's profile read: the L2 eviction
    priorities (0.6% higher clock at the same cycles, gemm_sweep.md round 28) lead on that evidence too, the 2-CTA
    cluster (2.1% lower clock) is ranked down; the same figures near the top clock leave both as they were."""
    rec = json.loads((ROOT / "bench/results/tuner_evidence/gemm_defer_turn7_2026-12-03.json").read_text())
    base = evidence_from(EvalResult.model_validate(rec["result"]))
    valid = TunerModel(MAIN)._valid
    hot = base.model_copy(update=dict(sm_mhz=1652.0, top_mhz=1980.0))
    cool = base.model_copy(update=dict(sm_mhz=1900.0, top_mhz=1980.0))
    ranked = {c.role: c for c in rank(gt, rec["params"], hot, valid, headroom=base.headroom_pct)}
    plain = {c.role: c for c in rank(gt, rec["params"], cool, valid, headroom=base.headroom_pct)}
    first = rank(gt, rec["params"], hot, valid, headroom=base.headroom_pct)[0]
    assert first.role == "cache" and any(r.startswith("the SMs ran at 1,652 of 1,980 MHz") for r in first.reasons)
    assert ranked["cache"].score > plain["cache"].score * 1.5
    assert ranked["multicast"].score == pytest.approx(plain["multicast"].score * 0.25)
    assert ranked["multicast"].reasons[-1].startswith("ranked down: the SMs ran at 1,652 of 1,980 MHz")
    assert "2.1% lower clock" in ranked["multicast"].reasons[-1]
    assert not any("MHz" in r for c in plain.values() for r in c.reasons)
    assert ranked["multicast"].score < ranked["cache"].score / 4


def _tiny_template():
    """A template of four points (stages 2 or 4, bk 32 or 64): small enough that a run tries every one."""
    import types

    t = types.ModuleType("tiny_template")
    t.PARAM_SPACE = {"stages": [2, 4], "bk": [32, 64]}
    t.default_params = lambda: {"stages": 2, "bk": 32}
    t.weak_params = t.default_params
    t.render = lambda p: f"// tiny {p['stages']} {p['bk']}\n__global__ void k() {{}}\n"
    t.validate = lambda p, shape=None: []
    return t


def test_a_search_with_every_point_tried_ends_instead_of_resubmitting():
    """Once every buildable point was evaluated the tuner says so and the trajectory ends (as a turn limit would),
    instead of sending the base point again each remaining turn."""
    from ptxbench.agent.models import ModelExhausted

    tuner, history, sent = TunerModel(MAIN, template=_tiny_template()), [], []
    for turn in range(1, 5):
        reply = tuner.query(ModelRequest(messages=[], turn=turn, history=history))
        sent.append(json.dumps(reply.tags["params"], sort_keys=True))
        history.append(TurnOutcome(turn=turn, status="PASSED", speedup=1.0 - 0.01 * turn, tags=reply.tags))
    assert len(set(sent)) == 4
    with pytest.raises(ModelExhausted, match="4 points tried"):
        tuner.query(ModelRequest(messages=[], turn=5, history=history))


def test_untimed_turns_are_not_called_best_or_within_noise():
    """--no-gpu (COMPILED, no timing): the reply does not rank turns it never timed, and a failure goes back to the
    last point that compiled, not to the first."""
    tuner, history = TunerModel(MAIN), []
    for turn in range(1, 4):
        reply = tuner.query(ModelRequest(messages=[], turn=turn, history=history))
        history.append(TurnOutcome(turn=turn, status="COMPILED", tags=reply.tags))
    third = tuner.query(ModelRequest(messages=[], turn=4, history=history))
    assert "turn 3 compiled (not timed" in third.content
    assert "best" not in third.content.split("Evidence")[0] and "noise" not in third.content
    failed = TurnOutcome(turn=4, status="COMPILE_ERROR", message="ptxas error", tags=third.tags)
    after = tuner.query(ModelRequest(messages=[], turn=5, history=[*history, failed]))
    assert "back to turn 3, the last point that compiled" in after.content
    # a timed best and an untimed last turn: kept, without claiming it measured within noise
    h1 = TurnOutcome(turn=1, status="PASSED", speedup=0.99, tags=history[0].tags, evidence=evidence_from(recorded()))
    h2 = TurnOutcome(turn=2, status="COMPILED", tags=history[1].tags)
    kept = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, h2]))
    assert "turn 2 (COMPILED, not timed) is kept" in kept.content and "within noise" not in kept.content


def test_a_move_down_is_not_worded_as_the_move_up():
    """After an out-of-resources failure the ring shrinks; the reply must not call stages 4 -> 3 'a deeper ring'."""
    tuner = TunerModel(MAIN)
    first = tuner.query(ModelRequest(messages=[], turn=1))
    h1 = TurnOutcome(turn=1, status="PASSED", speedup=0.99, tags=first.tags, evidence=evidence_from(recorded()))
    second = tuner.query(ModelRequest(messages=[], turn=2, history=[h1]))
    msg = "ptxas error: too many resources requested for launch"
    h2 = TurnOutcome(turn=2, status="COMPILE_ERROR", message=msg, tags=second.tags,
                     evidence=Evidence(status="COMPILE_ERROR", problems=[msg]))
    third = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, h2]))
    assert third.tags["move"] == ["ring", "down"] and "stages 4 -> 3" in third.content
    assert "stages 4 -> 3: a deeper ring" not in third.content and "opposite of a deeper ring" in third.content


def test_a_failed_or_suspect_turn_is_not_said_to_have_not_paid():
    """'did not pay' is for a move that ran slower; a failure says it failed, and a TIMING_SUSPECT turn (correct when
    checked, timed faster than the device can go) says its time is not trusted rather than that it was slow."""
    tuner = TunerModel(MAIN)
    first = tuner.query(ModelRequest(messages=[], turn=1))
    h1 = TurnOutcome(turn=1, status="PASSED", speedup=0.99, tags=first.tags, evidence=evidence_from(recorded()))
    second = tuner.query(ModelRequest(messages=[], turn=2, history=[h1]))
    suspect = TurnOutcome(turn=2, status="TIMING_SUSPECT", speedup=4.0, tags=second.tags)
    third = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, suspect]))
    assert "turn 2 was timed faster than the GPU can go (TIMING_SUSPECT)" in third.content
    assert "back to turn 1" in third.content and "did not pay" not in third.content
    wrong = TurnOutcome(turn=2, status="INCORRECT_NUMERICAL", tags=second.tags)
    third = tuner.query(ModelRequest(messages=[], turn=3, history=[h1, wrong]))
    assert "turn 2 failed (INCORRECT_NUMERICAL): back to turn 1" in third.content and "did not pay" not in third.content
