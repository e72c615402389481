"""The checks of module data and of parameters read the text ptxas reads. Each case below assembled with a write 64 KiB
past a module variable or past the parameters that the checks did not see: a string holding `//`, `/*` or `{`, a
space in a guard, an instruction after a `.loc` on its line, a block's register shadowing the one holding the address,
`x` beside `%x`, `stackrestore` read as a definition, `.reg` arguments and results, the parameter bank read at a
computed place, an octal array size. Pure text (compile.py's checks before ptxas), and two compiles for the sizes
ptxas gives."""
from __future__ import annotations

import pytest

from ptxbench.tools.module_data import ModuleData
from ptxbench.tools.param_reach import param_writes
from ptxbench.tools.sass import strip_ptx_comments

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .global .align 256 .b8 g_only[16];\n"


def kernel(body: str, funcs: str = "", params: str = ".param .u64 pA") -> str:
    return (f"{HEAD}{funcs}\n.visible .entry gemm({params})\n{{\n    .reg .pred %p<4>;\n    .reg .b64 %rd<16>;\n"
            f"    .reg .b32 %r<8>;\n{body}\n    ret;\n}}\n")


def checks(text: str) -> list[str]:
    """compile.py's checks before ptxas, on the text as it reads it."""
    data = ModuleData(strip_ptx_comments(text, blank_strings=True))
    issues = (data.unreadable("ptx") + data.register_clashes("ptx") + data.reach("ptx")
              + param_writes(data, "ptx"))
    return [i.message for i in issues]


MOD = "    mov.u64 %rd1, g_only;\n"
PARAM = "    mov.u64 %rd1, pA;\n    cvta.param.u64 %rd1, %rd1;\n"
STORE = "st.global.u32 [%rd1+65536], %r1;"

EVASIONS = {
    "a string holding //": MOD + f'    .pragma "//"; {STORE}',
    "a string opening a comment": MOD + '    .pragma "/*";\n' + f"    {STORE}\n" + '    .pragma "*/";',
    "a string holding a brace": MOD + '    .pragma "{";\n' + f"    {STORE}\n" + '    .pragma "}";',
    "a space in the guard": MOD + "    setp.eq.u32 %p1, %r1, %r1;\n" + f"    @ %p1 {STORE}",
    "a space and a bang in the guard": MOD + f"    @ ! %p1 {STORE}",
    "an instruction after a .loc": MOD + f"    .loc 1 1 0 {STORE}",
    "a block's register shadowing": MOD + "    {\n    .reg .b64 %rd1;\n    mov.u64 %rd1, 0;\n    }\n" + f"    {STORE}",
    "a parameter's address under a block's register": PARAM + "    {\n    .reg .b64 %rd1;\n    mov.u64 %rd1, 0;\n"
                                                       "    }\n" + f"    {STORE}",
    "stackrestore read as a definition": "    stacksave.u64 %rd9;\n" + MOD + "    stackrestore.u64 %rd1;\n"
                                         "    stackrestore.u64 %rd9;\n" + f"    {STORE}",
    "the parameter bank below a name": "    ld.param.u64 %rd1, [pA+-120];\n" + f"    {STORE}",
    "the parameter bank through a register": "    mov.u64 %rd2, pA;\n    add.s64 %rd3, %rd2, -120;\n"
                                             "    ld.param.u64 %rd1, [%rd3];\n" + f"    {STORE}",
}


@pytest.mark.parametrize("case", sorted(EVASIONS))
def test_a_write_the_checks_did_not_see_is_refused(case):
    issues = checks(kernel(EVASIONS[case]))
    assert any("65536" in m or "bank" in m or "stackrestore" in m for m in issues), (case, issues)


def test_a_file_string_opening_a_comment_hides_no_kernel():
    text = HEAD + '.file 1 "/*"\n' + kernel(MOD + f"    {STORE}")[len(HEAD):] + '.file 2 "*/"\n'
    assert any("reaches bytes 65536..65539 of module variable g_only" in m for m in checks(text))


def test_x_beside_percent_x_and_a_range_over_nvccs_names_are_refused():
    both = kernel("    .reg .b64 x;\n    .reg .b64 %x;\n    mov.u64 %x, g_only;\n    mov.u64 x, 0;\n"
                  "    st.global.u32 [%x+65536], %r1;")
    assert any("register x is declared without `%` beside a register `%x`" in m for m in checks(both))
    ranged = kernel("    .reg .b64 rd<4>;\n" + MOD + "    mov.u64 rd1, 0;\n" + f"    {STORE}")
    assert any("register rd is declared without `%` beside" in m for m in checks(ranged))


