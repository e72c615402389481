"""The knowledge pack's core sections (module header, TMA, mbarrier, wgmma, register reallocation), checked as
the pack spells them.

- every PTX instruction line of those sections, with the tensor-map address line and the multicast form,
  assembles under the `.version 8.0` the module section says is enough, into the SASS it names, without warnings;
- setmaxnreg: the entry directives the pack names are the ones ptxas needs (`.maxntid` alone leaves it ignored,
  C7508), and its value rule is the range and step ptxas enforces;
- the descriptor fields the wgmma section states are the ones make_desc_sw128 in wgmma.cuh encodes.
"""
from __future__ import annotations

import re

import pytest

from ptxbench.tools.compile import compile_source

from pack_sections import PACK, instructions, opcode_key, section

HEAD = [".version 8.0", ".target sm_90a", ".address_size 64"]
SECTIONS = ["TMA", "mbarrier", "wgmma (warpgroup MMA)", "wgmma for attention", "Register reallocation"]
EXPECTED = {"cp.async.bulk.tensor.2d.shared::cluster": "UTMALDG", "cp.async.bulk.tensor.2d.global": "UTMASTG",
            "cp.async.bulk.commit_group": None, "cp.async.bulk.wait_group": None, "fence.proxy.async": "FENCE",
            "mbarrier.init": None, "fence.mbarrier_init": None, "mbarrier.arrive.expect_tx": "SYNCS",
            "mbarrier.try_wait.parity": "SYNCS", "wgmma.mma_async": "HGMMA", "wgmma.fence": "WARPGROUP",
            "wgmma.commit_group": None, "wgmma.wait_group": None, "setmaxnreg": "USETMAXREG"}
# the pack's operand names bound to registers of the right kinds
BINDINGS = [("[dst], [tmap, {c0, c1}], [bar]", "[%r1], [%rd1, {%r3, %r4}], [%r2]"),
            ("[tmap, {c0, c1}], [src]", "[%rd1, {%r3, %r4}], [%r1]"), ("[bar], count", "[%r2], %r5"),
            ("_, [bar], bytes", "_, [%r2], %r6"), ("p, [bar], parity", "p, [%r2], %r7"), ("[full]", "[%r2]"),
            ("[empty]", "[%r2]"), ("m64nNk16", "m64n16k16"), ("{d...}", "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}"),
            ("desc_a, desc_b, scale_d", "%rd2, %rd3, p"), ("wait_group.sync.aligned N", "wait_group.sync.aligned 1")]
# the lines the pack writes two to a span or names by their qualifier: its tensor-map address and the multicast load
EXTRA = ["mov.u64 %rd1, tmA;", "cvta.param.u64 %rd1, %rd1;", "mov.u16 %h1, 3;",
         "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
         " [%r1], [%rd1, {%r3, %r4}], [%r2], %h1;"]


def _lines() -> list[str]:
    return [x for title in SECTIONS for x in instructions(section(title))]


def _bind(line: str) -> str:
    for name, reg in BINDINGS:
        line = line.replace(name, reg)
    return line


def _body(line: str) -> list[str]:
    """The bound line; a product is fenced, waited for and stored, else ptxas drops it."""
    if not line.startswith("wgmma.mma_async"):
        return [_bind(line)]
    # the pack's own products name `%rd1` as a descriptor: here it holds the tensor map's address, which no
    # descriptor may be (tools/address_use.py), so it is made one first, as `%rd2` and `%rd3` are
    return ["mov.u64 %rd1, 0;", "wgmma.fence.sync.aligned;", _bind(line), "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 0;", "st.global.v4.f32 [%rd4], {%f1, %f2, %f3, %f4};",
            "st.global.v4.f32 [%rd4+16], {%f5, %f6, %f7, %f8};"]


def _entry(name: str, directives: list[str], body: list[str]) -> list[str]:
    return [f".visible .entry {name}(.param .align 64 .b8 tmA[128], .param .u64 out)", *directives, "{",
            "  .reg .pred p;", "  .reg .b32 %r<8>;", "  .reg .b64 %rd<5>;", "  .reg .f32 %f<9>;", "  .reg .b16 %h<2>;",
            "  .shared .align 1024 .b8 buf[16384];", "  .shared .align 8 .b64 bar;", "  mov.u64 %rd1, tmA;",
            "  mov.u32 %r1, buf;", "  mov.u32 %r2, bar;", *[f"  mov.u32 %r{k}, %tid.x;" for k in range(3, 8)],
            "  mov.u64 %rd2, 0;", "  mov.u64 %rd3, 0;", "  ld.param.u64 %rd4, [out];", "  setp.ne.b32 p, %r3, 0;", *[f"  {b}" for b in body],
            "  ret;", "}"]


def _compile(entries: list[str]):
    return compile_source("\n".join(HEAD + entries + [""]), "ptx", "sm_90a")


def _directives() -> list[str]:
    """The entry directives the register-reallocation section names, with the block size filled in."""
    named = re.findall(r"`(\.[a-z]+)(?: (\d+))?`", section("Register reallocation"))
    return [f"{d} {n}" if n else f"{d} 384, 1, 1" for d, n in named]


def test_the_sections_spell_every_instruction_they_teach():
    assert sorted({opcode_key(x, EXPECTED) for x in _lines()}) == sorted(EXPECTED)
    assert "`.version 8.0` or later" in section("Module and limits")
    assert "`mov.u64 %rd, NAME; cvta.param.u64 %rd, %rd;`" in section("TMA") and ".multicast::cluster" in PACK


