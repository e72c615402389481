"""Every PTX line of the knowledge pack is assembled by some test, as the pack spells it.

tests/prompts/test_knowledge_{core,epilogue,backward,measured}.py assemble the instruction spans of their sections;
the pipelines and named-barrier sections' spans, and the copies' `.L2::cache_hint` forms the epilogue section
describes in words, were assembled by none. Here:
- every section that spells an instruction is assembled by one of those modules or by this one (a new section with
  PTX lines and no test fails here);
- the pipelines section's scale-d predicate (`setp.ne.b32 p, %r, 0;` then `..., p, 1, 1, 0, 0;`) in a CUDA asm
  statement as the section says to write it, and the named-barrier section's `bar.sync` / `bar.arrive` lines;
- the TMA load, multicast load and store in their `.L2::cache_hint` form, `pol` last, with both policies the
  epilogue section names (evict_last for A, evict_first for B and C).
"""
from __future__ import annotations

import importlib
import re

from ptxbench.tools.compile import compile_source

from pack_sections import PACK, instructions, section

HEAD = [".version 8.0", ".target sm_90a", ".address_size 64"]
# section title -> the test module that assembles its instruction spans (its SECTIONS or SECTION)
ASSEMBLED_ELSEWHERE = {
    "TMA": "test_knowledge_core", "mbarrier": "test_knowledge_core", "wgmma (warpgroup MMA)": "test_knowledge_core",
    "wgmma for attention": "test_knowledge_core", "Register reallocation": "test_knowledge_core",
    "GEMM epilogue": "test_knowledge_epilogue", "Attention backward": "test_knowledge_backward",
    "Measured on the H200": "test_knowledge_measured"}
ASSEMBLED_HERE = ("Pipelines, clusters and multicast", "Named barriers")


def _titles() -> list[str]:
    return re.findall(r"^## (.+)$", PACK, re.M)


def test_every_section_that_spells_an_instruction_is_assembled_by_a_test():
    covered = list(ASSEMBLED_ELSEWHERE) + list(ASSEMBLED_HERE)
    for title in _titles():
        if not instructions(section(title)):
            continue
        owner = next((c for c in covered if title.startswith(c)), None)
        assert owner, f"section {title!r} spells PTX lines no test assembles"
        if owner in ASSEMBLED_ELSEWHERE:
            module = importlib.import_module(ASSEMBLED_ELSEWHERE[owner])
            sections = [section(t) for t in getattr(module, "SECTIONS", [])] + [getattr(module, "SECTION", "")]
            assert section(owner) in sections, (owner, module.__name__)


def test_no_prose_span_spells_an_instruction_with_operands_but_not_whole():
    """`wgmma.wait_group 1` (the attention overlap's line) read as an instruction and ptxas refuses it (".sync modifier
    required"): a span that gives operands is a line a model copies, so it is spelled whole and assembled with the rest;
    a bare opcode (`st.global`, `setmaxnreg.dec`) names one and is not."""
    prose = re.sub(r"```.*?```", "", PACK, flags=re.S)
    partial = [s for s in re.findall(r"`([^`]+)`", prose)
               if re.fullmatch(r"[a-z][a-z0-9_]*(?:\.[\w:]+)+ [^;]+", s)]
    assert not partial, partial
    r = compile_source("\n".join(HEAD + [".visible .entry k()", "{", "  wgmma.wait_group 1;", "  ret;", "}", ""]), "ptx",
                       "sm_90a")
    assert r.status != "ok" and ".sync modifier required" in " ".join(str(e.message) for e in r.errors)


def _ok(result):
    assert result.status == "ok", "\n".join(str(e.message) for e in result.errors) or result.log
    return result


# ---- the pipelines and named-barrier sections --------------------------------------------------------

# the sections' operand names bound to values of the right kinds
BINDINGS = [("id, count", "1, 256"), ("%r,", "%r1,")]


def _bind(line: str) -> str:
    for name, value in BINDINGS:
        line = line.replace(name, value)
    return line


