"""The reference GEMM's ping-pong schedule (gemm_template: schedule="pingpong"): it renders, validates and assembles
for sm_90a (HGMMA + UTMALDG + UTMASTG, no spills, no ptxas warnings, only the named barriers its immediate ids
name), and a model of its synchronisation (the producer's ring of full / empty mbarriers with parity waits, TMA
completions in any order, the two consumers' turn barriers and epilogue barriers, the cluster's peers) plays the
kernel's sequence for 1..10 tiles per CTA (1..5 per consumer, and a consumer with none) under many schedules of
the actors: no hang, no barrier over-subscribed, no arrival left unmatched, every parity wait lands on the phase
it means, and the mainloops strictly alternate (tile j's before tile j + 1's)."""
from __future__ import annotations

import itertools
import random
import re

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import clean_kernel, compile_points, gpu_runner

MAIN = "gemm_bf16_m8192_n7168_k5120"
PP = {"schedule": "pingpong", "bn": 128, "stages": 5}  # 128 x 128 per consumer: two m64n128 accumulators
VARIANTS = {
    "pp128": PP,
    # as round 1 measured it (0.878x): with the uniform consumer index (the default since) this point spills 4 bytes
    "pp128_stm_c2_hilbert": PP | {"stmatrix": True, "cluster_m": 2, "order": "hilbert", "uniform": False},
    "pp64x256": {"schedule": "pingpong", "bm": 64, "bn": 256, "stages": 4},
    "pp128_direct": PP | {"epilogue": "direct", "stages": 7},
}


# ---- render, validate, assemble -----------------------------------------------------------------

def test_schedule_is_an_option_left_out_of_default_dumps():
    assert gt.OPTION_SPACE["schedule"] == ["cooperative", "pingpong"] and "schedule" not in gt.PARAM_SPACE
    assert gt.default_params().schedule == "cooperative" and "schedule" not in gt.default_params().model_dump()
    src = gt.render(gt.GemmParams(**PP))
    assert "'schedule': 'pingpong'" in src and "Ping-pong schedule" in src
    assert "Ping-pong" not in gt.render(gt.default_params())
    p = gt.GemmParams(**PP)
    assert (p.wm, p.acc_regs) == (128, 128) and p.smem_bytes == 5 * 32768 + 4 * 128 * 128 + 16 * 5 + 1024
    assert 'box = [64, 128]' in src.split("[tmap.C_map]")[1]  # the C box is the whole tile's rows


@pytest.mark.parametrize("bad, phrase", [
    (PP | {"consumers": 3, "bm": 192}, "must be 2"),
    (PP | {"persistent": False}, "persistent=True"),
    ({"schedule": "pingpong"}, "accumulator registers"),           # 128 x 256 per consumer: 256 registers
    (PP | {"bm": 192, "bn": 192, "stages": 2}, "accumulator registers"),  # 288 registers
    (PP | {"stages": 6}, "shared memory"),                          # 6 x 32 KB ring + 2 x 32 KB staging
    ({"schedule": "pingpong", "bm": 64, "bn": 256, "stages": 5}, "shared memory"),
    (PP | {"schedule": "zigzag"}, "not one of"),
])
def test_validate_rejects_what_does_not_fit(bad, phrase):
    reasons = gt.validate(gt.GemmParams(**bad))
    assert any(phrase in r for r in reasons), reasons
    with pytest.raises(ValueError):
        gt.render(gt.GemmParams(**bad))


def test_the_points_that_fit_validate():
    for name, changes in VARIANTS.items():
        assert gt.validate(gt.GemmParams(**changes), shape=(8192, 7168, 5120)) == [], name
    # every valid ping-pong point of the space: 240 registers at most, the ring and two staging buffers in 227 KB
    for bm, bn, stages, pr in itertools.product([64, 128, 192, 256], gt.PARAM_SPACE["bn"], range(2, 9), (24, 40)):
        p = gt.GemmParams(schedule="pingpong", bm=bm, bn=bn, stages=stages, producer_regs=pr)
        if not gt.validate(p):
            assert p.acc_regs <= p.consumer_regs - 40 <= 200 and p.smem_bytes <= gt.SMEM_LIMIT


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_pingpong_assembles_with_immediate_barrier_ids(compiled, name):
    k = clean_kernel(compiled[name])
    ops = k.sass_opcodes
    p = gt.GemmParams(**VARIANTS[name])
    assert (ops.get("UTMASTG", 0) > 0) == (p.epilogue == "tma")
    # ids 0 (__syncthreads), 1-2 (turns) and 3-4 (epilogue staging): not the 16 a register id reserves
    assert k.barriers == (5 if p.epilogue == "tma" else 3), k.barriers
    src = gt.render(p)
    assert "named_barrier_sync(" not in src and not re.search(r'bar\.(sync|arrive) %0, %1;" :: "r"', src)


