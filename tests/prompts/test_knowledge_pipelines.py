"""The knowledge pack's pipeline rules, each assembled as the pack spells it (issue 17, item 4).

- start parity: the two `try_wait.parity` lines assemble in a producer / consumer ring;
- register fences: the pack's `asm volatile("" : "+f"(acc[i]) ...)` idiom after its wait line compiles
  around a wgmma;
- named-barrier ping-pong: the ```ptx block assembles with immediate ids (3 barriers), an id in a
  register makes ptxas reserve all 16 (and the feedback says so), and the schedule, played out, alternates
  the two consumers without a hang and leaves no arrival unmatched;
- the [B*H*S, D] view: the ```toml map resolves for every attention workload (GQA K / V included), the
  pack's row formula is the flat row of a contiguous [B, H, S, D] tensor, and its `tma_load_2d` line compiles;
- wgmma serialisation: a wgmma into part of a live accumulator (C7511) and one a branch may skip while another is in
  flight (C7515), each on a small kernel, and the fixes the pack names (an array of its own, a branch between steps)
  without the warning.
"""
from __future__ import annotations

import re

import pytest

from ptxbench import prompts
from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import list_workloads

PACK = prompts.load("knowledge_sm90a")
INCLUDES = '#include <cuda.h>\n#include <cuda_bf16.h>\n#include "ptxbench/mbarrier.cuh"\n' \
           '#include "ptxbench/tma.cuh"\n#include "ptxbench/wgmma.cuh"\nusing namespace ptxbench;\n'
PTX_HEAD = [".version 8.0", ".target sm_90a", ".address_size 64"]


def _ok(result):
    assert result.status == "ok", "\n".join(str(e.message) for e in result.errors) or result.log
    return result


