"""The reference GEMM's stream-K tail (gemm_template: tail="streamk"): the tiles of the full waves one CTA each, then
the k-blocks of the remaining tiles split evenly over all the CTAs; each contributor of a tail tile publishes its
fp32 partial sums in its workspace slot and draws a ticket, and the last one adds the others' and stores the tile.

Here: the option renders (scratch buffers, arguments, grid), validates and assembles for sm_90a (HGMMA + UTMALDG,
no spills, no warnings); the plan resolves on the main GEMM and on small ragged shapes; a Python model of the
assignment (StreamK of the kernel, also compiled for the host and compared) covers every (tile, k-block) exactly
once on several shapes for every grid of 1..132 CTAs, with at most two workspace slots per CTA; a model of the
ticket protocol, played under every interleaving of up to 3 contributors (random ones beyond), finds exactly one
last contributor per tile and consumer, which sees every other partial published, adds each exactly once and leaves
the ticket at 0 for the next call; and the source keeps the fences in the order the argument needs."""
from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest

from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import gemm
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import clean_kernel, compile_points, gpu_runner

HOST_CXX = shutil.which("g++") or shutil.which("c++")  # builds device code for the host

MAIN = "gemm_bf16_m8192_n7168_k5120"
SK = {"tail": "streamk"}
VARIANTS = {
    "sk": SK,
    "sk_stmatrix": SK | {"stmatrix": True},
    "sk_direct": SK | {"epilogue": "direct"},
    "sk_128x64_s8": SK | {"bm": 128, "bn": 64, "stages": 8},            # params_for(M=128) with a stream-K tail
    "sk_64x64_c1_s8": SK | {"bm": 64, "bn": 64, "consumers": 1, "stages": 8},  # params_for(M=64)
    "sk_bn192_cap120": SK | {"bn": 192, "max_ctas": 120},
}
# (M, N, K) for the plan and the GPU: the main GEMM (76 tail tiles of 1792), the smoke GEMM and a ragged one (fewer
# tiles than CTAs: every tile split, up to 8 contributors of one k-block each), a decode GEMM (28 tiles), tails
# with empty ranges (K = 192: 33 tail tiles x 3 k-blocks for 132 CTAs)
SHAPES = [(8192, 7168, 5120), (256, 256, 512), (200, 296, 328), (64, 7168, 5120), (3456, 2816, 192), (2000, 2040, 200)]


# ---- the option: render, validate, plan -----------------------------------------------------------------

def test_tail_is_an_option_left_out_of_default_dumps():
    assert gt.OPTION_SPACE["tail"] == ["none", "streamk"] and "tail" not in gt.PARAM_SPACE
    assert gt.default_params().tail == "none" and "tail" not in gt.default_params().model_dump()
    default = gt.render(gt.default_params())
    assert "StreamK" not in default and "scratch" not in default
    src = gt.render(gt.GemmParams(**SK, max_ctas=0))  # every SM (the default caps the persistent grid at 128)
    assert "'tail': 'streamk'" in src and "struct StreamK" in src
    plan = src.split("*/")[0]
    assert 'grid = ["num_sms", 1, 1]' in plan
    assert '"i32:K", "scratch:sk_ws", "scratch:sk_tickets"]' in plan
    assert '[scratch.sk_ws]\ndtype = "float32"\nshape = ["num_sms", 2, 32768]\nzero = false' in plan
    assert '[scratch.sk_tickets]\ndtype = "int32"\nshape = ["num_sms", 2]\nzero = true' in plan
    capped = gt.render(gt.GemmParams(**SK, max_ctas=120)).split("*/")[0]
    assert 'grid = ["min(num_sms, 120)", 1, 1]' in capped and 'shape = ["min(num_sms, 120)", 2' in capped


@pytest.mark.parametrize("bad, phrase", [
    (SK | {"schedule": "pingpong", "bn": 128, "stages": 5}, "schedule='cooperative'"),
    (SK | {"persistent": False}, "persistent=True"),
    (SK | {"cluster_m": 2}, "cluster_m=2 must be 1"),
    ({"tail": "splitk"}, "not one of"),
])
def test_validate_rejects_what_does_not_fit(bad, phrase):
    reasons = gt.validate(gt.GemmParams(**bad))
    assert any(phrase in r for r in reasons), reasons
    with pytest.raises(ValueError):
        gt.render(gt.GemmParams(**bad))


