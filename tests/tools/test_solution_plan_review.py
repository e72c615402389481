"""Hostile plans against the checks that stand before the GPU: each refusal names the field to fix, before any GPU time
is spent, and the GPU worker's own checks (tools/gpu/limits.py) agree with the parser's."""
from __future__ import annotations

import pytest

from ptxbench.tools.gpu.limits import DeviceLimits, check_plan
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import ResolvedArg, ResolvedLaunch, ResolvedPlan, ResolvedTensorMap, Solution
from ptxbench.workloads.schema import Baseline, TensorSpec, Workload

GEMM = Workload(
    id="test_gemm", op="gemm", title="C = A @ B^T", symbols={"M": 256, "N": 256, "K": 512}, reference="gemm",
    tensors=[TensorSpec(name="A", role="input", dtype="bfloat16", shape=["M", "K"]),
             TensorSpec(name="B", role="input", dtype="bfloat16", shape=["N", "K"]),
             TensorSpec(name="C", role="output", dtype="bfloat16", shape=["M", "N"])],
    baselines=[Baseline(name="cublas", primary=True)], flops=1.0, min_bytes=1.0, targets={})

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _plan(args: str, tables: str = "", language: str = "ptx") -> str:
    return (f'/* ptxbench\nlanguage = "{language}"\n\n[[launch]]\nkernel = "k"\ngrid = [2]\nblock = [128]\n'
            f"args = [{args}]\n{tables}*/\n")


def _issue(result, *words: str):
    assert isinstance(result, list), f"expected issues, got a Solution: {result}"
    for issue in result:
        if all(w in issue.message for w in words):
            return issue
    raise AssertionError(f"no issue with {words}: {[str(i) for i in result]}")


# ---------- a NaN out-of-bounds fill on an integer tensor ----------
# cuTensorMapEncodeTiled takes CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA for floating-point data only (cuda.h):
# the plan passed, the driver refused it at the worker's first bind, a PLAN_ERROR that named no line and cost a GPU trip.

TMAP_ENTRY = (HEAD + ".visible .entry k(\n\t.param .align 64 .b8 t[128],\n\t.param .u64 c\n)\n{\n\tret;\n}\n")


@pytest.mark.parametrize("dtype, box0", [("int32", 16), ("int64", 2), ("uint8", 16)])
def test_a_nan_fill_on_an_integer_buffer_is_refused_on_its_line(dtype, box0):
    tables = (f'[scratch.s]\ndtype = "{dtype}"\nshape = [64, 64]\n'
              f'[tmap.t]\ntensor = "s"\nbox = [{box0}, 8]\noob_fill = "nan"\n')
    found = _issue(parse_solution(_plan('"tmap:t", "C"', tables) + TMAP_ENTRY, GEMM), "oob_fill", "nan", dtype)
    assert found.kind == "plan" and found.line == 15  # the oob_fill line
    floating = tables.replace(f'dtype = "{dtype}"', 'dtype = "float32"').replace(f"box = [{box0}", "box = [16")
    assert isinstance(parse_solution(_plan('"tmap:t", "C"', floating) + TMAP_ENTRY, GEMM), Solution)


def test_the_worker_refuses_a_nan_fill_on_an_integer_buffer_too():
    t = ResolvedTensorMap(name="t", tensor="s", source="scratch", dtype="int32", rank=2, dims=[64, 64], strides=[64],
                          byte_strides=[256], box=[16, 8], elem_strides=[1, 1], swizzle="none", l2_promotion="none",
                          oob_fill="nan")
    launch = ResolvedLaunch(kernel="k", grid=(1, 1, 1), block=(128, 1, 1), args=[ResolvedArg(kind="tmap", name="t")])
    plan = ResolvedPlan(num_sms=132, launches=[launch], tmaps=[t])
    errs = check_plan(plan, DeviceLimits(), {"s": 64 * 64 * 4})
    assert any("nan" in e and "int32" in e for e in errs), errs
    float_map = t.model_copy(update={"dtype": "float32"})
    assert check_plan(plan.model_copy(update={"tmaps": [float_map]}), DeviceLimits(), {"s": 64 * 64 * 4}) == []


# ---------- a kernel the file declares but never defines ----------
# `.extern .entry k(...);` assembles, and a CUDA prototype compiles, to a module without k: the plan passed, the
# compile passed, and the worker's cuModuleGetFunction was the first to find that the kernel was not there.

