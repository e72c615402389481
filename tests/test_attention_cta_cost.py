"""bench/attention_cta_cost.py on the CPU: its shapes keep the main workload's CTAs, one kernel text serves them all
(so the fit compares one kernel at four lengths), and the line and per-CTA arithmetic recover known values. The
timings themselves need the GPU: bash bench/gpu_round.sh cta-cost."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import attention_cta_cost as cc  # noqa: E402
from ptxbench.workloads.registry import get_workload, mha_fwd  # noqa: E402
from ptxbench.workloads.solutions import attention_template as at  # noqa: E402


def test_every_shape_has_the_main_workloads_ctas_and_its_tiles():
    main = get_workload("mha_fwd_d128")
    want = cc.ctas(main.symbols["B"], main.symbols["S"])
    assert want == 6144
    assert {cc.ctas(b, s) for b, s in cc.SHAPES} == {want}
    assert (main.symbols["B"], main.symbols["S"]) in cc.SHAPES and main.symbols["H"] == cc.HEADS
    assert [cc.tiles_per_cta(s, False) for _, s in cc.SHAPES] == [8, 16, 32, 64]
    assert [cc.tiles_per_cta(s, True) for _, s in cc.SHAPES] == [4.5, 8.5, 16.5, 32.5]


@pytest.mark.parametrize("causal", [False, True])
def test_one_kernel_text_at_every_length(causal):
    texts = {at.render(at.default_params(mha_fwd(b, cc.HEADS, s, cc.D, causal=causal, held_out=True)))
             for b, s in cc.SHAPES}
    main = get_workload("mha_fwd_d128_causal" if causal else "mha_fwd_d128")
    assert texts == {at.render(at.default_params(main))}


@pytest.mark.parametrize("causal", [False, True])
def test_every_variant_is_a_valid_point_at_every_shape(causal):
    for b, s in cc.SHAPES:
        wl = mha_fwd(b, cc.HEADS, s, cc.D, causal=causal, held_out=True)
        for change in cc.VARIANTS.values():
            assert at.validate(at.default_params(wl).model_copy(update=change), wl) == []
    assert cc.VARIANTS["kernel"] == {} and cc.VARIANTS["unstaggered"] == {"stagger": False}  # TUNED, and without


def test_the_fit_recovers_a_known_line_and_the_per_cta_cost():
    u_us, f_us, rounds = 1.3, 4.5, 47
    xs = [8.0, 16.0, 32.0, 64.0]
    ys = [rounds * (x * u_us + f_us) / 1e3 for x in xs]  # kernel ms
    fit = cc.fit_line(xs, ys)
    got = cc.per_cta(fit, rounds)
    assert got["u_us"] == pytest.approx(u_us) and got["F_us"] == pytest.approx(f_us)
    assert got["F_in_tiles"] == pytest.approx(f_us / u_us)
    assert fit["worst_residual"] < 1e-12
    bent = cc.fit_line(xs, ys[:-1] + [ys[-1] * 1.05])  # a shape off the line shows in the residual
    assert bent["worst_residual"] > 0.01
