"""tools/param_reach.py: a kernel's parameters are only read. `cvta.param` makes a generic address of a parameter, or
of any number (`cvta.param.u64 %rd, 0` assembles), and past the parameters lies the driver's memory; every address
computed from one is followed, across calls, and a write through it, a store of it or a return of it is refused.
The TMA kernels' reads (tensor maps in either copy direction, prefetches) compile, the repository's PTX with them (its
CUDA solutions go through the same compile in tests/workloads). Pure text checks, and two CUDA sources compiled."""
from __future__ import annotations

import pytest

from ptxbench.tools.module_data import ModuleData
from ptxbench.tools.param_reach import param_writes
from text_mutations import mutations

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"
PARAMS = ".param .u64 out, .param .align 64 .b8 tm[128]"


def ptx(body: str, funcs: str = "") -> str:
    return (f"{HEAD}{funcs}\n.visible .entry k({PARAMS})\n{{\n    .reg .pred %p<4>;\n    .reg .b64 %rd<16>;\n"
            f"    .reg .b32 %r<16>;\n{body}\n    ret;\n}}\n")


def issues(text: str) -> list[str]:
    return [i.message for i in param_writes(ModuleData(text), "ptx")]


TMAP = "    mov.u64 %rd1, tm;\n    cvta.param.u64 %rd2, %rd1;\n"

# a callee that reads a tensor map it is handed, and one that writes through it
READER = (".func use(.param .b64 use_param_0)\n{\n    .reg .b64 %rd<4>;\n    ld.param.u64 %rd1, [use_param_0];\n"
          "    prefetch.tensormap [%rd1];\n    ret;\n}\n")
WRITER = (".func use(.param .b64 use_param_0)\n{\n    .reg .b64 %rd<4>;\n    .reg .b32 %r<2>;\n"
          "    ld.param.u64 %rd1, [use_param_0];\n    add.s64 %rd2, %rd1, 65536;\n    st.u32 [%rd2], %r1;\n    ret;\n}\n")
GIVER = (".func (.param .b64 give_retval0) give(.param .b64 give_param_0)\n{\n    .reg .b64 %rd<4>;\n"
         "    ld.param.u64 %rd1, [give_param_0];\n    st.param.b64 [give_retval0], %rd1;\n    ret;\n}\n")
CALL = ("    {\n    .param .b64 param0;\n    st.param.b64 [param0+0], %rd2;\n    call.uni\n    use,\n    (\n    param0\n"
        "    );\n    }\n")


@pytest.mark.parametrize("body, funcs", [
    # the TMA kernels: a tensor map read in both copy directions, prefetched, fenced
    (TMAP + "    prefetch.tensormap [%rd2];\n    fence.proxy.tensormap::generic.acquire.gpu [%rd2], 128;\n"
     "    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2, {%r2, %r3}], [%r4];\n"
     "    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd2, {%r2, %r3}], [%r1];\n"
     "    cp.async.bulk.prefetch.tensor.2d.L2.global [%rd2, {%r2, %r3}];", ""),
    # a parameter's bytes read through its address, and the pointer a parameter holds written through
    (TMAP + "    ld.u32 %r1, [%rd2+8];\n    ld.param.u64 %rd3, [out];\n    cvta.to.global.u64 %rd4, %rd3;\n"
     "    st.global.u32 [%rd4], %r1;", ""),
    # a tensor map handed to a function that only reads it (nvcc's attention forward does so)
    (TMAP + CALL, READER),
    # the pack's `mov.u64 %rd1, tmA; cvta.param.u64 %rd1, %rd1;`, then %rd1 reused for the output pointer
    ("    mov.u64 %rd1, tm;\n    cvta.param.u64 %rd1, %rd1;\n    prefetch.tensormap [%rd1];\n"
     "    ld.param.u64 %rd1, [out];\n    cvta.to.global.u64 %rd1, %rd1;\n    st.global.u32 [%rd1], %r1;", ""),
    # a matrix product's descriptor in a register that held the address before: defined again, it holds none of it
    (TMAP + "    mov.u64 %rd2, 0;\n"
     "    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%r1, %r2, %r3, %r4}, %rd2, %rd3, %p1, 1, 1, 0, 0;"
     "\n    ld.param.u64 %rd4, [out];\n    st.global.v4.u32 [%rd4], {%r1, %r2, %r3, %r4};", ""),
])
def test_what_the_tma_kernels_do_with_their_parameters_is_allowed(body, funcs):
    assert issues(ptx(body, funcs)) == []


