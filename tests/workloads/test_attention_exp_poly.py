"""The attention forward's exp_poly option (workloads/solutions/attention_softmax.py): one exponential in 8 or 4 on the
FMA pipe. Checked here: a float32 mirror of ex2_fma holds 2^x to 7.5e-5 over every value the softmax feeds it (masked
scores included), the rendered function carries the mirror's constants, TUNED's points assemble with it (fewer
MUFU.EX2, three FFMA more for each one moved, the same HGMMA, no spills), and round 17 pairs each point with its TUNED
control. Its speed is for the H200 (attention_sweep.py --round 17)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention_softmax import EXP_POLY_C, EXP_POLY_CLAMP

ROOT = Path(__file__).resolve().parents[2]
SHIFT = np.float32(12582912.0)


def ex2_fma(x: np.ndarray) -> np.ndarray:
    """The kernel's ex2_fma in float32, operation for operation."""
    x = np.maximum(x.astype(np.float32), np.float32(EXP_POLY_CLAMP))
    t = (x + SHIFT).astype(np.float32)
    f = (x - (t - SHIFT).astype(np.float32)).astype(np.float32)
    c = [np.float32(v) for v in EXP_POLY_C]
    p = (((c[3] * f + c[2]).astype(np.float32) * f + c[1]).astype(np.float32) * f + c[0]).astype(np.float32)
    return (p.view(np.int32) + (t.view(np.int32) << 23)).view(np.float32)


def test_the_polynomial_holds_two_to_the_x_over_everything_the_softmax_feeds_it():
    # x = S * scale * log2(e) - max: at most 0 (8 with the lazy rescale), -inf where a score is masked
    x = np.linspace(-130.0, 8.0, 1_000_001, dtype=np.float32)
    got, want = ex2_fma(x), np.exp2(np.maximum(x.astype(np.float64), EXP_POLY_CLAMP))
    assert np.max(np.abs(got / want - 1)) < 8e-5
    masked = ex2_fma(np.array([-np.inf, -1e30], dtype=np.float32))
    assert np.all(masked > 0) and np.all(masked < 1e-36)  # no wrapped exponent: a vanishing weight, never a large one
    assert ex2_fma(np.array([0.0], dtype=np.float32))[0] == pytest.approx(1.0, rel=1e-4)


def test_the_rendered_function_is_the_mirror_and_the_default_render_is_unchanged():
    p = at.default_params(get_workload("mha_fwd_d128")).model_copy(update={"exp_poly": 8})
    text = at.render(p)
    assert "s[j] = j % 8 == 0 ? ex2_fma(" in text and f"fmaxf(x, {EXP_POLY_CLAMP:.1f}f)" in text
    assert all(f"{c}f" in text for c in EXP_POLY_C) and "12582912.f" in text
    plain = at.default_params(get_workload("mha_fwd_d128"))
    assert "exp_poly" not in plain.model_dump() and "ex2_fma" not in at.render(plain)


@pytest.mark.parametrize("wid,every", [("mha_fwd_d128", 8), ("mha_fwd_d128", 4), ("mha_fwd_d128_causal", 8),
                                       ("mha_fwd_d96", 8), ("mha_fwd_d128_gqa_h32_kv8", 8)])
def test_tuned_points_assemble_with_fewer_mufu_exponentials(wid, every):
    base = at.default_params(get_workload(wid))
    compiled = {}
    for e in (0, every):
        p = base.model_copy(update={"exp_poly": e})
        r = compile_source(at.render(p), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, [w.message for w in r.warnings]
        compiled[e] = r.kernels[at.kernel_name(p)]
    mine, ref = compiled[every], compiled[0]
    assert mine.spill_stores == mine.spill_loads == 0
    moved = ref.sass_opcodes["MUFU"] - mine.sass_opcodes["MUFU"]
    # SN / every exponentials moved in each copy of the softmax ptxas builds (two non-causal, three causal)
    assert moved == (3 if base.causal else 2) * (base.bn // 2) // every, moved
    assert mine.sass_opcodes["FFMA"] - ref.sass_opcodes["FFMA"] == 3 * moved
    assert mine.sass_opcodes["HGMMA"] == ref.sass_opcodes["HGMMA"]


def test_round_17_pairs_each_point_with_its_tuned_control():
    spec = importlib.util.spec_from_file_location("attention_sweep", ROOT / "bench" / "attention_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    points = mod.ROUNDS[17]
    controls = {wid for wid, ch, _ in points if "exp_poly" not in ch}
    assert controls == {wid for wid, ch, _ in points} and len(points) == 9
    for wid, ch, _ in points:
        assert at.validate({**at.default_params(get_workload(wid)).model_dump(), **ch}, get_workload(wid)) == [], (wid, ch)
