"""The reference GEMM: its template renders solutions that parse, compile to HGMMA + UTMALDG
without spills, and (on a GPU) match torch on the smoke and main GEMMs."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from ptxbench.tools.solution.plan import Solution
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import clean_kernel, compile_points, gpu_runner

HOST_CXX = shutil.which("g++") or shutil.which("c++")  # builds device code for the host

ROOT = Path(__file__).resolve().parents[2]
MAIN = "gemm_bf16_m8192_n7168_k5120"
SMOKE = "smoke_gemm_bf16_m256_n256_k512"
SOLUTION_FILE = ROOT / "workloads" / "solutions" / f"{MAIN}.cu"

# Between them these exercise every code path of the template: TMA-store and direct epilogues,
# persistent and one-tile-per-CTA grids, 1-3 consumers, two 64-wide chunks per stage, clusters, ping-pong.
VARIANTS = {
    "default": {},
    "direct_np_c3_bk128": dict(epilogue="direct", persistent=False, bm=192, bn=128, consumers=3,
                               producer_regs=24, bk=128, stages=2, group_m=1),
    "cluster2_c1": dict(cluster_m=2, bm=64, bn=128, consumers=1, stages=6, max_ctas=128),
    # the options outside PARAM_SPACE: fast.cu's Hilbert tile order and stmatrix staging
    "hilbert": dict(order="hilbert"),
    "stmatrix": dict(stmatrix=True),
    "hilbert_stmatrix_cluster2": dict(order="hilbert", stmatrix=True, cluster_m=2),
    "hilbert_stmatrix_np_c1_bn192": dict(order="hilbert", stmatrix=True, persistent=False, bm=64, bn=192,
                                         consumers=1, stages=4),
    # the ping-pong schedule (tests/workloads/test_gemm_pingpong.py): each consumer owns whole tiles
    "pingpong_128x128": dict(schedule="pingpong", bn=128, stages=5),
    "pingpong_64x256_stmatrix_cluster2": dict(schedule="pingpong", bm=64, bn=256, stages=4, stmatrix=True, cluster_m=2),
}


def _workload(wid: str):
    return get_workload(wid)


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


def test_checked_in_solution_is_the_rendered_default():
    assert SOLUTION_FILE.read_text() == gt.render(gt.default_params())


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_compiles_to_hgmma_and_tma_without_spills(compiled, name):
    result = compiled[name]
    kernel = clean_kernel(result)
    assert result.targets["wgmma"].in_sass and result.targets["tma"].in_sass
    params = gt.GemmParams(**VARIANTS[name])
    if params.epilogue == "tma":
        assert kernel.sass_opcodes.get("UTMASTG", 0) > 0
        # stmatrix staging: STSM and no plain shared stores; else the st.shared.b32 path
        assert (kernel.sass_opcodes.get("STSM", 0) > 0) == params.stmatrix
        assert (kernel.sass_opcodes.get("STS", 0) == 0) == params.stmatrix


def test_options_leave_the_default_render_and_param_space_alone():
    # builtin/tuner does not search them, but defer and l2_hints: measured faster (gemm_sweep.md rounds 4-5 and 14), so
    # they joined PARAM_SPACE
    assert set(gt.OPTION_SPACE) & set(gt.PARAM_SPACE) == {"defer", "l2_hints"}
    default = gt.render(gt.default_params())
    assert "order" not in default.splitlines()[default.count("\n", 0, default.index("// Reference GEMM"))]
    hilbert = gt.render(gt.GemmParams(order="hilbert"))
    assert "'order': 'hilbert'" in hilbert and "Hilbert order" in hilbert and "GROUP_M tile rows" not in hilbert
    stm = gt.render(gt.GemmParams(stmatrix=True))
    assert "stmatrix.sync.aligned.m8n8.x4" in stm and "st.shared.b32" not in stm
    assert any("needs epilogue='tma'" in r for r in gt.validate(gt.GemmParams(stmatrix=True, epilogue="direct")))
    assert any("not one of" in r for r in gt.validate(gt.GemmParams(order="zorder")))


@pytest.mark.skipif(HOST_CXX is None, reason="needs a host C++ compiler (g++ or c++) to build the device code for the host")
def test_hilbert_order_visits_every_tile_once_in_steps_to_a_neighbour(tmp_path):
    """The device function, compiled for the host: on every grid up to 70 x 70 it is a bijection from tile index to
    (tm, tn), and (almost) every step moves to an adjacent tile."""
    import subprocess

    cxx = HOST_CXX
    src = tmp_path / "hilbert.cpp"
    src.write_text(
        "#include <cstdio>\n#include <cstdlib>\n#include <vector>\n#define __device__\n#define __forceinline__ inline\n"
        + gt.HILBERT_TILE_COORDS + r"""
