"""The knowledge pack's GEMM epilogue section (issue 14, item 4), checked as the pack spells it.

- every PTX instruction line of the section (the proxy fence, the TMA store with its commit / wait, stmatrix, the
  L2 eviction policy) assembles for sm_90a as written, into the SASS it names;
- its stmatrix register / lane map is the wgmma section's accumulator layout;
- its `tile_of` (grouped persistent tile order) compiles as written and visits every tile of a grid once,
  `group_m` rows of tiles at a time.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ptxbench.tools.compile import compile_source

from pack_sections import PACK, instructions, opcode_key, section

SECTION = section("GEMM epilogue")
EXPECTED = {"fence.proxy.async": "FENCE", "cp.async.bulk.tensor": "UTMASTG", "cp.async.bulk.commit_group": None,
            "cp.async.bulk.wait_group": None, "stmatrix": "STSM", "createpolicy.fractional": None}


def _instructions() -> list[str]:
    return instructions(SECTION)


def _key(line: str) -> str:
    return opcode_key(line, EXPECTED)


def test_the_section_spells_every_instruction_it_teaches():
    assert sorted(_key(x) for x in _instructions()) == sorted(EXPECTED)


def test_each_instruction_line_assembles_as_written():
    entries = []
    lines = _instructions()
    for i, line in enumerate(lines):
        # the section's operand names bound to registers of the right kinds
        body = (line.replace("[tmap, {c0, c1}], [smem]", "[%rd1, {%r1, %r2}], [%r3]")
                .replace("[addr], {a, b, c, d}", "[%r3], {%r4, %r5, %r6, %r7}")
                .replace(".b64 pol, ", ".b64 %rd0, "))
        entries += [f".visible .entry k{i}(.param .u64 tmap)", ".reqntid 128, 1, 1", "{",
                    "  .reg .b32 %r<8>;", "  .reg .b64 %rd<2>;", "  .shared .align 1024 .b8 buf[16384];",
                    "  ld.param.u64 %rd1, [tmap];", "  mov.u32 %r1, 0;", "  mov.u32 %r2, 0;", "  mov.u32 %r3, buf;",
                    *[f"  mov.u32 %r{k}, %tid.x;" for k in range(4, 8)], f"  {body}", "  ret;", "}"]
    ptx = "\n".join([".version 8.0", ".target sm_90a", ".address_size 64", *entries, ""])
    r = compile_source(ptx, "ptx", "sm_90a")
    assert r.status == "ok", "\n".join(str(e.message) for e in r.errors) or r.log
    for i, line in enumerate(lines):
        sass = EXPECTED[_key(line)]
        if sass:
            assert r.kernels[f"k{i}"].sass_opcodes.get(sass, 0) >= 1, (line, r.kernels[f"k{i}"].sass_opcodes)


def _accumulator(t: int, j: int) -> tuple[int, int]:
    """The wgmma section's layout, read from its text: (row, column) of d[j] for thread t."""
    wgmma = " ".join(re.search(r"^## wgmma \(warpgroup MMA\).*?(?=^## )", PACK, re.S | re.M).group(0).split())
    row, col = re.search(r"d\[j\] is at row (.+?), column (.+?)\.", wgmma).groups()
    row, col = (e.replace("/", "//") for e in (row, col))  # C integer division
    return eval(row, {}, {"t": t, "j": j}), eval(col, {}, {"t": t, "j": j})


def test_the_stmatrix_map_is_the_accumulator_layout():
    offsets = [tuple(map(int, p)) for p in re.findall(r"\((\d+), (\d+)\)", SECTION)[:4]]
    assert offsets == [(0, 0), (8, 0), (0, 8), (8, 8)]
    for t in range(32):  # one warp; thread t's pair (2k, 2k + 1) of group g is its element of matrix k of group g
        for g in range(4):
            base_row, base_col = _accumulator(0, 8 * g)  # the group's matrix 0 starts at row 0 of the warp's 16
            for k in range(4):
                r0, c0 = _accumulator(t, 8 * g + 2 * k)
                r1, c1 = _accumulator(t, 8 * g + 2 * k + 1)
                dr, dc = offsets[k]
                # stmatrix: register k of lane t holds row t // 4, columns 2 (t % 4), + 1 of matrix k
                assert (r0 - base_row, c0 - base_col) == (dr + t // 4, dc + 2 * (t % 4)) and (r1, c1) == (r0, c0 + 1)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_tile_of_compiles_as_written_and_visits_every_tile_once(tmp_path):
    code = re.search(r"```cuda\n(.*?)```", SECTION, re.S).group(1)
    main = r"""
#include <algorithm>
#include <cstdio>
using std::min;
#define __host__
#define __device__
""" + code + r"""
int main(int argc, char** argv) {
  int m, n, g;
  while (std::scanf("%d %d %d", &m, &n, &g) == 3) {
    for (int t = 0; t < m * n; ++t) { int tm, tn; tile_of(t, m, n, g, tm, tn); std::printf("%d %d\n", tm, tn); }
    std::printf("end\n");
  }
}
"""
    (tmp_path / "t.cpp").write_text(main)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True, timeout=120)
    grids = [(m, n, g) for m in (1, 3, 7, 16, 64) for n in (1, 5, 56) for g in (1, 4, 8, 16)]
    out = subprocess.run([str(tmp_path / "t")], input="".join(f"{m} {n} {g}\n" for m, n, g in grids),
                         capture_output=True, text=True, timeout=120, check=True).stdout.split("end\n")
    for (m, n, g), block in zip(grids, out):
        tiles = [tuple(map(int, line.split())) for line in block.strip().splitlines()]
        assert sorted(tiles) == [(i, j) for i in range(m) for j in range(n)], (m, n, g)
        for t, (tm, _) in enumerate(tiles):  # a group's tiles stay within its group_m rows of tiles
            assert tm // g == t // (g * n), (m, n, g, t)
