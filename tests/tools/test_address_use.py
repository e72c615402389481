"""tools/address_use.py: an address the checks of module data and of parameters follow is used only as an address.
Its bits tested under a guard, or looked up in a table, came back as a number the flow no longer followed, and a
write through it reached the driver's pool past module data unchecked (tests/data/cheats/attacks/*laundered*).
Also a register named without `%` (module_data._Unprefixed), which the checks once did not read as one. Pure text."""
from __future__ import annotations

import pytest

from ptxbench.tools.module_data import ModuleData, module_data_reach
from ptxbench.tools.param_reach import param_writes

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"
FLAGS = ".global .align 8 .b8 flags[16];"
PARAMS = ".param .u64 out, .param .align 64 .b8 tm[128]"


def ptx(body: str, decls: str = FLAGS, regs: str = "") -> str:
    return (f"{HEAD}{decls}\n.visible .entry k({PARAMS})\n{{\n    .reg .pred %p<4>;\n    .reg .b64 %rd<16>;\n"
            f"    .reg .b32 %r<16>;\n    .reg .f64 %fd<4>;\n{regs}{body}\n    ret;\n}}\n")


def module_issues(body: str) -> list[str]:
    return [i.message for i in module_data_reach(ptx(body), "ptx")]


def param_issues(body: str) -> list[str]:
    return [i.message for i in param_writes(ModuleData(ptx(body)), "ptx")]


GLOBAL = "    mov.u64 %rd1, flags;\n"
PARAM = "    mov.u64 %rd1, tm;\n    cvta.param.u64 %rd1, %rd1;\n"


@pytest.mark.parametrize("use", [
    "    mov.u64 %rd2, %rd1;\n    ld.global.u32 %r1, [%rd2];",
    "    add.s64 %rd2, %rd1, 8;\n    sub.u64 %rd3, %rd2, 4;\n    ld.global.u32 %r1, [%rd3];",
    # a table read at a run-time index: the address plus a number computed from data
    "    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd3, %rd1, %rd2;\n    ld.global.u32 %r2, [%rd3];",
    "    mad.wide.u32 %rd3, %r1, 4, %rd1;\n    ld.global.u32 %r2, [%rd3];",
    "    cvta.global.u64 %rd2, %rd1;\n    cvta.to.global.u64 %rd3, %rd2;\n    ld.u32 %r1, [%rd3+8];",
    # a null test (`use_bias ? g_bias : nullptr`, then `if (p)`) and an alignment test (`(uintptr_t)p & 15`)
    "    setp.ne.s64 %p1, %rd1, 0;\n    or.pred %p2, %p1, %p3;\n    and.b64 %rd2, %rd1, 15;\n    setp.eq.s64 %p3, %rd2, 0;",
    # nvcc's `cond ? &tmA : &tmB` (tests/data/profile/solutions/tma_decoy.cu)
    "    setp.ne.s32 %p1, %r1, 0;\n    selp.b64 %rd2, %rd1, %rd9, %p1;\n    ld.u32 %r2, [%rd2];",
])
def test_an_address_moved_offset_and_read_through_is_allowed(use):
    assert module_issues(GLOBAL + use) == []
    assert param_issues(PARAM + use) == []


# each a way to make a number of an address's bits (the flow follows data, not what a guard, a branch or a loaded
# value depends on): refused at the instruction that reads the bits
LAUNDERING = [
    # the bit-by-bit rebuild of tests/data/cheats/attacks/guarded_laundered_counter.ptx
    ("    mov.u64 %rd2, 0;\n    mov.u64 %rd3, 1;\nLOOP:\n    and.b64 %rd4, %rd1, %rd3;\n    setp.ne.u64 %p1, %rd4, 0;\n"
     "    @%p1 or.b64 %rd2, %rd2, %rd3;\n    shl.b64 %rd3, %rd3, 1;\n    setp.ne.u64 %p2, %rd3, 0;\n    @%p2 bra LOOP;\n"
     "    st.global.u32 [%rd2+65536], %r1;", "`and.b64`"),
    ("    setp.eq.u64 %p1, %rd1, %rd9;\n    @%p1 mov.u64 %rd2, 4096;", "`setp.eq.u64`"),
    # a byte of the address as a table's index (plain CUDA's `kIdent[(a >> 8 * j) & 0xff]`)
    ("    shr.u64 %rd2, %rd1, 8;\n    ld.global.u8 %r1, [%rd2];", "`shr.u64`"),
    ("    cvt.u32.u64 %r1, %rd1;", "`cvt.u32.u64`"),
    ("    mov.b64 {%r1, %r2}, %rd1;", "`mov.b64`"),
    ("    mul.lo.u64 %rd2, %rd1, 3;", "`mul.lo.u64`"),
    ("    mad.lo.u64 %rd2, %rd1, 2, %rd9;", "`mad.lo.u64`"),
    ("    add.cc.u64 %rd2, %rd1, 1;", "`add.cc.u64`"),
    ("    mov.b64 %fd1, %rd1;\n    add.f64 %fd2, %fd1, 0d4330000000000000;", "`add.f64`"),
    ("    isspacep.global %p1, %rd1;", "`isspacep.global`"),
    ("    setp.ne.s64 %p1, %rd1, 1;", "`setp.ne.s64`"),  # against any number but 0: a bit, then another
    ("    and.b64 %rd2, %rd1, 256;", "`and.b64`"),  # a bit above the 256-byte alignment
    ("    selp.b64 %rd2, 1, 0, %rd1;", "`selp.b64`"),  # not a predicate ptxas takes: the rule's reading, not ptxas's
]


