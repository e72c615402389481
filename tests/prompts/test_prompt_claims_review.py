"""What the task and the solution format tell a model about the harness, checked against the code that does it.

- every prompt renders for every workload of the registry, every variant and mode, with no placeholder left
  (task.md, and the feedback and start-kernel frames);
- the source policy's refusals are the ones the format names (`std::`, `new`, directives beyond the allow list);
- `max_clusters` is a symbol of `[[launch]]` tables only, as the format says;
- the zero fill of `zero = true` scratch runs inside the timed call, as the format and the task say;
- each argument spelling of the format's table, in PTX and in CUDA, is what the parser and ptxas accept;
- a target family used for a token share of the work does not count, and the task says where the line is;
- where the library itself misses the element rule, the task states the calibrated rule the referee applies.
"""
from __future__ import annotations

import re

import pytest

from policy_refusals import DEVICE, REFUSED
from ptxbench import prompts
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.loop.task import system_prompt, task_prompt
from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.cuda_policy import check_cuda_source
from ptxbench.tools.solution.parse import parse_solution
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload, list_workloads

GEMM = "gemm_bf16_m8192_n7168_k5120"
FORMAT = prompts.load("solution_format")
PLACEHOLDER = re.compile(r"\$(?:\{?[A-Za-z_]\w*\}?)|\{arch\}")


def _flat(text: str) -> str:
    return " ".join(text.split())


# ---- rendering ----------------------------------------------------------------------------------

def test_no_prompt_file_holds_a_dollar_of_its_own():
    """A `$` in a text inserted into the task would read as a placeholder left unfilled: none holds one."""
    for name in prompts.names():
        if name not in ("task", "feedback", "start_from"):
            assert "$" not in prompts.load(name), name


@pytest.mark.parametrize("variant", list(prompts.VARIANTS))
def test_every_workload_renders_with_no_placeholder_left(variant):
    for wl in list_workloads():
        for mode in ("pipeline", "tools"):
            for target in (None, 0.0, 1.5):
                config = OptimizeConfig(workload=wl.id, prompt=variant, mode=mode, target_speedup=target)
                text = system_prompt(config) + task_prompt(config, wl)
                assert not PLACEHOLDER.findall(text), (wl.id, variant, mode, PLACEHOLDER.findall(text))
                assert wl.id in text and "# Solution format" in text
                if variant != "basic":
                    assert "# Knowledge pack" in text and "ptxbench/wgmma.cuh" in text, (wl.id, variant)


def test_a_task_names_only_its_own_architecture():
    """`optimize --arch sm_100a` rendered a format that said `.target sm_90a`, `ptxas -arch=sm_90a` and `compute_90a`:
    a model that followed it had its first file refused (`.target sm_90a does not match the task's architecture`)."""
    from ptxbench.workloads.arch import ARCHS

    for arch in ARCHS:
        others = [a for a in ARCHS if a != arch]
        for wl in list_workloads():
            if arch not in wl.targets:
                continue
            for variant in prompts.VARIANTS:
                config = OptimizeConfig(workload=wl.id, prompt=variant, arch=arch)
                text = system_prompt(config) + task_prompt(config, wl)
                assert f"target architecture `{arch}`" in text
                for other in others:
                    assert other not in text and other.replace("sm_", "compute_") not in text, (arch, wl.id, variant, other)
    languages = _flat(FORMAT.split("## Languages", 1)[1].split("## The plan block", 1)[0])
    assert "`.target` of the task's architecture" in languages and "`ptxas -arch=` that architecture" in languages


def test_the_feedback_and_start_frames_fill_every_placeholder():
    from ptxbench.agent.loop.feedback import _fill
    from ptxbench.agent.loop.start_kernel import start_section

    for no_gpu in (False, True):
        text = _fill(3, "PASSED", " (speedup 1.000x)", no_gpu, "body", "progress")
        assert not PLACEHOLDER.findall(text), text
    text = start_section({"language": "cuda", "source": "// k\n"}, "PASSED", 1.0, "feedback")
    assert not PLACEHOLDER.findall(text) and "```cuda\n// k\n```" in text, text


# ---- the source policy --------------------------------------------------------------------------

# what a model writes (tests/policy_refusals.py) -> the spelling the format must name for it
_REFUSED = [(REFUSED[key], named) for key, named in [
    ("std", "`std::`"), ("new", "`new`"), ("error", "`#error`"), ("line", "`#line`"),
    ("pragma", "`#pragma` other than `unroll`")]]


