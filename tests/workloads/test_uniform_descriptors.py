"""The templates' `uniform` option (GEMM and attention forward): the consumer index broadcast from lane 0 so that
ptxas knows it is warp-uniform and builds the wgmma descriptors that depend on it in uniform registers. Checked on
the CPU: a point's dump leaves the option out at its default (the GEMM's is on, the forward's is off and TUNED sets
it), the uniform render assembles clean with far fewer register-to-uniform moves (R2UR) and no more HGMMA; its speed
was measured on the H200 (bench/gemm_sweep.py round 2, bench/attention_sweep.py rounds 6-7)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at, gemm_template as gt

BROADCAST = "__shfl_sync(0xffffffffu, wg - 1, 0)"


def _kernel(text: str, name: str | None = None):
    r = compile_source(text, "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, (r.errors, r.warnings)
    return r.kernels[name] if name else next(iter(r.kernels.values()))


def _check(plain_text: str, uniform_text: str, name: str | None = None, fewer: float = 0.5):
    assert BROADCAST not in plain_text and uniform_text.count(BROADCAST) == 1
    plain, uniform = _kernel(plain_text, name), _kernel(uniform_text, name)
    assert uniform.spill_stores == 0 and uniform.spill_loads == 0
    assert uniform.sass_opcodes.get("HGMMA") == plain.sass_opcodes.get("HGMMA")
    assert uniform.sass_opcodes.get("R2UR", 0) <= fewer * plain.sass_opcodes.get("R2UR", 0), (plain.sass_opcodes.get(
        "R2UR"), uniform.sass_opcodes.get("R2UR"))
    assert sum(uniform.sass_opcodes.values()) < sum(plain.sass_opcodes.values())


def test_gemm_uniform_consumer_index():
    """On by default since the H200 measured it faster (gemm_sweep.md round 2): a dump names only the plain index.
    Checked where it was measured, the epilogue between tiles (GemmParams(); the reference defers it since)."""
    p = gt.GemmParams()
    assert p.uniform and "uniform" not in p.model_dump()
    plain = p.model_copy(update={"uniform": False})
    assert plain.model_dump()["uniform"] is False
    _check(gt.render(plain), gt.render(p))


@pytest.mark.parametrize("wid", ["mha_fwd_d128", "mha_fwd_d64", "mha_fwd_d128_gqa_h32_kv8_causal"])
def test_attention_uniform_consumer_index(wid):
    p = at.single_tile(at.default_params(get_workload(wid))).model_copy(update={"uniform": False})
    assert "uniform" not in p.model_dump()
    u = p.model_copy(update={"uniform": True})
    assert at.validate(u) == []
    _check(at.render(p), at.render(u), at.kernel_name(p))