GEMM_ARGS = '"A", "B", "C", "i32:K"'
PTX_PARAMS = "(\n\t.param .u64 a,\n\t.param .u64 b,\n\t.param .u64 c,\n\t.param .s32 kk\n)"
PTX_BODY = "\n{\n\tret;\n}\n"
CUDA_PARAMS = "(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int kk)"
CUDA_HEAD = "#include <cuda_bf16.h>\n"


def _ptx(*entries: str) -> str:
    return _plan(GEMM_ARGS) + HEAD + "".join(entries)


def _cuda(*kernels: str) -> str:
    return _plan(GEMM_ARGS, language="cuda") + CUDA_HEAD + "".join(kernels)


@pytest.mark.parametrize("source, line", [
    (_ptx(".extern .entry k" + PTX_PARAMS + ";\n"), 13),
    (_ptx(".visible .entry j" + PTX_PARAMS + PTX_BODY, ".extern .entry k" + PTX_PARAMS + ";\n"), 22),
    (_cuda('extern "C" __global__ void k' + CUDA_PARAMS + ";\n"), 11),
    (_cuda('extern "C" __global__ void __launch_bounds__(128) k' + CUDA_PARAMS + ";\n",
           'extern "C" __global__ void j' + CUDA_PARAMS + " {}\n"), 11),
])
def test_a_kernel_only_declared_is_a_plan_issue_on_its_declaration(source, line):
    found = _issue(parse_solution(source, GEMM), "kernel k", "declared", "never defined")
    assert found.kind == "plan" and found.line == line


@pytest.mark.parametrize("source", [
    _ptx(".visible .entry k" + PTX_PARAMS + PTX_BODY),
    _ptx(".visible .entry k" + PTX_PARAMS + "\n.maxntid 128, 1, 1" + PTX_BODY),
    _ptx(".visible .entry k" + PTX_PARAMS + ' .pragma "nounroll";' + PTX_BODY),  # a pragma at entry scope, then the body
    _cuda('extern "C" __global__ void k' + CUDA_PARAMS + ";\n", 'extern "C" __global__ void k' + CUDA_PARAMS + " {}\n"),
    _cuda('extern "C" __global__ void k' + CUDA_PARAMS + " {}\n", 'extern "C" __global__ void k' + CUDA_PARAMS + ";\n"),
    # a prototype whose definition a macro writes: the scan cannot see it, so it does not refuse it
    _cuda("#define KERNEL(name) extern \"C\" __global__ void name" + CUDA_PARAMS + " {}\n",
          'extern "C" __global__ void k' + CUDA_PARAMS + ";\n", "KERNEL(k)\n"),
])
def test_a_declaration_beside_its_definition_is_fine(source):
    assert isinstance(parse_solution(source, GEMM), Solution), parse_solution(source, GEMM)


def test_the_compilers_accept_a_declared_kernel_and_leave_it_out_of_the_module(tmp_path, monkeypatch):
    """Why the parser refuses it: ptxas and nvcc both compile such a file, to a module without the kernel."""
    from ptxbench.tools.compile import compile_source

    # ptxas is a dependency (the nvidia-cuda-nvcc wheel): a missing one is a broken install, which this test should show
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path))
    ptx = HEAD + ".visible .entry j" + PTX_PARAMS + PTX_BODY + ".extern .entry k" + PTX_PARAMS + ";\n"
    compiled = compile_source(ptx, "ptx", "sm_90a")
    assert compiled.status == "ok" and set(compiled.kernels) == {"j"}, compiled.errors


# ---------- a kernel of thousands of parameters ----------
# ptxas takes up to 32764 bytes of parameters (8000 i32s assemble), and the plan checks pass a launch of as many args;
# the worker read at most 4096 parameter sizes and refused it, saying the kernel took 4096.

def test_the_worker_reads_every_parameter_the_parameter_space_can_hold(runner, monkeypatch):
    from ptxbench.tools.gpu import launch

    count = 8000
    success, past_the_end = launch.cu.CUresult.CUDA_SUCCESS, object()
    monkeypatch.setattr(launch.cu, "cuFuncGetParamInfo",
                        lambda fn, i: (success, 4 * i, 4) if i < count else (past_the_end, 0, 0))
    assert launch.param_sizes(object()) == [4] * count