@pytest.mark.parametrize("source,named", _REFUSED)
def test_what_the_policy_refuses_the_format_names(source, named):
    """The policy refused `std::` (so `std::uint32_t` under the allowed <cstdint>), `new` / `delete` and every directive
    outside its allow list, and the format named none of them: a model found out from a refused turn."""
    assert check_cuda_source(source), source  # the code side: refused
    languages = _flat(FORMAT.split("## Languages", 1)[1].split("## The plan block", 1)[0])
    assert named in languages, named


def test_what_the_format_allows_the_policy_allows():
    """And `uint32_t` under <cstdint> compiles without `std::`, as the format says to write it."""
    source = ("#include <cstdint>\n#include <cuda_bf16.h>\n#define N 4\n#pragma once\n"
              + DEVICE.format("uint32_t x = N;\n#pragma unroll\nfor (int i = 0; i < N; ++i) x += i; (void)x;"))
    assert not check_cuda_source(source), check_cuda_source(source)
    r = compile_source(source, "cuda", "sm_90a")
    assert r.status == "ok", [str(e.message) for e in r.errors]


# ---- max_clusters -------------------------------------------------------------------------------

def _plan(scratch_shape: str) -> str:
    return ('/* ptxbench\nlanguage = "cuda"\n[[launch]]\nkernel = "k"\ngrid = ["max_clusters", 1, 1]\nblock = [128, 1, 1]\n'
            f'args = ["C", "scratch:w"]\n[scratch.w]\ndtype = "int32"\nshape = [{scratch_shape}]\n*/\n'
            '#include <cuda_bf16.h>\nextern "C" __global__ void k(__nv_bfloat16* C, int* w) {}\n')


def test_max_clusters_is_a_symbol_of_launch_tables_only():
    wl = get_workload(GEMM)
    assert isinstance(parse_solution(_plan('"num_sms"'), wl, "sm_90a"), Solution)
    refused = parse_solution(_plan('"max_clusters"'), wl, "sm_90a")
    assert isinstance(refused, list) and any("max_clusters" in i.message for i in refused), refused
    assert "`max_clusters` (in `[[launch]]` tables only:" in _flat(FORMAT)


# ---- what is timed -------------------------------------------------------------------------------

def test_the_zero_fill_runs_inside_the_timed_call_and_the_prompt_says_so():
    """CandidateCalls.call is the timed interval (timing.time_sides puts it between the CUDA events); it zero-fills
    `zero = true` scratch before the launches. The format said only "zero-fills the buffer before every run"."""
    from ptxbench.tools.gpu.buffers import allocate_set
    from ptxbench.tools.gpu.calls import CandidateCalls, InputSet

    bufs = allocate_set([("C", (4, 4), "bfloat16", "output")], [("acc", [8], "float32", True)], device="cpu")
    seen = {}

    class Candidate:
        def bind(self, b):
            return b

        def launch(self, b):
            seen["acc"] = b.scratch["acc"].data.clone()

    calls = CandidateCalls(Candidate(), [InputSet(0, 0, bufs, {})], key=1)
    bufs.scratch["acc"].data.fill_(7.0)
    calls.current = 0
    calls.call()
    assert not seen["acc"].any(), seen
    scratch = _flat(FORMAT.split("### Scratch buffers", 1)[1].split("###", 1)[0])
    assert "inside the timed call" in scratch, scratch
    speed = _flat(task_prompt(OptimizeConfig(workload=GEMM), get_workload(GEMM)).split("- Speed:", 1)[1].split("\n- ", 1)[0])
    assert "`zero = true` scratch" in speed and "every launch of the plan" in speed, speed


# ---- the argument table ---------------------------------------------------------------------------

_ARGS = ["C", "scratch:s", "tmap:m", "i32:M", "u32:N", "i64:K", "u64:K", "f32:1 / sqrt(K)", "f64:0.5"]
_PTX_PARAMS = [".param .u64 c", ".param .u64 s", ".param .align 64 .b8 m[128]", ".param .s32 a", ".param .u32 b",
               ".param .s64 d", ".param .u64 e", ".param .f32 f", ".param .f64 g"]
_CUDA_PARAMS = ["__nv_bfloat16* c", "float* s", "const __grid_constant__ CUtensorMap m", "int a", "uint32_t b",
                "int64_t d", "uint64_t e", "float f", "double g"]


def _arg_plan(language: str) -> str:
    args = ", ".join(f'"{a}"' for a in _ARGS)
    return (f'/* ptxbench\nlanguage = "{language}"\n[[launch]]\nkernel = "k"\ngrid = [1, 1, 1]\nblock = [32, 1, 1]\n'
            f'args = [{args}]\n[scratch.s]\ndtype = "float32"\nshape = ["M"]\n'
            '[tmap.m]\ntensor = "A"\nbox = [64, 128]\nswizzle = "128B"\n*/\n')


