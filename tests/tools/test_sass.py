"""SASS disassembly (nvdisasm -json and the cuobjdump fallback) and target-instruction presence."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.results import KernelResources
from ptxbench.tools.sass import (
    DisassemblyLimitHit,
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


def _straight_line_ptx(n: int) -> str:
    body = "".join(f" add.u32 %r{i % 50 + 2}, %r{i * 7 % 50 + 2}, {i};\n" for i in range(n))
    return (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n .reg .u32 %r<60>;\n"
            f" .reg .u64 %rd<4>;\n ld.param.u64 %rd1, [p];\n mov.u32 %r2, 1;\n{body} st.global.u32 [%rd1], %r3;\n"
            " ret;\n}\n")


def test_a_memory_limit_below_what_nvdisasm_needs_for_any_cubin_is_the_machines_problem(monkeypatch, tmp_path):
    """Under the jail, nvdisasm needs about 71 MB of address space for any cubin (-json; -c -gi about 82 MB), ptxas
    about 64 MB for a small kernel: under 68 MB a 10-instruction kernel assembles and its disassembly runs out of
    memory. That is the limits' fault, not the kernel's: an infra error naming the limits (it said `cannot
    disassemble: nvdisasm failed: ...`), never a verdict cached for the source. Under 76 MB only the lined listing
    has no room: the compile goes on without SASS lines, as before."""
    from ptxbench.tools.limit_hit import LimitsBelowTheTool

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXBENCH_JAIL_AS_MB", "68")
    with pytest.raises(LimitsBelowTheTool) as failed:
        compile_source(_straight_line_ptx(10), "ptx", "sm_90a")
    said = str(failed.value)
    assert "nvdisasm ran out of its memory limit (68 MB" in said and "below what nvdisasm needs for any kernel" in said
    monkeypatch.setenv("PTXBENCH_JAIL_AS_MB", "76")
    result = compile_source(_straight_line_ptx(10), "ptx", "sm_90a")
    assert result.status == "ok" and result.kernels["k"].sass_opcodes and not result.sass_by_line, result


def _disassembler_says(monkeypatch, res, smallest_fits: bool) -> None:
    """run_in_jail answers `res` for the kernel's cubin and, in the smallest-cubin probe, success when
    `smallest_fits`."""
    from ptxbench.tools import limit_hit, sass
    from ptxbench.tools.toolchain import ProcResult

    monkeypatch.setattr(limit_hit, "_SMALLEST_FITS", {})
    monkeypatch.setattr(sass, "run_in_jail", lambda tc, argv, workdir, *a, **k: ProcResult(
        returncode=0 if smallest_fits else 255) if (workdir / "smallest.ptx").exists() else res)


@pytest.mark.parametrize("rc, said, hit", [
    (255, "nvdisasm fatal   : Memory allocation failure", "memory limit"),
    (-24, "", "CPU-time limit"),
    (137, "", "CPU-time limit"),
])
def test_a_disassembler_the_jails_limits_stopped_on_this_cubin_is_the_kernels_limit_verdict(monkeypatch, tmp_path,
                                                                                         rc, said, hit):
    from ptxbench.tools import sass
    from ptxbench.tools.toolchain import ProcResult

    _disassembler_says(monkeypatch, ProcResult(returncode=rc, stderr=said), smallest_fits=True)
    (tmp_path / "kernel.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(sass.DisassemblyLimitHit, match=hit) as stopped:
        sass._disassemble(tmp_path / "kernel.cubin", find_toolchain("sm_90a"), 60.0)
    assert "SASS is too large to disassemble within the limit" in str(stopped.value) and not stopped.value.timed_out


def test_the_disassemblers_limit_hit_is_the_compiles_cached_verdict(monkeypatch, tmp_path):
    """A compile whose disassembly ran out of memory (the smallest cubin fitting) is a COMPILE_ERROR-class result
    naming the limit, cached as ptxas's own limit hit is; it was a ToolchainError, an INFRA_ERROR."""
    from ptxbench.tools.toolchain import ProcResult

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    ran_out = ProcResult(returncode=255, stderr="nvdisasm fatal   : Memory allocation failure")
    _disassembler_says(monkeypatch, ran_out, smallest_fits=True)
    result = compile_source(_straight_line_ptx(10), "ptx", "sm_90a")
    assert result.status == "error" and len(result.errors) == 1, result.errors
    assert result.errors[0].message.startswith("the kernel's SASS is too large to disassemble within the limit "
                                               "(nvdisasm ran out of its memory limit"), result.errors
    assert compile_source(_straight_line_ptx(10), "ptx", "sm_90a").cached


def test_a_disassembler_that_fails_otherwise_stays_the_machines_problem(monkeypatch, tmp_path):
    """A missing library (status 127) or a jail that cannot start is no verdict on the kernel."""
    from ptxbench.tools import jail, sass
    from ptxbench.tools.toolchain import ProcResult, ToolchainError

    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(b"\x7fELF")
    missing = ProcResult(returncode=127, stderr="nvdisasm: error while loading shared libraries: libx.so")
    monkeypatch.setattr(sass, "run_in_jail", lambda *a, **k: missing)
    with pytest.raises(ToolchainError) as failed:
        sass._disassemble(cubin, find_toolchain("sm_90a"), 60.0)
    assert not isinstance(failed.value, sass.DisassemblyLimitHit), failed.value

    def no_jail(*a, **k):
        raise jail.JailError("the compiler's jail could not start (bwrap: ...): the tool did not run")

    monkeypatch.setattr(sass, "run_in_jail", no_jail)
    with pytest.raises(jail.JailError):
        sass._disassemble(cubin, find_toolchain("sm_90a"), 60.0)
