"""What the harness's own process does with model text before any compiler runs is bounded on hostile text: a file
built to make a check slow must not hold up the run. tools/ptx_flow.py (the checks of module data and parameters, on
every `ptx` file): 400 KB of back branches with thousands of addresses held at once took 94 s, and of `brx.idx` jumps
(each to every label) past 300 s (bench/results/hostile_text_cost.md); with the work budget each is read as a whole
past it, in about a second, and still refused where it writes."""
from __future__ import annotations

import time

import pytest

from ptxbench.tools import ptx_flow
from ptxbench.tools.module_data import ModuleData
from ptxbench.tools.param_reach import param_writes
from ptxbench.tools.solution.parse import MAX_SOLUTION_CHARS

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
# a write through an address computed at run time from the first one: refused by a flow that settled or not
PLANTED = "ld.global.u64 %rd1, [%rd2];\nadd.u64 %rd2, %rd{last}, %rd1;\nst.global.u32 [%rd2], %r1;\n"


def _module(origin: str, make_line, decls: str = ".global .align 8 .b64 g[4];\n", first: str = "") -> tuple[str, int]:
    """A module of one kernel, `make_line(i)` repeated up to the size a solution may have, then the planted write."""
    lines, size, budget = [], 0, MAX_SOLUTION_CHARS - 2_000
    while size + len(line := make_line(len(lines))) + 1 < budget:
        lines.append(line)
        size += len(line) + 1
    n = len(lines)
    body = first + origin + "\n" + "\n".join(lines) + "\n" + PLANTED.format(last=n)
    text = (HEAD + decls + ".visible .entry k(.param .u64 p0)\n{\n"
            f".reg .b64 %rd<{n + 8}>;\n.reg .b32 %r<{n + 8}>;\n.reg .pred %p<4>;\n{body}ret;\n}}\n")
    assert len(text) <= MAX_SOLUTION_CHARS
    return text, n


def _back_branches(i: int) -> str:  # each register computed from the last, a branch back to the line before
    return f"L{i}: add.u64 %rd{i + 1}, %rd{i}, 0;\n@%p1 bra L{max(0, i - 1)};"


def _table_jumps(i: int) -> str:  # each line a `brx.idx`: a jump to any label of the function
    return f"L{i}: add.u64 %rd{i + 1}, %rd{i}, 1;\nbrx.idx %r1, T;"


@pytest.mark.parametrize("shape, first", [(_back_branches, ""), (_table_jumps, "T: .branchtargets L0;\n")])
def test_a_module_built_to_make_the_flow_slow_is_read_as_a_whole_in_seconds(shape, first):
    text, n = _module("mov.u64 %rd0, g;", shape, first=first)
    data = ModuleData(text)
    start = time.perf_counter()
    found = [i.message for i in data.reach("ptx")]
    took = time.perf_counter() - start
    assert took < 15, f"{took:.1f} s for {n} lines (94 s and past 300 s before the work budget)"
    assert any("writes through `[%rd2]`, an address computed from module variable g" in m for m in found), found


def test_the_parameter_check_under_the_same_budget():
    text, n = _module("cvta.param.u64 %rd0, 0;", _back_branches, decls="")
    data = ModuleData(text)
    start = time.perf_counter()
    found = [i.message for i in param_writes(data, "ptx")]
    assert time.perf_counter() - start < 15
    assert any("writes through `[%rd2]`, an address computed from a kernel parameter's" in m for m in found), found


def test_past_the_budget_every_function_left_is_read_as_a_whole(monkeypatch):
    """Past the budget (one call's, all functions together) a function is read as a whole: a register its flow would
    have cleared (redefined as data before the write) is taken to hold the address, as any definition gave it."""
    body = ("mov.u64 %rd1, g;\nadd.u64 %rd2, %rd1, %rd9;\nld.global.u64 %rd2, [%rd5];\n"
            "st.global.u32 [%rd2], %r1;\n")
    text = (HEAD + ".global .align 8 .b64 g[4];\n"
            + "".join(f".visible .entry k{j}()\n{{\n.reg .b64 %rd<16>;\n.reg .b32 %r<4>;\n{body}ret;\n}}\n"
                      for j in range(2)))
    assert ModuleData(text).reach("ptx") == []  # by the flow: %rd2 holds loaded data at the store
    monkeypatch.setattr(ptx_flow, "WORK_BUDGET", 1)
    found = [i.message for i in ModuleData(text).reach("ptx")]
    assert any("writes through `[%rd2]`" in m for m in found), found


@pytest.mark.parametrize("solution", ["gemm_bf16_m8192_n7168_k5120.cu", "attention_fwd_wgmma.cu",
                                      "attention_bwd_wgmma.cu"])
