"""compute-sanitizer output parsing on REAL outputs captured on the H200 (tests/data/ncu/san_*.txt),
and the line-info build that makes the sanitizer name lines of the solution file."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.profile.lineinfo import annotate_ptx, has_line_info
from ptxbench.tools.sanitize import parse_sanitizer, sanitize_candidate, sanitize_feedback

NCU = Path(__file__).parents[1] / "data" / "ncu"
KERNELS = Path(__file__).parents[1] / "data" / "profile"


def san(name: str, tool: str):
    return parse_sanitizer((NCU / f"san_{name}.txt").read_text(), tool)


def line_of(kernel_file: str, n: int) -> str:
    return (KERNELS / kernel_file).read_text().splitlines()[n - 1].strip()


def test_memcheck_out_of_bounds_write_names_kernel_and_ptx_line():
    findings, errors = san("memcheck_oob", "memcheck")
    assert errors == 25  # 24 writes past the 1000-element buffer + the failed synchronisation
    write = findings[0]
    assert (write.kind, write.kernel, write.ptx_line) == ("Invalid __global__ write", "oob_write", 23)
    assert line_of("oob_write.ptx", 23).startswith("st.global.u32")
    assert "24 reports" in write.message and "size 4,000 bytes" in write.message
    assert findings[1].kind == "CUDA API error"


def test_racecheck_names_both_sides_of_the_race():
    findings, errors = san("racecheck_race", "racecheck")
    (race,) = findings
    assert errors == 1 and race.kernel == "smem_race" and race.ptx_line == 22
    assert line_of("smem_race.ptx", 22).startswith("st.shared") and line_of("smem_race.ptx", 27).startswith("ld.shared")
    assert "write at smem_race.ptx:22 and read at smem_race.ptx:27" in race.message and "2048 hazards" in race.message


def test_initcheck_and_clean_runs():
    findings, _ = san("initcheck_uninit", "initcheck")
    assert findings[0].kind == "Uninitialized __global__ memory read" and findings[0].ptx_line == 36
    for name, tool in (("synccheck_race", "synccheck"), ("memcheck_gated_live", "memcheck")):
        findings, errors = san(name, tool)
        assert findings == [] and errors == 0
    assert sanitize_feedback([], {"memcheck": 0}) == "compute-sanitizer: memcheck: no errors."


def test_feedback_lists_findings_with_kernel_and_line():
    findings, _ = san("racecheck_race", "racecheck")
    text = sanitize_feedback(findings, {"racecheck": 1})
    assert "racecheck in kernel smem_race: shared-memory race: write at smem_race.ptx:22" in text


def test_a_long_kernel_name_is_quoted_short():
    # the model names its kernels at any length; a report without lines quoted the name twice per finding, uncapped
    name = "oob_write" + "_" * 100_000
    text = (NCU / "san_memcheck_oob.txt").read_text().replace("oob_write+", name + "+").replace(" in oob_write.ptx:23", "")
    findings, _ = parse_sanitizer(text, "memcheck")
    race, _ = parse_sanitizer((NCU / "san_racecheck_race.txt").read_text().replace("smem_race+", name + "+"), "racecheck")
    feedback = sanitize_feedback(findings + race, {"memcheck": 25, "racecheck": 1})
    assert findings[0].kernel.startswith("oob_write") and race[0].kernel.startswith("oob_write")
    assert len(feedback) < 1000 and "24 reports" in feedback


def test_unknown_tool_is_refused_as_a_result():
    out = sanitize_candidate("smoke_gemm_bf16_m256_n256_k512", "", tools=["leakcheck"])
    assert not out.ok and "leakcheck" in out.error


def test_annotate_ptx_puts_a_loc_on_each_instruction_line_and_keeps_the_line_count():
    src = (KERNELS / "solutions" / "wgmma_dead_branch.ptx").read_text()
    out = annotate_ptx(src)
    assert has_line_info(out) and not has_line_info(src)
    assert annotate_ptx(out) == out  # idempotent: nvcc output with .loc is left alone
    lines, original = out.splitlines(), src.splitlines()
    assert len(lines) == len(original)  # ptxas's line N is the model's line N
    for n, (ln, orig) in enumerate(zip(lines, original), 1):
        if ".loc 1 " in ln:
            assert ln.split(".loc 1 ", 1)[1].split()[0] == str(n)
            assert ln.replace(f".loc 1 {n} 0 ", "").replace(" ", "") == orig.replace(" ", "")
    wgmma_line = next(i for i, ln in enumerate(original, 1) if "wgmma.mma_async" in ln)
    assert lines[wgmma_line - 1].lstrip().startswith(f".loc 1 {wgmma_line} 0 ")
    assert ".loc" not in lines[wgmma_line]  # the operand line continues the instruction
    assert sum(ln.count('.file 1 "solution.ptx"') for ln in lines) == 1


def test_annotate_ptx_breaks_lines_where_ptxas_does():
    # ptxas ends a line at \n only: what follows a form feed (or \r, \x85, \u2028) in a // comment is still comment,
    # and must stay so in the module the harness assembles, on the same line number
    for sep in ("\x0c", "\r", "\x0b", "\x1c", "\x85", "\u2028"):
        src = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n    .reg .b32 %r<2>;\n"
               f"    mov.u32 %r1, 1;\n    // stays 1{sep}    mov.u32 %r1, 2;\n    ret;\n}}\n")
        out = annotate_ptx(src)
        assert out.count("\n") == src.count("\n"), repr(sep)
        hidden = out.split("\n")[7]
        assert hidden.lstrip().startswith("// stays 1" + sep) and ".loc" not in hidden, repr(sep)
        assert out.split("\n")[8].replace(" ", "") == ".loc190ret;"


def test_annotated_ptx_assembles_with_lineinfo(tmp_path):
    from ptxbench.tools.sanitize import lineinfo_cubin
    # ptxas is a dependency (the nvidia-cuda-nvcc wheel): a missing one is a broken install, not a reason to skip.
    cubin = lineinfo_cubin((KERNELS / "solutions" / "smem_race.ptx").read_text(), "sm_90a", tmp_path)
    assert cubin is not None and cubin.stat().st_size > 0


def test_the_sanitizers_ptxas_runs_in_the_compiler_jail(tmp_path, monkeypatch):
    """The sanitizer re-assembles a `ptx` solution with line info: model text read by ptxas, so ptxas runs as every
    compile runs it, in the jail (its limits, a stripped environment), not on the host with the harness's keys."""
    from ptxbench.tools import toolchain
    from ptxbench.tools.sanitize import lineinfo_cubin

    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "sk-test-" + "x" * 24)
    real, seen = toolchain.run_tool, []

    def recording(argv, *args, **kwargs):
        seen.append((list(argv), kwargs.get("env")))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(toolchain, "run_tool", recording)
    cubin = lineinfo_cubin((KERNELS / "solutions" / "smem_race.ptx").read_text(), "sm_90a", tmp_path)
    assert cubin is not None and cubin.stat().st_size > 0
    runs = [(argv, env) for argv, env in seen if "--version" not in argv and any(a.endswith("ptxas") for a in argv)]
    assert runs, seen
    for argv, env in runs:
        assert env is not None and "SOME_PROVIDER_API_KEY" not in env, argv
        assert "ulimit" in " ".join(argv), argv  # the jail's limits wrap the tool

