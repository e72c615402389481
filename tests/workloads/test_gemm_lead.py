"""The reference GEMM's split run first (gemm_template: tail="lead", on the deferred kernel): the k-blocks of the tiles
past the full waves split evenly over all the CTAs and run before the full waves' tiles, so that every CTA of the
persistent grid, on every SM, runs the same number of k-blocks (+-1). The split's arithmetic and its ticket protocol
are tail="streamk"'s (test_gemm_streamk.py plays the protocol under every interleaving); what is new is the order of
the walk and its place in the deferred kernel.

Here: the option validates (it needs defer) and renders with its scratch; the walk (a Python model of next_lead, and
the device code compiled for the host) covers every (tile, k-block) exactly once for every grid of 1..132 CTAs, the
split range first, each CTA's range ending where the next one's starts; the kernel keeps the consumers' walk in
uniform registers (the loop's descriptors built there, as in the reference) and nothing spills in the k-loop; on the
GPU, the kernel matches torch on the main GEMM and ragged shapes, three calls each (the kernel's own ticket reset
in the last)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import gemm
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import compile_points, gpu_runner
from test_gemm_streamk import ASSIGNMENTS, SHAPES, StreamK

HOST_CXX = shutil.which("g++") or shutil.which("c++")

MAIN = "gemm_bf16_m8192_n7168_k5120"
LEAD = {"defer": True, "group_m": 16, "l2_hints": True, "tail": "lead", "max_ctas": 0}  # default_params() + the split
VARIANTS = {
    "lead": LEAD,
    "lead_stmatrix": LEAD | {"stmatrix": True},
    "lead_bn128": LEAD | {"bn": 128, "l2_hints": False},
    "lead_cap120": LEAD | {"max_ctas": 120},
}


def lead_units(sk: StreamK, c: int) -> list[tuple[int, int, int, int]]:
    """CTA c's units (tile, kb, ke, r) as next_lead hands them out: its k-range of the split tiles, then the full
    waves' tiles c, c + ctas, ..."""
    out, ct, it, end = [], c, sk.begin(c), sk.begin(c + 1)
    nr = it // sk.k_iters
    nkb = it - nr * sk.k_iters
    while it < end:
        r, kb = nr, nkb
        ke = min(sk.k_iters, kb + (end - it))
        it += ke - kb
        out.append((sk.dp_tiles + r, kb, ke, r))
        nr, nkb = r + 1, 0
    while ct < sk.dp_tiles:
        out.append((ct, 0, sk.k_iters, -1))
        ct += sk.ctas
    return out


# ---- the option ----------------------------------------------------------------------------------------

def test_lead_is_an_option_that_needs_defer():
    assert "lead" in gt.OPTION_SPACE["tail"]
    assert gt.validate(gt.GemmParams(**LEAD), shape=(8192, 7168, 5120)) == []
    reasons = gt.validate(gt.GemmParams(**(LEAD | {"defer": False})))
    assert any("tail='lead'" in r and "defer=True" in r for r in reasons), reasons
    reasons = gt.validate(gt.GemmParams(**(LEAD | {"cluster_m": 2})))
    assert any("cluster_m=2 must be 1" in r for r in reasons), reasons
    src = gt.render(gt.GemmParams(**LEAD))
    plan = src.split("*/")[0]
    assert 'grid = ["num_sms", 1, 1]' in plan and '"scratch:sk_ws", "scratch:sk_tickets"]' in plan
    assert "sk.next_lead(ct, it, end, step, tile, kb, ke, r, nr, nkb)" in src
    # the consumers read the range from lane 0; the producer (one thread) does not shuffle
    assert src.count("lane0(sk.begin(") == 2 and src.count("it = sk.begin(blockIdx.x)") == 1
    # a split part's result is published, not stored: its deferred slabs are off, and the fixup comes after the
    # previous tile's last slabs
    assert src.index("for (int s = ke - kb; pm0 >= 0") < src.index("streamk_fixup(acc, ws, tickets, sk, r, consumer)")
    assert "pm0 = -1;\n        continue;" in src
    assert "store_slab_deferred(pk, k - kb," in src and "k - kb < BN / 64" in src


