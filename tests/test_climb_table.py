"""bench/climb_table.py on the recorded climbs (docs/examples/tuner-climb*): its tables are the README's, each turn's
speedup is the one tuner_climb.sh's summary printed, and a move is what the submitted params changed from the turn the
reply built on (a return to an earlier best included)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from climb_table import rows, table  # noqa: E402

from ptxbench.workloads.solutions import gemm_template as gt  # noqa: E402

CLIMBS = {"tuner-climb-mha_fwd_d128": "cuDNN", "tuner-climb": "cuBLAS", "tuner-climb-mha_bwd_d128": "cuDNN",
          "tuner-climb-mha_fwd_d128_causal": "cuDNN"}


@pytest.mark.parametrize("folder", sorted(CLIMBS))
def test_the_readme_holds_the_tables_the_script_makes(folder):
    d = ROOT / "docs" / "examples" / folder
    readme = (d / "README.md").read_text(encoding="utf-8")
    for run in ("run1", "run2", "run3"):
        assert table(d / run, CLIMBS[folder]) in readme, run


@pytest.mark.parametrize("folder", sorted(CLIMBS))
def test_every_turns_speedup_is_the_summarys(folder):
    d = ROOT / "docs" / "examples" / folder
    summary = (d / "summary.md").read_text(encoding="utf-8")
    for run in ("run1", "run2", "run3"):
        per_turn = re.search(rf"^\| {run} \|[^|]*\| ([\d. ]+) \|$", summary, re.M).group(1).split()
        # a turn a run's time limit cut before its evaluation has no speedup (its row shows "-")
        assert [r["speedup"].split()[0] for r in rows(d / run) if r["speedup"] != "-"] == per_turn


def test_a_move_is_measured_from_the_turn_the_reply_built_on():
    r = {x["turn"]: x for x in rows(ROOT / "docs" / "examples" / "tuner-climb-mha_fwd_d128" / "run1")}
    assert r[1]["evidence"] == "weak_params() (start)" and "consumers=1" in r[1]["move"]
    assert r[4]["move"] == "uniform (default) -> True"           # an option a dump leaves out at its default
    assert r[4]["evidence"].startswith("the wgmma issue lines hold 16% of stall samples")
    walk = r[5]["move"].split(", ")                               # the walk as one move, with its repair
    assert {"persistent (default) -> True", "q_ahead (default) -> True", "producer_fn (default) -> True",
            "producer_regs 24 -> 40", "epilogue direct -> tma", "q_regs (default) -> True"} == set(walk)
    assert r[7]["move"] == "early_pack (default) -> True"         # turn 6 kept (within noise of turn 5's best)


def test_the_causal_climbs_group_eight_heads_longest_first_and_pass_cudnn():
    d = ROOT / "docs" / "examples" / "tuner-climb-mha_fwd_d128_causal"
    for run in ("run1", "run2", "run3"):
        r = {x["turn"]: x for x in rows(d / run)}
        assert r[5]["evidence"].startswith("causal: the query tiles' lengths differ")
        assert r[5]["move"] == "lpt_group 0 -> 8"                   # the order's lever aims at 8 heads
        assert max(float(x["speedup"].split()[0]) for x in r.values()) >= 1.10, run


def test_the_gemm_climbs_defer_the_epilogue_when_the_traffic_moves_under_the_math():
    d = ROOT / "docs" / "examples" / "tuner-climb"
    for run in ("run1", "run2", "run3"):
        r = {x["turn"]: x for x in rows(d / run)}
        assert len(r) == 8 and all(x["status"] == "PASSED" for x in r.values()), run
        assert r[4]["move"] == "group_m 1 -> 16"                              # the order's favoured value
        assert r[6]["move"] == "persistent False -> True" and float(r[6]["speedup"].split()[0]) >= 1.0
        assert r[7]["move"] == "defer (default) -> True"
        assert r[7]["evidence"].startswith("compute-bound") and "tensor pipe's idle" in r[7]["evidence"]
        assert float(r[7]["ours_ms"]) < 0.992 * float(r[6]["ours_ms"])      # the deferred epilogue paid, > 0.8%
        assert r[8]["move"] == "l2_hints (default) -> True"                   # turn 8: default_params(), the reference
        assert "they move under the math" in r[8]["evidence"]
        assert float(r[8]["ours_ms"]) < 0.996 * float(r[7]["ours_ms"])      # the L2 priorities paid, > 0.4%
        assert "a clock the power limit sets" in r[8]["evidence"]            # the tuner read the SMs' clock
        assert "2.1% lower clock" not in r[8]["evidence"]                    # (the cluster's rank-down is not the move's)
        assert max(float(x["speedup"].split()[0]) for x in r.values()) >= 1.028, run
        assert min(r, key=lambda t: float(r[t]["ours_ms"])) == 8, run             # the reference point is the fastest
        turn8 = next((d / run / "trajectories").glob("*/kernels/turn_08.cu")).read_text()
        assert turn8 == gt.render(gt.default_params()), run                       # and it is the reference's render


def test_a_move_back_to_an_options_default_is_named():
    from climb_table import _move
    assert _move({"bn": 128, "uniform": True}, {"bn": 128}) == "uniform True -> (default)"
    assert _move({"bn": 128}, {"bn": 176, "stagger": True}) == "bn 128 -> 176, stagger (default) -> True"


def test_the_backwards_climb_names_a_neighbour_when_no_evidence_is_left():
    r = {x["turn"]: x for x in rows(ROOT / "docs" / "examples" / "tuner-climb-mha_bwd_d128" / "run1")}
    assert r[2]["move"] == "order head_fastest -> head_groups" and r[2]["evidence"].startswith("DRAM moved 25.4x")
    assert r[4]["move"] == "stages 2 -> 3" and float(r[4]["speedup"].split()[0]) >= 1.05  # the reference's build
    assert r[5]["move"] == "dq bulk -> vector, schedule cooperative -> decoupled"  # decoupled builds with vector dQ only
    assert r[6]["evidence"] == "every lever move tried: a neighbour" and r[6]["move"] == "order head_groups -> head_fastest"
