"""Solution files: pulling the kernel out of a reply, parsing its plan, checking it, resolving it."""
from __future__ import annotations

import pytest

from ptxbench.tools.solution.plan import FormatIssue, Solution
from ptxbench.tools.solution.parse import PlanError, extract_solution, parse_solution, read_reply, resolve_plan
from ptxbench.workloads.schema import Baseline, TensorSpec, Workload
from waits import cpu_timed


def _workload(**symbols) -> Workload:
    sym = {"M": 256, "N": 256, "K": 512, **symbols}
    return Workload(
        id="test_gemm", op="gemm", title="C = A @ B^T", symbols=sym, reference="gemm",
        tensors=[TensorSpec(name="A", role="input", dtype="bfloat16", shape=["M", "K"]),
                 TensorSpec(name="B", role="input", dtype="bfloat16", shape=["N", "K"]),
                 TensorSpec(name="C", role="output", dtype="bfloat16", shape=["M", "N"])],
        baselines=[Baseline(name="cublas", primary=True)], flops=2.0 * sym["M"] * sym["N"] * sym["K"],
        min_bytes=1.0, targets={"sm_90a": ["wgmma", "tma"]})


GEMM = _workload()
ATTN = Workload(
    id="test_attn", op="mha_fwd", title="attention", symbols={"B": 2, "H": 4, "S": 256, "D": 64, "scale": 0.125},
    reference="mha_fwd",
    tensors=[TensorSpec(name=n, role="input", dtype="bfloat16", shape=["B", "H", "S", "D"]) for n in "QKV"]
    + [TensorSpec(name="O", role="output", dtype="bfloat16", shape=["B", "H", "S", "D"]),
       TensorSpec(name="LSE", role="output", dtype="float32", shape=["B", "H", "S"])],
    baselines=[Baseline(name="cudnn_sdpa", primary=True)], flops=1.0, min_bytes=1.0, targets={})

PLAN = """/* ptxbench
language = "ptx"

[[launch]]
kernel = "k"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "i32:K"]
*/
"""
HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"
ENTRY = ".visible .entry k(\n\t.param .u64 a,\n\t.param .u64 b,\n\t.param .u64 c,\n\t.param .s32 kk\n)\n{\n\tret;\n}\n"
FILE = PLAN + HEAD + ENTRY  # the .entry is on line 13


def _issues(result) -> list[FormatIssue]:
    assert isinstance(result, list), f"expected issues, got a Solution: {result}"
    assert result and all(isinstance(i, FormatIssue) for i in result)
    return result


def _one(result, line: int | None, *words: str) -> FormatIssue:
    """The issue on `line` whose message contains every word."""
    for issue in _issues(result):
        if issue.line == line and all(w in issue.message for w in words):
            return issue
    raise AssertionError(f"no issue on line {line} with {words}: {[str(i) for i in result]}")


# ---------- extraction ----------

def test_fenced_block_with_prose_around():
    reply = f"Here is my kernel.\n\n```ptx\n{FILE}```\n\nIt uses one thread per column."
    source, language = extract_solution(reply)
    assert language == "ptx" and source == FILE


@pytest.mark.parametrize("tag", ["cuda", "cpp", "c++", "cu", "CUDA"])
def test_cuda_tags(tag):
    body = '/* ptxbench\nlanguage = "cuda"\n*/\nextern "C" __global__ void k() {}\n'
    source, language = extract_solution(f"```{tag}\n{body}```")
    assert language == "cuda" and source == body


def test_untagged_and_tilde_fences_take_language_from_plan():
    assert extract_solution(f"```\n{FILE}```").language == "ptx"
    assert extract_solution(f"~~~\n{FILE}~~~\n").source == FILE


def test_several_blocks_the_one_with_the_plan_wins():
    reply = f"First a sketch:\n```ptx\n{HEAD}{ENTRY}```\nThe file:\n```ptx\n{FILE}```\nUsage:\n```bash\nptxbench compile k.ptx\n```\n"
    extracted = extract_solution(reply)
    assert extracted.source == FILE and extracted.warnings == []


def test_several_blocks_with_plans_the_last_wins_with_a_warning():
    second = FILE.replace('kernel = "k"', 'kernel = "k2"')
    extracted = extract_solution(f"```ptx\n{FILE}```\nrevised:\n```ptx\n{second}```")
    assert extracted.source == second
    assert "2 code blocks" in extracted.warnings[0] and "last" in extracted.warnings[0]


def test_raw_file_without_fences_is_accepted_when_it_has_a_plan():
    source, language = extract_solution(FILE)
    assert source == FILE and language == "ptx"


