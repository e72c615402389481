"""The attention forward's template (workloads/solutions/attention_template.py): the checked-in file is its default
render, validate() explains what it refuses, every point of bench/attention_sweep.py renders a plan that parses,
and a sample of the space that exercises every code path (ping-pong, TMA-store epilogue, D = 96, key tail,
ragged query tile, three consumers, longest-first order, GQA) assembles to HGMMA + UTMALDG without spills.
bench/attention_template_compile.py compiles the register-tightest valid point of every class (bench/results/
attention_template.md)."""
from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions import attention_template as at
from ptxbench.workloads.solutions.attention import FAST_FORWARD, HERE

from sweeps import attention_sweep

# (point, HGMMA expected): between them every code path of the template
SAMPLE = {
    "pingpong_tma_d128": (dict(schedule="pingpong", epilogue="tma"), 32),
    "pingpong_d128_causal_lpt_bn160": (dict(causal=True, schedule="pingpong", lpt_group=4, bn=160, epilogue="tma"),
                                       8 + 2 * (8 + 10) + 10),
    "d96_causal_pingpong_tma": (dict(head_dim=96, causal=True, schedule="pingpong", epilogue="tma"), 42),
    "d64_c3_bn96_pingpong_gqa": (dict(head_dim=64, gqa=True, consumers=3, bn=96, stages=4, schedule="pingpong",
                                      producer_regs=40), 4 + 2 * (4 + 6) + 6),
    "d64_c1_bn192_tma": (dict(head_dim=64, consumers=1, bn=192, stages=3, epilogue="tma"), 4 + 2 * (4 + 12) + 12),
    "weak": (at.weak_params().model_dump(), 8 + 12 + 4),
    # the widest key tile ping-pong admits (PINGPONG_SPARE: 32 registers to spare), its key tail masked at S = 4096
    "pingpong_d128_bn192": (dict(schedule="pingpong", bn=192, epilogue="tma"), 8 + 2 * (8 + 12) + 12),
}


@pytest.fixture(scope="module")
def compiled() -> dict:
    def build(name):
        p = at.AttnParams(**SAMPLE[name][0])
        return name, (p, compile_source(at.render(p), "cuda", "sm_90a"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, SAMPLE))


def test_checked_in_solution_is_the_rendered_default():
    assert (HERE / FAST_FORWARD).read_text() == at.render(at.default_params())


def test_defaults_and_weak_point_are_in_the_space():
    for p in (at.default_params(), at.weak_params(), *(at.default_params(get_workload(w)) for w in
                                                       ("mha_fwd_d64", "mha_fwd_d96_causal", "mha_fwd_d128_gqa_h32_kv8"))):
        assert all(getattr(p, k) in v for k, v in at.PARAM_SPACE.items()) and at.validate(p) == [], p
    assert at.default_params(get_workload("mha_fwd_d64")).stages == 4
    w = get_workload("mha_fwd_d128_causal")
    assert at.params_for(w, schedule="pingpong").model_dump() == at.plain_params(w).model_dump() | {"schedule": "pingpong"}
    # the reference of each problem is its plain point with the measured changes (TUNED)
    for wid in ("mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d64", "smoke_mha_fwd_d64_gqa_h4_kv2"):
        wl = get_workload(wid)
        p = at.plain_params(wl)
        assert at.default_params(wl) == p.model_copy(update=at.TUNED.get((p.head_dim, p.causal, p.gqa), {}))
    assert at.default_params(w).epilogue == "tma" and at.default_params(w).lpt_group == 8


@pytest.mark.parametrize("bad, phrase", [
    (dict(schedule="pingpong", consumers=1), "ping-pong needs"),
    (dict(lpt_group=4), "orders causal tiles"),
    (dict(bn=192), "registers per consumer"),
    (dict(bn=192, schedule="pingpong", producer_regs=40), "registers per consumer"),  # 24 to spare: ptxas spills
    (dict(consumers=3), "registers per consumer"),
    (dict(stages=4), "shared memory"),
    (dict(bn=80), "not one of"),
    (dict(head_dim=80), "head_dim=80"),
])
def test_validate_explains_invalid_combinations(bad, phrase):
    reasons = at.validate(at.AttnParams(**bad))
    assert any(phrase in r for r in reasons), reasons
    with pytest.raises(ValueError):
        at.render(at.AttnParams(**bad))


