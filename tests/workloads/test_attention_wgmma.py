"""The Hopper attention forward reference (workloads/solutions/attention_template.py rendered at each problem's
default point by `fast_solution`): the plans parse and resolve for every forward workload it covers, the kernels
compile to HGMMA + UTMALDG without spills or ptxas warnings, and (on a GPU) they pass and run at least at a
measured fraction of cuDNN. The template's own space: test_attention_template.py."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.plan import Solution
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention import fast_solution

# every workload the fast forward covers -> (entry point, D, causal, GQA); the cheap smoke shapes first (the GPU
# test runs in this order)
FILES = {"smoke_mha_fwd_d64": ("attn_fwd_wgmma_d64", 64, False, False),
         "smoke_mha_fwd_d64_causal": ("attn_fwd_wgmma_d64_causal", 64, True, False),
         "smoke_mha_fwd_d64_gqa_h4_kv2": ("attn_fwd_wgmma_d64_gqa", 64, False, True),
         "mha_fwd_d64": ("attn_fwd_wgmma_d64", 64, False, False),
         "mha_fwd_d64_causal": ("attn_fwd_wgmma_d64_causal", 64, True, False),
         "mha_fwd_d96": ("attn_fwd_wgmma_d96", 96, False, False),
         "mha_fwd_d96_causal": ("attn_fwd_wgmma_d96_causal", 96, True, False),
         "mha_fwd_d128_gqa_h32_kv8": ("attn_fwd_wgmma_gqa", 128, False, True),
         "mha_fwd_d128_gqa_h32_kv8_causal": ("attn_fwd_wgmma_causal_gqa", 128, True, True),
         "mha_fwd_d128": ("attn_fwd_wgmma", 128, False, False),
         "mha_fwd_d128_causal": ("attn_fwd_wgmma_causal", 128, True, False)}
# Speedup floors vs cuDNN, about 0.9x of the lower of two H200 figures for each reference point
# (bench/results/attention_template.md, 2026-12-01: the sweep's mean and this test's run): d128 1.048x / 1.032x,
# causal 1.041x, d64 1.165x / 1.117x, d64 causal 1.010x, d96 1.126x / 1.093x, d96 causal 1.090x, GQA 1.041x,
# causal GQA 1.095x / 1.034x; none on the smoke shapes (S = 256: launch-bound).
MIN_SPEEDUP = {"mha_fwd_d128": 0.93, "mha_fwd_d128_causal": 0.9, "mha_fwd_d128_gqa_h32_kv8": 0.9,
               "mha_fwd_d128_gqa_h32_kv8_causal": 0.93,
               "mha_fwd_d64": 1.0, "mha_fwd_d64_causal": 0.88, "mha_fwd_d96": 0.98, "mha_fwd_d96_causal": 0.97}
assert all(w in MIN_SPEEDUP or w.startswith("smoke_") for w in FILES)


def hgmma(d: int, causal: bool, bn: int) -> int:
    """HGMMA in the SASS: S = Q K^T has D / 16 k16 steps, O += P V bn / 16; tile 0 (S only), the loop (S + PV),
    the last PV, and with causal the masked loop (S + PV)."""
    s, pv = d // 16, bn // 16
    return s + (s + pv) * (2 if causal else 1) + pv


assert hgmma(128, False, 128) == 8 + 16 + 8 and hgmma(64, True, 128) == 4 + 12 + 12 + 8 and hgmma(96, False, 128) == 28
# What the D = 128 kernels compiled to before the template (ptxas 13.5, the six-entry file): it must not move.
D128_SASS = {"HGMMA": 32, "UTMALDG": 22, "USETMAXREG": 2}
VARIANTS = {v[1:]: w for w, v in FILES.items()}  # (D, causal, GQA) -> a workload that has it (main over smoke)


@pytest.fixture(scope="module")
def compiled() -> dict:
    from concurrent.futures import ThreadPoolExecutor

    def build(key):
        return key, compile_source(fast_solution(get_workload(VARIANTS[key])), "cuda", "sm_90a")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, VARIANTS))


def test_every_fast_solution_is_the_template_at_the_workloads_default():
    for wid, (kernel, d, causal, gqa) in FILES.items():
        w = get_workload(wid)
        p = at.default_params(w)
        assert (p.head_dim, p.causal, p.gqa) == (d, causal, gqa) and at.kernel_name(p) == kernel
        assert fast_solution(w) == at.render(p)


def _resolved(wid: str):
    w = get_workload(wid)
    sol = parse_solution(fast_solution(w), w)
    assert isinstance(sol, Solution), [str(i) for i in sol]
    assert not sol.warnings, sol.warnings  # the plan's args were checked against the kernel's parameters
    return w, resolve_plan(sol.plan, w, num_sms=132)


@pytest.mark.parametrize("wid", list(FILES))
def test_plan_parses_and_resolves(wid):
    w, plan = _resolved(wid)
    kernel, d, causal, gqa = FILES[wid]
    p = at.default_params(w)
    sym = w.symbols
    assert (sym["D"], w.causal, "HKV" in sym) == (d, causal, gqa)
    launch = plan.launches[0]
    s, bh = sym["S"], sym["B"] * sym["H"]
    bhkv = sym["B"] * sym["HKV"] if gqa else bh
    assert launch.kernel == kernel
    tiles = -(-s // p.bm)  # query tiles of 64 x consumers rows (the last one ragged where S is not a multiple)
    if p.persistent:  # one CTA per SM walking the tiles
        assert launch.grid == (min(132, tiles * bh), 1, 1)
    else:
        assert launch.grid == ((tiles * bh, 1, 1) if p.lpt_group else (tiles, bh, 1))  # longest-first: one 1-D grid
    assert launch.block == (128 * (1 + p.consumers), 1, 1) == (p.threads, 1, 1)
    assert p.stages == (4 if d == 64 else 2)
    row = 128 * (1 if d == 64 else 2)  # bytes of a Q / K / V row: 64-wide 128B-swizzled slabs, D = 96 padded to two
    # the Q tile (O staged in it for the TMA store; persistent: in a tile of its own), K and V per stage, 1 KiB
    # alignment and 256 B of barriers
    q_tiles = 2 if p.persistent else 1
    assert launch.smem == 1024 + row * (q_tiles * p.bm + 2 * p.stages * p.bn) + 256 == p.smem_bytes <= 232448
    rows = {"Q_map": bh, "K_map": bhkv, "V_map": bhkv} | ({"O_map": bh} if p.epilogue == "tma" else {})
    assert sorted(t.name for t in plan.tmaps) == sorted(rows)
    for t in plan.tmaps:  # Q, K, V (and O for the TMA store) seen as [rows, D], 64-wide boxes, 128B swizzle
        assert t.dims == [d, rows[t.name] * s] and t.box[0] == 64 and t.swizzle == "128B", t
    scalars = [a.value for a in launch.args if a.kind == "scalar"]
    assert scalars[:2] == [s, d]
    if p.persistent:  # then B * H and the zeroed tile counter
        assert scalars[-1] == bh and launch.args[-1].kind == "scratch"
        scalars = scalars[:-1]
    if gqa:  # the last scalar before them: group = H / HKV
        assert scalars[-1] == sym["H"] // sym["HKV"] and scalars[-1] * sym["HKV"] == sym["H"]


@pytest.mark.parametrize("key", list(VARIANTS))
def test_compiles_to_hgmma_and_tma_without_spills(compiled, key):
    r = compiled[key]
    assert r.status == "ok", r.log[-2000:]
    assert r.targets["wgmma"].in_sass and r.targets["tma"].in_sass
    d, causal, _ = key
    p = at.default_params(get_workload(VARIANTS[key]))
    k = r.kernels[at.kernel_name(p)]
    # persistent: the cross-tile step's S of the next tile besides the last P V
    assert k.sass_opcodes.get("HGMMA", 0) == hgmma(d, causal, p.bn) + (d // 16 if p.persistent else 0)
    assert k.sass_opcodes.get("UTMALDG", 0) > 0
    assert k.sass_opcodes.get("USETMAXREG", 0) == 2  # dec for the producer, inc for the consumers
    assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack == 0
    # C7515 (serialised wgmma), C7508 / C7504 (setmaxnreg ignored) would show up here
    assert not r.warnings, [str(w) for w in r.warnings]


def test_the_d128_kernels_compile_as_before(compiled):
    """The templating left the D = 128 kernels' instruction stream alone (HGMMA, TMA loads, setmaxnreg): their points
    without the persistent walk (round 22 put it in TUNED)."""
    def single_tile_ops(wid: str) -> dict:
        p = at.single_tile(at.default_params(get_workload(wid)))
        return compile_source(at.render(p), "cuda", "sm_90a").kernels[at.kernel_name(p)].sass_opcodes

    ops = single_tile_ops("mha_fwd_d128")
    assert {op: ops.get(op, 0) for op in D128_SASS} == D128_SASS
    causal = single_tile_ops("mha_fwd_d128_causal")
    assert {op: causal.get(op, 0) for op in D128_SASS} == D128_SASS | {"HGMMA": 48}
    # D = 64 issues one TMA box per tile where D = 128 (and the padded D = 96) issue two
    d64 = compiled[(64, False, False)].kernels["attn_fwd_wgmma_d64"].sass_opcodes
    d96 = single_tile_ops("mha_fwd_d96")
    assert d64["UTMALDG"] * 2 == ops["UTMALDG"] == d96["UTMALDG"]


@pytest.mark.gpu
@pytest.mark.parametrize("wid", list(FILES))
def test_passes_and_is_fast_on_the_gpu(wid):
    from gpu_helpers import shared_evaluator

    # No ncu profile here (about 10 s a workload): the executed-target check is tests/tools/test_profile_gpu.py's, and
    # bench/results/attention_wgmma.md records the profiled run.
    r = shared_evaluator().evaluate(wid, fast_solution(get_workload(wid)),
                                    EvalOptions(timeout_s=120, trials=1, profile_on_pass=False))
    t = r.timing
    print("RESULT", wid, r.status, r.message, t and (t.candidate.median_ms, t.baselines[t.primary_baseline].median_ms,
                                                     t.speedup, t.speedup_ci))  # shown with pytest -rP
    assert r.status == "PASSED", (r.message, r.runtime_error, r.plan_errors)
    assert r.targets_static["wgmma"].in_sass and r.targets_static["tma"].in_sass
    assert r.timing and r.timing.primary_baseline == "cudnn_sdpa"
    if wid in MIN_SPEEDUP:
        assert r.timing.speedup >= MIN_SPEEDUP[wid], (r.timing.speedup, r.timing.speedup_ci, r.message)


def test_fast_solution_maps_exactly_the_covered_workloads():
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.workloads.solutions.attention import attention_solution
    from ptxbench.workloads.solutions.attention_backward import reference_backward

    every = list_workloads(include_held_out=True)
    mapped = {w.id for w in every if fast_solution(w) is not None}
    assert mapped == set(FILES)
    for wid in FILES:
        assert reference_source(wid) == fast_solution(get_workload(wid))
    for wid in ("mha_bwd_d128", "mha_bwd_d64", "smoke_mha_bwd_d64"):  # backwards: the wgmma backward, not the forward
        w = get_workload(wid)
        assert fast_solution(w) is None and reference_source(wid) == reference_backward(w) != attention_solution(w)
    # the shape rule itself: D in {64, 96, 128}, S a multiple of the default key tile (128), H a multiple of HKV
    base = get_workload("smoke_mha_fwd_d64_gqa_h4_kv2")
    for change, covered in (({"S": 384}, True), ({"S": 200}, False), ({"S": 192}, False), ({"D": 96}, True),
                            ({"D": 80}, False), ({"D": 128}, True), ({"HKV": 3, "H": 4}, False), ({"HKV": 4}, True)):
        w = base.model_copy(update={"symbols": base.symbols | change})
        assert (fast_solution(w) is not None) == covered, change
    causal_gqa = base.model_copy(update={"causal": True})  # no workload asks for it yet; the template has it
    assert 'kernel = "attn_fwd_wgmma_d64_causal_gqa"' in fast_solution(causal_gqa)