def test_the_pipeline_and_named_barrier_lines_assemble():
    lines = [x for title in ASSEMBLED_HERE for x in instructions(section(title))]
    opcodes = sorted({x.split()[0] for x in lines})
    assert opcodes == ["bar.arrive", "bar.sync", "setp.ne.b32"], opcodes
    entries = []
    for i, line in enumerate(lines):
        entries += [f".visible .entry k{i}(.param .u64 out)", ".reqntid 384, 1, 1", "{", "  .reg .pred p;",
                    "  .reg .b32 %r<4>;", "  .reg .b64 %rd<2>;", "  ld.param.u64 %rd1, [out];",
                    "  cvta.to.global.u64 %rd1, %rd1;", "  mov.u32 %r2, %tid.x;", "  shr.u32 %r1, %r2, 7;",
                    "  add.u32 %r1, %r1, 1;", f"  {_bind(line)}", "  selp.u32 %r3, 1, 0, p;",
                    "  st.global.u32 [%rd1], %r3;", "  ret;", "}"]
    r = _ok(compile_source("\n".join(HEAD + entries + [""]), "ptx", "sm_90a"))
    for i, line in enumerate(lines):
        if line.startswith("bar."):
            assert r.kernels[f"k{i}"].sass_opcodes.get("BAR", 0) >= 1, (line, r.kernels[f"k{i}"].sass_opcodes)


def test_a_runtime_scale_d_in_your_own_asm_as_the_pipelines_section_spells_it():
    text = " ".join(section("Pipelines, clusters and multicast").split())
    said = re.search(r'in your own asm pass it as an int, `"r"\((.+?)\)` \(a bool is refused: `(.+?)`\), and set the '
                     r'predicate inside: `(setp[^`]+)` then `([^`]+)`', text)
    assert said, text
    operand, refusal, setp, tail = said.groups()
    assert tail.startswith("..., p, ")
    regs = ", ".join(f"%{i}" for i in range(8))
    wgmma = f"wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {{{regs}}}, %8, %9" + tail[len("..."):]
    asm = "{\\n\\t.reg .pred p;\\n\\t" + setp.replace("%r", "%10") + "\\n\\t" + wgmma + "\\n\\t}"
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(8))
    source = ('#include <stdint.h>\n'
              'extern "C" __global__ void __launch_bounds__(128, 1) k(float* out, int n) {\n'
              '  __shared__ __align__(1024) uint8_t tile[2 * 64 * 128];\n'
              '  float d[8];\n'
              '  const uint64_t da = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) >> 4;\n'
              '  const uint64_t db = static_cast<uint32_t>(__cvta_generic_to_shared(tile + 8192)) >> 4;\n'
              '  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n'
              '  for (int k = 0; k < n; ++k)\n'
              f'    asm volatile("{asm}" : {outs} : "l"(da), "l"(db), "r"(OPERAND));\n'
              '  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n'
              '  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n'
              '  for (int i = 0; i < 8; ++i) out[threadIdx.x * 8 + i] = d[i];\n'
              '}\n')
    r = _ok(compile_source(source.replace("OPERAND", operand), "cuda", "sm_90a"))
    assert r.kernels["k"].sass_opcodes.get("HGMMA", 0) >= 1, r.kernels["k"].sass_opcodes
    # the bool a model passes first (`k > 0`, as to the helper) is refused with the words the section quotes
    refused = compile_source(source.replace("OPERAND", "k > 0"), "cuda", "sm_90a")
    assert refused.status != "ok" and refusal in "\n".join(str(e.message) for e in refused.errors), refused.errors


# ---- the L2 cache-hint forms of the TMA copies ----------------------------------------------------------

def _hinted(line: str) -> str:
    """A copy line in its `.L2::cache_hint` form, `pol` as its last operand (the epilogue section's words)."""
    opcode, operands = line.rstrip(";").split(" ", 1)
    return f"{opcode}.L2::cache_hint {operands}, %rd4;"