def test_no_block_and_empty_reply_are_issues():
    assert "no code block" in _issues(extract_solution("I think the kernel should tile by 128."))[0].message
    assert "empty" in _issues(extract_solution("   \n"))[0].message
    assert "empty" in _issues(extract_solution(""))[0].message


def test_a_draft_in_inline_reasoning_is_not_the_answer():
    """A reasoning model served without a reasoning parser sends its thinking inline, `<think>...</think>` (R1-style
    replies often without the opening tag). A draft kernel there was taken as the submission when the answer after it
    had no code block, or a block without the plan; only what follows the last </think> counts now."""
    draft = f"<think>\nFirst try:\n```ptx\n{FILE}```\nbut the tile is wrong.\n</think>\n"
    assert "no code block" in _issues(extract_solution(draft + "The kernel should tile by 128."))[0].message
    final = extract_solution(draft + f"```ptx\n{HEAD}{ENTRY}```")  # the answer's block, though the draft has the plan
    assert final.source == f"{HEAD}{ENTRY}" and not any("last one" in w for w in final.warnings)
    assert "all reasoning" in _issues(extract_solution(f"```ptx\n{FILE}```\n</think>\n  "))[0].message
    assert extract_solution(f"Thought it over.\n</think>\n```ptx\n{FILE}```").source == FILE  # no opening tag


def test_blocks_without_plan_take_the_last_code_block_and_parse_reports_the_plan():
    reply = f"```ptx\n{HEAD}{ENTRY}```\n```python\nprint(1)\n```"
    extracted = extract_solution(reply)
    assert extracted.language == "ptx" and ".entry k" in extracted.source
    assert any("no code block holds" in w for w in extracted.warnings)
    assert "no launch plan" in _issues(parse_solution(extracted.source, GEMM))[0].message


def test_plan_in_a_separate_toml_block_gets_a_hint():
    reply = f"```ptx\n{HEAD}{ENTRY}```\n```toml\nlanguage = \"ptx\"\n```"
    assert any("separate ```toml" in w for w in extract_solution(reply).warnings)


def test_unclosed_block_is_taken_with_a_warning():
    extracted = extract_solution(f"```ptx\n{FILE}")
    assert extracted.source == FILE and any("not closed" in w for w in extracted.warnings)


def test_tag_disagreeing_with_plan_uses_the_plan():
    extracted = extract_solution(f"```cuda\n{FILE}```")
    assert extracted.language == "ptx" and any("tagged ```cuda" in w for w in extracted.warnings)


def test_read_reply_keeps_extraction_warnings():
    second = FILE
    solution = read_reply(f"```ptx\n{FILE}```\n```ptx\n{second}```", GEMM)
    assert isinstance(solution, Solution) and any("last one" in w for w in solution.warnings)
    assert _issues(read_reply("no code here", GEMM))[0].line is None


# ---------- parsing: the good path ----------