@pytest.mark.parametrize("use, opcode", LAUNDERING)
def test_an_address_whose_bits_are_computed_on_is_refused(use, opcode):
    for issues, where in ((module_issues(GLOBAL + use), "module variable flags"),
                          (param_issues(PARAM + use), "a kernel parameter's")):
        # (a split writes no register the module-data check reads as its result: refused there as letting it out)
        assert any(m.startswith(opcode) and where in m and ("bits of an address" in m or "passes on" in m)
                   for m in issues), issues


def test_an_address_as_a_matrix_descriptor_is_refused():
    """A descriptor's bits choose the shared memory a product reads (start, strides): a table lookup by another name.
    Module data refused it before (a product writes no register the check reads as its result); parameters now too."""
    use = "    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%r1, %r2, %r3, %r4}, %rd1, %rd3, %p1, 1, 1, 0, 0;"
    assert any(m.startswith("`wgmma.mma_async") for m in module_issues(GLOBAL + use))
    assert any(m.startswith("`wgmma.mma_async") and "bits of an address" in m for m in param_issues(PARAM + use))


def test_a_symbol_compared_by_name_is_refused_and_a_register_reused_after_is_not():
    assert any("`setp.ne.u64` computes on the bits" in m for m in module_issues("    setp.ne.u64 %p1, flags, 1;"))
    # the flow's own reach: %rd1 holds the address only until it is defined again
    assert module_issues(GLOBAL + "    ld.global.u32 %r1, [%rd1];\n    mov.u64 %rd1, 7;\n    shl.b64 %rd2, %rd1, 3;") == []


def compiled_checks(text: str) -> list[str]:
    data = ModuleData(text)
    return [i.message for i in data.register_clashes("ptx") + data.reach("ptx") + param_writes(data, "ptx")]


@pytest.mark.parametrize("regs, line, said", [
    ("    .reg .b64 pa;\n", "    cvta.param.u64 pa, 0;\n    st.u32 [pa+65536], %r1;",
     "`st.u32` writes through `[%pa+65536]`, an address computed from a kernel parameter's"),
    ("", "    { .reg .u64 x<2>;\n    mov.u64 x1, flags;\n    add.s64 x0, x1, %rd9;\n    st.global.u32 [x0], %r1; }",
     "writes through `[%x0]`, an address computed from module variable flags"),
    ("    .reg .b64 state;\n", "    mov.u64 state, flags;\n    and.b64 %rd2, state, 4096;", "`and.b64` computes on"),
])
def test_a_register_named_without_percent_is_followed_like_any_other(regs, line, said):
    """PTX allows `.reg .b64 pa;` (CUTLASS's inline asm names its `state` so); the checks read it as `%pa`."""
    issues = compiled_checks(ptx(line, regs=regs))
    assert any(said in m for m in issues), issues


def test_a_register_named_like_a_symbol_is_refused():
    """A block's `.reg .b64 flags;` would turn every `flags` of the module into a register the checks follow as one."""
    text = ptx("    { .reg .b64 flags;\n    mov.u64 flags, 0; }\n    st.global.u32 [flags+65536], %r1;")
    issues = ModuleData(text).register_clashes("ptx")
    assert len(issues) == 1 and "register flags is declared without `%` and shares its name" in issues[0].message
    assert ".reg .b64 flags" in text.split("\n")[issues[0].line - 1]


def test_percent_less_registers_of_the_pack_and_nvcc_pass():
    """`.reg .pred p;` (the pack, ptxbench/mbarrier.cuh), `.reg .b64 st;` (mbarrier.cuh's arrive), nvcc's unused
    `.reg .b32 temp_param_reg;`: no address in them, nothing to refuse."""
    regs = "    .reg .pred p;\n    .reg .b64 st;\n    .reg .b32 temp_param_reg;\n"
    body = ("    setp.ne.b32 p, %r1, 0;\n    @p mov.u32 %r2, 1;\n    mbarrier.arrive.shared::cta.b64 st, [%r3];\n"
            + GLOBAL + "    ld.global.u32 %r4, [%rd1];")
    assert compiled_checks(ptx(body, regs=regs)) == []


def test_the_register_names_are_read_in_linear_time():
    import time

    regs = "".join(f"    .reg .b32 n{i};\n" for i in range(20_000)) + "    .reg .b32 q<4>;\n"
    body = "".join(f"    add.s32 n{i}, n{i}, {i};\n" for i in range(20_000))
    body += "    mov.u32 q3, 1;\n    mov.u32 %r1, q" + "0" * 200_000 + ";"  # a word of 200,000 digits
    started = time.perf_counter()
    data = ModuleData(ptx(body, regs=regs))
    assert data.register_clashes("ptx") == [] and data.instructions[0].operands.startswith("%n0, %n0")
    assert data.instructions[20_000].operands == "%q3, 1"
    assert time.perf_counter() - started < 5