def test_each_instruction_line_assembles_at_the_stated_version():
    lines = _lines()
    entries = []
    for i, line in enumerate(lines):
        entries += _entry(f"k{i}", _directives(), _body(line))
    entries += _entry("kx", [], EXTRA)
    r = _compile(entries)
    assert r.status == "ok", "\n".join(str(e.message) for e in r.errors) or r.log
    assert not r.warnings, [w.message for w in r.warnings]
    for i, line in enumerate(lines):
        sass = EXPECTED[opcode_key(line, EXPECTED)]
        if sass:
            assert r.kernels[f"k{i}"].sass_opcodes.get(sass, 0) >= 1, (line, r.kernels[f"k{i}"].sass_opcodes)
    assert r.kernels["kx"].sass_opcodes.get("UTMALDG", 0) >= 1, r.kernels["kx"].sass_opcodes


def _setmaxnreg_warnings(directives: list[str]) -> list[str]:
    r = _compile(_entry("k", directives, ["setmaxnreg.dec.sync.aligned.u32 40;"]))
    assert r.status == "ok", "\n".join(str(e.message) for e in r.errors) or r.log
    return [w.message for w in r.warnings if "C7508" in w.message]


def test_setmaxnreg_entry_directives_are_the_ones_ptxas_needs():
    """The pack named `.maxntid` alone; ptxas then still ignores setmaxnreg (C7508): it needs `.minnctapersm 1`
    beside it, as CUDA's __launch_bounds__(threads, 1) emits, so a PTX solution written from the pack lost it."""
    assert _setmaxnreg_warnings([".maxntid 384, 1, 1"]), "ptxas now takes .maxntid alone: the pack may say so"
    assert not _setmaxnreg_warnings(_directives()), _directives()


def test_setmaxnreg_value_rule_is_what_ptxas_enforces():
    lo, hi = map(int, re.search(r"multiples of 8 in \[(\d+), (\d+)\]", section("Register reallocation")).groups())
    for value, ok in ((lo, True), (hi, True), (lo - 8, False), (hi + 8, False), (lo + 4, False)):
        r = _compile(_entry("k", _directives(), [f"setmaxnreg.inc.sync.aligned.u32 {value};"]))
        assert (r.status == "ok") == ok, (value, [str(e.message) for e in r.errors])


@pytest.fixture(scope="module")
def desc_code() -> str:
    from pathlib import Path

    header = Path(__file__).resolve().parents[2] / "prompts/include/ptxbench/wgmma.cuh"
    return re.search(r"uint64_t make_desc_sw128\(.*?\n}\n", header.read_text(), re.S).group(0)


def test_the_descriptor_fields_are_the_headers_encoding(desc_code):
    wgmma = " ".join(section("wgmma (warpgroup MMA)").split())
    assert "all (bytes >> 4); bits 62-63 select the swizzle (1 = 128B)" in wgmma
    assert "stride byte offset 1024 (8 rows x 128 B)" in wgmma and "adding 32 bytes (2 in descriptor units)" in wgmma
    # start address: bits 0-13 of (address >> 4); stride byte offset 1024 >> 4 at bit 32; swizzle 1 at bit 62
    assert "(addr & 0x3FFFF) >> 4" in desc_code and (0x3FFFF >> 4) == (1 << 14) - 1
    assert "(1024 >> 4) << 32" in desc_code and "static_cast<uint64_t>(1) << 62" in desc_code
    assert 32 >> 4 == 2


def test_the_expert_notes_stage_a_tma_store_as_the_pack_does():
    """A TMA store reads its shared-memory box packed or swizzled (a tensor map has no shared-memory pitch), so the
    expert notes' staging "padded to avoid bank conflicts" could not feed the TMA store they named."""
    from ptxbench import prompts

    expert = " ".join(prompts.load("expert").split())
    line = re.search(r"Epilogue:.*?TMA store\.", expert).group(0)
    assert "padd" not in line and "128B swizzle" in line, line
    assert "128B-swizzled layout" in " ".join(section("GEMM epilogue").split())


def test_the_overlap_puts_s_in_a_group_that_wait_group_1_completes():
    """wgmma.wait_group N returns once at most the N newest committed groups are pending (every older one complete).
    The line read "issue S_j, then O += P V, commit, and wait_group 1": one group holding both, which wait_group 1
    leaves pending, so S_j was read before its product landed."""
    wgmma = " ".join(section("wgmma for attention").split())
    line = re.search(r"- Overlap: (.*?)\.(?: - |$)", wgmma).group(1)
    steps = re.findall(r"(S_j = Q K_j\^T|O \+= P_\{j-1\} V_\{j-1\}|commit|wait_group(?:\.sync\.aligned)? \d+)", line)
    open_group, groups, complete = [], [], set()
    for step in steps:
        if step == "commit":
            groups.append(open_group)
            open_group = []
        elif step.startswith("wait_group"):
            n = int(step.split()[1])
            for group in groups[:len(groups) - n]:
                complete.update(group)
        else:
            open_group.append(step)
    assert steps[-1] == "wait_group.sync.aligned 1" and not open_group, steps
    assert "S_j = Q K_j^T" in complete, steps
    assert "O += P_{j-1} V_{j-1}" not in complete, steps  # the P V product still runs, as the line says


def test_the_bytes_per_mac_figure_is_the_stated_formula():
    """(64 + N) x 32 B for 64 x N x 16 MACs: n256 reads 1.25 B per 16 MACs against n128's 1.5, 17% fewer (n128 reads
    20% more); the section said n256 needs 20% fewer."""
    text = " ".join(section("Measured on the H200").split())
    fewer = int(re.search(r"reads \(64 \+ N\) x 32 B for 64 x N x 16 MACs: n256 needs (\d+)% fewer bytes per MAC than n128",
                          text).group(1))
    per_mac = lambda n: (64 + n) * 32 / (64 * n * 16)  # noqa: E731
    assert fewer == round(100 * (1 - per_mac(256) / per_mac(128)))