def test_example_ptx_solution_parses_and_resolves(data_dir):
    source = (data_dir / "solutions" / "gemm_naive_sm90a.ptx").read_text()
    solution = parse_solution(source, GEMM)
    assert isinstance(solution, Solution), solution
    assert solution.language == "ptx" and solution.warnings == []
    first, second = solution.plan.launches
    assert (first.kernel, first.line, second.kernel, second.line) == ("gemm_f32", 7, "to_bf16", 15)
    assert [a.line for a in first.args] == [11, 11, 11, 12, 13, 13, 13]
    assert (solution.plan.tmaps[0].line, solution.plan.scratch[0].line) == (21, 25)
    plan = resolve_plan(solution.plan, GEMM, num_sms=132)
    assert plan.launches[0].grid == (2, 256, 1) and plan.launches[0].block == (128, 1, 1)
    assert plan.launches[1].grid == (256 * 256 // 256, 1, 1)
    assert [(a.kind, a.name, a.value) for a in plan.launches[0].args][-3:] == [
        ("scalar", "M", 256), ("scalar", "N", 256), ("scalar", "K", 512)]
    tmap = plan.tmaps[0]
    assert (tmap.dims, tmap.strides, tmap.byte_strides, tmap.box, tmap.elem_strides) == (
        [512, 256], [512], [1024], [64, 1], [1, 1])
    assert plan.scratch[0].shape == [256, 256] and plan.scratch[0].nbytes == 256 * 256 * 4


def test_a_workload_may_be_given_by_its_id(data_dir):
    """The id `ptxbench workloads` lists (as LocalEvaluator.evaluate takes it) was read as a Workload: an
    AttributeError traceback from the plan checks."""
    source = (data_dir / "solutions" / "gemm_naive_sm90a.ptx").read_text()
    wid = "smoke_gemm_bf16_m256_n256_k512"
    solution = read_reply(f"```ptx\n{source}```", wid)
    assert isinstance(solution, Solution) and parse_solution(source, wid) == parse_solution(source, GEMM), solution
    assert resolve_plan(solution.plan, wid, num_sms=132) == resolve_plan(solution.plan, GEMM, num_sms=132)
    with pytest.raises(KeyError, match="unknown workload 'gemm'; known: "):
        parse_solution(source, "gemm")


def test_example_cuda_solution_parses(data_dir):
    source = (data_dir / "solutions" / "gemm_naive_sm90a.cu").read_text()
    solution = parse_solution(source, GEMM)
    assert isinstance(solution, Solution), solution
    assert solution.language == "cuda" and solution.plan.launches[0].kernel == "gemm_naive"


def test_without_a_workload_only_the_form_is_checked():
    solution = parse_solution(FILE.replace('"i32:K"', '"i32:UNKNOWN"'))
    assert isinstance(solution, Solution)
    assert _one(parse_solution(FILE.replace('"i32:K"', '"i32:UNKNOWN"'), GEMM), 8, "unknown name 'UNKNOWN'")


def test_star_prefixed_comment_style_is_accepted():
    starred = "/* ptxbench\n" + "".join(f" * {ln}\n" for ln in PLAN.splitlines()[1:-1]) + " */\n" + HEAD + ENTRY
    solution = parse_solution(starred, GEMM)
    assert isinstance(solution, Solution) and solution.plan.launches[0].line == 4


def test_resolved_grid_uses_num_sms_and_fails_cleanly():
    source = FILE.replace('grid = ["cdiv(N, 128)", "M"]', 'grid = ["min(num_sms, 8)"]')
    solution = parse_solution(source, GEMM)
    assert resolve_plan(solution.plan, GEMM, num_sms=4).launches[0].grid == (4, 1, 1)
    with pytest.raises(PlanError) as err:
        resolve_plan(solution.plan, GEMM, num_sms=0)
    assert "grid[0]" in str(err.value) and err.value.issues[0].line == 4  # the launch header: resolve_plan has no key lines


def test_tmap_view_over_a_4d_tensor():
    plan = """/* ptxbench
language = "ptx"
[[launch]]
kernel = "k"
grid = ["B * H", "cdiv(S, 64)"]
block = [128]
args = ["tmap:q", "O"]
[tmap.q]
tensor = "Q"
box = [64, 64]
dims = ["D", "B * H * S"]
swizzle = "128B"
*/
"""
    entry = ".visible .entry k(.param .align 64 .b8 q[128], .param .u64 o)\n{\n\tret;\n}\n"
    solution = parse_solution(plan + HEAD + entry, ATTN)
    assert isinstance(solution, Solution), solution
    tmap = resolve_plan(solution.plan, ATTN, 132).tmaps[0]
    assert (tmap.rank, tmap.dims, tmap.strides, tmap.byte_strides) == (2, [64, 2 * 4 * 256], [64], [128])
    too_big = plan.replace('"B * H * S"', '"B * H * S + 1"')
    _one(parse_solution(too_big + HEAD + entry, ATTN), 11, "reach element", "has 131072 elements")


# ---------- parsing: issues with lines ----------

def test_missing_plan_and_line_comment_hint():
    assert "no launch plan" in _issues(parse_solution(HEAD + ENTRY, GEMM))[0].message
    assert "must be a /* */ comment" in _issues(parse_solution("// ptxbench\n" + HEAD + ENTRY))[0].message


def test_unclosed_plan_block():
    _one(parse_solution("\n/* ptxbench\nlanguage = \"ptx\"\n" + HEAD), 2, "never closed")


def test_broken_toml_reports_the_file_line():
    broken = FILE.replace('block = [128]', 'block = [128')
    issue = _issues(parse_solution(broken, GEMM))[0]
    assert issue.line in (7, 8) and "not valid TOML" in issue.message
    broken = FILE.replace('kernel = "k"', 'kernel "k"')
    _one(parse_solution(broken, GEMM), 5, "not valid TOML")


def test_unquoted_expression_gets_a_hint():
    _one(parse_solution(FILE.replace('"cdiv(N, 128)"', "cdiv(N, 128)"), GEMM), 6, "must be quoted strings")


def test_language_missing_or_wrong():
    _one(parse_solution(FILE.replace('language = "ptx"\n', ""), GEMM), 1, 'language = "ptx"')
    _one(parse_solution(FILE.replace('language = "ptx"', 'language = "triton"'), GEMM), 2, "'triton'")


def test_no_launch():
    plan = '/* ptxbench\nlanguage = "ptx"\n*/\n'
    _one(parse_solution(plan + HEAD + ENTRY, GEMM), 1, "at least one [[launch]]")


def test_grid_with_four_entries():
    issue = _one(parse_solution(FILE.replace('["cdiv(N, 128)", "M"]', "[1, 1, 1, 1]"), GEMM), 6, "grid", "1 to 3")
    assert "got 4" in str(issue) and str(issue).startswith("line 6: ")


@pytest.mark.parametrize("toml_expr, words", [
    ('"M.__class__"', ["attribute access"]),
    ('"eval(\'1\')"', ["unknown function 'eval'"]),
    ('"2 ** 100"', ["exponent"]),
    ('"M // 0"', ["division by zero"]),
    ('"Q"', ["unknown name 'Q'", "K, M, N, max_clusters, num_sms"]),
    ('"cdiv(\uff2e, 128)"', ["non-ASCII character", "U+FF2E", "ASCII"]),  # a full-width N, which Python reads as N
])
def test_bad_expressions_in_grid(toml_expr, words):
    _one(parse_solution(FILE.replace('"cdiv(N, 128)"', toml_expr), GEMM), 6, *words)


def test_unknown_keys_are_named():
    _one(parse_solution(FILE.replace("block = [128]", "block = [128]\nthreads = 128"), GEMM), 8,
         "unknown key 'threads'", "kernel, grid, block")


def test_arg_spelling_issues():
    result = parse_solution(FILE.replace('"i32:K"', '"int:K"'), GEMM)
    _one(result, 8, "unknown kind 'int'", "did you mean i32")
    _one(parse_solution(FILE.replace('"i32:K"', '"K*2"'), GEMM), 8, 'scalar needs its type')
    _one(parse_solution(FILE.replace('"i32:K"', "7"), GEMM), 8, "must be a string")


def test_param_count_mismatch_names_the_entry_line():
    issue = _one(parse_solution(FILE.replace('"i32:K"]', '"i32:K", "i32:M"]'), GEMM), 13, "4 parameters", "passes 5")
    assert "line 4" in issue.message


def test_kernel_not_found_lists_entries():
    _one(parse_solution(FILE.replace('kernel = "k"', 'kernel = "gemm"'), GEMM), 4, "'gemm' is not defined",
         "kernels found: k")


def test_param_kind_mismatches():
    tmap_plan = FILE.replace('args = ["A"', 'args = ["tmap:a"').replace("*/", '[tmap.a]\ntensor = "A"\nbox = [64, 64]\n*/')
    _one(parse_solution(tmap_plan, GEMM), 17, "parameter 1 of k", "128-byte CUtensorMap", ".align 64 .b8")
    unaligned = tmap_plan.replace(".param .u64 a,", ".param .b8 a[128],")
    _one(parse_solution(unaligned, GEMM), 17, "64-byte aligned")
    aligned = tmap_plan.replace(".param .u64 a,", ".param .align 64 .b8 a[128],")
    assert isinstance(parse_solution(aligned, GEMM), Solution)
    _one(parse_solution(FILE.replace('"i32:K"', '"f32:K"'), GEMM), 17, "f32", "integer")
    _one(parse_solution(FILE.replace('"i32:K"', '"i64:K"'), GEMM), 17, "8-byte i64", "4 bytes")


def test_unknown_tensor_and_helpful_hints():
    _one(parse_solution(FILE.replace('"A", "B"', '"X", "B"'), GEMM), 8, "unknown tensor 'X'", "A, B, C")
    scratch = FILE.replace('"A", "B"', '"acc", "B"').replace("*/", '[scratch.acc]\ndtype = "float32"\nshape = ["M"]\n*/')
    _one(parse_solution(scratch, GEMM), 8, "write scratch:acc")
    _one(parse_solution(FILE.replace('"A", "B"', '"M", "B"'), GEMM), 8, "is a symbol", "i32:M")


def test_undeclared_scratch_and_tmap():
    _one(parse_solution(FILE.replace('"A", "B"', '"scratch:buf", "B"'), GEMM), 8, "scratch:buf is not declared")
    _one(parse_solution(FILE.replace('"A", "B"', '"tmap:amap", "B"'), GEMM), 8, "tmap:amap is not declared")


def test_a_plan_of_thousands_of_objects_is_refused_before_anything_is_allocated():
    """Each scratch buffer and tensor map costs every call its restore and checks; a plan with thousands would spend
    the watchdog's time in harness work. 64 of each kind resolve; 65 are refused with the count."""
    def with_scratch(n: int) -> str:
        tables = "".join(f'[scratch.s{i}]\ndtype = "float32"\nshape = [16]\n' for i in range(n))
        return FILE.replace("*/", tables + "*/")

    assert isinstance(parse_solution(with_scratch(64), GEMM), Solution)
    _one(parse_solution(with_scratch(65), GEMM), None, "65 [[scratch]] entries", "at most 64")
    launch = '[[launch]]\nkernel = "k"\ngrid = [1]\nblock = [128]\nargs = ["A", "B", "C", "i32:K"]\n'
    _one(parse_solution(FILE.replace("*/", launch * 64 + "*/"), GEMM), None, "65 [[launch]] entries")


def test_scratch_checks_and_unused_warning():
    bad = FILE.replace("*/", '[scratch.acc]\ndtype = "float33"\nshape = ["M", "N"]\n*/')
    _one(parse_solution(bad, GEMM), 10, "dtype must be one of", "float33")
    unused = FILE.replace("*/", '[scratch.acc]\ndtype = "float32"\nshape = ["M", "N"]\nzero = true\n*/')
    solution = parse_solution(unused, GEMM)
    assert isinstance(solution, Solution) and solution.warnings == ["scratch.acc is declared but no launch uses it"]
    huge = unused.replace('shape = ["M", "N"]', 'shape = ["M * 2**20", "N * 2**10"]')
    _one(parse_solution(huge, GEMM), 11, "32 GiB")
    clash = unused.replace("[scratch.acc]", "[scratch.C]")
    _one(parse_solution(clash, GEMM), 9, "name of a workload tensor")


@pytest.mark.parametrize("edit, line, words", [
    (("block = [128]", "block = [2048]"), 7, ["2048", "at most 1024"]),
    (("block = [128]", "block = [32, 32, 2]"), 7, ["2048 threads", "1 to 1024"]),
    (("block = [128]", "block = [0]"), 7, ["block[0]", "at least 1"]),
    (('grid = ["cdiv(N, 128)", "M"]', 'grid = ["-M"]'), 6, ["grid[0]", "-256"]),
    (('grid = ["cdiv(N, 128)", "M"]', 'grid = [1, 70000]'), 6, ["grid[1]", "65535"]),
    (('grid = ["cdiv(N, 128)", "M"]', 'grid = ["M / 3"]'), 6, ["whole number"]),
    (("block = [128]", "block = [128]\nsmem = 300000"), 8, ["smem", "232448"]),
    (("block = [128]", "block = [128]\ncluster = [3]"), 8, ["not a multiple of cluster[0]"]),
    (("block = [128]", "block = [128]\ncluster = [16]"), 8, ["16 CTAs", "at most 8"]),
    (('"i32:K"', '"i32:M * N * K * 1000"'), 8, ["outside the i32 range"]),
    (('"i32:K"', '"u32:-1"'), 8, ["outside the u32 range"]),
])
def test_value_ranges(edit, line, words):
    _one(parse_solution(FILE.replace(*edit), GEMM), line, *words)


@pytest.mark.parametrize("tmap, line, words", [
    ('box = [64, 300]', 11, ["box[1]", "1 to 256"]),
    ('box = [128, 64]\nswizzle = "128B"', 11, ["swizzle 128B", "at most 128 bytes"]),
    ('box = [4, 64]', 11, ["multiple of 16 bytes"]),
    ('box = [64, 64, 1]', 11, ["rank 2", "give one box entry per dimension"]),
    ('box = [64, 64]\nstrides = ["K", 1]', 12, ["strides needs a list of 1 to 1 entries"]),
    ('box = [64, 64]\ndims = [512, 256]\nstrides = [100]', 13, ["200 bytes", "multiple of 16"]),
    ('box = [64, 64]\nswizzle = "256B"', 12, ["swizzle must be one of"]),
    # dims of 1 reach no element past the first row whatever the stride, but the driver takes strides below 2**40
    # bytes, and a cuuint64 none of 2**64 or more (an OverflowError in the worker: INFRA_ERROR, not the plan's error)
    ('box = [64, 1]\ndims = [64, 1]\nstrides = ["2**62"]', 13, ["2**40"]),
    ('box = [64, 1]\ndims = [64, 1]\nstrides = ["2**39"]', 13, ["2**40"]),
])
def test_tmap_checks(tmap, line, words):
    source = FILE.replace('args = ["A"', 'args = ["tmap:a"').replace(".param .u64 a,", ".param .align 64 .b8 a[128],")
    source = source.replace("*/", f'[tmap.a]\ntensor = "A"\n{tmap}\n*/')
    _one(parse_solution(source, GEMM), line, *words)


def test_tmap_of_unknown_tensor_and_over_scratch():
    source = FILE.replace('args = ["A"', 'args = ["tmap:a"').replace(".param .u64 a,", ".param .align 64 .b8 a[128],")
    _one(parse_solution(source.replace("*/", '[tmap.a]\ntensor = "Z"\nbox = [64, 64]\n*/'), GEMM), 10,
         "'Z' is neither a workload tensor")
    over_scratch = source.replace("*/", '[tmap.a]\ntensor = "acc"\nbox = [32]\n[scratch.acc]\ndtype = "float32"\nshape = ["M"]\n*/')
    solution = parse_solution(over_scratch, GEMM)
    assert isinstance(solution, Solution) and solution.warnings == []
    tmap = resolve_plan(solution.plan, GEMM, 132).tmaps[0]
    assert (tmap.source, tmap.dtype, tmap.dims, tmap.strides) == ("scratch", "float32", [256], [])


# ---------- cuda files through parse_solution ----------

CUDA_PLAN = """/* ptxbench
language = "cuda"
[[launch]]
kernel = "k"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "C", "i32:K"]
*/
"""


def test_cuda_signature_checks():
    good = CUDA_PLAN + 'extern "C" __global__ void k(const __nv_bfloat16* a, __nv_bfloat16* c, int k) {}\n'
    assert isinstance(parse_solution(good, GEMM), Solution)
    _one(parse_solution(good.replace('extern "C" ', ""), GEMM), 9, 'not extern "C"')
    _one(parse_solution(good.replace(", int k)", ")"), GEMM), 9, "2 parameters", "passes 3")
    _one(parse_solution(good.replace("__nv_bfloat16* c", "float c"), GEMM), 9, "device pointer")
    block = CUDA_PLAN + 'extern "C" {\n__global__ void k(const void* a, void* c, int k) {}\n}\n'
    assert isinstance(parse_solution(block, GEMM), Solution)


def test_cuda_host_code_is_refused_through_parse_solution():
    bad = CUDA_PLAN + ('#include <cstdio>\nextern "C" __global__ void k(void* a, void* c, int k) { printf("x"); }\n'
                       "int main() { return 0; }\n")
    result = parse_solution(bad, GEMM)
    _one(result, 9, "#include <cstdio>")
    _one(result, 10, "printf")
    _one(result, 11, "main")


def test_ptx_module_checks_through_parse_solution():
    _one(parse_solution(PLAN + ENTRY, GEMM), 1, ".version")
    _one(parse_solution(FILE.replace(".target sm_90a", ".target sm_100a"), GEMM), 11, "expected .target sm_90a")


def test_the_prompt_reference_example_parses():
    """prompts/solution_format.md is what models copy: its example plan must pass the parser."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "prompts" / "solution_format.md").read_text()
    plan = text.split("```\n/* ptxbench", 1)[1].split("\n```", 1)[0]
    kernel = ('#include <cuda.h>\nextern "C" __global__ void gemm(const __grid_constant__ CUtensorMap a, '
              "const __grid_constant__ CUtensorMap b, __nv_bfloat16* c, int m, int n, int k) {}\n")
    solution = parse_solution("/* ptxbench" + plan + "\n" + kernel)
    assert isinstance(solution, Solution), solution
    assert [m.name for m in solution.plan.tmaps] == ["A_map", "B_map"] and solution.plan.scratch[0].zero
    # and resolves on the GEMM it is written for: its scratch shape once named B, H, S, D, no GEMM's symbols
    from ptxbench.workloads.registry import get_workload

    gemm = get_workload("gemm_bf16_m8192_n7168_k5120")
    resolved = resolve_plan(parse_solution("/* ptxbench" + plan + "\n" + kernel, gemm).plan, gemm, 132)
    assert resolved.scratch[0].shape == [8192, 7168] and resolved.launches[0].grid == (56, 64, 1)


def test_extracted_pickles_with_its_warnings():
    import pickle

    extracted = extract_solution(f"```ptx\n{FILE}```\n```ptx\n{FILE}```")
    again = pickle.loads(pickle.dumps(extracted))
    assert tuple(again) == (FILE, "ptx") and again.warnings == extracted.warnings != []


def test_cuda_kernel_made_by_a_macro_is_a_warning_not_an_issue():
    source = CUDA_PLAN + ('#define KERNEL(name) extern "C" __global__ void name(const void* a, void* c, int k)\n'
                          "KERNEL(k) {}\n")
    solution = parse_solution(source, GEMM)
    assert isinstance(solution, Solution) and "not recognised" in solution.warnings[0]
    missing = CUDA_PLAN + 'extern "C" __global__ void other(const void* a, void* c, int k) {}\n'
    _one(parse_solution(missing, GEMM), 3, "'k' is not defined", "kernels found: other")


def test_issue_list_is_capped():
    host = CUDA_PLAN + 'extern "C" __global__ void k(void* a, void* c, int k) {}\n' + "".join(
        f"int f{i}() {{ return {i}; }}\n" for i in range(50))
    issues = _issues(parse_solution(host, GEMM))
    assert len(issues) == 31 and issues[-1].line is None and "20 more" in issues[-1].message
    assert [i.line for i in issues[:30]] == list(range(10, 40))


# ---------- the kind of every issue (the evaluator's PLAN_ERROR vs COMPILE_ERROR comes from it) ----------


def _kinds(result) -> dict[str, str]:
    return {i.message: i.kind for i in _issues(result)}


def test_every_issue_has_the_kind_of_the_check_that_found_it():
    good = CUDA_PLAN + 'extern "C" __global__ void k(const __nv_bfloat16* a, __nv_bfloat16* c, int k) {}\n'
    plan_faults = [
        good.replace('language = "cuda"', 'language = "triton"'),  # the plan's TOML (no plan word in the message)
        good.replace('"A", "C"', '"X", "C"'),  # the plan against the workload
        good.replace(", int k)", ")"),  # the plan against the kernel's signature
        good.replace("__nv_bfloat16* c", "float c"),
        good.replace("void k(", "void other("),
        PLAN + "\t.visible .entry k() {}\n__global__ void g() {}\n",  # the plan says ptx over a CUDA file
    ]
    for source in plan_faults:
        assert "plan" in _kinds(parse_solution(source, GEMM)).values(), source
    source_faults = [
        good + "void launch() { k<<<1, 1>>>(0, 0, 0); }\n",  # host code whose message names the launch plan
        good + "__device__ void f() { auto* p = new int; }\n",  # "ask for scratch buffers in the plan"
        good.replace('extern "C" ', ""),
        FILE.replace(".target sm_90a", ".target sm_100a"),
        PLAN + ENTRY,
        "x" * 500_000,
    ]
    for source in source_faults:
        assert set(_kinds(parse_solution(source, GEMM)).values()) == {"source"}, source
    assert {i.kind for i in _issues(resolve_plan_issues())} == {"plan"}
    for reply in ("", "no code here", "x" * 2_000_000):
        assert {i.kind for i in _issues(extract_solution(reply))} == {"format"}


def resolve_plan_issues() -> list[FormatIssue]:
    solution = parse_solution(FILE, GEMM)
    with pytest.raises(PlanError) as e:
        resolve_plan(solution.plan, _workload(M=2**31), 132)
    return e.value.issues


def test_a_capped_list_keeps_the_plan_kind_of_what_it_cut():
    host = 'extern "C" __global__ void k(void* a, void* c, int k) {}\n' + "".join(f"int f{i}() {{ return {i}; }}\n" for i in range(50))
    issues = _issues(parse_solution(CUDA_PLAN + host, GEMM))
    assert len(issues) == 31 and {i.kind for i in issues} == {"source"}
    # a plan issue without a line sorts last and falls past the cap: the summary carries its kind
    clash = CUDA_PLAN.replace("*/", '[tmap.a]\ntensor = "A"\nbox = [64, 64]\n[scratch.a]\ndtype = "float32"\nshape = ["M"]\n*/')
    issues = _issues(parse_solution(clash + host, GEMM))
    assert len(issues) == 31 and {i.kind for i in issues[:30]} == {"source"}
    assert issues[-1].kind == "plan" and "21 more" in issues[-1].message


# ---------- hostile text: a verdict, quickly ----------
# Each shape below took seconds to minutes (a scan per bracket, per mention or per unclosed comment over the rest
# of a file up to MAX_SOLUTION_CHARS); the bounds (CPU seconds) leave a slow machine room.

GOOD_CUDA = CUDA_PLAN + 'extern "C" __global__ void k(const __nv_bfloat16* a, __nv_bfloat16* c, int k) {}\n'


def test_a_line_of_brackets_in_a_multiline_string_is_read_in_linear_time():
    from ptxbench.tools.solution.plan_toml import PlanBlock, _scan_lines

    # `\"` inside a """ string is an escape, so the `[` line is string content, not a table header
    plan = GOOD_CUDA.replace('language = "cuda"\n', 'language = "cuda"\nx = """\\"""\n[' + " " * 3000 + '\n"""\n', 1)
    issues, took = cpu_timed(parse_solution, plan, GEMM)
    assert took < 2 and [(i.line, i.kind) for i in _issues(issues)] == [(3, "plan")], issues  # unknown key 'x'
    lines, took = cpu_timed(_scan_lines, PlanBlock("[[launch]]\nkernel = 1\n[" + " " * 3000, 1))
    assert took < 2 and lines.headers == [(1, "launch")] and lines.keys == {(1, "kernel"): 2}


@pytest.mark.parametrize("shape, count", [
    ('extern"C"{', 10_000),  # each `extern "C" {` walked to its closing brace
    ("__maxnreg__(", 33_000),  # each attribute searched from the start and matched to the end
    ("{" + " k" * 190_000, 1),  # the braces before every mention of the kernel's name counted
])
def test_unclosed_scopes_and_many_mentions_are_scanned_in_linear_time(shape, count):
    issues, took = cpu_timed(parse_solution, CUDA_PLAN + shape * count + "\n", GEMM)
    assert took < 2 and "is not defined" in _issues(issues)[0].message, took


@pytest.mark.parametrize("language, declaration", [("ptx", ".entry k{}("), ("cuda", 'extern "C" __global__ void k{}(')])
def test_many_unclosed_parameter_lists_are_read_once(language, declaration):
    head = (PLAN + HEAD if language == "ptx" else CUDA_PLAN).replace('"k"', '"k0"')
    source = head + "".join(declaration.format(i) for i in range(256)) + "x" * 350_000
    result, took = cpu_timed(parse_solution, source, GEMM)
    assert took < 2, took
    # each list ends where the next declaration begins: k0's holds what lies before k1, not the rest of the file
    assert "kernel k0 has 0 parameters" in _issues(result)[0].message if language == "ptx" else \
        "kernel k0 has 1 parameters" in _issues(result)[0].message, result


def test_a_reply_of_unclosed_plan_comments_is_read_in_linear_time():
    reply = "/* ptxbench " * 80_000
    extracted, took = cpu_timed(extract_solution, reply)
    assert took < 2 and extracted.source.startswith("/* ptxbench")
    assert extract_solution("```\n/* ptxbench\nx = 1\nlanguage = 'ptx'\n*/\n```\n/* ptxbench\nlanguage = 'cuda'").language == "ptx"


@pytest.mark.parametrize("table", ["[[launch]]\n", "[tmap.t{}]\n", "[scratch.s{}]\n"])
def test_a_plan_of_thousands_of_tables_is_read_in_linear_time(table):
    # each table's line was looked up in a scan over every header of the plan: 36,000 [[launch]] headers in a 400 KB
    # file took about a minute of the host's CPU per evaluation
    plan = '/* ptxbench\nlanguage = "ptx"\n' + "".join(table.format(i) for i in range(20_000)) + "*/\n" + HEAD
    issues, took = cpu_timed(parse_solution, plan, GEMM)
    assert took < 3, took
    _one(issues, None, "20000 [[", "at most 64")


def test_a_plan_of_thousands_of_launches_is_refused_before_its_kernels_are_looked_up():
    # each launch's kernel was looked up in the whole file (its braces and mentions counted again per launch): 4,000
    # launches of a `cuda` file took 50 s of the host's CPU per evaluation; past the limit nothing is looked up
    launches = "".join(f'[[launch]]\nkernel = "k{i}"\ngrid = [1]\nblock = [1]\n' for i in range(4000))
    issues, took = cpu_timed(parse_solution, CUDA_PLAN.replace("[[launch]]", launches + "[[launch]]", 1) + "{}\n" * 20_000,
                             GEMM)
    assert took < 2, took
    _one(issues, None, "4001 [[launch]] entries", "at most 64")


def test_a_dotted_key_of_thousands_of_parts_is_refused_before_toml_reads_it():
    # tomllib's work on one dotted key grows as the square of its parts: `x.k0.k1...k49999 = 1` took a minute
    plan = '/* ptxbench\nlanguage = "ptx"\nx.' + ".".join(f"k{i}" for i in range(50_000)) + " = 1\n*/\n" + HEAD
    issues, took = cpu_timed(parse_solution, plan, GEMM)
    assert took < 2, took
    _one(issues, 3, "50000 dots")


def test_text_utf8_cannot_encode_is_an_issue_on_its_line():
    lone = "\ud800"  # what a JSON "\\ud800" decodes to
    issue = _one(parse_solution(FILE.replace("\tret;", "\tret; // " + lone), GEMM), 20, "UTF-8", "\\ud800")
    assert issue.kind == "source"
    _one(extract_solution(f"```ptx\n{FILE.replace('ret;', 'ret; // ' + lone)}```\n"), 20, "UTF-8")
    assert isinstance(extract_solution(f"prose {lone}\n```ptx\n{FILE}```\n"), tuple)  # outside the file: no matter


def test_a_toml_number_past_4300_digits_is_a_plan_issue_in_plain_words():
    issue = _one(parse_solution(FILE.replace("block = [128]", "block = [1" + "0" * 5000 + "]"), GEMM), 1, "too long")
    assert issue.kind == "plan" and "set_int_max_str_digits" not in issue.message
