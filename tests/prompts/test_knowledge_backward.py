"""The knowledge pack's attention backward section (issue 13), checked as the pack spells it.

- every PTX instruction line of the section (the dS^T fence, the MN-major x MN-major wgmma, the dQ vector
  reduction, the bulk reduce with its commit / wait, the 1-D bulk copy of the L2 / Dr rows) assembles for
  sm_90a as written, into the SASS it names;
- its dS^T address formula is TMA's 128B swizzle of a [rows, 64] bf16 box;
- its accumulator column formula is the wgmma section's.
"""
from __future__ import annotations

import re

from ptxbench.tools.compile import compile_source

from pack_sections import PACK, instructions, opcode_key, section

SECTION = section("Attention backward")
# Every PTX instruction the section spells, by its first opcode parts, and the SASS each must become.
EXPECTED = {"fence.proxy.async": "FENCE", "wgmma.mma_async": "HGMMA", "red.global.add": "REDG",
            "cp.reduce.async.bulk": "UBLKRED", "cp.async.bulk.commit_group": None, "cp.async.bulk.wait_group": None,
            "cp.async.bulk.shared::cluster": "UBLKCP"}


def _instructions() -> list[str]:
    return instructions(SECTION)


def _key(line: str) -> str:
    return opcode_key(line, EXPECTED)


def test_the_section_spells_every_instruction_it_teaches():
    assert sorted(_key(x) for x in _instructions()) == sorted(EXPECTED)


def test_each_instruction_line_assembles_as_written():
    lines = _instructions()
    entries = []
    for i, line in enumerate(lines):
        body = [f"  {line}"]
        if line.startswith("wgmma."):
            body = ["  setp.ne.b32 p, %r3, 0;", "  wgmma.fence.sync.aligned;", *body,
                    "  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 0;",
                    *[f"  st.global.f32 [%rd1+{4 * (k - 1)}], %f{k};" for k in range(1, 9)]]
        entries += [f".visible .entry k{i}(.param .u64 out)", ".reqntid 128, 1, 1", "{",
                    "  .reg .pred p;", "  .reg .b32 %r<4>;", "  .reg .f32 %f<9>;", "  .reg .b64 %rd<3>;",
                    "  .shared .align 1024 .b8 buf[16384];", "  .shared .align 8 .b64 bar;",
                    "  ld.param.u64 %rd1, [out];", "  cvta.to.global.u64 %rd1, %rd1;",
                    "  mov.u32 %r1, buf;", "  mov.u32 %r2, bar;", "  mov.u32 %r3, %tid.x;",
                    "  cvt.u64.u32 %rd2, %r1;",
                    *[f"  mov.f32 %f{k}, 0f3F800000;" for k in range(1, 9)],
                    *body, "  ret;", "}"]
    # .version 8.1: the vector `red` needs it (the section says so)
    ptx = "\n".join([".version 8.1", ".target sm_90a", ".address_size 64", *entries, ""])
    r = compile_source(ptx, "ptx", "sm_90a")
    assert r.status == "ok", "\n".join(str(e.message) for e in r.errors) or r.log
    for i, line in enumerate(lines):
        sass = EXPECTED[_key(line)]
        if sass:
            assert r.kernels[f"k{i}"].sass_opcodes.get(sass, 0) >= 1, (line, r.kernels[f"k{i}"].sass_opcodes)


def test_the_ds_address_is_the_128b_swizzle_of_a_tma_box():
    formula = next(s for s in re.findall(r"`([^`]+)`", SECTION) if s.startswith("r * 128 +"))
    for r in range(64):
        for c in range(8):  # 16-byte chunk c of 128-byte row r; TMA's 128B swizzle XORs address bits 4-6 with 7-9
            plain = r * 128 + c * 16
            assert eval(formula, {}, {"r": r, "c": c}) == plain ^ (((plain >> 7) & 7) << 4)


def test_the_query_column_is_the_accumulator_layout_of_the_wgmma_section():
    column = re.search(r"the query is the accumulator COLUMN\s+`([^`]+)`", SECTION).group(1)
    wgmma = re.search(r"^## wgmma \(warpgroup MMA\).*?(?=^## )", PACK, re.S | re.M).group(0)
    assert f"column {column}" in " ".join(wgmma.split())