# ---------- hostile plans the checks already refuse, pinned: a PLAN_ERROR naming the field ----------

PTX_FILE = _plan(GEMM_ARGS) + HEAD + ".visible .entry k" + PTX_PARAMS + PTX_BODY


@pytest.mark.parametrize("old, new, words", [
    ("grid = [2]", 'grid = ["2**2**30"]', ["grid[0]", "exponent", "at most 64"]),  # no 2**(2**30)-digit integer is made
    ("grid = [2]", 'grid = ["(2**62)**64"]', ["grid[0]", "below 2**63"]),
    ("grid = [2]", 'grid = ["' + "(" * 240 + "1" + ")" * 240 + '"]', ["grid[0]"]),
    ("grid = [2]", "grid = [nan]", ["grid[0]", "not finite"]),
    ("grid = [2]", 'grid = ["2**31"]', ["grid[0]", "2147483647"]),
    ("block = [128]", "block = [128]\nsmem = 1.5", ["smem", "whole number"]),
    ("block = [128]", "block = [128]\nsmem = 232449", ["smem", "232448"]),
    ("block = [128]", "block = [128]\ncluster = [2, 2, 4]", ["16 CTAs", "at most 8"]),
    ("block = [128]", 'block = [128]\ncluster = ["max_clusters"]', ["cluster[0]", "unknown name 'max_clusters'"]),
    ("block = [128]", "block = [128]\nblock = [64]", ["not valid TOML", "overwrite"]),
    ("block = [128]", "block = [128]\nx = " + "{a=" * 5000 + "1" + "}" * 5000, ["nested too deeply"]),
    ('kernel = "k"', 'kernel = "\u043a"', ["kernel", "identifier"]),  # a Cyrillic k
    ('"A", "B"', '"\uff21", "B"', ["not a tensor name"]),  # a full-width A
    ('"i32:K"', '"i32:\uff2b"', ["non-ASCII", "'K'"]),
    ('"A", "B"', '"Z", "B"', ["unknown tensor 'Z'"]),
    ("*/", '[scratch.s]\ndtype = "float32"\nshape = ["2**40"]\n*/', ["scratch.s", "32 GiB"]),
    ("*/", '[scratch.s]\ndtype = "float32"\nshape = [1]\n[scratch.s]\ndtype = "float32"\nshape = [1]\n*/',
     ["not valid TOML", "twice"]),
])
def test_a_hostile_plan_is_a_plan_issue_naming_its_field(old, new, words):
    assert old in PTX_FILE
    found = _issue(parse_solution(PTX_FILE.replace(old, new, 1), GEMM), *words)
    assert found.kind == "plan" and found.line is not None


def test_the_same_output_passed_twice_is_no_plan_issue_and_resolves_to_one_buffer():
    """Aliasing gives the kernel nothing it lacks (it holds every pointer it is passed): the plan is taken as written."""
    solution = parse_solution(PTX_FILE.replace('"A", "B"', '"C", "C"', 1), GEMM)
    assert isinstance(solution, Solution)
    assert [a.name for a in resolve_plan(solution.plan, GEMM, 132).launches[0].args[:3]] == ["C", "C", "C"]


# ---------- a tensor map parameter declared as a pointer ----------
# nvcc compiles `const CUtensorMap* const __grid_constant__ t`, an 8-byte parameter: the scan took it for the 128-byte
# map because the line names CUtensorMap and __grid_constant__, and only the worker's parameter sizes refused it.

@pytest.mark.parametrize("param", ["const CUtensorMap* const __grid_constant__ t", "CUtensorMap *t"])
def test_a_pointer_to_a_tensor_map_is_no_tensor_map_parameter(param):
    source = (_plan('"tmap:t", "C"', '[tmap.t]\ntensor = "A"\nbox = [64, 8]\n', language="cuda") + "#include <cuda.h>\n"
              + f'extern "C" __global__ void k({param}, __nv_bfloat16* c) {{}}\n')
    found = _issue(parse_solution(source, GEMM), "parameter 1", "by value", "const __grid_constant__ CUtensorMap")
    assert found.kind == "plan"
    by_value = source.replace(param, "const __grid_constant__ CUtensorMap t")
    assert isinstance(parse_solution(by_value, GEMM), Solution)