int main() {
  long steps = 0, far = 0;
  for (int w = 1; w <= 70; ++w)
    for (int h = 1; h <= 70; ++h) {
      std::vector<int> seen(w * h, 0);
      int pm = -1, pn = -1;
      for (int t = 0; t < w * h; ++t) {
        int tm, tn;
        tile_coords(t, w, h, tm, tn);
        if (tm < 0 || tm >= w || tn < 0 || tn >= h || seen[tm * h + tn]++) { printf("bad %d %d %d\n", w, h, t); return 1; }
        if (t) { ++steps; far += abs(tm - pm) + abs(tn - pn) != 1; }
        pm = tm; pn = tn;
      }
    }
  printf("%ld %ld\n", steps, far);
  return 0;
}
""")
    exe = tmp_path / "hilbert"
    subprocess.run([cxx, "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout
    steps, far = map(int, out.stdout.split())
    assert far < steps // 1000  # odd-sized grids need a few diagonal steps


def test_params_for_shrinks_the_tile_for_decode_shapes_only():
    assert gt.params_for("gemm_bf16_m8192_n7168_k5120") == gt.default_params()
    assert gt.params_for((4096, 4096, 4096)) == gt.default_params()
    small = gt.params_for("gemm_bf16_m64_n7168_k5120")
    assert (small.bm, small.bn, small.consumers) == (64, 64, 1)
    mid = gt.params_for({"M": 128, "N": 7168, "K": 5120}, stages=6)
    assert (mid.bm, mid.bn, mid.consumers, mid.stages) == (128, 64, 2, 6)
    for wid in ("gemm_bf16_m64_n7168_k5120", "gemm_bf16_m128_n7168_k5120"):
        assert gt.validate(gt.params_for(wid), shape=(int(wid.split("_m")[1].split("_")[0]), 7168, 5120)) == []


def test_the_reference_of_each_gemm_is_its_shapes_point():
    """builtin/reference submits params_for(workload): the main and square GEMMs the default point, the decode GEMMs
    their 64-column tiles. It once submitted the default for every shape: 0.537x / 0.717x cuBLAS at M = 64 / 128,
    against 0.983x / 1.029x with the tile choice (bench/results/reference_eval.md)."""
    from ptxbench.agent.models.builtin import reference_source

    main = reference_source("gemm_bf16_m8192_n7168_k5120")
    assert main == gt.render(gt.default_params()) == (Path(gt.__file__).with_name("gemm_bf16_m8192_n7168_k5120.cu")
                                                      .read_text())
    assert reference_source("gemm_bf16_m4096_n4096_k4096") == main
    for wid in ("gemm_bf16_m64_n7168_k5120", "gemm_bf16_m128_n7168_k5120"):
        src = reference_source(wid)
        assert src == gt.render(gt.params_for(wid)) and src != main and "cdiv(N, 64)" in src


def test_gemm_sweep_points_render_and_validate():
    """bench/gemm_sweep.py's points of every round, with the defaults as they ran (run on the H200), are buildable for
    their workloads."""
    spec = importlib.util.spec_from_file_location("gemm_sweep", ROOT / "bench" / "gemm_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert {w for w, *_ in sweep.POINTS} == {MAIN, "gemm_bf16_m64_n7168_k5120", "gemm_bf16_m128_n7168_k5120",
                                              "gemm_bf16_m4096_n4096_k4096"}
    space = {name: list(values) for name, values in gt.PARAM_SPACE.items()}
    for round_, points in sweep.ROUNDS.items():
        with sweep.space_of(round_):  # rounds 21-22: rings and k-blocks past the searched space
            for wid, changes, predicted, why in points:  # each as it ran
                p = sweep.params_of(changes)
                s = get_workload(wid).symbols
                assert gt.validate(p, shape=(s["M"], s["N"], s["K"])) == [], (wid, changes)
                assert isinstance(parse_solution(sweep.source_of(changes), get_workload(wid)), Solution)
                assert 0 < predicted < 2 and why
    assert gt.PARAM_SPACE == space  # put back: the tuner's space is untouched
    with pytest.raises(ValueError):
        gt.render(sweep.params_of({"stages": 12}))  # outside a wider round, a deep ring is refused as before


def test_gemm_sweep_holds_a_wider_rounds_space_through_its_whole_run(monkeypatch, capsys):
    """main() keeps rounds 21-22's deep rings and k-blocks valid until every point is built: the space is held by a
    `with` around the run, not by a context object the next statement may drop (which puts the space back at once)."""
    import sys
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("gemm_sweep", ROOT / "bench" / "gemm_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    import ptxbench.tools.evaluate as evaluate

    def validate_only(points, ev):  # compile_all without the compiler: each point's problems, else a compiled stand-in
        out = {}
        for i, (wid, changes, *_) in enumerate(points):
            s = get_workload(wid).symbols
            problems = gt.validate(sweep.params_of(changes), shape=(s["M"], s["N"], s["K"]))
            out[i] = "; ".join(problems) if problems else SimpleNamespace(status="COMPILED", compile=None)
        return out

    monkeypatch.setattr(sweep, "compile_all", validate_only)
    monkeypatch.setattr(evaluate, "LocalEvaluator", lambda: SimpleNamespace(close=lambda: None))
    for round_ in (21, 22):
        monkeypatch.setattr(sys, "argv", ["gemm_sweep.py", "--dry-run", "--round", str(round_)])
        sweep.main()
        out = capsys.readouterr().out
        assert "INVALID" not in out and out.count("COMPILED") >= len(sweep.ROUNDS[round_]), out[-2000:]
    assert 14 not in gt.PARAM_SPACE["stages"] and 256 not in gt.PARAM_SPACE["bk"]  # put back after the run


def test_gemm_sweep_promotion_edit_changes_only_bs_tensor_map():
    """Round 22's `promo_b` text change: B's tensor map's L2 promotion, nothing else of the render."""
    spec = importlib.util.spec_from_file_location("gemm_sweep", ROOT / "bench" / "gemm_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    base = sweep.P64 | {"defer": False, "group_m": 8, "l2_hints": False}
    plain = sweep.source_of(base)
    for value in ("none", "128B"):
        edited = sweep.source_of(base | {"promo_b": value})
        diff = [(a, b) for a, b in zip(plain.splitlines(), edited.splitlines()) if a != b]
        assert diff == [('l2_promotion = "256B"', f'l2_promotion = "{value}"')]
        plan = parse_solution(edited, get_workload("gemm_bf16_m64_n7168_k5120")).plan
        assert {m.name: m.l2_promotion for m in plan.tmaps} == {"A_map": "256B", "B_map": value, "C_map": "none"}
    with pytest.raises(ValueError, match="B's tensor map"):
        sweep.TEXT_CHANGES["promo_b"]("no plan here", "none")


@pytest.mark.parametrize("wid", [MAIN, SMOKE, "gemm_bf16_m64_n7168_k5120"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_plan_parses_and_resolves(wid, name):
    workload = _workload(wid)
    params = gt.GemmParams(**VARIANTS[name])
    solution = parse_solution(gt.render(params), workload)
    assert isinstance(solution, Solution), [str(i) for i in solution]
    resolved = resolve_plan(solution.plan, workload, num_sms=132)
    launch = resolved.launches[0]
    m, n = workload.symbols["M"], workload.symbols["N"]
    tiles = -(-m // (params.bm * params.cluster_m)) * params.cluster_m * -(-n // params.bn)
    grid = launch.grid[0]
    assert grid % params.cluster_m == 0 and 0 < grid <= (min(132, tiles) if params.persistent else tiles)
    assert launch.block[0] == params.threads
    assert launch.smem == params.smem_bytes <= gt.SMEM_LIMIT


def test_default_is_the_fast_configuration():
    p = gt.default_params()
    assert (p.bm, p.bn, p.consumers, p.persistent, p.epilogue) == (128, 256, 2, True, "tma")
    assert gt.validate(p) == [] and gt.validate(p, shape=(8192, 7168, 5120)) == []


def test_param_space_defaults_are_in_the_space():
    p = gt.default_params()
    for name, values in gt.PARAM_SPACE.items():
        assert getattr(p, name) in values, name


@pytest.mark.parametrize("bad, phrase", [
    (dict(stages=8), "shared memory"),
    (dict(bm=256, bn=256), "accumulator registers"),
    (dict(bm=192, consumers=2), "multiple of 64 x consumers"),
    (dict(bn=224, epilogue="tma"), "64-column slabs"),
    (dict(stages=9), "not one of"),
])
def test_validate_explains_invalid_combinations(bad, phrase):
    reasons = gt.validate(gt.GemmParams(**bad))
    assert any(phrase in r for r in reasons), reasons
    with pytest.raises(ValueError):
        gt.render(gt.GemmParams(**bad))


def test_validate_checks_the_shape():
    assert any("K=100" in r for r in gt.validate(gt.default_params(), shape=(128, 128, 100)))
    assert gt.validate(gt.default_params(), shape=(64, 7168, 5120)) == []  # M < BM: zero-filled tiles


def test_search_space_has_many_valid_points():
    import random
    rng = random.Random(0)
    points = [{k: rng.choice(v) for k, v in gt.PARAM_SPACE.items()} for _ in range(2000)]
    valid = sum(not gt.validate(p) for p in points)
    assert 100 < valid < len(points)  # a sizeable share is buildable, and validate() rejects some


# ---- GPU: correctness against torch through a small stand-alone launcher (bench/) ----

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256, 512), (200, 296, 328), (64, 7168, 5120), (8192, 7168, 5120)])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_matches_torch(compiled, name, shape):
    import torch

    torch.manual_seed(1)
    bench, runner = gpu_runner(name, VARIANTS[name], compiled[name])
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for trial in range(2):  # fresh NaN-poisoned output each time: every element must be written
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})()
        torch.cuda.synchronize()
        verdict = bench.check(c, a.float() @ b.float().T)
        assert verdict["ok"], verdict
        assert verdict["rel_fro"] < 5e-3