def test_the_cooperative_default_still_reserves_what_it_did(compiled):
    # the cooperative epilogue's barrier id is 1 + consumer at run time: ptxas reserves all 16 (unchanged here)
    r = compile_source(gt.render(gt.default_params()), "cuda", workload=MAIN)
    assert r.status == "ok" and r.kernels[gt.KERNEL].barriers == 16


# ---- a model of the kernel's synchronisation ----------------------------------------------------

# The lines of the rendered kernel the model plays (each must be in the source, so the model follows the kernel).
KERNEL_LINES = (
    "mbar_init(&full[s], 1);",
    "mbar_init(&empty[s], 4 * CLUSTER_M);",
    "const int n_tiles = first < cluster_tiles ? (cluster_tiles - first + step - 1) / step : 0;",
    "for (int j = 0; j < n_tiles; ++j) {  // every tile, in the order the two consumers take them",
    "mbar_wait(&empty[stage], phase ^ 1);",
    "for (int j = consumer; j < n_tiles; j += 2) {",
    "const uint32_t pos = static_cast<uint32_t>(j) * static_cast<uint32_t>(k_iters);",
    "int stage = static_cast<int>(pos % STAGES);",
    "uint32_t phase = (pos / STAGES) & 1;",
    "if (j > 0) turn_wait(consumer);",
    "mbar_wait(&full[stage], phase);",
    "if (j + 1 < n_tiles) turn_pass(consumer);  // the other consumer's mainloop runs while this one finishes",
    "for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);",
    "if constexpr (CLUSTER_M > 1) cluster_sync();",
)


def _barrier_ids() -> dict[str, dict[int, tuple[int, int]]]:
    """What turn_wait / turn_pass / epilogue_sync do for consumer c, read from the kernel's helpers:
    name -> {c: (barrier id, thread count)}."""
    src = gt.PINGPONG_BARRIERS
    consts = {m[0]: int(m[1]) for m in re.findall(r"constexpr int (\w+) = (\d+);", src)}
    out = {}
    for name in ("turn_wait", "turn_pass", "epilogue_sync"):
        body = src.split(f"void {name}(int c) {{")[1].split("\n}")[0]
        calls = re.findall(r"bar_(?:sync|arrive)_imm<(\w+)(?: \+ (\d))?, (\d+)>", body)
        assert len(calls) == 2 and "if (c == 0)" in body and "else" in body, body
        out[name] = {c: (consts[b] + int(plus or 0), int(n)) for c, (b, plus, n) in enumerate(calls)}
    return out


class Hang(AssertionError):
    """No actor of the model can move and some have not finished: the kernel would hang here."""


class Model:
    """Named barriers (whole warpgroups arrive: 128 threads at a time) and mbarriers with phase parity."""

    def __init__(self):
        self.named: dict[tuple, list] = {}   # (cta, id) -> [arrived threads, count of this generation, generation]
        self.mbar: dict[tuple, dict] = {}    # (cta, name, stage) -> {"count", "arrived", "tx", "done"}

    # named barriers: bar.arrive / bar.sync id, count
    def arrive(self, cta, bid, count, threads=128):
        b = self.named.setdefault((cta, bid), [0, None, 0])
        assert b[0] == 0 or b[1] == count, f"barrier {bid} of CTA {cta}: count {count} against {b[1]}"
        b[0] += threads
        b[1] = count
        assert b[0] <= count, f"barrier {bid} of CTA {cta} over-subscribed"
        if b[0] == count:
            b[0], b[1], b[2] = 0, None, b[2] + 1
        return b

    def sync(self, cta, bid, count):
        gen = self.named.setdefault((cta, bid), [0, None, 0])[2]
        b = self.arrive(cta, bid, count)
        return lambda: b[2] != gen

    # mbarriers: arrivals complete a phase once `count` arrived and the expected bytes landed
    def init(self, key, count):
        self.mbar[key] = {"count": count, "arrived": 0, "tx": 0, "done": 0, "pos": None}

    def _maybe_complete(self, m):
        if m["arrived"] == m["count"] and m["tx"] == 0:
            m["arrived"], m["done"], m["pos"] = 0, m["done"] + 1, None

    def mbar_arrive(self, key, expect_tx=0):
        m = self.mbar[key]
        m["arrived"] += 1
        m["tx"] += expect_tx
        assert m["arrived"] <= m["count"], f"mbarrier {key}: more arrivals than its count in one phase"
        self._maybe_complete(m)

    def complete_tx(self, key, nbytes, pos, stages):
        m = self.mbar[key]
        assert m["done"] == pos // stages, f"{key}: bytes of ring position {pos} landed in phase {m['done']}"
        m["tx"] -= nbytes
        self._maybe_complete(m)

    def parity_ready(self, key, parity):  # mbarrier.try_wait.parity: the phase of this parity has completed
        return lambda: (self.mbar[key]["done"] & 1) != parity