def test_the_variants_validate():
    for name, changes in VARIANTS.items():
        for m, n, k in SHAPES:
            assert gt.validate(gt.GemmParams(**changes), shape=(m, n, k)) == [], (name, (m, n, k))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["sk", "sk_64x64_c1_s8", "sk_bn192_cap120"])
def test_plan_resolves_with_its_scratch(name, shape):
    p = gt.GemmParams(**VARIANTS[name])
    m, n, k = shape
    workload = gemm(m, n, k, held_out=True)
    solution = parse_solution(gt.render(p), workload)
    assert isinstance(solution, Solution), [str(i) for i in solution]
    resolved = resolve_plan(solution.plan, workload, num_sms=132)
    ctas = min(132, p.max_ctas or 132)
    assert resolved.launches[0].grid == (ctas, 1, 1) or list(resolved.launches[0].grid) == [ctas, 1, 1]
    scratch = {s.name: s for s in resolved.scratch}
    assert scratch["sk_ws"].shape == [ctas, 2, p.bm * p.bn] and not scratch["sk_ws"].zero
    assert scratch["sk_tickets"].shape == [ctas, p.consumers] and scratch["sk_tickets"].zero
    # the tickets index r * CONSUMERS + consumer with r < tail tiles < CTAs
    tiles = -(-m // p.bm) * -(-n // p.bn)
    assert tiles % ctas < ctas


# ---- assemble -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_streamk_assembles_without_spills(compiled, name):
    k = clean_kernel(compiled[name])
    ops = k.sass_opcodes
    assert ops.get("ATOMG", 0) == 1  # the ticket
    p = gt.GemmParams(**VARIANTS[name])
    assert (ops.get("UTMASTG", 0) > 0) == (p.epilogue == "tma")


# ---- the assignment: a model of StreamK, and the device code compiled for the host ----------------------

class StreamK:
    """gemm_template's struct StreamK, line for line (C++ integer division of non-negatives is Python's //)."""

    def __init__(self, tiles: int, k_iters: int, ctas: int):
        self.dp_tiles = tiles - tiles % ctas
        self.k_iters, self.ctas = k_iters, ctas
        self.total = tiles % ctas * k_iters

    def begin(self, c: int) -> int:
        return self.total * c // self.ctas

    def cta_of(self, x: int) -> int:
        return ((x + 1) * self.ctas - 1) // self.total

    def units(self, c: int) -> list[tuple[int, int, int, int]]:
        """CTA c's units (tile, kb, ke, r) as its `for (...; sk.next(...);)` loop visits them."""
        out, ct, it, end = [], c, self.begin(c), self.begin(c + 1)
        while True:
            if ct < self.dp_tiles:
                out.append((ct, 0, self.k_iters, -1))
                ct += self.ctas
                continue
            if it >= end:
                return out
            r = it // self.k_iters
            kb = it - r * self.k_iters
            ke = min(self.k_iters, kb + (end - it))
            it += ke - kb
            out.append((self.dp_tiles + r, kb, ke, r))

    def contributors(self, r: int) -> list[int]:
        """What streamk_fixup reads: the CTAs of cta_of(first k-block) .. cta_of(last) with a non-empty range."""
        k0 = r * self.k_iters
        lo, hi = self.cta_of(k0), self.cta_of(k0 + self.k_iters - 1)
        return [c for c in range(lo, hi + 1) if self.begin(c + 1) > self.begin(c)]

    def seg(self, c: int, r: int) -> int:
        return 0 if self.begin(c) // self.k_iters == r else 1


# (tiles, k_iters): the main GEMM (1792 x 80), the square 4096 (512 x 64), decode (28 x 80), the smoke and ragged
# GEMMs (2 x 8, 4 x 6), K = 192 (297 x 3), one k-block per tile, a single tile, odd sizes
ASSIGNMENTS = [(1792, 80), (512, 64), (28, 80), (2, 8), (4, 6), (297, 3), (133, 1), (1, 1), (131, 200), (264, 80),
               (7, 5), (3584, 80), (130, 2)]


@pytest.mark.parametrize("tiles, k_iters", ASSIGNMENTS)
def test_every_k_block_of_every_tile_is_computed_once_and_every_tile_stored_once(tiles, k_iters):
    for ctas in range(1, 133):
        sk = StreamK(tiles, k_iters, ctas)
        covered: dict[int, list[int]] = {}
        stored = [0] * tiles                                # DP tiles by their CTA, tail tiles by their last contributor
        slots: dict[tuple[int, int], int] = {}              # (CTA, slot) -> the tail tile whose partials it holds
        by_tile: dict[int, list[int]] = {}
        for c in range(ctas):
            tail_tiles = []
            for tile, kb, ke, r in sk.units(c):
                assert 0 <= kb < ke <= k_iters and 0 <= tile < tiles
                covered.setdefault(tile, []).extend(range(kb, ke))
                if r < 0:
                    assert (kb, ke) == (0, k_iters) and tile < sk.dp_tiles
                    stored[tile] += 1
                else:
                    assert tile == sk.dp_tiles + r and r < ctas  # a ticket row exists for it (tickets: ctas rows)
                    tail_tiles.append(r)
                    by_tile.setdefault(r, []).append(c)
                    key = (c, sk.seg(c, r))
                    assert key not in slots, (ctas, c, r)  # two tiles of one CTA never share a slot
                    slots[key] = r
            assert len(tail_tiles) <= 2 and tail_tiles == sorted(tail_tiles)  # slot 0, then slot 1
            if len(tail_tiles) == 2:
                assert tail_tiles[1] == tail_tiles[0] + 1 and sk.seg(c, tail_tiles[0]) == 0
        for tile in range(tiles):
            assert sorted(covered.get(tile, [])) == list(range(k_iters)), (ctas, tile)
        for r, cs in by_tile.items():
            assert sk.contributors(r) == cs, (ctas, r)       # what the finalizer reads is who contributed
            stored[sk.dp_tiles + r] += 1                     # one last contributor each (the protocol model below)
        assert stored == [1] * tiles
        # even split: ranges differ by at most one k-block
        lengths = [sk.begin(c + 1) - sk.begin(c) for c in range(ctas)]
        assert max(lengths) - min(lengths) <= 1 and sum(lengths) == sk.total


def host_streamk(tmp_path, main: str, stdin: str) -> str:
    """struct StreamK of the kernel compiled for the host with `main`, run on `stdin`; its output."""
    helpers = gt.STREAMK_HELPERS
    struct = helpers[helpers.index("struct StreamK {"):helpers.index("\n};\n") + 4]
    src, exe = tmp_path / "sk.cpp", tmp_path / "sk"
    src.write_text("#include <cstdio>\n#include <algorithm>\nusing std::min;\n#define __device__\n"
                   "#define __forceinline__ inline\n" + struct + main)
    subprocess.run([HOST_CXX, "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    return out.stdout


@pytest.mark.skipif(HOST_CXX is None, reason="needs a host C++ compiler (g++ or c++) to build the device code for the host")
def test_the_device_streamk_computes_what_the_model_does(tmp_path):
    """struct StreamK of the rendered kernel, compiled for the host, walks the same units for every CTA."""
    stdout = host_streamk(tmp_path, r"""
int main(int argc, char** argv) {
  int tiles, k_iters;
  while (scanf("%d %d", &tiles, &k_iters) == 2) {
    for (int ctas = 1; ctas <= 132; ++ctas) {
      const StreamK sk(tiles, k_iters, ctas);
      for (int c = 0; c < ctas; ++c) {
        printf("%d %d:", ctas, c);
        for (int ct = c, it = sk.begin(c), end = sk.begin(c + 1), tile = 0, kb = 0, ke = 0, r = -1;
             sk.next(ct, it, end, ctas, tile, kb, ke, r);)
          if (r >= 0) printf(" %d,%d,%d,%d", tile, kb, ke, r);
        if (sk.total) for (int x = sk.begin(c); x < sk.begin(c + 1); ++x) if (sk.cta_of(x) != c) printf(" BAD");
        printf("\n");
      }
    }
  }
  return 0;
}
""", "".join(f"{t} {k}\n" for t, k in ASSIGNMENTS))
    want = []
    for tiles, k_iters in ASSIGNMENTS:
        for ctas in range(1, 133):
            sk = StreamK(tiles, k_iters, ctas)
            for c in range(ctas):
                units = "".join(f" {t},{kb},{ke},{r}" for t, kb, ke, r in sk.units(c) if r >= 0)
                want.append(f"{ctas} {c}:{units}")
    assert stdout.splitlines() == want


# ---- the ticket protocol of streamk_fixup ---------------------------------------------------------------

def contributor(me: int, parts: int, mem: dict, log: dict, broken: frozenset):
    """One contributor's warpgroup in streamk_fixup as a generator: each yield is one step that the other
    contributors may interleave with (thread 0's ld.acquire / atom.acq_rel on the ticket, the stores of the
    partials, the loads). mem: 'ticket' and 'ws' (slot -> value or None = poison); log: what happened."""
    if "no_early_check" not in broken:
        last = mem["ticket"] == parts - 1                      # ld.acquire.gpu
        yield
    else:
        last = False
    if not last:
        if "ticket_before_store" in broken:
            old = mem["ticket"]; mem["ticket"] = old + 1       # atom.acq_rel before the partials are out
            yield
            mem["ws"][me] = 1 << me
            yield
        else:
            mem["ws"][me] = 1 << me                            # st.global.cg of the partials
            yield                                              # fence.acq_rel.gpu, bar.red, then:
            old = mem["ticket"]; mem["ticket"] = old + 1       # atom.acq_rel.gpu
            yield
        last = old == parts - 1
        if not last:
            return
    total = 1 << me
    for other in range(parts):                                 # fence.acq_rel.gpu, then ld.global.cg of each slot
        if other != me:
            v = mem["ws"][other]
            assert v is not None, f"contributor {me} read slot {other} before it was published"
            total += v
    yield
    if "no_reset" not in broken:
        mem["ticket"] = 0                                      # st.relaxed.gpu: zero for the next call
    log["finalizers"].append(me)
    log["sums"].append(total)


def play(parts: int, schedule, mem: dict, broken: frozenset = frozenset()) -> dict:
    """Run `parts` contributors of one (tile, consumer) under `schedule` (a function that picks the next runnable
    one from a list); returns the log."""
    mem["ws"] = {i: None for i in range(parts)}                # poisoned every call
    log = {"finalizers": [], "sums": []}
    gens = {i: contributor(i, parts, mem, log, broken) for i in range(parts)}
    while gens:
        i = schedule(sorted(gens))
        try:
            next(gens[i])
        except StopIteration:
            del gens[i]
    return log


def check_call(parts: int, log: dict, mem: dict) -> None:
    assert log["finalizers"] and len(log["finalizers"]) == 1, f"finalizers {log['finalizers']}: the tile is stored " \
                                                             f"{len(log['finalizers'])} times"
    assert log["sums"] == [(1 << parts) - 1], "a partial added twice or not at all"
    assert mem["ticket"] == 0, "ticket left non-zero for the next call"


def all_schedules(parts: int, broken: frozenset = frozenset()):
    """Every interleaving of `parts` contributors (depth-first over the choice of the next one to step)."""
    def explore(prefix):
        choices, idx = [], [0]

        def schedule(runnable):
            k = idx[0]
            idx[0] += 1
            if k < len(prefix):
                return prefix[k]
            choices.append((k, runnable))
            return runnable[0]

        mem = {"ticket": 0}
        log = play(parts, schedule, mem, broken)
        yield log, mem
        for k, runnable in choices:
            for alt in runnable[1:]:
                # the prefix up to step k as taken, then `alt`
                yield from explore(prefix_at(prefix, choices, k) + [alt])

    def prefix_at(prefix, choices, k):
        taken = list(prefix)
        for kk, runnable in choices:
            if kk >= k:
                break
            taken.append(runnable[0])
        return taken[:k]

    yield from explore([])


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_every_interleaving_stores_the_tile_once_with_every_partial(parts):
    n = 0
    for log, mem in all_schedules(parts):
        check_call(parts, log, mem)
        n += 1
    assert n >= (1 if parts == 1 else parts)  # several interleavings were played


@pytest.mark.parametrize("parts", [2, 5, 8, 13])
def test_random_interleavings_and_consecutive_calls(parts):
    """Many calls in a row on the same ticket (the kernel's own reset; the plan's zero fill is not relied on)."""
    rng = random.Random(parts)
    mem = {"ticket": 0}
    for _ in range(400):
        log = play(parts, lambda runnable: rng.choice(runnable), mem)
        check_call(parts, log, mem)


@pytest.mark.parametrize("broken, phrase", [
    (frozenset({"ticket_before_store"}), "before it was published"),
    (frozenset({"no_reset"}), "ticket left non-zero|stored 0 times"),
])
def test_the_model_catches_a_broken_protocol(broken, phrase):
    with pytest.raises(AssertionError, match=phrase):
        for parts in (2, 3):
            for log, mem in all_schedules(parts, broken):
                check_call(parts, log, mem)


def test_without_the_early_check_it_is_still_correct():
    for parts in (1, 2, 3):
        for log, mem in all_schedules(parts, frozenset({"no_early_check"})):
            check_call(parts, log, mem)


def test_the_source_keeps_the_order_the_protocol_needs():
    """The memory-ordering argument, as the source must spell it: publish (each thread's stores), each thread's
    fence.acq_rel.gpu, the warpgroup barrier, thread 0's atom.acq_rel (release; its acquire for the last one);
    the last: acquire (ld.acquire or the atom), barrier, each thread's fence, the loads, then the reset."""
    src = gt.STREAMK_HELPERS
    body = src[src.index("__device__ __forceinline__ bool streamk_fixup("):]
    steps = [
        "bool last = warpgroup_any(t == 0 && ld_acquire_gpu(ticket) == parts - 1, consumer);",
        "st_cg_v4(p + 4 * 128 * i",
        "fence_acq_rel_gpu();\n    last = warpgroup_any(t == 0 && atom_add_acq_rel_gpu(ticket, 1) == parts - 1, consumer);",
        "if (!last) return false;",
        "  fence_acq_rel_gpu();\n  for (int c = c_lo; c <= c_hi; ++c) {",
        "const float4 v = ld_cg_v4(p + 4 * 128 * i);",
        "if (t == 0) st_relaxed_gpu(ticket, 0);",
        "return true;",
    ]
    pos = [body.index(s) for s in steps]
    assert pos == sorted(pos)
    for op in ("ld.acquire.gpu.global.b32", "atom.acq_rel.gpu.global.add.s32", "fence.acq_rel.gpu;",
               "bar.red.or.pred pout, %2, 128, pin;", "st.global.cg.v4.f32", "ld.global.cg.v4.f32"):
        assert op in src, op
    # the kernel calls the fixup for tail units only, before the epilogue, and skips the store when not last
    kernel = gt.render(gt.GemmParams(**SK))
    assert kernel.count("if (r >= 0 && !streamk_fixup(acc, ws, tickets, sk, r, consumer)) continue;") == 1
    assert kernel.index("!streamk_fixup(") < kernel.index("store_tile_tma(acc, epi + consumer")
    # both loops walk the same units; the first k-block of each unit zeroes the accumulators
    assert kernel.count("sk.next(ct, it, end, step, tile, kb, ke, r);) {") == 2
    assert kernel.count("for (int k = kb; k < ke; ++k) {") == 2 and "((k - kb) | kc | kk) != 0" in kernel
    assert not re.search(r"\(k \| kc \| kk\)", kernel)


# ---- GPU: correctness against torch, twice per shape (tickets reset, NaN-poisoned output) ---------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_streamk_matches_torch(compiled, name, shape):
    import torch

    torch.manual_seed(3)
    bench, runner = gpu_runner(name, VARIANTS[name], compiled[name])
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().T
    for trial in range(3):  # fresh NaN-poisoned output each time: every element must be written
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch = runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})
        if trial == 2:  # the kernel's own reset: no zero fill before this call
            runner.plan["scratch"]["sk_tickets"]["zero"] = False
            launch = runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})
        launch()
        torch.cuda.synchronize()
        verdict = bench.check(c, ref)
        assert verdict["ok"], (trial, verdict)
        assert verdict["rel_fro"] < 5e-3
        assert int(runner.scratch["sk_tickets"].abs().sum()) == 0, "tickets left non-zero"


@pytest.mark.skipif(HOST_CXX is None, reason="needs a host C++ compiler (g++ or c++) to build the device code for the host")
def test_the_32_bit_split_is_guarded(tmp_path):
    """begin() and cta_of() divide in 32 bits (a 64-bit division is a call, around which ptxas spills); fits() is
    false exactly where total x ctas reaches 2^32, and the kernel traps there instead of splitting wrongly."""
    cases = [(1792, 80, 132), (1792, 80, 128), (1791, 450_000, 132), (147, 200_000, 148), (147, 197_000, 148)]
    stdout = host_streamk(tmp_path, r"""
int main() {
  int tiles, k_iters, ctas;
  while (scanf("%d %d %d", &tiles, &k_iters, &ctas) == 3) printf("%d\n", StreamK(tiles, k_iters, ctas).fits() ? 1 : 0);
  return 0;
}
""", "".join(f"{t} {k} {c}\n" for t, k, c in cases))
    want = [int((t % c) * k * c < 2 ** 32) for t, k, c in cases]
    assert stdout.split() == [str(w) for w in want] and want == [1, 1, 0, 0, 1]
    assert "if (!sk.fits()) __trap();" in gt.render(gt.GemmParams(tail="streamk", max_ctas=0))
