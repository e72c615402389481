"""The attention forward's split_rows option (workloads/solutions/attention_softmax.py SPLIT_ROWS): each row's max
and sum as four chains. On in TUNED where the H200 measured it faster (attention_sweep.py round 10), off in the
checked-in file; it assembles at every problem's TUNED point with the same exponentials and maxima and no spills, and
every accumulator element lands in exactly one chain for every key tile the template builds."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at

from sass_order import ex2_under_pending_product, loop_exponentials_under_product, sass_ops
from sweeps import attention_sweep


def _round_10():
    return attention_sweep().ROUNDS[10]


def test_split_rows_is_on_where_it_measured_faster():
    """Round 10 (attention_template.md): faster at D = 128 causal, D = 96 causal and GQA, slower at D = 128. Under the
    persistent walk rounds 25-26 measured D = 128 faster with split_rows (-1.1%, -1.3%) and causal with split_max
    instead (-0.9%, -0.8%): the checked-in file (D = 128) has it now, the causal reference the max chains alone."""
    assert at.OPTION_SPACE["split_rows"] == [False, True]
    assert {problem for problem, point in at.TUNED.items() if point.get("split_rows")} == \
        {(128, False, False), (96, True, False), (128, False, True)}
    assert at.default_params().model_dump()["split_rows"] is True
    assert "split_rows: each row's max" in at.render(at.default_params())  # the checked-in attention_fwd_wgmma.cu
    causal = at.render(at.default_params(get_workload("mha_fwd_d128_causal")))
    assert "split_max: each row's max" in causal and "split_rows: each row's max" not in causal


def test_round_10_pairs_each_tuned_point_with_split_rows_and_every_point_builds():
    points = _round_10()
    without = [{k: v for k, v in pt.items() if k not in ("split_rows", "q_regs", "split_max")}  # as round 10 knew them
               for pt in attention_sweep().TUNED_BEFORE_22.values()]
    assert len(points) == 16 and {tuple(sorted(ch.items())) for _, ch, _ in points[::2]} == \
        {tuple(sorted(pt.items())) for pt in without}
    for (wid, plain, _), (wid2, split, predicted) in zip(points[::2], points[1::2]):
        assert wid == wid2 and split == {**plain, "split_rows": True} and predicted > 0
        w = get_workload(wid)
        p = at.params_for(w, **split)
        assert at.validate(p, w) == []
        assert isinstance(parse_solution(at.render(p), w), Solution)


@pytest.mark.parametrize("bn", at.PARAM_SPACE["bn"])
def test_every_element_of_a_row_lands_in_exactly_one_chain(bn):
    """The option's loops, mirrored: the first four 4-column groups start the chains, group j / 4 >= 4 joins chain
    (j / 4) % 4; the sum's loop puts group j / 4 in the same chain. Row r0 holds elements j, j + 1 of each group,
    row r0 + 8 elements j + 2, j + 3."""
    sn = bn // 2
    chains: dict[int, list[int]] = {q: [4 * q, 4 * q + 1] for q in range(4)}
    for j in range(16, sn, 4):
        chains[(j // 4) % 4] += [j, j + 1]
    first_row = sorted(i for c in chains.values() for i in c)
    assert first_row == [j + k for j in range(0, sn, 4) for k in (0, 1)]
    assert max(len(c) for c in chains.values()) <= 2 * -(-sn // 16)  # each chain about a quarter of the row


def _as_round_10(p):
    """A TUNED point as rounds 10 and 11 measured it: q_regs and split_max joined TUNED after round 13, stagger after
    round 19."""
    return p.model_copy(update={"q_regs": False, "split_max": False, "stagger": False})


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d64"])
def test_split_rows_assembles_with_the_same_exponentials_and_maxima(wid):
    """Cooperative (D = 128, and causal with its masked step) and ping-pong (D = 64): no spills, the same MUFU and
    FMNMX counts; FADD grows by the three adds that join each row's four partial sums, two rows per softmax."""
    p = _as_round_10(at.single_tile(at.default_params(get_workload(wid))))
    kernels = {}
    for split in (False, True):
        q = p.model_copy(update={"split_rows": split})
        r = compile_source(at.render(q), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, (wid, split, [w.message for w in r.warnings])
        kernels[split] = r.kernels[at.kernel_name(q)]
    plain, split = kernels[False], kernels[True]
    assert split.spill_stores == split.spill_loads == 0 and split.registers <= plain.registers
    for op in ("MUFU", "FMNMX", "HGMMA"):
        assert split.sass_opcodes.get(op) == plain.sass_opcodes.get(op), op
    softmaxes = (split.sass_opcodes["FADD"] - plain.sass_opcodes["FADD"]) / 6
    assert softmaxes in (2, 3), softmaxes  # the unmasked step and the masked one(s) each inline softmax_tile


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d128_causal"])
def test_split_rows_costs_most_of_early_packs_overlap(wid):
    """What round 10 measured against (attention_template.md): with the four chains ptxas 13.5 keeps at most 20 of the
    66 exponentials under the previous P V product, against 44 without them, at the plain and the causal point alike;
    the shorter chains paid for that loss where the softmax is longer (causal) and not at plain D = 128."""
    p = _as_round_10(at.single_tile(at.default_params(get_workload(wid))))
    under = {split: ex2_under_pending_product(sass_ops(at.render(q), at.kernel_name(q)))
             for split in (False, True) for q in [p.model_copy(update={"split_rows": split})]}
    assert under[False] >= 40 and under[True] <= 20, under


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d128_causal"])
def test_split_max_keeps_the_overlap_and_builds(wid):
    """split_max (the max chains alone): the 44 exponentials under the P V product stay, the schedule differs from the
    plain point's, no spills; it cannot be combined with split_rows (which holds it)."""
    p = _as_round_10(at.single_tile(at.default_params(get_workload(wid)))).model_copy(update={"split_rows": False})
    q = p.model_copy(update={"split_max": True})
    assert at.validate(q, get_workload(wid)) == [] and "split_max" in at.validate(q.model_copy(update={"split_rows": True}))[0]
    plain, split = (sass_ops(at.render(x), at.kernel_name(x)) for x in (p, q))
    assert ex2_under_pending_product(split) >= 40 and split != plain
    r = compile_source(at.render(q), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings and r.kernels[at.kernel_name(q)].spill_stores == 0


def test_round_11_sets_split_max_in_place_of_split_rows():
    mod = attention_sweep()
    points = mod.ROUNDS[11]
    assert len(points) == 8
    for (wid, tuned, _), (wid2, split, _) in zip(points[::2], points[1::2]):
        w = get_workload(wid)
        before = {k: v for k, v in mod.TUNED_BEFORE_22[tuple(at.problem_of(w).values())].items()
                  if k not in ("q_regs", "split_max")}
        assert wid == wid2 and tuned == before and split["split_max"]
        assert "split_rows" not in split and at.validate(at.params_for(w, **split), w) == []


def test_rounds_25_and_26_measured_the_points_tuned_now_holds():
    """Round 25 took TUNED's loop options out one at a time at D = 128 and causal; round 26 read the two swapped splits
    again in the other order and tried the swaps at D = 96, D = 96 causal and GQA. What TUNED holds at D = 128 and
    causal is exactly the swapped point both rounds measured; the base of both rounds is TUNED before the swap."""
    sweep = attention_sweep()
    before = sweep.TUNED_ROUND_25
    for problem, old, new in (((128, False, False), "split_max", "split_rows"), ((128, True, False), "split_rows", "split_max")):
        assert before[problem].get(old) and not before[problem].get(new)
        assert at.TUNED[problem] == {**{k: v for k, v in before[problem].items() if k != old}, new: True}
    r25 = sweep.ROUNDS[25]
    assert [ch for wid, ch, _ in r25 if wid == "mha_fwd_d128"][0] == before[(128, False, False)]
    assert at.TUNED[(128, False, False)] in [ch for wid, ch, _ in r25 if wid == "mha_fwd_d128"]
    assert at.TUNED[(128, True, False)] in [ch for wid, ch, _ in r25 if wid == "mha_fwd_d128_causal"]
    r26 = sweep.ROUNDS[26]
    assert [ch for wid, ch, _ in r26 if wid == "mha_fwd_d128"] == [at.TUNED[(128, False, False)],
                                                                   before[(128, False, False)],
                                                                   at.TUNED[(128, False, False)]]
    # the other three cooperative points were measured against TUNED as rounds 25-26 knew it (round 27 then gave D = 96
    # early_pack); their splits stayed
    for wid, problem in (("mha_fwd_d96", (96, False, False)), ("mha_fwd_d96_causal", (96, True, False)),
                         ("mha_fwd_d128_gqa_h32_kv8", (128, False, True))):
        pts = [ch for w, ch, _ in r26 if w == wid]
        assert pts[0] == pts[-1] == before[problem] and len(pts) >= 3
        assert {k: at.TUNED[problem].get(k, False) for k in ("split_rows", "split_max")} == \
            {k: before[problem].get(k, False) for k in ("split_rows", "split_max")}
    for wid, ch, _ in r25 + r26:
        assert at.validate(at.params_for(get_workload(wid), **ch), get_workload(wid)) == []


def test_the_faster_split_at_d128_keeps_fewer_exponentials_under_the_product():
    """Rounds 8-13 chose the loop's options by how many exponentials ptxas keeps under the P V product; under the walk
    that count stopped predicting the time: D = 128's faster split_rows keeps 15 of 66 there (split_max 46)."""
    sweep = attention_sweep()
    w = get_workload("mha_fwd_d128")
    now = at.default_params(w)
    old = at.params_for(w, **sweep.TUNED_ROUND_25[(128, False, False)])
    count = {p.split_rows: loop_exponentials_under_product(at.render(p), at.kernel_name(p), (p.head_dim + p.bn) // 16)
             for p in (now, old)}
    assert now.split_rows and not old.split_rows
    assert count[True] < count[False], count