@pytest.mark.parametrize("body, funcs, said", [
    (TMAP + "    st.u32 [%rd2+65536], %r1;", "", "writes through `[%rd2+65536]`"),
    # a parameter-space store through a register (ptxas 13 crashes on it: the check says what it is first)
    ("    mov.u64 %rd1, tm;\n    st.param.u32 [%rd1+65536], %r1;", "", "writes through `[%rd1+65536]`"),
    # any number made a parameter-space address: the cheat needs no parameter at all
    ("    mov.u64 %rd1, 0;\n    cvta.param.u64 %rd2, %rd1;\n    st.u32 [%rd2], %r1;", "", "writes through"),
    ("    cvta.to.param.u64 %rd2, %rd5;\n    atom.add.u32 %r2, [%rd2], 1;", "", "writes through"),
    # arithmetic on the address, a copy into it, a tensor-map rewrite of it
    (TMAP + "    mul.wide.u32 %rd3, %r1, 4;\n    add.s64 %rd4, %rd2, %rd3;\n    st.u32 [%rd4], %r1;", "", "writes"),
    (TMAP + "    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 128;", "", "writes through"),
    (TMAP + "    tensormap.replace.tile.global_address.global.b1024.b64 [%rd2], %rd5;", "", "writes through"),
    # the address kept where another address could be read back from, returned, passed through a pointer
    (TMAP + "    st.shared.u64 [%r1], %rd2;", "", "stores an address"),
    (TMAP + "    {\n    .param .b64 param0;\n    .param .b64 retval0;\n    st.param.b64 [param0+0], %rd2;\n"
     "    call.uni (retval0), give, (param0);\n    ld.param.b64 %rd3, [retval0];\n    }", GIVER, "returns an address"),
    (TMAP + "    {\n    .param .b64 param0;\n    st.param.b64 [param0+0], %rd2;\n    call.uni %rd9, (param0), proto;\n"
     "    }", "", "cannot follow"),
    # handed to a function that writes through it
    (TMAP + CALL, WRITER, "writes through `[%rd2]`"),
    # along the flow: a loop's second pass, a guarded redefinition that may not run, a join after a branch
    ("    ld.param.u64 %rd1, [out];\nLOOP:\n    st.u32 [%rd1], %r1;\n    mov.u64 %rd3, tm;\n"
     "    cvta.param.u64 %rd1, %rd3;\n    @%p1 bra LOOP;", "", "writes through `[%rd1]`"),
    (TMAP + "    @%p1 ld.param.u64 %rd2, [out];\n    st.u32 [%rd2], %r1;", "", "writes through `[%rd2]`"),
    ("    ld.param.u64 %rd2, [out];\n    @%p1 bra SKIP;\n    mov.u64 %rd1, tm;\n    cvta.param.u64 %rd2, %rd1;\n"
     "SKIP:\n    st.u32 [%rd2], %r1;", "", "writes through `[%rd2]`"),
    # through a jump table: every label of the function may follow
    ("    ld.param.u64 %rd2, [out];\n    brx.idx %r1, TABLE;\nA:\n    st.u32 [%rd2], %r1;\n    ret;\nB:\n"
     "    mov.u64 %rd1, tm;\n    cvta.param.u64 %rd2, %rd1;\n    bra.uni A;", "", "writes through `[%rd2]`"),
    # the address split into halves and joined again
    (TMAP + "    mov.b64 {%r1, %r2}, %rd2;\n    mov.b64 %rd5, {%r1, %r2};\n    st.u32 [%rd5+64], %r3;", "",
     "writes through `[%rd5+64]`"),
    # carried by a matrix product's accumulators (a product with a zero matrix keeps them)
    (TMAP + "    mov.b64 {%r1, %r2}, %rd2;\n"
     "    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%r1, %r2, %r3, %r4}, %rd6, %rd7, %p1, 1, 1, 0, 0;\n"
     "    mov.b64 %rd5, {%r1, %r2};\n    st.u32 [%rd5], %r3;", "", "writes through `[%rd5]`"),
])
def test_every_write_an_address_of_a_parameter_reaches_is_refused(body, funcs, said):
    found = issues(ptx(body, funcs))
    assert any(said in m for m in found), found


