"""A model of st_walk's cross-CTA protocol (workloads/solutions/attention_bwd_variants/dq_zeroing.py, also st_conv's),
played under random interleavings with only a few CTAs resident at a time, admitted in launch order as SMs free up:
every CTA finishes (no wait on a CTA that cannot run), every slice is zeroed exactly once and before any reduction
into it, whatever order the CTAs reach it in.

Per CTA three actors: the walker (claims each of the CTA's slices in its blocks' order with a CAS 0 -> 1, zeroes the
ones it won, releases them as 2; it never waits), the producer (before a block, waits until the block's slice is 2),
and the consumers (a block's reduction, after the producer's arrival). dq_zero's protocol, where an owner CTA
zeroed its slice and the producer zeroed unclaimed ones alone, was deadlock-free too but slow; the model checks
only safety and progress, not speed."""
from __future__ import annotations

import random

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants import variant_text


def cta_blocks(kb: int, heads: int, n_slices: int, causal: bool, spb: int) -> list[int]:
    """The global slices of a CTA's blocks in order (the producer's `q_row / BN` for HD = 128 (spb 2) or 64 (1))."""
    per_head = n_slices * spb - (kb * spb if causal else 0)
    q_first = kb * spb if causal else 0
    return [h * n_slices + (q_first + it % per_head) // spb for h in range(heads) for it in range(per_head)]


def play(n_kb: int, heads_per_cta: int, n_kv: int, causal: bool, spb: int, resident: int, seed: int,
         owner_only: bool = False) -> None:
    """owner_only: a walker that zeroes only its own key block's slices (the negative control)."""
    rng = random.Random(seed)
    n_slices = n_kb  # S / BN slices per query head, one per key block's 128 rows
    # launch order: key blocks of a head group side by side (head_groups), each CTA (kv head, key block)
    order = [(kv, kb) for kv in range(n_kv) for kb in range(n_kb)]
    state = {}  # global slice -> 0 untouched, 1 being zeroed, 2 zeroed
    zeroed_by = {}
    reduced_before_zero = []
    ctas = []
    for kv, kb in order:
        heads = list(range(kv * heads_per_cta, (kv + 1) * heads_per_cta))
        blocks = [heads[0] * n_slices + s for s in cta_blocks(kb, heads_per_cta, n_slices, causal, spb)]
        walk = list(dict.fromkeys(blocks))  # the walker's slices, in the blocks' order
        if owner_only:
            walk = [h * n_slices + kb for h in heads]
        ctas.append({"blocks": blocks, "walk": walk, "w": 0, "zeroing": None, "p": 0, "c": 0, "done": False})
    admitted, running = 0, []
    steps = 0
    while any(not c["done"] for c in ctas):
        while len(running) < resident and admitted < len(ctas):
            running.append(ctas[admitted])
            admitted += 1
        moves = []
        for c in running:
            if c["zeroing"] is not None or c["w"] < len(c["walk"]):
                moves.append((c, "walker"))
            if c["p"] < len(c["blocks"]) and state.get(c["blocks"][c["p"]], 0) == 2:
                moves.append((c, "producer"))
            if c["c"] < c["p"]:
                moves.append((c, "consumer"))
        assert moves, f"deadlock: {[(c['w'], c['p'], c['c']) for c in running]}"
        c, actor = rng.choice(moves)
        if actor == "walker":
            if c["zeroing"] is not None:  # finishes zeroing the slice it won, releases it
                s = c["zeroing"]
                assert state[s] == 1 and s not in zeroed_by
                zeroed_by[s] = id(c)
                state[s] = 2
                c["zeroing"] = None
            else:
                s = c["walk"][c["w"]]
                c["w"] += 1
                if state.get(s, 0) == 0:  # atomicCAS 0 -> 1 won
                    state[s] = 1
                    c["zeroing"] = s
        elif actor == "producer":
            c["p"] += 1
        else:
            s = c["blocks"][c["c"]]
            if state.get(s, 0) != 2:
                reduced_before_zero.append(s)
            c["c"] += 1
        if c["c"] == len(c["blocks"]) and c["w"] == len(c["walk"]) and c["zeroing"] is None:
            c["done"] = True
            running.remove(c)
        steps += 1
        assert steps < 10 ** 6
    assert not reduced_before_zero
    needed = {s for c in ctas for s in c["blocks"]}
    assert set(zeroed_by) == needed  # each needed slice zeroed once (a second claim would have failed the assert)


@pytest.mark.parametrize("causal, heads_per_cta, spb", [(False, 1, 2), (True, 1, 2), (False, 3, 2), (False, 1, 1),
                                                         (True, 1, 1)])
@pytest.mark.parametrize("resident", [1, 2, 5])
def test_the_walk_always_finishes_and_zeroes_each_slice_once_before_its_reductions(causal, heads_per_cta, spb, resident):
    text = variant_text("st_walk")
    assert "if (t == lead) walk_claimed" not in text  # st_walk's walkers: warps 1-3 on a named barrier
    assert "while (load_acquire(dQflag + slice) != 2) __nanosleep(64);" in text  # the producer's only wait
    for seed in range(40):
        play(n_kb=4, heads_per_cta=heads_per_cta, n_kv=3, causal=causal, spb=spb, resident=resident, seed=seed)


def test_the_model_finds_the_deadlock_of_walkers_that_zero_only_their_own_slices():
    """The negative control: if each CTA zeroed only its own key block's slices, a causal CTA would wait for slices
    of key blocks launched after it, and with one CTA resident nothing could run: the model must say so."""
    with pytest.raises(AssertionError, match="deadlock"):
        play(n_kb=4, heads_per_cta=1, n_kv=2, causal=True, spb=2, resident=1, seed=0, owner_only=True)