def test_driver_probes_are_not_findings_but_kernel_faults_are():
    # shape of the memcheck output for the fault corpus's oob_write.cu on the H200 (cuda solution, nvcc -lineinfo)
    findings, errors = san("memcheck_api_noise", "memcheck")
    assert errors == 68
    assert [f.kind for f in findings] == ["Invalid __global__ write", "CUDA API error"]
    assert findings[0].kernel == "gemm" and findings[0].ptx_line == 24 and "solution.cu:24" in findings[0].message
    assert "LAUNCH_FAILED" in findings[1].message


def _jail_that_cannot_start(mode: str, monkeypatch, tmp_path) -> None:
    """The jail forced to fail before the tool runs, as tests/tools/test_jail.py does: a bwrap that cannot build its
    sandbox, or an unshare script whose read-only binds and remounts are all refused."""
    from tests.tools.test_jail import _bwrap_that_fails_to_start, _unshare_with_read_only_binds_refused

    if mode == "bwrap":
        _bwrap_that_fails_to_start(monkeypatch, tmp_path)
    else:
        _unshare_with_read_only_binds_refused(monkeypatch, remount_too=True)


def _jail_mode(mode: str):
    """A jail mode as a parameter, skipped where this machine cannot run it (no bwrap, no user namespaces)."""
    from ptxbench.tools import jail

    return pytest.param(mode, marks=pytest.mark.skipif(mode not in jail.available_modes(), reason=f"no {mode} jail here"))


@pytest.mark.parametrize("mode", [_jail_mode("bwrap"), _jail_mode("unshare")])
def test_a_sanitize_run_whose_jail_cannot_start_is_one_infra_line(mode, monkeypatch, tmp_path):
    """lineinfo_cubin's ptxas runs in the jail; a jail that cannot start raises JailError there, and that escaped
    sanitize_candidate as a traceback through the evaluation that asked for --sanitize. It is one infra line now, and no
    sanitizer runs (nor a silent fallback to another cubin)."""
    from ptxbench.tools import jail
    from ptxbench.tools.sanitize import lineinfo_cubin

    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text("#!/bin/sh\necho ran > \"$0.ran\"\n")
    sanitizer.chmod(0o755)
    monkeypatch.setenv("PTXBENCH_COMPUTE_SANITIZER", str(sanitizer))
    _jail_that_cannot_start(mode, monkeypatch, tmp_path)
    source = (KERNELS / "solutions" / "smem_race.ptx").read_text()
    with pytest.raises(jail.JailError):
        lineinfo_cubin(source, "sm_90a", tmp_path)
    compiled = tmp_path / "compiled.cubin"
    compiled.write_bytes(b"\x7fELF")
    outcome = sanitize_candidate("gemm_bf16_m8192_n7168_k5120", source, cubin_path=compiled, arch="sm_90a")
    assert not outcome.ok and not outcome.findings, outcome
    assert outcome.error.startswith("infra error, no sanitizer ran: the compiler's jail could not start ("), outcome.error
    assert "\n" not in outcome.error and not (tmp_path / "compute-sanitizer.ran").exists()