def test_the_refusal_is_at_the_line_and_counts_the_others():
    text = ptx(TMAP + "    st.u32 [%rd2+64], %r1;\n    st.u32 [%rd2+128], %r1;")
    found = param_writes(ModuleData(text), "ptx")
    assert len(found) == 1 and found[0].line == text.splitlines().index("    st.u32 [%rd2+64], %r1;") + 1
    assert "(and 1 more place)" in found[0].message


def test_no_ptx_file_of_the_repository_is_refused():
    from pathlib import Path

    from ptxbench.tools.sass import strip_ptx_comments

    root = Path(__file__).resolve().parents[2]
    files = [p for p in root.rglob("*.ptx") if not {".git", "runs"} & set(p.parts)]
    assert len(files) >= 20
    refused = {p.name: issues(strip_ptx_comments(p.read_text())) for p in files}
    assert not {n: m for n, m in refused.items() if m}


def test_a_module_that_takes_no_parameter_address_costs_one_scan():
    assert issues(ptx("    ld.param.u64 %rd3, [out];\n    st.global.u32 [%rd3], %r1;")) == []


def test_cuda_a_grid_constant_tensor_map_compiles_and_a_write_past_a_parameter_does_not():
    from ptxbench.tools.compile import compile_source

    honest = ('#include <cuda.h>\nextern "C" __global__ void k(const __grid_constant__ CUtensorMap tm, float* out) {\n'
              '  asm volatile("prefetch.tensormap [%0];" :: "l"(&tm) : "memory");\n  out[threadIdx.x] = 1.f;\n}\n')
    assert compile_source(honest, "cuda", use_cache=False).status == "ok"
    stash = ('extern "C" __global__ void k(const __grid_constant__ int4 p, float* out) {\n'
             '  unsigned* past = (unsigned*)((const char*)&p + 65536);\n'
             '  past[threadIdx.x] = 7;\n  out[threadIdx.x] = past[threadIdx.x + 1];\n}\n')
    r = compile_source(stash, "cuda", use_cache=False)
    # the write (line 3), and the read past it at line 4, a word of the parameter bank let out to `out`
    assert r.status == "error" and sorted({e.line for e in r.errors}) == [3, 4], [(e.line, e.message) for e in r.errors]
    assert "writes through" in r.errors[0].message and all("kernel parameter" in e.message for e in r.errors)


def test_hostile_text_gets_issues_never_an_exception():
    base = ptx(TMAP + CALL + "    st.u32 [%rd2+010], %r1;\n    cvta.to.param.u64 %rd3, %rd2;", WRITER + GIVER)
    alphabet = "{}[]();,=+-.%$:0123456789x \n" + "paramcvtusegive"
    for text in mutations(base, alphabet, 1500, seed=11):
        found = issues(text)
        assert isinstance(found, list) and all(found)


@pytest.mark.parametrize("passes", [64, 4])
def test_a_flow_that_does_not_settle_in_its_passes_is_read_as_a_whole(monkeypatch, passes):
    """Each pass round the loop carries the address one register further back; with too few passes to settle the
    check takes every register to hold what any definition gave it, and still refuses."""
    from ptxbench.tools import ptx_flow

    monkeypatch.setattr(ptx_flow, "MAX_PASSES", passes)
    chain = "".join(f"    mov.u64 %rd{k}, %rd{k + 1};\n" for k in range(1, 12))
    body = f"TOP:\n    st.u32 [%rd1], %r1;\n{chain}    cvta.param.u64 %rd12, %rd0;\n    @%p1 bra TOP;"
    found = issues(ptx(body).replace(".reg .b64 %rd<16>;", ".reg .b64 %rd<16>;\n    .reg .b64 %rd0;"))
    assert any("writes through `[%rd1]`" in m for m in found), found