@pytest.mark.parametrize("funcs, call", [
    (".func (.reg .b64 %ret) where()\n{\n    mov.u64 %ret, g_only;\n    ret;\n}\n", "    call (%rd1), where, ();\n"),
    (".func put(.reg .b64 %a, .reg .b32 %v)\n{\n    st.global.u32 [%a+65536], %v;\n    ret;\n}\n",
     PARAM + "    call put, (%rd1, %r1);\n"),
])
def test_reg_arguments_and_results_are_refused(funcs, call):
    assert any("are `.param`, not `.reg`" in m for m in checks(kernel(call, funcs)))


def test_a_callee_reading_its_slot_through_the_slots_address_is_followed():
    callee = (".func put(.param .b64 fa, .param .b32 fv)\n{\n    .reg .b64 %rd<4>;\n    .reg .b32 %r<4>;\n"
              "    mov.u64 %rd1, fa;\n    ld.param.u64 %rd2, [%rd1];\n    ld.param.u32 %r1, [fv];\n"
              "    st.global.u32 [%rd2+65536], %r1;\n    ret;\n}\n")
    call = (PARAM + "    {\n    .param .b64 a0;\n    .param .b32 a1;\n    st.param.b64 [a0], %rd1;\n"
            "    st.param.b32 [a1], %r1;\n    call put, (a0, a1);\n    }\n")
    assert any("writes through `[%rd2+65536]`" in m for m in checks(kernel(call, callee)))


def test_nvccs_own_blocks_and_a_statement_no_check_reads():
    """nvcc's double `sin` reduces in blocks of `.reg .u32 %r0, ...` beside the function's `%r<N>`: another register,
    given a name of its own, never refused. A body statement that is no instruction is refused, not skipped."""
    block = ("    {\n    .reg .u32 %r0, %r1;\n    mov.b64 {%r0, %r1}, %rd5;\n    add.u32 %r1, %r1, 1;\n    }\n"
             "    ld.global.u32 %r1, [%rd1];")
    text = kernel(MOD + block)
    assert checks(text) == []
    renamed = [i.operands for i in ModuleData(strip_ptx_comments(text)).instructions if i.opcode == "add.u32"]
    assert renamed == ["%r1\u02b91, %r1\u02b91, 1"]
    assert any("is no instruction the checks of addresses can read" in m
               for m in checks(kernel(MOD + "    ST.global.u32 [%rd1+65536], %r1;")))


def test_comment_stripping_blanks_strings_only_when_asked():
    text = '.file 1 "/a/b.cu"\n.pragma "//"; st.u32 [x], 1; // c\n'
    assert strip_ptx_comments(text) == '.file 1 "/a/b.cu"\n.pragma "//"; st.u32 [x], 1; \n'
    assert strip_ptx_comments(text, blank_strings=True) == '.file 1 "       "\n.pragma "  "; st.u32 [x], 1; \n'


@pytest.mark.parametrize("decl, size", [(".b8 g_only[0200000]", 65536), (".b8 g_tab[][4] = {{1,2,3,4},{5,6,7,8}}", 8)])
def test_array_sizes_are_read_as_ptxas_reads_them(decl, size):
    (var,) = ModuleData(f"{HEAD[:-len('.visible .global .align 256 .b8 g_only[16];') - 1]}\n.global {decl};\n").variables
    assert var.size == size


def test_a_variable_the_check_reads_larger_than_the_cubin_holds_is_refused():
    data = ModuleData(HEAD + ".global .b8 g_big[64];\n")
    assert data.oversized([("g_only", 16), ("g_big", 64)]) == []
    (issue,) = data.oversized([("g_only", 16), ("g_big", 32)])
    assert "g_big holds 32 bytes" in issue.message and "read 64" in issue.message


def test_a_float_initialiser_is_a_number():
    data = ModuleData(HEAD + ".visible .global .align 4 .f32 scale = 0f3F800000;\n.global .f64 d = 0d3FF0000000000000;\n"
                             ".global .f32 e = 1.5e3;\n")
    assert data.initialisers == []