def test_the_cache_hint_forms_assemble_with_pol_last():
    epilogue = " ".join(section("GEMM epilogue").split())
    assert "the copy's `.L2::cache_hint` form with `pol` as its last operand" in epilogue
    policy = re.search(r"`(createpolicy\.fractional\.L2::evict_last\.b64 pol, 1\.0;)`", epilogue).group(1)
    assert "A's TMA loads evict_last, B's loads and C's stores evict_first" in epilogue
    tma = section("TMA")
    load = next(x for x in instructions(tma) if x.startswith("cp.async.bulk.tensor.2d.shared::cluster"))
    store = next(x for x in instructions(tma) if x.startswith("cp.async.bulk.tensor.2d.global"))
    assert "`.multicast::cluster` with a 16-bit CTA mask" in tma
    multicast = load.replace("::bytes ", "::bytes.multicast::cluster ").replace("[bar];", "[bar], %h1;")
    bind = [("[dst]", "[%r1]"), ("[bar]", "[%r2]"), ("[src]", "[%r1]"), ("tmap, {c0, c1}", "%rd1, {%r3, %r4}")]
    cases = []
    for kind in ("evict_last", "evict_first"):
        for line, sass in ((load, "UTMALDG"), (multicast, "UTMALDG"), (store, "UTMASTG")):
            for name, reg in bind:
                line = line.replace(name, reg)
            cases.append((policy.replace("evict_last", kind).replace(" pol,", " %rd4,"), _hinted(line), sass))
    entries = []
    for i, (pol, line, _) in enumerate(cases):
        entries += [f".visible .entry k{i}(.param .align 64 .b8 tmA[128])", ".reqntid 128, 1, 1", "{",
                    "  .reg .b32 %r<5>;", "  .reg .b64 %rd<5>;", "  .reg .b16 %h<2>;",
                    "  .shared .align 1024 .b8 buf[16384];", "  .shared .align 8 .b64 bar;",
                    "  mov.u64 %rd1, tmA;", "  cvta.param.u64 %rd1, %rd1;", "  mov.u32 %r1, buf;", "  mov.u32 %r2, bar;",
                    "  mov.u32 %r3, %tid.x;", "  mov.u32 %r4, 0;", "  mov.u16 %h1, 3;", f"  {pol}", f"  {line}",
                    "  ret;", "}"]
    r = _ok(compile_source("\n".join(HEAD + entries + [""]), "ptx", "sm_90a"))
    for i, (_, line, sass) in enumerate(cases):
        assert r.kernels[f"k{i}"].sass_opcodes.get(sass, 0) >= 1, (line, r.kernels[f"k{i}"].sass_opcodes)


# ---- the expert notes' register split ----------------------------------------------------------------

def test_the_expert_notes_register_splits_fit_the_ctas_pool():
    """The notes said "setmaxnreg.dec to 24-40" for the producer and "setmaxnreg.inc to 232-240" for two consumers:
    40 / 240 is in those ranges, and 384 threads at 168 registers (what ptxas gives __launch_bounds__(384, 1)) cannot
    hold it, so the consumers' inc waits forever (the pack's register-pool rule, tools/regpool.py)."""
    from ptxbench import prompts
    from ptxbench.tools.regpool import SetmaxnregMoves, pool_shortfall
    from ptxbench.workloads.solutions.register_split import launch_regs

    registers = launch_regs(384)
    assert registers == 168
    gemm = " ".join(prompts.load("expert").split("## Attention forward", 1)[0].split())
    assert not re.search(r"setmaxnreg\.(?:dec|inc) to \d+-\d+", gemm), gemm  # no ranges: the pairs that fit
    fits = re.findall(r"(\d+) / (\d+) / (\d+)\b(?! hangs)", gemm)
    hangs = re.findall(r"(\d+) / (\d+) / (\d+) hangs", gemm)
    assert fits and hangs, gemm
    for dec, inc, inc2 in fits + hangs:
        assert inc == inc2
        short = pool_shortfall(registers, 384, SetmaxnregMoves([int(dec)], [int(inc)]))
        assert (short == 0) == ((dec, inc, inc2) in fits), (dec, inc, short)


# ---- claims of the pack about what ptxas makes of the helpers ----------------------------------------------

_MBARRIER = '#include "ptxbench/mbarrier.cuh"\nusing namespace ptxbench;\n'


