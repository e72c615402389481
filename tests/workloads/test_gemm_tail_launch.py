"""The GEMM template's tail="launch" (workloads/solutions/gemm_tail_launch.py): the full waves' tiles in the kernel as
it is, the last partial wave's tiles split by k-blocks over every SM in a second launch (gemm_bf16_tn_tail, the
stream-K kernel with its walk started past the full waves).

Here: the option validates beside defer (stream-K did not) and refuses what it cannot run; the plan has the two
launches on every SM, the scratch on the second only; both kernels assemble clean; the first kernel is the
reference's code with its registers renamed (SASS lines in order, registers and constants abstracted: 1,458 of 1,536
at the main GEMM, where the in-kernel stream-K kept 289), so the split leaves the main loop's schedule alone; a model
of both launches' walks covers every (tile, k-block) exactly once for every grid of 1..132 CTAs; and on the GPU, the
results match torch on the stream-K test's shapes."""
from __future__ import annotations

import pytest

from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import gemm
from ptxbench.workloads.solutions import gemm_template as gt
from ptxbench.workloads.solutions.gemm_tail_launch import TAIL_KERNEL

from gemm_helpers import check_against_torch, clean_kernel, compile_points
from sass_order import loop_schedule

MAIN = "gemm_bf16_m8192_n7168_k5120"
TL = {"tail": "launch", "max_ctas": 0}
VARIANTS = {
    "reference": {},  # the default point (defer, 128 CTAs): what the first kernel is compared with
    "tl": TL,  # the default point with the tail launch
    "tl_direct": TL | {"epilogue": "direct", "defer": False},
    "tl_64x64_c1_s8": TL | {"bm": 64, "bn": 64, "consumers": 1, "stages": 8, "defer": False},
}
SHAPES = [(8192, 7168, 5120), (256, 256, 512), (200, 296, 328), (64, 7168, 5120), (3456, 2816, 192), (2000, 2040, 200)]


def test_the_option_validates_beside_defer_and_refuses_what_it_cannot_run():
    assert "launch" in gt.OPTION_SPACE["tail"] and "tail" not in gt.PARAM_SPACE
    assert gt.default_params().defer and gt.validate(gt.default_params().model_copy(update=TL)) == []
    for bad in ({"max_ctas": 128}, {"schedule": "pingpong", "defer": False, "bn": 128, "stages": 5},
                {"cluster_m": 2}, {"persistent": False, "defer": False}):
        reasons = gt.validate(gt.default_params().model_copy(update=TL | bad))
        assert any("tail='launch'" in r for r in reasons), (bad, reasons)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_plan_launches_both_kernels_on_every_sm(shape):
    m, n, k = shape
    workload = gemm(m, n, k, held_out=True)
    solution = parse_solution(gt.render(gt.default_params().model_copy(update=TL)), workload)
    assert isinstance(solution, Solution), [str(i) for i in solution]
    plan = resolve_plan(solution.plan, workload, num_sms=132)
    first, tail = plan.launches
    assert (first.kernel, tail.kernel) == (gt.KERNEL, TAIL_KERNEL)
    assert tuple(first.grid) == tuple(tail.grid) == (132, 1, 1)  # StreamK's CTA count is the first kernel's step
    assert len(first.args) == 7 and len(tail.args) == 9  # the workspace and tickets: the tail kernel's only
    scratch = {s.name: s for s in plan.scratch}
    assert scratch["sk_tickets"].zero and not scratch["sk_ws"].zero


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", [n for n in VARIANTS if n != "reference"])
def test_both_kernels_assemble_clean(compiled, name):
    clean_kernel(compiled[name])
    tail = compiled[name].kernels[TAIL_KERNEL]
    assert tail.spill_stores == tail.spill_loads == 0 and tail.sass_opcodes.get("HGMMA", 0) > 0
    assert tail.sass_opcodes.get("ATOMG", 0) == 1  # the stream-K ticket
    assert compiled[name].kernels[gt.KERNEL].sass_opcodes.get("ATOMG", 0) == 0


def test_the_first_kernel_is_the_references_code(compiled):
    ls = loop_schedule()
    base, mine = (ls.abstract(ls.kernel_lines(compiled[n].cubin_path, gt.KERNEL)) for n in ("reference", "tl"))
    matched = ls.in_order(base, mine)
    assert matched >= 0.9 * len(base) and abs(len(mine) - len(base)) <= 0.05 * len(base), (len(base), len(mine), matched)


def _walks(tiles: int, k_iters: int, ctas: int) -> dict[int, list[int]]:
    """The k-blocks each tile gets from both launches: the first kernel's tile loop (first, first + step, ... below
    dp_end = tiles - tiles % step, step = ctas) and the tail kernel's StreamK walk from ct = dp_tiles (its k-ranges
    only), as the kernels write them."""
    covered: dict[int, list[int]] = {}
    dp_end = tiles - tiles % ctas
    for c in range(ctas):
        for ct in range(c, dp_end, ctas):
            covered.setdefault(ct, []).extend(range(k_iters))
    total = tiles % ctas * k_iters
    begin = [total * c // ctas for c in range(ctas + 1)]
    for c in range(ctas):
        it, end = begin[c], begin[c + 1]
        while it < end:
            r = it // k_iters
            kb = it - r * k_iters
            ke = min(k_iters, kb + (end - it))
            it += ke - kb
            covered.setdefault(dp_end + r, []).extend(range(kb, ke))
    return covered


@pytest.mark.parametrize("tiles, k_iters", [(1792, 80), (512, 64), (28, 80), (2, 8), (297, 3), (133, 1), (1, 1),
                                            (264, 80), (3584, 80), (130, 2)])
def test_both_launches_cover_every_k_block_of_every_tile_once(tiles, k_iters):
    for ctas in range(1, 133):
        covered = _walks(tiles, k_iters, ctas)
        assert sorted(covered) == list(range(tiles)), ctas
        assert all(sorted(ks) == list(range(k_iters)) for ks in covered.values()), ctas


def test_the_kernels_walk_as_the_model_does():
    src = gt.render(gt.default_params().model_copy(update=TL))
    first = src[src.index("gemm_bf16_tn(const"):src.index("// ---- Stream-K tail")]
    tail = src[src.index(TAIL_KERNEL + "("):]
    assert "const int dp_end = cluster_tiles - cluster_tiles % step;" in first
    assert first.count("for (int ct = first; ct < dp_end; ct += step) {") == 2
    assert tail.count("for (int ct = sk.dp_tiles, it = sk.begin(blockIdx.x),") == 2


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", [n for n in VARIANTS if n != "reference"])
def test_tail_launch_matches_torch(compiled, name, shape):
    check_against_torch(name, VARIANTS[name], compiled[name], shape, seed=5, calls=2)
