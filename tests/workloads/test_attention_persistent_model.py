"""A model of the persistent attention forward's synchronisation (workloads/solutions/attention_persistent.py), played
under random interleavings: the producer thread and the consumers of one CTA walking several query tiles of different
lengths through the double Q buffer and the K / V ring, with TMA writes landing at random later moments.

mbarriers are modelled as on Hopper: an arrival count, a transaction count, and phases; `wait(parity)` passes once
the phase of that parity has completed (a fresh barrier passes parity 1). The model checks that every read of a
stage or Q buffer sees the tile it expects (the right query tile, the right key tile), that no TMA write lands in a
buffer a consumer is still reading, and that the CTA finishes. The ring positions and parities are the kernel's
(its lines are checked in the rendered source)."""
from __future__ import annotations

import random

import pytest

from ptxbench.workloads.solutions import attention_template as at


class Barrier:
    def __init__(self, count: int):
        self.count, self.pending, self.tx, self.completed = count, count, 0, 0

    def passes(self, parity: int) -> bool:
        return self.completed % 2 != parity

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def arrive(self, expect_tx: int = 0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0
        self._maybe_complete()

    def complete_tx(self):
        self.tx -= 1
        self._maybe_complete()


def producer_ops(tiles: list[int], stages: int) -> list[tuple]:
    """The producer thread's loop (attention_persistent.py), tile i with n key tiles."""
    ops, g = [], 0
    for i, n in enumerate(tiles):
        ops += [("wait", ("emptyQ", i % 2), ((i // 2) & 1) ^ 1), ("load", ("fullQ", i % 2), ("Q", i % 2), (i,))]
        for j in range(n):
            st, ph = g % stages, (g // stages) & 1
            ops += [("wait", ("emptyK", st), ph ^ 1), ("load", ("fullK", st), ("K", st), (i, j)),
                    ("wait", ("emptyV", st), ph ^ 1), ("load", ("fullV", st), ("V", st), (i, j))]
            g += 1
    return ops


def consumer_ops(tiles: list[int], stages: int, c: int) -> list[tuple]:
    """A consumer warpgroup's loop: key tile 0 (S only), consumer_step j = 1 .. n - 1 at ring position g0 + j, the
    last P V, the epilogue (O staged in its Q rows), then its Q buffer released."""
    ops, g = [], 0
    for i, n in enumerate(tiles):
        q = ("Q", i % 2)
        ops += [("wait", ("fullQ", i % 2), (i // 2) & 1), ("read", q, (i,), c)]
        ops += [("wait", ("fullK", g % stages), (g // stages) & 1), ("read", ("K", g % stages), (i, 0), c),
                ("done", ("K", g % stages), c), ("arrive", ("emptyK", g % stages))]
        for j in range(1, n):
            st, sp = (g + j) % stages, (g + j - 1) % stages
            ops += [("wait", ("fullK", st), ((g + j) // stages) & 1), ("wait", ("fullV", sp), ((g + j - 1) // stages) & 1),
                    ("read", ("K", st), (i, j), c), ("read", ("V", sp), (i, j - 1), c),
                    ("done", ("K", st), c), ("arrive", ("emptyK", st)), ("done", ("V", sp), c), ("arrive", ("emptyV", sp))]
        sp = (g + n - 1) % stages
        ops += [("wait", ("fullV", sp), ((g + n - 1) // stages) & 1), ("read", ("V", sp), (i, n - 1), c),
                ("done", ("V", sp), c), ("arrive", ("emptyV", sp))]
        g += n
        ops += [("done", q, c), ("arrive", ("emptyQ", i % 2))]  # after the O store read its staging
    return ops


def play(tiles: list[int], stages: int, consumers: int, seed: int, consumer=consumer_ops) -> None:
    rng = random.Random(seed)
    bars = {("fullQ", b): Barrier(1) for b in range(2)} | {("emptyQ", b): Barrier(consumers) for b in range(2)}
    for s in range(stages):
        bars |= {("fullK", s): Barrier(1), ("fullV", s): Barrier(1),
                 ("emptyK", s): Barrier(consumers), ("emptyV", s): Barrier(consumers)}
    content, readers, in_flight = {}, {}, []
    actors = [producer_ops(tiles, stages)] + [consumer(tiles, stages, c) for c in range(consumers)]
    pos = [0] * len(actors)
    while any(p < len(a) for p, a in zip(pos, actors)) or in_flight:
        runnable = [k for k, a in enumerate(actors) if pos[k] < len(a) and
                    (a[pos[k]][0] != "wait" or bars[a[pos[k]][1]].passes(a[pos[k]][2]))]
        choices = runnable + (["tma"] if in_flight else [])
        assert choices, f"deadlock at {pos}"
        pick = rng.choice(choices)
        if pick == "tma":  # a load lands: nobody may be reading the buffer it writes
            bar, buf, tag = in_flight.pop(rng.randrange(len(in_flight)))
            assert not readers.get(buf), f"TMA write into {buf} while {readers[buf]} read it"
            content[buf] = tag
            bars[bar].complete_tx()
            continue
        op = actors[pick][pos[pick]]
        pos[pick] += 1
        if op[0] == "load":
            bars[op[1]].arrive(expect_tx=1)
            in_flight.append((op[1], op[2], op[3]))
        elif op[0] == "arrive":
            bars[op[1]].arrive()
        elif op[0] == "read":
            assert content.get(op[1]) == op[2], f"{op[1]} holds {content.get(op[1])}, consumer expects {op[2]}"
            readers.setdefault(op[1], set()).add(op[3])
        elif op[0] == "done":
            readers[op[1]].discard(op[2])


def test_the_models_lines_are_the_kernels():
    text = at.render(at.default_params().model_copy(update={"persistent": True}))
    for line in ("mbar_wait(&emptyQ[i % 2], ((i / 2) & 1) ^ 1);",
                 "mbar_wait(&fullQ[i % 2], (i / 2) & 1);",
                 "const int st = g % STAGES;", "const uint32_t ph = (g / STAGES) & 1;",
                 "mbar_wait(&emptyK[st], ph ^ 1);", "mbar_wait(&emptyV[st], ph ^ 1);",
                 "const int g = w.g0 + j;  // persistent: the ring position of key tile j of this query tile",
                 "const int st = g % STAGES, sp = (g - 1) % STAGES;",
                 "mbar_wait(&w.fullK[st], (g / STAGES) & 1);", "mbar_wait(&w.fullV[sp], ((g - 1) / STAGES) & 1);",
                 "mbar_wait(&fullK[g % STAGES], (g / STAGES) & 1);",
                 "const int sp = (g + n_tiles - 1) % STAGES;",
                 "mbar_wait(&fullV[sp], ((g + n_tiles - 1) / STAGES) & 1);",
                 "if (lane == 0) mbar_arrive(&emptyV[sp]);  // the next query tile's ring reuses it",
                 "if (t == 0) mbar_arrive(&emptyQ[i % 2]);", "g += n_tiles;"):
        assert line in text, line


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("tiles", [[3, 1, 4, 2, 5], [1, 1, 1, 1], [6, 6, 6]])
def test_every_read_sees_its_tile_and_no_load_overwrites_a_read(tiles, stages):
    for seed in range(60):
        play(tiles, stages, consumers=2, seed=seed)


def test_the_model_catches_a_q_buffer_freed_too_early():
    """The negative control: a consumer that released its Q buffer before its epilogue read it (the release moved
    ahead of the last reads) lets the producer's next load land in it."""
    def early(tiles, stages, c):
        ops = consumer_ops(tiles, stages, c)
        ops.insert(2, ops.pop(ops.index(("arrive", ("emptyQ", 0)))))  # right after the first Q read
        return ops

    with pytest.raises(AssertionError, match="TMA write into"):
        for seed in range(200):
            play([2, 2, 2, 2], 2, consumers=2, seed=seed, consumer=early)


def test_the_model_catches_the_last_v_stage_never_released():
    """The other negative control: without the release of a tile's last V stage (the non-persistent kernel needs
    none), the producer waits for that stage forever once the ring comes round to it."""
    def unreleased(tiles, stages, c):  # a tile's last V release is the one right before its Q "done"
        ops = consumer_ops(tiles, stages, c)
        return [op for k, op in enumerate(ops)
                if not (op[0] == "arrive" and op[1][0] == "emptyV" and ops[k + 1][0] == "done" and ops[k + 1][1][0] == "Q")]

    with pytest.raises(AssertionError, match="deadlock"):
        play([3, 3, 3], 2, consumers=2, seed=1, consumer=unreleased)
