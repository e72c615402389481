"""tools/module_data.py: a module variable's address never leaves its bytes (the driver's pool beside module data keeps
what a kernel writes there from call to call: global_tail_stash.cu ran 11.4x faster than its own no-hit twin on an
H100, bench/results/run33). Pure text checks on PTX, and two CUDA sources through the project's compile."""
from __future__ import annotations

import pytest

from ptxbench.tools.module_data import declarations, module_data_reach, statements
from text_mutations import mutations

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def ptx(decls: str, body: str, params: str = ".param .u64 out") -> str:
    return (f"{HEAD}{decls}\n.visible .entry k({params})\n{{\n    .reg .b64 %rd<16>;\n    .reg .b32 %r<16>;\n"
            f"    .reg .f32 %f<4>;\n{body}\n    ret;\n}}\n")


def reach(decls: str, body: str) -> list[str]:
    return [i.message for i in module_data_reach(ptx(decls, body), "ptx")]


COUNTER = ".global .align 4 .u32 counter;"
FLAGS = ".global .align 8 .b8 flags[16];"
TABLE = ".const .align 4 .b8 tab[256];"


@pytest.mark.parametrize("decls, body", [
    (COUNTER, "    atom.global.add.u32 %r1, [counter], 1;\n    st.global.u32 [counter], 0;"),
    # nvcc's atomicAdd(&counter, 1): the address in a register used only as an address within the variable
    (COUNTER, "    mov.u64 %rd1, counter;\n    atom.global.add.u32 %r1, [%rd1], 1;"),
    # atomicOr(&flags[1], 1): the address plus a constant, then through cvta.global (the same number)
    (FLAGS, "    mov.u64 %rd1, flags;\n    add.s64 %rd2, %rd1, 8;\n    cvta.global.u64 %rd3, %rd2;\n"
            "    atom.or.b64 %rd4, [%rd3], 1;\n    ld.global.v2.u32 {%r1, %r2}, [flags+8];"),
    # a constant table indexed at run time: the bank address is for ld.const, which reads the module's own bank
    (TABLE, "    mov.u64 %rd1, tab;\n    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd3, %rd1, %rd2;\n"
            "    ld.const.f32 %f1, [%rd3];"),
    # a global table read at a run-time index (nvcc's __cudart_sin_cos_coeffs for double sin): reading keeps nothing,
    # and the loaded value is data, free to store
    (FLAGS, "    mov.u64 %rd1, flags;\n    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd3, %rd1, %rd2;\n"
            "    ld.global.u32 %r2, [%rd3+65536];\n    ld.param.u64 %rd4, [out];\n    st.global.u32 [%rd4], %r2;"),
    # a copy of a size the instruction states, within the variable, and one that only reads it
    (FLAGS, "    cp.async.ca.shared.global [%r1], [flags], 16;\n    cp.async.ca.shared.global [%r1], [flags+4096], 16;"),
    # a register that held a table's address, reused for an output pointer: followed per instruction, not per function
    (FLAGS, "    mov.u64 %rd1, flags;\n    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd1, %rd1, %rd2;\n"
            "    ld.global.u32 %r2, [%rd1];\n    ld.param.u64 %rd1, [out];\n    st.global.u32 [%rd1], %r2;"),
])
def test_what_a_kernel_needs_module_data_for_is_allowed(decls, body):
    assert reach(decls, body) == []