@pytest.mark.parametrize("shape", SHAPES)
def test_plan_resolves_with_its_scratch(shape):
    m, n, k = shape
    workload = gemm(m, n, k, held_out=True)
    solution = parse_solution(gt.render(gt.GemmParams(**LEAD)), workload)
    assert isinstance(solution, Solution), [str(i) for i in solution]
    resolved = resolve_plan(solution.plan, workload, num_sms=132)
    assert list(resolved.launches[0].grid) == [132, 1, 1]
    scratch = {s.name: s for s in resolved.scratch}
    assert scratch["sk_ws"].shape == [132, 2, 128 * 256] and scratch["sk_tickets"].zero


# ---- the walk ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tiles, k_iters", ASSIGNMENTS)
def test_the_split_runs_first_and_every_k_block_once(tiles, k_iters):
    for ctas in range(1, 133):
        sk = StreamK(tiles, k_iters, ctas)
        covered: dict[int, list[int]] = {}
        by_tile: dict[int, list[int]] = {}
        blocks = []
        for c in range(ctas):
            units = lead_units(sk, c)
            split = [u for u in units if u[3] >= 0]
            assert units[:len(split)] == split  # the split range before any whole tile
            assert sum(ke - kb for _, kb, ke, _ in split) == sk.begin(c + 1) - sk.begin(c)
            assert split == [u for u in sk.units(c) if u[3] >= 0]  # the same parts as tail="streamk"
            for tile, kb, ke, r in units:
                covered.setdefault(tile, []).extend(range(kb, ke))
                if r >= 0:
                    by_tile.setdefault(r, []).append(c)
            blocks.append(sum(ke - kb for _, kb, ke, _ in units))
        for tile in range(tiles):
            assert sorted(covered.get(tile, [])) == list(range(k_iters)), (ctas, tile)
        for r, cs in by_tile.items():
            assert sk.contributors(r) == cs, (ctas, r)
        assert max(blocks) - min(blocks) <= 1  # every CTA the same k-blocks, +-1


def test_the_main_gemm_runs_balanced_on_132_ctas():
    sk = StreamK(1792, 80, 132)
    blocks = {sum(ke - kb for _, kb, ke, _ in lead_units(sk, c)) for c in range(132)}
    assert blocks == {1086, 1087}  # against 14 x 80 = 1,120 on 128 CTAs
    assert sk.dp_tiles == 1716 and sk.total == 76 * 80


