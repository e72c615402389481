"""SASS disassembly (nvdisasm -json and the cuobjdump fallback) and target-instruction presence."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.results import KernelResources
from ptxbench.tools.sass import (
    SassInstruction,
    _from_cuobjdump,
    disassemble,
    opcode_base,
    opcode_histogram,
    sass_listing,
    strip_ptx_comments,
    target_presence,
)
from ptxbench.tools.toolchain import find_toolchain

KERNELS = Path(__file__).parents[1] / "data" / "kernels"

CUOBJDUMP_SAMPLE = """
	code for sm_90a
		Function : wgmma_kernel
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0030*/                   WARPGROUP.ARRIVE ;                         /* 0x00000000000079c5 */
        /*0120*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;  /* 0x00e00000041879f0 */
        /*0140*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;            /* 0x00008000000079c5 */
        /*0150*/               @P0 BRA 0x1e0 ;                                /* 0x0000000000000947 */
        /*0160*/                   EXIT ;                                     /* 0x000000000000794d */
		..........
		Function : other
        /*0000*/                   UTCHMMA gdesc[UR12], gdesc[UR4], tmem[UR9], tmem[UR14], idesc[UR15], !UPT ;  /* 0x00ff0e040c0075ea */
"""


@pytest.fixture(scope="module")
def wgmma_cubin(tmp_path_factory) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        result = compile_source((KERNELS / "wgmma_sm90a.ptx").read_text(), "ptx", "sm_90a")
    assert result.status == "ok", result.errors
    return result.cubin_path


def test_opcode_is_the_first_dotted_part():
    assert opcode_base("HGMMA.64x64x16.F32.BF16") == "HGMMA"
    assert opcode_base("UTMALDG.2D") == "UTMALDG"
    insns = [SassInstruction(opcode=o) for o in ("HGMMA.64x64x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "EXIT")]
    assert opcode_histogram(insns) == {"HGMMA": 2, "EXIT": 1}


def test_cuobjdump_text_is_parsed_per_function():
    funcs = _from_cuobjdump(CUOBJDUMP_SAMPLE)
    assert list(funcs) == ["wgmma_kernel", "other"]
    assert opcode_histogram(funcs["wgmma_kernel"]) == {"WARPGROUP": 2, "LDC": 1, "HGMMA": 1, "BRA": 1, "EXIT": 1}
    bra = funcs["wgmma_kernel"][4]
    assert (bra.predicate, bra.opcode, bra.operands) == ("@P0", "BRA", "0x1e0")
    assert funcs["other"][0].base == "UTCHMMA"


def test_nvdisasm_and_cuobjdump_agree_on_a_real_cubin(wgmma_cubin):
    tc = find_toolchain("sm_90a")
    # Both ship as dependencies (the nvidia-cuda-nvdisasm / -cuobjdump wheels) and with every CUDA toolkit.
    assert tc.nvdisasm is not None and tc.cuobjdump is not None, tc.tools()
    via_nvdisasm = disassemble(wgmma_cubin, tc)
    via_cuobjdump = disassemble(wgmma_cubin, tc.model_copy(update={"nvdisasm": None}))
    assert set(via_nvdisasm) == set(via_cuobjdump) == {"wgmma_kernel"}
    hist = opcode_histogram(via_nvdisasm["wgmma_kernel"])
    assert hist == opcode_histogram(via_cuobjdump["wgmma_kernel"])
    assert hist["HGMMA"] == 1 and hist["WARPGROUP"] == 2


def test_listing_shows_full_mnemonics(wgmma_cubin):
    text = sass_listing(wgmma_cubin, kernel="wgmma_kernel")
    assert text.startswith("// wgmma_kernel")
    assert "HGMMA.64x64x16.F32.BF16" in text


def test_strip_comments_keeps_line_numbers():
    ptx = "a\n/* wgmma.mma_async\n spans */ b // cp.async.bulk.tensor\nc"
    stripped = strip_ptx_comments(ptx)
    assert stripped.count("\n") == ptx.count("\n")
    assert "wgmma" not in stripped and "cp.async" not in stripped and stripped.endswith("c")


def test_presence_ignores_spellings_in_comments():
    ptx = "// wgmma.mma_async is not used here\ncp.async.bulk.tensor.2d.shared::cluster.global [x], [y, {a, b}], [z];"
    got = target_presence("sm_90a", ptx, {"k": {"UTMALDG": 2, "FFMA": 5}})
    assert not got["wgmma"].in_ptx and not got["wgmma"].in_sass
    assert got["tma"].in_ptx and got["tma"].in_sass and got["tma"].sass_count == 2


def test_presence_matches_utc_wildcard_and_sums_kernels():
    kernels = {
        "a": KernelResources(name="a", sass_opcodes={"UTCHMMA": 1, "UTCBAR": 1}),
        "b": KernelResources(name="b", sass_opcodes={"LDTM": 3}),
    }
    got = target_presence("sm_100a", "tcgen05.mma.cta_group::1.kind::f16", kernels)
    assert got["tcgen05"].in_ptx and got["tcgen05"].sass_count == 5
    assert set(got) == {"tcgen05", "tma"}
    assert set(target_presence("sm_100a", "", kernels, families=["tcgen05"])) == {"tcgen05"}