def test_validate_checks_the_workload():
    d128 = at.default_params()
    assert any("D=64" in r for r in at.validate(d128, get_workload("mha_fwd_d64")))
    assert any("causal" in r for r in at.validate(d128, get_workload("mha_fwd_d128_causal")))
    assert any("gqa" in r for r in at.validate(d128, get_workload("mha_fwd_d128_gqa_h32_kv8")))
    w = get_workload("mha_fwd_d128")
    assert at.validate(d128, w) == [] and at.validate(d128, w.symbols) == []
    assert any("multiple of 64" in r for r in at.validate(d128, w.symbols | {"S": 4000}))
    assert any("multiple of bn=128" in r for r in at.validate(d128, w.symbols | {"S": 4032}))
    assert at.validate(d128.model_copy(update={"bn": 96}), w.symbols | {"S": 4032}) == []  # masked key tail


def test_search_space_has_many_valid_points():
    rng = random.Random(0)
    # the options searched since the GPU measured them (OPTION_SPACE, in PARAM_SPACE too) depend on each other (the
    # walk needs q_regs and the TMA epilogue, early_pack the lazy rescale): each is drawn set a sixth of the time
    options = {k: v for k, v in at.PARAM_SPACE.items() if k in at.OPTION_SPACE}
    points = [{k: rng.choice(v) for k, v in at.PARAM_SPACE.items() if k not in options}
              | {k: rng.choice([x for x in v if x != at.OPTION_DEFAULTS[k]]) if rng.random() < 1 / 6
                 else at.OPTION_DEFAULTS[k] for k, v in options.items()}
              | {"causal": rng.random() < 0.5, "head_dim": rng.choice(at.HEAD_DIMS)}
              for _ in range(2000)]
    valid = sum(not at.validate(p) for p in points)
    assert 100 < valid < len(points)


def _sweep_points():
    return attention_sweep().POINTS


def test_every_sweep_point_is_valid_and_its_plan_resolves():
    for wid, changes, _ in _sweep_points():
        w = get_workload(wid)
        p = at.params_for(w, **changes)
        assert at.validate(p, w) == [], (wid, changes)
        sol = parse_solution(at.render(p), w)
        assert isinstance(sol, Solution), (wid, changes, [str(i) for i in sol])
        assert not sol.warnings, sol.warnings  # the plan's args match the entry point's parameters
        launch = resolve_plan(sol.plan, w, num_sms=132).launches[0]
        s, bh = w.symbols["S"], w.symbols["B"] * w.symbols["H"]
        tiles = -(-s // p.bm)
        assert launch.grid == ((tiles * bh, 1, 1) if p.lpt_group else (tiles, bh, 1))
        assert launch.block == (p.threads, 1, 1) and launch.smem == p.smem_bytes <= at.SMEM_LIMIT


def test_pingpong_turns_use_immediate_named_barriers():
    src = at.render(at.AttnParams(schedule="pingpong"))
    assert re.search(r'bar\.sync %0, %1;" :: "n"\(ID\), "n"\(COUNT\)', src)
    assert re.search(r'bar\.arrive %0, %1;" :: "n"\(ID\), "n"\(COUNT\)', src)
    assert "constexpr bool PINGPONG = true;" in src and "constexpr int BAR_TURN = 1;" in src


@pytest.mark.parametrize("name", list(SAMPLE))
def test_sample_compiles_to_hgmma_and_tma_without_spills(compiled, name):
    p, r = compiled[name]
    assert r.status == "ok", r.log[-2000:]
    assert r.targets["wgmma"].in_sass and r.targets["tma"].in_sass
    k = r.kernels[at.kernel_name(p)]
    ops = k.sass_opcodes
    assert ops.get("HGMMA", 0) == SAMPLE[name][1]
    assert ops.get("UTMALDG", 0) > 0 and ops.get("USETMAXREG", 0) == 2
    assert (ops.get("UTMASTG", 0) > 0) == (p.epilogue == "tma")
    assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack == 0
    assert not r.warnings, [str(w) for w in r.warnings]
