"""What the prompt promises, checked against what the headers and the harness do (issue 17).

- prompts/helpers_sm90a.md is generated from the wrapper headers; its declarations compile as the
  headers' types, and every helper is called (as the prompt spells it) in a kernel that compiles.
- The knowledge pack's C++ snippet compiles; a persistent 2-CTA multicast GEMM written from the
  prompt alone around that snippet parses, resolves (max_clusters) and compiles to HGMMA + UTMALDG
  without spills or the warnings the pack warns about; on a GPU it must pass (marked gpu).
- The launch contract's numbers and defaults are the code's; `max_clusters` resolves per launch.
- Every prompt variant stays within its token budget (prompts/size.py).
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from ptxbench import prompts
from ptxbench.prompts import helpers as gen
from ptxbench.tools.compile import compile_source
from ptxbench.tools.gpu.limits import DeviceLimits
from ptxbench.tools.solution.plan import Solution, TensorMap
from ptxbench.tools.solution.plan_resolve import guaranteed_clusters
from ptxbench.tools.solution.parse import PlanError, parse_solution, resolve_plan
from ptxbench.workloads.arch import get_arch
from ptxbench.workloads.registry import get_workload

DATA = Path(__file__).parents[1] / "data" / "prompt"
GEMM = "gemm_bf16_m8192_n7168_k5120"
SMOKE_GEMM = "smoke_gemm_bf16_m256_n256_k512"
SM90A = get_arch("sm_90a")
INCLUDES = '#include <cuda.h>\n#include <cuda_bf16.h>\n#include "ptxbench/mbarrier.cuh"\n' \
           '#include "ptxbench/tma.cuh"\n#include "ptxbench/wgmma.cuh"\nusing namespace ptxbench;\n'


def _ok(result):
    assert result.status == "ok", "\n".join(str(e.message) for e in result.errors) or result.log
    return result


# ---- the helper reference ---------------------------------------------------------------------

def test_helper_reference_is_generated_from_the_headers():
    assert prompts.load("helpers_sm90a") == gen.render(), "run: python3 -m ptxbench.prompts.helpers"
    names = [h.name for h in gen.helpers()]
    assert len(names) == len(set(names)) and len(names) >= 30
    for variant in ("knowledge", "expert"):
        assert "helpers_{arch}" in prompts.variant(variant).knowledge


def _pointer_type(decl: str) -> tuple[str, str]:
    """('ptxbench::name<64>', 'ret (*)(params)') for a declaration of the reference."""
    m = re.fullmatch(r"(?:template <int (\w)> )?(.+?) (\w+)\((.*)\);", decl)
    assert m, decl
    tparam, ret, name, params = m.groups()
    if tparam:
        params = re.sub(rf"\b{tparam}\b", "64", params)
        return f"ptxbench::{name}<64>", f"{ret} (*)({params})"
    return f"ptxbench::{name}", f"{ret} (*)({params})"


def test_declarations_in_the_prompt_are_the_headers_types():
    lines = []
    for h in gen.helpers():
        fn, ptr = _pointer_type(h.declaration)
        lines.append(f'static_assert(std::is_same<decltype(&{fn}), {ptr}>::value, "{h.name}");')
    source = "#include <type_traits>\n" + INCLUDES + "\n".join(lines) + '\nextern "C" __global__ void k() {}\n'
    _ok(compile_source(source, "cuda", "sm_90a"))
    # and a wrong declaration would fail: the check can fail
    bad = source.replace("void (*)(uint64_t* bar, uint32_t count)", "void (*)(uint32_t bar, uint32_t count)")
    assert bad != source and compile_source(bad, "cuda", "sm_90a").status != "ok"


def test_every_helper_is_called_as_the_prompt_spells_it():
    source = (DATA / "helpers_calls.cu").read_text()
    missing = [h.name for h in gen.helpers() if not re.search(rf"\b{h.name}\s*(<[^>]*>)?\s*\(", source)]
    assert not missing, f"helpers_calls.cu does not call {missing}"
    r = _ok(compile_source(source, "cuda", "sm_90a"))
    k = r.kernels["helpers_calls"]
    assert k.sass_opcodes.get("HGMMA") == 2 and k.sass_opcodes.get("UTMALDG") == 2


def test_without_the_namespace_nvcc_says_what_the_prompt_says():
    source = '#include "ptxbench/mbarrier.cuh"\n#include "ptxbench/wgmma.cuh"\n' \
             'extern "C" __global__ void k(){ __shared__ uint64_t b; mbar_init(&b, 1); wgmma_wait<1>(); }\n'
    r = compile_source(source, "cuda", "sm_90a")
    text = "\n".join(str(e.message) for e in r.errors)
    assert 'identifier "mbar_init" is undefined' in text
    assert 'identifier "mbar_init" is undefined' in " ".join(prompts.load("helpers_sm90a").split())


# ---- the knowledge pack's pipeline snippet and a kernel written from the prompt ---------------

def knowledge_snippet() -> str:
    blocks = re.findall(r"```cpp\n(.*?)```", prompts.load("knowledge_sm90a"), re.S)
    assert len(blocks) == 1, "the knowledge pack has one C++ snippet (the cluster ring)"
    return blocks[0]


def test_knowledge_pack_snippet_compiles_for_every_cluster_size():
    body = "".join(
        f"template __device__ void produce<128, 256, {cm}, 4>(const CUtensorMap*, const CUtensorMap*, uint8_t*, "
        f"uint64_t*, uint64_t*, int, int, int, int&, uint32_t&);\n"
        f"template __device__ void consume<128, 256, {cm}, 4>(float (&)[128], uint8_t*, uint64_t*, uint64_t*, int, "
        f"int, int&, uint32_t&);\n" for cm in (1, 2, 4))
    _ok(compile_source(INCLUDES + knowledge_snippet() + body + 'extern "C" __global__ void k() {}\n', "cuda", "sm_90a"))


def prompt_gemm_source() -> str:
    text = (DATA / "gemm_cluster_from_prompt.cu").read_text()
    assert "// KNOWLEDGE-PACK-SNIPPET\n" in text
    return text.replace("// KNOWLEDGE-PACK-SNIPPET\n", knowledge_snippet())


def prompt_gemm_solution(workload: str) -> Solution:
    sol = parse_solution(prompt_gemm_source(), get_workload(workload), "sm_90a")
    assert isinstance(sol, Solution), "\n".join(map(str, sol))
    return sol


def test_gemm_written_from_the_prompt_resolves_to_a_resident_persistent_cluster_grid():
    sol = prompt_gemm_solution(GEMM)
    launch = resolve_plan(sol.plan, get_workload(GEMM), 132).launches[0]
    assert launch.grid == (132, 1, 1) and launch.cluster == (2, 1, 1) and launch.smem == 197696
    measured = resolve_plan(sol.plan, get_workload(GEMM), 132, cluster_capacity={2: 60}).launches[0]
    assert measured.grid == (120, 1, 1)


def test_gemm_written_from_the_prompt_compiles_clean():
    r = _ok(compile_source(prompt_gemm_source(), "cuda", "sm_90a", workload=GEMM))
    k = r.kernels["gemm_prompt"]
    assert k.sass_opcodes.get("HGMMA", 0) >= 1 and k.sass_opcodes.get("UTMALDG", 0) >= 1
    assert k.spill_stores == 0 and k.spill_loads == 0
    warnings = " ".join(str(w.message) for w in r.warnings)
    for code in ("C7515", "C7508", "C7511"):
        assert code not in warnings, warnings


# ---- the launch contract ----------------------------------------------------------------------

def test_launch_contract_numbers_are_the_harness_numbers():
    fmt = prompts.load("solution_format")
    assert str(SM90A.max_smem_per_block) in fmt and SM90A.max_smem_per_block == DeviceLimits().max_smem_optin
    fields = TensorMap.model_fields
    for key in ("swizzle", "l2_promotion", "oob_fill"):
        assert f'`{key} = "{fields[key].default}"`' in fmt, key
    assert f"{guaranteed_clusters(132, 1, SM90A)} single CTAs, {guaranteed_clusters(132, 2, SM90A)} pairs" in fmt
    assert "Outputs may be written through their pointer argument, a TMA store" in fmt


def test_tensor_map_defaults_resolve_as_stated():
    sol = prompt_gemm_solution(GEMM)
    t = resolve_plan(sol.plan, get_workload(GEMM), 132).tmaps[0]
    assert (t.l2_promotion, t.oob_fill, t.elem_strides) == ("none", "zero", [1, 1])


def _plan(grid: str, cluster: str | None, extra_args: str = "") -> str:
    cl = f"cluster = {cluster}\n" if cluster else ""
    return (f'/* ptxbench\nlanguage = "cuda"\n[[launch]]\nkernel = "k"\ngrid = ["{grid}", 1, 1]\nblock = [128, 1, 1]\n'
            f'{cl}args = ["C"{extra_args}]\n*/\n#include <cuda_bf16.h>\n'
            'extern "C" __global__ void k(__nv_bfloat16* C' + (", int n" if extra_args else "") + ") {}\n")


@pytest.mark.parametrize("cluster,size", [(None, 1), ("[2, 1, 1]", 2), ("[4, 1, 1]", 4), ("[8, 1, 1]", 8)])
def test_max_clusters_is_per_launch_and_prefers_the_measured_capacity(cluster, size):
    wl = get_workload(GEMM)
    sol = parse_solution(_plan("max_clusters * " + str(size), cluster, ', "i32:max_clusters"'), wl, "sm_90a")
    assert isinstance(sol, Solution), sol
    bound = guaranteed_clusters(132, size, SM90A)
    launch = resolve_plan(sol.plan, wl, 132).launches[0]
    assert launch.grid[0] == bound * size and launch.args[1].value == bound
    measured = 7  # the driver's figure, when measured, is what the symbol says
    launch = resolve_plan(sol.plan, wl, 132, cluster_capacity={size: measured}).launches[0]
    assert launch.grid[0] == measured * size and launch.args[1].value == measured
    launch = resolve_plan(sol.plan, wl, 132, cluster_capacity={size: 0}).launches[0]  # a failed probe: the bound
    assert launch.args[1].value == bound


def test_max_clusters_is_not_a_workload_symbol_elsewhere():
    wl = get_workload(GEMM)
    bad = _plan("max_clusters", None).replace('block = [128, 1, 1]', 'block = ["max_clusters", 1, 1]')
    sol = parse_solution(bad, wl, "sm_90a")
    # usable in every expression of its launch (block here): 132 threads resolve, the plan is fine
    assert isinstance(sol, Solution)
    assert resolve_plan(sol.plan, wl, 132).launches[0].block == (132, 1, 1)
    with pytest.raises(PlanError):
        resolve_plan(sol.plan, wl, 2000)  # 2000 threads per block: the symbol really is evaluated


def test_guaranteed_clusters_is_a_lower_bound_for_every_gpc_split():
    """Any split of 132 SMs into at most 8 GPCs of whole TPCs (2 SMs) holds at least the bound."""
    assert [guaranteed_clusters(132, c, SM90A) for c in (1, 2)] == [132, 66]
    rng = random.Random(17)
    for _ in range(3000):
        gpcs = rng.randint(1, 8)
        cuts = sorted(rng.sample(range(1, 66), gpcs - 1))
        tpcs = [b - a for a, b in zip([0, *cuts], [*cuts, 66])]
        for size in range(1, 9):
            fit = sum(2 * t // size for t in tpcs)
            assert fit >= guaranteed_clusters(132, size, SM90A), (tpcs, size)
    # tight: 8 GPCs of 16/18 SMs where every GPC wastes the most reach the bound for size 8 ... or near it
    assert guaranteed_clusters(132, 8, SM90A) >= 11


# ---- size ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(prompts.VARIANTS))
def test_each_prompt_variant_stays_within_its_token_budget(variant):
    from ptxbench.prompts import size

    measured = size.measure(variant, GEMM)
    print(measured, size.BUDGETS[variant])
    assert size.within_budget(measured), (measured, measured.estimate, size.BUDGETS[variant])
    text = size.prompt_text(variant, GEMM)
    assert "max_clusters" in text  # the launch contract: every variant
    if variant != "basic":  # what the size pays for is there
        assert "ptxbench/wgmma.cuh" in text and "wgmma_m64k16_bf16" in text and "bar.arrive 2, 256;" in text


# ---- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_measured_cluster_capacity_is_at_least_the_bound():
    import torch

    from ptxbench.tools.gpu.occupancy import measure_cluster_capacity

    torch.zeros(1, device="cuda")  # the primary context
    props = torch.cuda.get_device_properties(0)
    capacity = measure_cluster_capacity(DeviceLimits().max_smem_optin)
    print("cluster capacity (size: clusters resident at once, 1 CTA/SM):", capacity)
    assert capacity[1] == props.multi_processor_count
    for size, n in capacity.items():
        assert n >= guaranteed_clusters(props.multi_processor_count, size, SM90A), (size, n)


@pytest.mark.gpu
@pytest.mark.parametrize("workload", [SMOKE_GEMM, GEMM])
def test_gemm_written_from_the_prompt_passes_on_the_gpu(workload):
    from gpu_helpers import shared_evaluator

    from ptxbench.tools.evaluator import EvalOptions

    result = shared_evaluator().evaluate(workload, prompt_gemm_source(), EvalOptions(time=workload == GEMM, profile_on_pass=False, timeout_s=120))
    print(workload, result.status, result.message, result.speedup)
    assert result.status == "PASSED", result.message


def test_the_wgmma_header_is_its_generators_output():
    """wgmma.cuh is written by bench/gen_wgmma_header.py ("edit the script, not the header"): the header gained its
    m64n56k16 by hand, so running the script dropped the decode GEMMs' tile and put back comments already corrected."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "gen_wgmma_header.py"
    spec = importlib.util.spec_from_file_location("gen_wgmma_header", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.HEADER.read_text() == gen.render()
    assert "wgmma_m64k16_bf16<56>" in gen.render()