@pytest.mark.parametrize("decls, body, said", [
    (FLAGS, "    mov.u64 %rd1, flags;\n    add.s64 %rd2, %rd1, %rd9;\n    st.global.u32 [%rd2], %r1;",
     "`st.global.u32` writes through `[%rd2]`, an address computed from module variable flags"),
    (FLAGS, "    st.global.u64 [flags+65536], %rd1;", "`[flags+65536]` reaches bytes 65536..65543 of module variable "
                                                     "flags, which has 16"),
    (FLAGS, "    mov.u64 %rd1, flags;\n    add.s64 %rd2, %rd1, 16;\n    st.global.u32 [%rd2], %r1;",
     "`[%rd2]` reaches bytes 16..19"),
    (FLAGS, "    st.global.v4.u32 [flags+4], {%r1, %r2, %r3, %r4};", "reaches bytes 4..19"),
    (FLAGS, "    red.global.add.u32 [flags+16], 1;", "reaches bytes 16..19"),
    (FLAGS, "    mov.u64 %rd1, flags;\n    ld.param.u64 %rd2, [out];\n    st.global.u64 [%rd2], %rd1;",
     "`st.global.u64` stores or passes on an address computed from module variable flags"),
    (FLAGS, "    mov.u64 %rd1, flags;\n    atom.global.exch.b64 %rd3, [%rd2], %rd1;",
     "`atom.global.exch.b64` stores or passes on an address computed from module variable flags"),
    # along the flow: a loop's second pass writes through the address its end computed
    (FLAGS, "    ld.param.u64 %rd1, [out];\nLOOP:\n    st.global.u32 [%rd1], %r1;\n    mov.u64 %rd3, flags;\n"
            "    add.s64 %rd1, %rd3, %rd9;\n    @%p1 bra LOOP;", "writes through `[%rd1]`"),
    (FLAGS, "    cvta.global.u64 %rd1, flags;\n    st.u32 [%rd1+64], %r1;", "writes through `[%rd1+64]`"),
    (FLAGS, "    cp.async.bulk.global.shared::cta [flags], [%r1], %r2;", "copies a run-time number of bytes"),
    (FLAGS, "    mov.u64 %rd1, flags;\n    { .param .b64 p0;\n    st.param.b64 [p0], %rd1; }",
     "`st.param.b64` stores or passes on an address computed from module variable flags"),
    (TABLE, "    cvta.const.u64 %rd1, tab;", "`cvta.const.u64` makes a generic address of a constant"),
    (TABLE, "    mov.u64 %rd1, tab;\n    add.s64 %rd2, %rd1, 4096;\n    st.global.u32 [%rd2], %r1;",
     "`st.global.u32` writes through `[%rd2]`, an address computed from module variable tab"),
    (FLAGS + "\n.global .align 8 .u64 where = generic(flags);", "    ld.global.u64 %rd1, [where];",
     "the initialiser of module variable where names generic"),
    # `.visible.global` (no space) is a declaration ptxas takes too
    (".visible.global .align 4 .b8 flags[16];", "    st.global.u32 [flags+16], %r1;", "reaches bytes 16..19"),
])
def test_every_way_out_of_the_variables_bytes_is_refused(decls, body, said):
    messages = reach(decls, body)
    assert any(said in m for m in messages), messages
    assert all("driver's pool of module data" in m or "ld.const" in m or "initialise module variables" in m
               or "run-time number" in m for m in messages), messages


def test_the_refusal_names_the_line_and_counts_the_other_places():
    body = "$L__BB0_1:\n\t.loc 1 2 3\n    st.global.u32 [flags+64], %r1;\n    st.global.u32 [flags+128], %r1;"
    text = ptx(FLAGS, body)
    (issue,) = module_data_reach(text, "ptx")
    assert text.split("\n")[issue.line - 1].strip() == "st.global.u32 [flags+64], %r1;"
    assert issue.message.endswith("(and 1 more place)"), issue.message


def test_registers_are_followed_per_function():
    """%rd1 holds the global's address in one function and a parameter's in the other: only the first is about it."""
    text = (f"{HEAD}{FLAGS}\n.func f(.param .u64 p)\n{{\n    .reg .b64 %rd<4>;\n    mov.u64 %rd1, flags;\n"
            f"    atom.global.add.u32 %r1, [%rd1], 1;\n    ret;\n}}\n.visible .entry k(.param .u64 out)\n{{\n"
            f"    .reg .b64 %rd<4>;\n    ld.param.u64 %rd1, [out];\n    st.global.u32 [%rd1+64], %r1;\n    ret;\n}}\n")
    assert module_data_reach(text, "ptx") == []


def test_declarations_read_sizes_initialisers_and_opaque_handles():
    text = (f"{HEAD}.global .align 4 .u32 a;\n.visible .global .align 16 .b8 b[4][8];\n"
            f".const .align 4 .f32 c[] = {{1.0, 2.0, 3.0}};\n.global .texref t;\n.global .v2 .u32 d;\n")
    variables, issues = declarations(text)
    assert {(v.name, v.space, v.size) for v in variables} == {("a", "global", 4), ("b", "global", 32),
                                                               ("c", "const", 12), ("d", "global", 8)}
    assert issues == []