def play(n_tiles: int, k_iters: int, stages: int, cluster: int = 1, order: str = "random", seed: int = 0,
         wait_first: bool = False, pass_last: bool = False, empty_per_consumer: int = 4,
         own_ring: bool = False) -> list:
    """Play the ping-pong kernel's synchronisation for one cluster of `cluster` CTAs, each with `n_tiles` tiles.
    `order` picks which ready actor runs next: "first" / "last" (lowest / highest in [producer, consumer 0,
    consumer 1, TMA transfers] of CTA 0, then CTA 1, ...), or "random" with `seed`. The keyword flags break the
    kernel on purpose (the tests check the model catches it). Returns the mainloop starts (cta, consumer, j)."""
    m = Model()
    A_TX = 1  # bytes in units: own A (1) + CLUSTER_M slices of B (1 each) per stage
    for cta, s in itertools.product(range(cluster), range(stages)):
        m.init((cta, "full", s), 1)
        m.init((cta, "empty", s), empty_per_consumer * cluster)
    ids = _barrier_ids()
    starts, transfers = [], []
    done_cluster = [0]

    def producer(cta):
        stage, phase = 0, 0
        for j in range(n_tiles):
            for k in range(k_iters):
                pos = j * k_iters + k
                yield m.parity_ready((cta, "empty", stage), phase ^ 1)
                assert m.mbar[(cta, "empty", stage)]["done"] == pos // stages, "empty wait passed on a stale phase"
                m.mbar_arrive((cta, "full", stage), expect_tx=A_TX + cluster)
                transfers.append(((cta, "full", stage), A_TX, pos))  # own A
                for dst in range(cluster):  # this CTA's slice of B, multicast to every CTA of the cluster
                    transfers.append(((dst, "full", stage), 1, pos))
                stage, phase = (0, phase ^ 1) if stage + 1 == stages else (stage + 1, phase)
        yield from cluster_sync(cta)

    def release(cta, stage):
        for r in range(cluster):  # t % 32 == 0 of each of the 4 warps arrives on every CTA's empty[prev]
            for _ in range(4):
                m.mbar_arrive((r, "empty", stage))

    def consumer(cta, c):
        stage = phase = 0
        for j in range(c, n_tiles, 2):
            pos = j * k_iters
            if not own_ring:
                stage, phase = pos % stages, (pos // stages) & 1
            if j > 0 or wait_first:
                yield m.sync(cta, *ids["turn_wait"][c])
            starts.append((cta, c, j))
            prev = -1
            for k in range(k_iters):
                yield m.parity_ready((cta, "full", stage), phase)
                assert m.mbar[(cta, "full", stage)]["done"] == (pos + k) // stages + 1, \
                    f"consumer {c} read ring position {pos + k} from another phase"
                if prev >= 0:
                    release(cta, prev)  # wgmma_wait<1>: the group that read `prev` is done
                prev = stage
                stage, phase = (0, phase ^ 1) if stage + 1 == stages else (stage + 1, phase)
            if j + 1 < n_tiles or pass_last:
                m.arrive(cta, *ids["turn_pass"][c])
            yield lambda: True  # wgmma_wait<0> (the other consumer may run first)
            release(cta, prev)
            for _ in range(2 * 2):  # store_tile_tma: two epilogue_sync per 64-column slab
                yield m.sync(cta, *ids["epilogue_sync"][c])
        yield from cluster_sync(cta)

    def cluster_sync(cta):
        done_cluster[0] += 1
        yield lambda: done_cluster[0] == 3 * cluster

    actors = []
    for cta in range(cluster):
        actors += [producer(cta), consumer(cta, 0), consumer(cta, 1)]
    waiting = [lambda: True] * len(actors)
    live = list(range(len(actors)))
    rng = random.Random(seed)
    while live or transfers:
        ready = [i for i in live if waiting[i]()]
        choices = [("actor", i) for i in ready] + [("tma", i) for i in range(len(transfers))]
        if not choices:
            raise Hang(f"hang: {n_tiles} tiles, {k_iters} k-blocks, {stages} stages, cluster {cluster}, order "
                       f"{order}/{seed}; named {m.named}")
        kind, i = {"first": choices[0], "last": choices[-1]}.get(order) or rng.choice(choices)
        if kind == "tma":
            m.complete_tx(*transfers.pop(i), stages)
            continue
        try:
            waiting[i] = next(actors[i])
        except StopIteration:
            live.remove(i)
    left = {k: v for k, v in m.named.items() if v[0]}
    assert not left, f"arrivals left unmatched at the end: {left}"
    partial = {k: v for k, v in m.mbar.items() if v["arrived"] or v["tx"]}
    assert not partial, f"mbarrier phases left incomplete: {partial}"
    return starts


def test_the_model_plays_the_rendered_kernel():
    src = gt.render(gt.GemmParams(**PP))
    for line in KERNEL_LINES:
        assert line in src, line
    ids = _barrier_ids()
    assert ids["turn_wait"] == {0: (1, 256), 1: (2, 256)} and ids["turn_pass"] == {0: (2, 256), 1: (1, 256)}
    assert ids["epilogue_sync"] == {0: (3, 128), 1: (4, 128)}
    assert "epilogue_sync(consumer);" in src and src.count("turn_wait(consumer)") == 1


@pytest.mark.parametrize("n_tiles", range(1, 11))  # 1..5 tiles per consumer (and consumer 1 with none)
def test_pingpong_never_hangs_and_alternates(n_tiles):
    # k_iters < stages, = stages, not a multiple, a multiple: the ring's parity crosses tiles every way
    for k_iters, stages in ((1, 4), (3, 4), (4, 4), (5, 3), (2, 5), (8, 2)):
        orders = [("first", 0), ("last", 0)] + [("random", s) for s in range(12)]
        for order, seed in orders:
            starts = play(n_tiles, k_iters, stages, order=order, seed=seed)
            assert starts == [(0, j % 2, j) for j in range(n_tiles)], starts  # strict alternation, in tile order
    for order, seed in [("first", 0), ("last", 0)] + [("random", s) for s in range(6)]:
        starts = play(n_tiles, 3, 4, cluster=2, order=order, seed=seed)
        for cta in range(2):
            assert [x[1:] for x in starts if x[0] == cta] == [(j % 2, j) for j in range(n_tiles)]


@pytest.mark.parametrize("broken, phrase", [
    (dict(wait_first=True), "hang"),                # consumer 0 waits for a turn nobody passes
    (dict(pass_last=True), "unmatched"),            # the CTA's last mainloop passes the turn to no one
    (dict(empty_per_consumer=8), "hang|incomplete"),
    (dict(own_ring=True), "another phase|hang"),  # each consumer counting only its own stages (the cooperative way)  # the cooperative count: both consumers' warps per stage
])
def test_the_model_catches_a_broken_schedule(broken, phrase):
    with pytest.raises(AssertionError, match=phrase):
        for n_tiles in (1, 2, 3):
            for order, seed in [("first", 0), ("last", 0)] + [("random", s) for s in range(4)]:
                play(n_tiles, 3, 4, order=order, seed=seed, **broken)


# ---- GPU: correctness against torch where CTAs hold 1..5 and 27..28 tiles (odd and even counts) ----------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3456, 2816, 192), (4096, 2048, 320), (2000, 2040, 200), (8192, 7168, 5120)])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_pingpong_matches_torch(compiled, name, shape):
    import torch

    torch.manual_seed(2)
    bench, runner = gpu_runner(name, VARIANTS[name], compiled[name])
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):  # fresh NaN-poisoned output each time: every element must be written
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})()
        torch.cuda.synchronize()
        verdict = bench.check(c, a.float() @ b.float().T)
        assert verdict["ok"], verdict
        assert verdict["rel_fro"] < 5e-3