def _block(lang: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", PACK, re.S)
    assert len(blocks) == 1, f"the knowledge pack has one ```{lang} block"
    return blocks[0]


def _code_span(pattern: str) -> str:
    prose = re.sub(r"```.*?```", "", PACK, flags=re.S)  # spans of the text, not of the fenced blocks
    spans = [s for s in re.findall(r"`([^`]+)`", prose) if re.search(pattern, s)]
    assert spans, pattern
    return spans[0]


# ---- start parity ------------------------------------------------------------------------------

def test_start_parity_lines_assemble_in_a_ring():
    full_wait = _code_span(r"try_wait\.parity.*\[full\], 0;")
    empty_wait = _code_span(r"try_wait\.parity.*\[empty\], 1;")
    # the producer's first wait uses parity 1 (returns at once), the consumer's parity 0 (waits for the load)
    ptx = "\n".join(PTX_HEAD + [
        ".visible .entry ring(.param .u64 out)", ".reqntid 64, 1, 1", "{",
        "  .reg .pred p, q;", "  .reg .b32 %r<4>;", "  .reg .b64 %rd<3>;",
        "  .shared .align 8 .b64 full;", "  .shared .align 8 .b64 empty;",
        "  mov.u32 %r1, %tid.x;", "  setp.ne.u32 q, %r1, 0;", "  @q bra INIT_DONE;",
        "  mbarrier.init.shared::cta.b64 [full], 1;", "  mbarrier.init.shared::cta.b64 [empty], 1;",
        "INIT_DONE:", "  bar.sync 0;", "  setp.ge.u32 q, %r1, 32;", "  @q bra CONSUMER;",
        "PRODUCER_WAIT:", "  " + empty_wait, "  @!p bra PRODUCER_WAIT;",
        "  mbarrier.arrive.shared::cta.b64 %rd1, [full];", "  bra.uni DONE;",
        "CONSUMER:", "CONSUMER_WAIT:", "  " + full_wait, "  @!p bra CONSUMER_WAIT;",
        "  mbarrier.arrive.shared::cta.b64 %rd1, [empty];",
        "DONE:", "  ret;", "}", ""])
    _ok(compile_source(ptx, "ptx", "sm_90a"))


# ---- register fences around wgmma waits -------------------------------------------------------

def test_register_fence_idiom_compiles_after_the_wait_line():
    fence = _code_span(r'asm volatile\(""\s*:\s*"\+f"\(acc\[i\]\)')
    wait = _code_span(r'asm volatile\("wgmma\.wait_group\.sync\.aligned 0;"')
    source = INCLUDES + (
        'extern "C" __global__ void __launch_bounds__(128, 1) fenced(float* out) {\n'
        '  constexpr int N = 64;\n'
        '  __shared__ __align__(1024) uint8_t tile[2 * 64 * 128];\n'
        '  float acc[N / 2];\n'
        '  const uint64_t da = make_desc_sw128(tile), db = make_desc_sw128(tile + 64 * 128);\n'
        '  wgmma_fence();\n'
        '  wgmma_m64k16_bf16<N>(acc, da, db, 0);\n'
        '  wgmma_commit();\n'
        f'  {wait}\n'
        f'  {fence}\n'
        '  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = acc[i];\n'
        '}\n')
    r = _ok(compile_source(source, "cuda", "sm_90a"))
    assert r.kernels["fenced"].sass_opcodes.get("HGMMA") == 1
    # it is the idiom the header ships as wgmma_fence_regs
    header = (prompts.HERE / "include" / "ptxbench" / "wgmma.cuh").read_text()
    assert 'asm volatile("" : "+f"(d[i]) :: "memory");' in header


# ---- named-barrier ping-pong -------------------------------------------------------------------

def _ping_pong_parts() -> tuple[list[str], list[str], list[str]]:
    """(consumer 0's loop body, consumer 1's prologue, consumer 1's loop body): the block's instructions."""
    lines = _block("ptx").splitlines()
    split = next(i for i, ln in enumerate(lines) if ln.startswith("// consumer 1"))
    loop = next(i for i, ln in enumerate(lines) if i > split and "every iteration" in ln)

    def code(part):
        return [ln.split("//")[0].strip() for ln in part if ln.split("//")[0].strip()]

    return code(lines[:split]), code(lines[split:loop]), code(lines[loop:])


def _ping_pong_ptx(c0: list[str], pro1: list[str], c1: list[str], iters: int = 4) -> str:
    # consumer 1 skips its last arrival (the pack's comment): its final iteration is its body without it
    c1_last = c1[:-1] if c1[-1].startswith("bar.arrive") else c1
    body = [".visible .entry ping_pong(.param .u32 n)", ".reqntid 384, 1, 1", "{",
            "  .reg .pred p;", "  .reg .b32 %r<8>;",
            "  mov.u32 %r1, %tid.x;", "  shr.u32 %r2, %r1, 7;",  # warpgroup
            "  ld.param.u32 %r3, [n];", "  mov.u32 %r4, 0;",
            "  setp.eq.u32 p, %r2, 1;", "  @p bra C0;", "  setp.eq.u32 p, %r2, 2;", "  @p bra C1;", "  bra.uni DONE;",
            "C0:", *["  " + x for x in c0], "  add.u32 %r4, %r4, 1;", "  setp.lt.u32 p, %r4, %r3;", "  @p bra C0;",
            "  bra.uni DONE;",
            "C1:", *["  " + x for x in pro1], "  sub.u32 %r3, %r3, 1;",
            "C1_LOOP:", "  setp.ge.u32 p, %r4, %r3;", "  @p bra C1_LAST;",
            *["  " + x for x in c1], "  add.u32 %r4, %r4, 1;", "  bra.uni C1_LOOP;",
            "C1_LAST:", *["  " + x for x in c1_last],
            "DONE:", "  ret;", "}", ""]
    return "\n".join(PTX_HEAD + body)


def test_ping_pong_block_assembles_with_immediate_ids():
    c0, pro1, c1 = _ping_pong_parts()
    assert c0 == ["bar.sync 1, 256;", "bar.arrive 2, 256;"] and pro1 == ["bar.arrive 1, 256;"]
    assert c1 == ["bar.sync 2, 256;", "bar.arrive 1, 256;"]
    r = _ok(compile_source(_ping_pong_ptx(c0, pro1, c1), "ptx", "sm_90a"))
    assert r.kernels["ping_pong"].barriers == 3  # ids 0..2: only what is named
    # the same schedule with consumer 0's id in a register: ptxas reserves every barrier (the pack's claim)
    reg = [x.replace("bar.sync 1,", "bar.sync %r5,") for x in c0]
    ptx = _ping_pong_ptx(reg, pro1, c1).replace("  mov.u32 %r4, 0;", "  mov.u32 %r4, 0;\n  add.u32 %r5, %r2, 0;")
    r = _ok(compile_source(ptx, "ptx", "sm_90a"))
    assert r.kernels["ping_pong"].barriers == 16


def test_the_feedback_shows_reserved_barriers():
    from ptxbench.agent.loop.feedback import BARRIERS_NOTE, render_eval
    from ptxbench.tools.results import CompileResult, EvalResult, KernelResources

    def text(barriers):
        comp = CompileResult(status="ok", arch="sm_90a", kernels={"k": KernelResources(name="k", barriers=barriers)})
        return render_eval(EvalResult(workload="w", status="COMPILED", compile=comp), 1, no_gpu=True)

    assert "1 named barrier reserved" in text(1) and "3 named barriers reserved" in text(3)
    assert BARRIERS_NOTE not in text(3) and "16 named barriers" in text(16) and BARRIERS_NOTE in " ".join(text(16).split())


def _play(c0: list[str], pro1: list[str], c1: list[str], iters: int) -> list[int]:
    """Run the schedule on a model of named barriers (whole warpgroups of 128 threads): the order in which the
    consumers pass their turn barrier. Fails on a hang or an arrival left unmatched at the end."""
    progs = {0: [x for _ in range(iters) for x in c0],
             1: pro1 + [x for i in range(iters) for x in (c1 if i < iters - 1 else c1[:-1])]}
    pc, waiting, count, turns = {0: 0, 1: 0}, {0: None, 1: None}, {}, []
    op = re.compile(r"bar\.(sync|arrive) (\d+), (\d+);")
    while any(pc[c] < len(progs[c]) or waiting[c] is not None for c in progs):
        moved = False
        for c in progs:
            if waiting[c] is not None or pc[c] >= len(progs[c]):
                continue
            kind, bid, n = op.fullmatch(progs[c][pc[c]]).groups()
            pc[c] += 1
            moved = True
            count[(int(bid), int(n))] = count.get((int(bid), int(n)), 0) + 128
            if kind == "sync":
                waiting[c] = (int(bid), int(n))
            for key, arrived in list(count.items()):
                if arrived >= key[1]:  # the barrier completes: its waiters go on
                    assert arrived == key[1], f"barrier {key} over-subscribed"
                    count[key] = 0
                    for w in progs:
                        if waiting[w] == key:
                            waiting[w] = None
                            turns.append(w)
        assert moved, f"the ping-pong hangs: waiting {waiting}, arrivals {count}"
    assert not any(count.values()), f"arrivals left unmatched at the end: {count}"
    return turns


def test_ping_pong_schedule_alternates_and_balances():
    c0, pro1, c1 = _ping_pong_parts()
    assert _play(c0, pro1, c1, 5) == [0, 1] * 5
    # a count mismatch (256 on one side, 384 on the other) hangs: the model catches it
    with pytest.raises(AssertionError, match="hangs|over-subscribed|unmatched"):
        _play([x.replace("2, 256", "2, 384") for x in c0], pro1, c1, 3)


# ---- the [B*H*S, D] view of attention tensors --------------------------------------------------

def _attention_plan(workload) -> str:
    q_map = _block("toml")
    kv = "HKV" if "HKV" in workload.symbols else "H"
    maps = [q_map] + [q_map.replace("Q_map", f"{t}_map").replace('"Q"', f'"{t}"')
                      .replace('"B * H * S"', f'"B * {kv} * S"') for t in ("K", "V")]
    return ('/* ptxbench\nlanguage = "cuda"\n[[launch]]\nkernel = "k"\ngrid = [1, 1, 1]\nblock = [128, 1, 1]\n'
            'args = ["tmap:Q_map", "tmap:K_map", "tmap:V_map"]\n' + "\n".join(maps) + "*/\n"
            '#include <cuda.h>\nextern "C" __global__ void k(const __grid_constant__ CUtensorMap a, '
            "const __grid_constant__ CUtensorMap b, const __grid_constant__ CUtensorMap c) {}\n")


def test_bhsd_view_resolves_for_every_attention_workload():
    seen = 0
    for wl in list_workloads():
        if wl.op != "mha_fwd":
            continue
        sol = parse_solution(_attention_plan(wl), wl, "sm_90a")
        assert isinstance(sol, Solution), (wl.id, sol)
        sy = {k: int(v) for k, v in wl.symbols.items() if k != "scale"}
        tmaps = {t.tensor: t for t in resolve_plan(sol.plan, wl, 132).tmaps}
        assert tmaps["Q"].dims == [sy["D"], sy["B"] * sy["H"] * sy["S"]], wl.id
        assert tmaps["K"].dims == [sy["D"], sy["B"] * sy.get("HKV", sy["H"]) * sy["S"]], wl.id
        seen += 1
    assert seen >= 4


def test_bhsd_row_formula_is_the_flat_row_and_the_load_line_compiles():
    import torch

    B, H, S, D = 2, 3, 5, 4
    q = torch.arange(B * H * S * D).reshape(B, H, S, D)
    rows = q.reshape(B * H * S, D)
    assert all(torch.equal(rows[(b * H + h) * S + s], q[b, h, s]) for b in range(B) for h in range(H) for s in range(S))
    line = _code_span(r"tma_load_2d\(sQ")
    source = INCLUDES + (
        'extern "C" __global__ void __launch_bounds__(128, 1) load_q(const __grid_constant__ CUtensorMap tmQ, '
        "int H, int S, float* out) {\n"
        "  extern __shared__ __align__(1024) uint8_t sQ[];\n"
        "  __shared__ uint64_t full;\n"
        "  const int b = blockIdx.z, h = blockIdx.y, s0 = blockIdx.x * 128;\n"
        "  if (threadIdx.x == 0) { mbar_init(&full, 1); mbar_fence_init(); }\n"
        "  __syncthreads();\n"
        "  if (threadIdx.x == 0) {\n"
        "    mbar_arrive_expect_tx(&full, 2 * 16384);\n"
        f"    for (int c = 0; c < 2; ++c) {line}\n"
        "  }\n"
        "  mbar_wait(&full, 0);\n"
        "  out[threadIdx.x] = static_cast<float>(sQ[threadIdx.x]);\n"
        "}\n")
    r = _ok(compile_source(source, "cuda", "sm_90a"))
    assert r.kernels["load_q"].sass_opcodes.get("UTMALDG", 0) >= 1


def test_task_statements_give_the_exact_scale_and_the_lse_base():
    """The pack leans on the task text for these: every attention task states them (tests/workloads checks the
    reference agrees)."""
    for wl in list_workloads():
        if wl.op in ("mha_fwd", "mha_bwd"):
            d = int(wl.symbols["D"])
            assert f"scale = 1/sqrt(D) = 1/sqrt({d}) exactly" in wl.doc and "natural log (base e" in wl.doc, wl.id


# The pack's three ways to make ptxas serialise wgmma, each shown on a small kernel with its fix beside it.
_SERIAL_KERNEL = INCLUDES + """extern "C" __global__ void __launch_bounds__(128) k(float* out, int n) {
  extern __shared__ __align__(1024) uint8_t smem[];
  float x[64], y[64];
  const uint64_t da = make_desc_sw128(smem), db = make_desc_sw128(smem + 8192);
#pragma unroll
  for (int i = 0; i < 64; ++i) y[i] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_m64k16_bf16<128>(x, da + 2 * kk, db + 2 * kk, kk != 0);
  wgmma_commit();
BODY
#pragma unroll
  for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = x[i] + y[i];
}
"""
_HALF_INTO_PART = """  wgmma_wait<0>();
  wgmma_fence_regs(x);
  for (int it = 0; it < n; ++it) {  // m64n64 into the first 32 registers of x
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k16_bf16<64>(*reinterpret_cast<float(*)[32]>(&x[0]), da, db, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(x);
  }"""
_HALF_OWN_ARRAY = """  wgmma_wait<0>();
  wgmma_fence_regs(x);
  for (int it = 0; it < n; ++it) {  // the fix: an accumulator of its own (scale-d 0 first), copied after the wait
    float h[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k16_bf16<64>(h, da, db, kk != 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(h);
#pragma unroll
    for (int i = 0; i < 32; ++i) x[i] = h[i];
  }"""
_SKIPPED_IN_FLIGHT = """  if (n) {  // skipped by a branch while x's product is in flight
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k16_bf16<128>(y, da + 2 * kk, db + 2 * kk, 1);
    wgmma_commit();
  }
  wgmma_wait<0>();
  wgmma_fence_regs(x);
  wgmma_fence_regs(y);"""
_BRANCH_BETWEEN_STEPS = """  wgmma_wait<0>();  // the fix: the first step complete before the branch
  wgmma_fence_regs(x);
  if (n) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k16_bf16<128>(y, da + 2 * kk, db + 2 * kk, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(y);
  }"""


@pytest.mark.parametrize("body,code", [(_HALF_INTO_PART, "C7511"), (_HALF_OWN_ARRAY, None),
                                       (_SKIPPED_IN_FLIGHT, "C7515"), (_BRANCH_BETWEEN_STEPS, None)])
def test_the_packs_wgmma_serialisation_cases_and_their_fixes(body, code):
    assert "(C7511: give it its own array)" in PACK and "(C7515 / C7512: branch between whole steps)" in PACK
    r = _ok(compile_source(_SERIAL_KERNEL.replace("BODY", body), "cuda", "sm_90a"))
    serialised = [w.message for w in r.warnings if "serialized" in w.message]
    if code is None:
        assert not serialised, serialised
    else:
        assert serialised and code in serialised[0], [w.message for w in r.warnings]


def test_wgmma_n_rule_is_what_ptxas_accepts():
    """The pack said N is a multiple of 8 "(16 for these shapes)": ptxas assembles every multiple of 8 for
    bf16 (wgmma.cuh itself defines N = 56), so a model held to 16 lost tile shapes such as n24 or n40."""
    assert "N is a multiple of 8 up to 256" in PACK and "16 for these shapes" not in PACK
    regs = lambda n: "{" + ", ".join(f"%f{i}" for i in range(n // 2)) + "}"  # noqa: E731
    body = [f"  wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {regs(n)}, %rd1, %rd2, p, 1, 1, 0, 0;"
            for n in (8, 24, 40, 56)]
    ptx = "\n".join(PTX_HEAD + [".visible .entry k()", "{", "  .reg .pred p;", "  .reg .f32 %f<32>;",
                                 "  .reg .b64 %rd<3>;", "  mov.u64 %rd1, 0;", "  mov.u64 %rd2, 0;",
                                 "  setp.ne.b64 p, %rd1, 0;", "  wgmma.fence.sync.aligned;", *body,
                                 "  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 0;",
                                 "  ret;", "}", ""])
    _ok(compile_source(ptx, "ptx", "sm_90a"))