def test_a_runtime_barrier_id_through_the_helper_reserves_all_16():
    """The named-barrier section: `named_barrier_sync(1 + wg, n)` with a runtime wg makes ptxas reserve all 16
    barriers; immediate ids reserve only what they name."""
    assert "`named_barrier_sync(1 + wg, n)` with a runtime wg) makes ptxas reserve all 16 barriers" in \
        " ".join(section("Named barriers").split())
    for body, barriers in (("named_barrier_sync(1 + threadIdx.x / 128, 256);", 16),
                           ("named_barrier_sync(2, 256); named_barrier_sync(1, 256);", 3)):
        source = _MBARRIER + f'extern "C" __global__ void __launch_bounds__(384, 1) k(int* o) {{ {body} o[threadIdx.x] = 1; }}\n'
        assert _ok(compile_source(source, "cuda", "sm_90a")).kernels["k"].barriers == barriers, body


def test_a_release_cluster_arrival_costs_a_membar_and_the_helpers_does_not():
    """The pipelines section and mbarrier.cuh: mbar_arrive_cluster's default `.release.cta` arrival has no MEMBAR;
    `.release.cluster` adds one per arrival."""
    assert "default `.release.cta` semantics; `.release.cluster` costs a MEMBAR per arrival" in \
        " ".join(section("Pipelines").split())
    own = ('asm volatile("{\\n\\t.reg .b32 ra;\\n\\tmapa.shared::cluster.u32 ra, %0, %1;\\n\\t'
           'mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\\n\\t}" :: "r"(smem_u32(&b)), "r"(1u) : "memory");')
    membars = []
    for body in ("mbar_arrive_cluster(&b, 1);", own):
        source = _MBARRIER + f'extern "C" __global__ void k(int* o) {{ __shared__ uint64_t b; {body} o[threadIdx.x] = 1; }}\n'
        membars.append(_ok(compile_source(source, "cuda", "sm_90a")).kernels["k"].sass_opcodes.get("MEMBAR", 0))
    assert membars[0] == 0 and membars[1] >= 1, membars


# ---- claims of the pack about what clusters bought ------------------------------------------------------------

def test_the_cluster_line_of_the_limits_states_what_was_measured():
    """The limits called 2 "the sweet spot for GEMM" while the pack's measured lines and gemm_sweep.md rounds 25 and
    28 found a 2-CTA cluster multicasting B slower on the tuned GEMM: the line's range runs from the tile-order
    line's low figure (held to the climb's records by test_knowledge_measured) to round 25's template cluster (c2
    against the reference, both diagnoses), and round 28 read the cluster's clock lower on randn."""
    import json
    from pathlib import Path

    assert "sweet spot" not in PACK
    limits = " ".join(section("Module and limits").split())
    said = re.search(r"Clusters of up to 8 CTAs \(on the H200 a 2-CTA cluster multicasting B made the tuned GEMM "
                     r"(\d\.\d)-(\d\.\d)% slower: its clock falls under the power limit\)", limits)
    assert said, limits
    low, high = said.groups()
    epilogue = " ".join(section("GEMM epilogue").split())
    assert re.search(rf"a 2-CTA cluster {re.escape(low)}-\d\.\d% slower", epilogue), epilogue
    results = Path(__file__).resolve().parents[2] / "bench" / "results" / "gemm_sweep"
    log = (results / "r25_a_multicast_2026-12-04" / "round.log").read_text()
    ms = {name: [float(x) for x in re.findall(rf"^\| {name} \| ([\d.]+) \|", log, re.M)] for name in ("ref", "c2")}
    assert len(ms["ref"]) == len(ms["c2"]) == 2, ms
    losses = [100 * (c2 / ref - 1) for ref, c2 in zip(ms["ref"], ms["c2"])]
    assert f"{max(losses):.1f}" == high, losses
    clocks = json.loads((results / "r28_clock_neighbours_2026-12-04" / "data3.json").read_text())["clocks"]
    mhz = {k: sorted(x["cta_mhz_median"] for x in clocks[f"{k}/randn"]) for k in ("trace_clk", "trace_clk_c2")}
    assert mhz["trace_clk_c2"][len(mhz["trace_clk_c2"]) // 2] < mhz["trace_clk"][len(mhz["trace_clk"]) // 2], mhz