@pytest.mark.skipif(HOST_CXX is None, reason="needs a host C++ compiler (g++ or c++) to build the device code for the host")
def test_the_device_walk_is_the_model(tmp_path):
    src = gt.render(gt.GemmParams(**LEAD))
    struct = src[src.index("struct StreamK {"):]
    struct = struct[:struct.index("\n};\n") + 4]
    (tmp_path / "lead.cpp").write_text(
        "#include <cstdio>\n#include <algorithm>\nusing std::min;\n#define __device__\n#define __forceinline__ inline\n"
        + struct + r"""
int main() {
  int tiles, k_iters;
  while (scanf("%d %d", &tiles, &k_iters) == 2) {
    for (int ctas = 1; ctas <= 132; ++ctas) {
      const StreamK sk(tiles, k_iters, ctas);
      for (int c = 0; c < ctas; ++c) {
        printf("%d %d:", ctas, c);
        for (int ct = c, it = sk.begin(c), end = sk.begin(c + 1), tile = 0, kb = 0, ke = 0, r = -1,
             nr = it / k_iters, nkb = it - nr * k_iters; sk.next_lead(ct, it, end, ctas, tile, kb, ke, r, nr, nkb);)
          printf(" %d,%d,%d,%d", tile, kb, ke, r);
        printf("\n");
      }
    }
  }
  return 0;
}
""")
    exe = tmp_path / "lead"
    subprocess.run([HOST_CXX, "-O1", "-o", str(exe), str(tmp_path / "lead.cpp")], check=True, capture_output=True,
                   timeout=120)
    cases = [(t, k) for t, k in ASSIGNMENTS if t * k < 300_000]  # the whole-tile lists of the large ones are long
    out = subprocess.run([str(exe)], input="".join(f"{t} {k}\n" for t, k in cases), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0
    want = [f"{ctas} {c}:" + "".join(f" {t},{kb},{ke},{r}" for t, kb, ke, r in lead_units(StreamK(t_, k_, ctas), c))
            for t_, k_ in cases for ctas in range(1, 133) for c in range(ctas)]
    assert out.stdout.splitlines() == want


# ---- assemble ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_lead_assembles_with_the_loop_in_uniform_registers(compiled, name):
    from ptxbench.tools.sass import disassemble

    result = compiled[name]
    assert result.status == "ok", result.log[-2000:]
    assert all("spilled" in w.message for w in result.warnings), [str(w) for w in result.warnings]  # below
    kernel = result.kernels[gt.KERNEL]
    ops = kernel.sass_opcodes
    assert ops.get("HGMMA", 0) > 0 and ops.get("USETMAXREG", 0) == 2 and ops.get("ATOMG", 0) == 2  # ticket, barrier
    assert ops.get("UTMASTG", 0) >= 4
    # ptxas keeps a few words of the walk in local memory outside the loop (at most 16 bytes); the loop has none
    assert kernel.spill_stores <= 16 and kernel.spill_loads <= 16
    lines = [f"{i.opcode} {i.operands}" for i in disassemble(result.cubin_path)[gt.KERNEL]]
    loop = _between_hgmmas(lines)
    assert all("gdesc[UR" in x for x in loop if x.startswith("HGMMA"))
    assert not any(x.startswith(("LDL", "STL")) for x in loop)
    assert not any(x.startswith("R2UR") for x in loop)  # the descriptors built in uniform registers, as the reference's


def _between_hgmmas(lines: list[str]) -> list[str]:
    """The consumers' k-block: its four HGMMAs and what ptxas put between them."""
    first = next(i for i, x in enumerate(lines) if x.startswith("HGMMA"))
    last = max(i for i, x in enumerate(lines) if x.startswith("HGMMA"))
    return lines[first:last + 1]


# ---- GPU: correctness against torch, three calls per shape ----------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_lead_matches_torch(compiled, name, shape):
    import torch

    torch.manual_seed(7)
    bench, runner = gpu_runner(name, VARIANTS[name], compiled[name])
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().T
    for trial in range(3):  # fresh NaN-poisoned output each time: every element must be written
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if trial == 2:  # the kernel's own reset: no zero fill before this call
            runner.plan["scratch"]["sk_tickets"]["zero"] = False
        runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})()
        torch.cuda.synchronize()
        verdict = bench.check(c, ref)
        assert verdict["ok"] and verdict["rel_fro"] < 5e-3, (trial, verdict)
        tickets = runner.scratch["sk_tickets"].flatten().tolist()
        ctas, consumers = runner.scratch["sk_tickets"].shape
        barrier = tickets.pop(consumers * (ctas - 1))  # lead_sync's counter: only grows, by the arrivals a call
        assert tickets == [0] * len(tickets), "tickets left non-zero"
        p = gt.GemmParams(**VARIANTS[name])
        tiles = -(-m // p.bm) * -(-n // p.bn)
        arrivals = consumers * min(tiles % ctas * -(-k // p.bk), ctas)
        assert barrier == (0 if tiles % ctas == 0 else arrivals * (2 if trial == 2 else 1)), barrier  # 2: no zero fill