def test_the_project_kernels_spend_a_small_share_of_the_budget(monkeypatch, solution):
    """nvcc's PTX of the reference kernels: the backward's, the largest, spends about 96,000 of 20 million (its tuner
    variants up to 210,000), so no honest kernel of this size comes near the whole-function reading."""
    from pathlib import Path

    import ptxbench.workloads.solutions as solutions
    from ptxbench.tools.compile import compile_source

    works = []

    class Counted(ptx_flow._Work):
        def __init__(self, budget):
            super().__init__(budget)
            works.append(self)

    monkeypatch.setattr(ptx_flow, "_Work", Counted)
    source = (Path(solutions.__file__).parent / solution).read_text()
    result = compile_source(source, "cuda", use_cache=False)
    assert result.status == "ok", result.errors
    assert works and max(w.spent for w in works) < ptx_flow.WORK_BUDGET // 50, [w.spent for w in works]


def test_a_literal_of_thousands_of_digits_is_an_offset_out_of_bytes_not_an_exception():
    text = (HEAD + ".global .align 8 .b8 g[16];\n.visible .entry k()\n{\n.reg .b32 %r<4>;\n"
            f"st.global.u32 [g+{'7' * 5000}], %r1;\nret;\n}}\n")
    found = [i.message for i in ModuleData(text).reach("ptx")]
    assert any("module variable g, which has 16" in m for m in found), found


def test_a_module_of_blank_lines_is_annotated_in_linear_time():
    """`^\\s*` under re.M crosses lines: from every start of a line of a blank run, quadratic (390,000 empty lines
    between `.target` and the kernel: 264 s before ptxas ran)."""
    from ptxbench.tools.profile.lineinfo import annotate_ptx, has_line_info

    text = HEAD + "\n" * 390_000 + ".visible .entry k()\n{\nret;\n}\n"
    start = time.perf_counter()
    annotated = annotate_ptx(text)
    assert time.perf_counter() - start < 5
    assert annotated.count("\n") == text.count("\n") and ".loc 1 390006 0 ret;" in annotated
    assert has_line_info(".version 8.5\n\n  \t.loc 1 2 0\n") and not has_line_info("add.u32 %r1, %r1, 1; .loc")


def _checks(text: str) -> list:
    """compile.py's text checks before ptxas, on the text as it reads them."""
    from ptxbench.tools.compile_log import system_calls
    from ptxbench.tools.sass import strip_ptx_comments

    code = strip_ptx_comments(text, blank_strings=True)
    data = ModuleData(code)
    return (system_calls(code, "ptx") + data.unreadable("ptx") + data.register_clashes("ptx") + data.reach("ptx")
            + param_writes(data, "ptx"))


KERNEL = ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<4>;\nret;\n}\n"


@pytest.mark.parametrize("shape", [
    ".global .ptr" + ".ptr" * 40 + " 1;\n",  # each qualifier read two ways: 2^k tries (k = 32 past 10 s)
    ".global .u32 x" + "[  ]" * 40 + " y;\n",  # the blanks of empty dimensions split every way (24 past 10 s)
    " " + ".param " * 50_000 + ";\n",  # each `.param` ran its qualifiers to the end of the chain (56 KB: 8 s)
    '.file 1 "' + "a" * 300_000 + '"\n',  # a label tried from every character of the name (30 KB: 9 s)
    ".extern .func (" * 25_000 + "\n",  # each `(` ran to the end of the file for a `)` (375 KB: 6 s)
    ".visible .entry j(.param .u64 out)\n{\n" + ".reg " * 60_000 + ";\n.reg .b64 out;\nret;\n}\n",  # a line search
])
def test_the_text_checks_are_linear_in_a_declaration_built_to_backtrack(shape):
    """Each shape made one regular expression of the checks before ptxas backtrack (exponential or quadratic), in the
    harness's own process, with no limit (seconds past 10 at 100-400 KB, past an hour extrapolated)."""
    start = time.perf_counter()
    issues = _checks(HEAD + shape + KERNEL)
    assert time.perf_counter() - start < 3, shape[:40]
    assert isinstance(issues, list)


def test_a_bare_prototype_is_found_in_linear_time_behind_strings_of_func():
    """`_declared_line` scanned lazily from every `.func` to a `;` far away (72 KB of `.file` strings: 10.8 s)."""
    from ptxbench.tools.compile import _declared_line

    text = "".join(f'.file {i} "' + ".func " * 1500 + ('";' if i == 8 else '"') + "\n" for i in range(1, 9))
    text += ".func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);\n"
    start = time.perf_counter()
    assert _declared_line(text, "vprintf") == 9
    assert time.perf_counter() - start < 2


def test_a_plan_of_64_launches_of_an_unknown_kernel_reads_the_file_once():
    """Each launch of a kernel the scan did not recognise asked whether its name stood at file scope, one scan of the
    whole file each: 64 launches and 127,000 mentions in braces took 9.5 s before any compile."""
    from ptxbench.tools.solution.parse import parse_solution

    launches = "".join('[[launch]]\nkernel = "k"\ngrid = [1]\nblock = [32]\nargs = []\n' for _ in range(64))
    text = (f'/* ptxbench\nlanguage = "cuda"\n{launches}*/\n__device__ void f() {{\nint k = 0;\n'
            + "{k}" * 127_000 + "\n}\n")
    start = time.perf_counter()
    issues = parse_solution(text)
    assert time.perf_counter() - start < 4
    assert issues and all("kernel 'k'" in i.message or "more" in i.message for i in issues), issues[-1]