def test_statements_keep_initialisers_and_vector_operands_whole():
    text = ptx(".global .u32 t[2] = {1, 2};", "    st.global.v2.u32 [t], {%r1, %r2};\n    { add.s32 %r3, %r1, 1; }")
    texts = [" ".join(t.split()) for _, t, _ in statements(text)]
    assert texts[0].endswith(".global .u32 t[2] = {1, 2}") and "st.global.v2.u32 [t], {%r1, %r2}" in texts
    assert "add.s32 %r3, %r1, 1" in texts


def test_a_cuda_array_indexed_at_run_time_is_refused_at_its_source_line_and_a_counter_compiles():
    from ptxbench.tools.compile import compile_source

    counter = ('__device__ unsigned int counter;\n__device__ unsigned long long flags[2];\n'
               'extern "C" __global__ void k(float* out) {\n'
               '  if (threadIdx.x == 0) { atomicAdd(&counter, 1u); atomicOr(&flags[1], 1ull); }\n}\n')
    assert compile_source(counter, "cuda", use_cache=False).status == "ok"
    indexed = ('__device__ float buf[1024];\nextern "C" __global__ void k(float* out, int n) {\n'
               '  int i = threadIdx.x;\n  buf[i] = i;\n  out[i] = buf[(i + 1) % 1024];\n}\n')
    r = compile_source(indexed, "cuda", use_cache=False)
    assert r.status == "error" and [e.line for e in r.errors] == [4], [(e.line, e.message) for e in r.errors]
    assert "module variable buf" in r.errors[0].message and "scratch buffer" in r.errors[0].message
    # read at a run-time index only: a lookup table, as nvcc's own for double sin
    table = ('__device__ float lut[64] = {1.f, 2.f};\nextern "C" __global__ void k(float* out) {\n'
             '  out[threadIdx.x] = lut[threadIdx.x % 64] + (float)sin((double)out[threadIdx.x]);\n}\n')
    assert compile_source(table, "cuda", use_cache=False).status == "ok"


def test_hostile_text_gets_issues_never_an_exception():
    """Model text is hostile: 2,000 mutations of a module with every construct the check reads (declarations with
    initialisers, vector operands, labels, .loc lines, octal and hexadecimal offsets) give a list, whatever they make."""
    base = ptx(FLAGS + "\n" + TABLE + "\n.global .u32 t[2] = {1, 02};",
               "$L__BB0_1:\n\t.loc 1 2 3\n    mov.u64 %rd1, flags;\n    add.s64 %rd2, %rd1, 010;\n"
               "    atom.global.or.b64 %rd3, [%rd2], 1;\n    st.global.v2.u32 [flags+0x8], {%r1, %r2};\n"
               "    mov.u64 %rd4, tab;\n    ld.const.u32 %r3, [%rd4+4];\n    @%p1 bra $L__BB0_1;")
    alphabet = "{}[];,=+-.%$:0123456789x \n" + "flagstab"
    for text in mutations(base, alphabet, 2000, seed=7):
        issues = module_data_reach(text, "ptx")
        assert isinstance(issues, list) and all(i.message for i in issues)


def test_a_variable_the_cubin_holds_and_the_check_did_not_read_is_refused():
    """The cubin's data symbols are the ground truth: a declaration spelt in a way ptxas takes and the parser does not
    read would leave its writes unchecked. A `.global` declared inside a function is `$__name__N` in the cubin."""
    from ptxbench.tools.module_data import unread_variables

    text = ptx(FLAGS, "    .global .align 4 .u32 inner;\n    st.global.u32 [inner], %r1;")
    assert unread_variables(text, ["flags", "$__inner__7"]) == []
    (issue,) = unread_variables(text, ["flags", "$__inner__7", "ghost"])
    assert issue.message.startswith("module variable ghost: the check of module data could not read its declaration")


def test_a_function_scope_global_compiles_and_is_checked():
    from ptxbench.tools.compile import compile_source

    text = ptx(".visible.global .align 4 .u32 vis;",
               "    .global .align 4 .u32 inner;\n    ld.global.u32 %r1, [inner];\n    st.global.u32 [vis], %r1;")
    assert compile_source(text, "ptx", use_cache=False).status == "ok"
    bad = text.replace("st.global.u32 [vis], %r1;", "st.global.u32 [inner+4], %r1;")
    r = compile_source(bad, "ptx", use_cache=False)
    assert r.status == "error" and "reaches bytes 4..7 of module variable inner" in r.errors[0].message, r.errors