def test_each_argument_spelling_of_the_table_parses_and_compiles():
    """The format's table of argument spellings and parameter declarations, every row, in both languages."""
    table = FORMAT.split("### Arguments", 1)[1].split("###", 1)[0]
    for spelling in ("`.param .u64`", "`.param .align 64 .b8 NAME[128]`", "`const __grid_constant__ CUtensorMap`",
                     "`.param .s32` / `.u32` / `.s64` / `.u64` / `.f32` / `.f64`"):
        assert spelling in table, spelling
    wl = get_workload(GEMM)
    ptx = (_arg_plan("ptx") + ".version 8.0\n.target sm_90a\n.address_size 64\n"
           ".extern .shared .align 16 .b8 smem[];\n"  # the format's dynamic shared memory declaration
           f".visible .entry k({', '.join(_PTX_PARAMS)})\n{{\n  ret;\n}}\n")
    cuda = (_arg_plan("cuda") + "#include <cuda.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n"
            f'extern "C" __global__ void k({", ".join(_CUDA_PARAMS)}) {{ extern __shared__ uint8_t smem[]; (void)smem; }}\n')
    assert ".extern .shared .align 16 .b8 smem[];" in FORMAT and "extern __shared__ uint8_t smem[]" in FORMAT
    for language, source in (("ptx", ptx), ("cuda", cuda)):
        sol = parse_solution(source, wl, "sm_90a")
        assert isinstance(sol, Solution), (language, [str(i) for i in sol])
        r = compile_source(source, language, "sm_90a", workload=GEMM)
        assert r.status == "ok", (language, [str(e.message) for e in r.errors])


# ---- target instructions ---------------------------------------------------------------------------

def test_a_token_share_of_the_work_does_not_count_and_the_task_says_where_the_line_is():
    """tools/profile/verdict.py calls a family that did under TOKEN_SHARE of the workload's work (its FLOPs, its
    inputs' bytes) a token, and scoring counts only `executed`; the task said only "must use ... executed"."""
    from ptxbench.tools.profile.verdict import TOKEN_SHARE, _with_share, expected_work
    from ptxbench.tools.results import RuntimeTarget
    from ptxbench.workloads.arch import get_arch

    assert TOKEN_SHARE == 0.5
    wl = get_workload(GEMM)
    work = expected_work(wl)
    for fam in get_arch("sm_90a").families:
        if not fam.work_counter:
            continue
        for share, verdict in ((0.49, "token"), (0.51, "executed")):
            got = _with_share(fam, RuntimeTarget(verdict="executed", reason=""), {fam.work_counter: share * work[fam.work]},
                              work, wl)
            assert got.verdict == verdict, (fam.name, share, got.reason)
    task = _flat(task_prompt(OptimizeConfig(workload=GEMM), wl))
    line = task.split("- Target instructions:", 1)[1].split(" - You have", 1)[0]
    assert "at least half of the workload's work" in line and "FLOPs" in line and "inputs' bytes" in line, line
    assert "a token" in line and "does not count" in line, line


# ---- the calibrated correctness rule ------------------------------------------------------------------

def test_the_calibrated_rule_is_stated_with_the_workloads_factor():
    """The referee holds a tensor to library_factor x the library's errors where the library itself misses (or
    nearly misses) the element rule (correctness.library_rule); the task said only "every element must pass"."""
    from ptxbench.tools.gpu.correctness import LibraryError, compare
    import torch

    wl = get_workload("mha_bwd_d128")
    tol = wl.tolerance
    ref = torch.linspace(-1, 1, 4096)
    out = ref.clone()
    out[7] += 0.05  # fails the element rule (atol = rtol = 0.01 there)
    lib = LibraryError(max_abs_err=0.03, rel_fro_err=1e-3, passes_element_rule=False)
    assert not compare(out, ref, tol, trial=0, tensor="dQ").passed
    assert compare(out, ref, tol, trial=0, tensor="dQ", library=lib).passed  # within 2 x 0.03
    factors = {w.tolerance.library_factor for w in list_workloads()}
    assert factors == {2.0}, factors  # the task states one factor for all
    judged = _flat(task_prompt(OptimizeConfig(workload=wl.id), wl).split("## How it is judged", 1)[1])
    assert "misses (or nearly misses) the element rule" in judged and "2x its max abs and relative Frobenius errors" \
        in judged, judged[:400]
