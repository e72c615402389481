"""SASS -> solution-file lines: `ptxbench compile --json` gains sass_by_line, in the model's own line numbers."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.tools.compile import compile_source
from ptxbench.tools.sass_lines import parse_lined_listing, refine_lines, spelled_lines

KERNELS = Path(__file__).parents[1] / "data" / "kernels"


def line_of(text: str, needle: str) -> int:
    return next(n for n, ln in enumerate(text.splitlines(), 1) if needle in ln and not ln.lstrip().startswith(("//", "#")))


def test_ptx_hgmma_and_syncs_sit_on_the_lines_that_wrote_them():
    src = (KERNELS / "lines_wgmma_sm90a.ptx").read_text()
    r = compile_source(src, "ptx", use_cache=False)
    assert r.status == "ok"
    hgmma = [ln for ln, ops in r.sass_by_line.items() if "HGMMA" in ops]
    assert hgmma == [line_of(src, "wgmma.mma_async")]  # ptxas gives HGMMA no row of its own: placed by its PTX
    assert "SYNCS" in r.sass_by_line[line_of(src, "mbarrier.try_wait")]  # a labelled line keeps its number
    assert r.sass_by_line[line_of(src, "bar.sync")] == {"BAR": 1}
    assert min(r.sass_by_line) > line_of(src, ".address_size")  # nothing lands in the plan block
    k = r.kernels["lines_ptx"]
    assert len(k.sass_lines) == sum(k.sass_opcodes.values()) and {"wgmma", "mbarrier_wait"} <= set(k.sass_features)


def test_cuda_hgmma_sits_on_its_wgmma_line_and_header_code_on_the_call_site():
    src = (KERNELS / "lines_wgmma_sm90a.cu").read_text()
    r = compile_source(src, "cuda", use_cache=False)
    assert r.status == "ok"
    assert [ln for ln, ops in r.sass_by_line.items() if "HGMMA" in ops] == [line_of(src, "wgmma.mma_async")]
    # mbar_wait is a ptxbench/mbarrier.cuh wrapper: its try_wait loop belongs to the solution line calling it
    assert "SYNCS" in r.sass_by_line[line_of(src, "mbar_wait(")]
    assert r.sass_by_line[line_of(src, "wgmma.fence")] == {"WARPGROUP": 1}


def test_compile_json_carries_sass_by_line():
    res = CliRunner().invoke(app, ["compile", str(KERNELS / "lines_wgmma_sm90a.ptx"), "--json"])
    d = json.loads(res.output)
    src = (KERNELS / "lines_wgmma_sm90a.ptx").read_text()
    assert d["sass_by_line"][str(line_of(src, "wgmma.mma_async"))] == {"HGMMA": 1}


def test_a_ptxas_error_keeps_the_models_line_number():
    r = compile_source((KERNELS / "syntax_error.ptx").read_text(), "ptx", use_cache=False)
    assert r.status == "error" and r.errors[0].line == 25


LISTING = """
.text.k:
	//## File "/w/solution.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/inc/ptxbench/mbarrier.cuh", line 68 inlined at "/w/solution.cu", line 40
	//## File "/w/solution.cu", line 40 inlined at "/w/solution.cu", line 90
	//## File "/w/solution.cu", line 90
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R0 ;
        /*0020*/              @!P0 BRA `(.L_x_10) ;
	//## File "/w/solution.cu", line 20 inlined at "/w/solution.cu", line 90
        /*0030*/                   UIADD3 UR4, UR4, 0x2, URZ ;
        /*0040*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
"""


def test_listing_lines_are_the_innermost_solution_location_and_rows_carry_over():
    insns = parse_lined_listing(LISTING, "solution.cu")["k"]
    assert [i.line for i in insns] == [10, 40, 40, 20, 20]  # header code -> its call site; no row -> previous
    assert [i.inherited for i in insns] == [False, False, True, False, True]
    source = "\n".join(f"line {n}" for n in range(1, 60)).replace("line 30", "wgmma.mma_async.sync.aligned")
    refine_lines({"k": insns}, source, spelled_lines(source))
    assert insns[4].line == 30 and insns[3].line == 20  # only the row-less HGMMA moves to the wgmma line


def test_lines_are_counted_at_newlines_only_as_ptxas_counts_them():
    # A form feed or \u2028 is whitespace to ptxas, a line break to str.splitlines(): every later line moved by one.
    src = "// plan\n.version 8.0\f\u2028\n.target sm_90a\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 x;\n"
    assert spelled_lines(src)["HGMMA"] == [4]
