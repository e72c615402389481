"""Compile feedback: every distinct error once and in order; warnings verbatim (or 'no compiler warnings'),
with the Hopper warnings that cost speed explained."""
from __future__ import annotations

from ptxbench.agent.loop.feedback import _compile_lines
from ptxbench.tools.evaluate import error_summary
from ptxbench.tools.results import CompileIssue, CompileResult, EvalResult


def test_error_summary_lists_each_error_once_in_order():
    errs = [CompileIssue(line=3, message='identifier "mbar_wait" is undefined'),
            CompileIssue(line=3, message='identifier "mbar_wait" is undefined'),
            *[CompileIssue(line=10 + i, message=f"error {i}") for i in range(14)]]
    text = error_summary(errs)
    assert text.count("mbar_wait") == 1 and text.startswith('line 3: identifier "mbar_wait"')
    assert "line 19: error 9" in text and "and 3 more" in text


def test_warnings_are_verbatim_and_hopper_ones_explained():
    clean = EvalResult(workload="w", status="COMPILED", compile=CompileResult(status="ok", arch="sm_90a"))
    assert "- no compiler warnings" in _compile_lines(clean)
    warned = CompileResult(status="ok", arch="sm_90a", warnings=[CompileIssue(line=None, severity="warning", message=(
        "ptxas warning : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized"))])
    lines = _compile_lines(EvalResult(workload="w", status="COMPILED", compile=warned))
    assert any("(C7515) Potential Performance Loss" in line for line in lines)
    assert any(line.strip().startswith("(C7515: ptxas serialised the wgmma") for line in lines)
    assert "- no compiler warnings" not in lines


def test_c7511_is_explained_as_the_wgmma_serialisation_ptxas_reports():
    """ptxas 13 words C7511 as wgmma serialised for want of registers for the wgmma pipeline (a wgmma into part of a
    larger accumulator, as the knowledge pack says); it was glossed as a register count that cannot be met."""
    message = ("potential performance loss (C7511): wgmma.mma_async instructions are serialized due to insufficient "
               "register resources for the wgmma pipeline in the function 'k' in line 52")
    comp = CompileResult(status="ok", arch="sm_90a", warnings=[CompileIssue(line=None, severity="warning", message=message)])
    gloss = [line.strip() for line in _compile_lines(EvalResult(workload="w", status="COMPILED", compile=comp))
             if line.strip().startswith("(C7511:")]
    assert len(gloss) == 1 and gloss[0].startswith("(C7511: ptxas serialised the wgmma"), gloss
    assert "part of a larger accumulator" in gloss[0] and "cannot be met" not in gloss[0]


def test_an_undefined_helper_name_gets_its_declaration():
    errs = [CompileIssue(line=40, message='identifier "mbar_init" is undefined'),
            CompileIssue(line=41, message='identifier "mbar_init" is undefined'),
            CompileIssue(line=42, message='identifier "not_a_helper" is undefined')]
    comp = CompileResult(status="error", arch="sm_90a", errors=errs)
    hints = [line for line in _compile_lines(EvalResult(workload="w", status="COMPILE_ERROR", compile=comp))
             if "in namespace ptxbench" in line]
    assert len(hints) == 1 and "`void mbar_init(" in hints[0] and "<ptxbench/mbarrier.cuh>" in hints[0]


def test_ptxas_info_level_performance_loss_reaches_the_model():
    """(C7512) comes at ptxas's info level, not as a warning: read from the log, kept as a warning, explained."""
    from ptxbench.tools.compile_log import parse_ptxas_log

    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
           "insufficient register resources for the function 'k'\n"
           "ptxas info    : Used 168 registers\n")
    errors, warnings, kernels = parse_ptxas_log(log)
    assert errors == [] and kernels["k"].registers == 168
    assert [w.message for w in warnings] == ["potential performance loss (C7512): wgmma.mma_async instructions are "
                                             "serialized due to insufficient register resources for the function 'k'"]
    lines = _compile_lines(EvalResult(workload="w", status="COMPILED",
                                      compile=CompileResult(status="ok", arch="sm_90a", warnings=warnings)))
    assert any(line.strip().startswith("(C7512: ptxas serialised every wgmma for want of registers") for line in lines)


def test_the_kernels_the_plan_launches_come_first_and_the_others_only_by_name():
    """A module of many entry points (the attention backward's holds 11) opened its compile lines with kernels the plan
    never runs: the model read D = 64's GQA kernel at the head of every D = 128 turn."""
    from ptxbench.tools.results import KernelResources

    names = ["attn_bwd_wgmma_d64_gqa", "attn_bwd_wgmma_d64", "attn_bwd_post", "attn_bwd_wgmma", "attn_bwd_pre",
             "k1", "k2", "k3", "k4", "k5"]
    kernels = {n: KernelResources(name=n, registers=168 if "wgmma" in n else 30) for n in names}
    kernels["attn_bwd_wgmma"].spill_stores = 8
    comp = CompileResult(status="ok", arch="sm_90a", kernels=kernels)
    lines = _compile_lines(EvalResult(workload="w", status="PASSED", compile=comp,
                                      launched=["attn_bwd_pre", "attn_bwd_wgmma", "attn_bwd_post"]))
    kernel_lines = [line for line in lines if line.startswith("- kernel ")]
    assert [line.split(":")[0] for line in kernel_lines] == ["- kernel attn_bwd_pre", "- kernel attn_bwd_wgmma",
                                                             "- kernel attn_bwd_post"]
    # in ptxas's unit: "SPILLS 8 stores" read as eight store instructions
    assert "SPILLS 8 bytes stored / 0 bytes loaded per thread" in kernel_lines[1]
    assert lines[-1] == ("- not launched by the plan: attn_bwd_wgmma_d64_gqa, attn_bwd_wgmma_d64, k1, k2, k3, k4 "
                         "and 1 more")
    # without the plan's names (an old record), every kernel as before
    old = _compile_lines(EvalResult(workload="w", status="PASSED", compile=comp))
    assert sum(line.startswith("- kernel ") for line in old) == len(names)
    assert not any("not launched" in line for line in old)


def test_a_compile_error_quotes_the_line_it_points_at(tmp_path):
    """ptxas and nvcc name a line number only ('line 87: Unknown symbol'): the model had to count the lines of its
    file to find it. The line is quoted as the solution has it, once for an error that recurs on many lines."""
    from pathlib import Path

    from ptxbench.tools.cache import CompileCache
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.compile_log import QUOTE_CHARS, with_source_text

    naive = (Path(__file__).parents[1] / "data" / "solutions" / "gemm_naive_sm90a.ptx").read_text()
    bad = naive.replace("fma.rn.f32 %f1, %f2, %f3, %f1;", "fma.rn.f32 %f1, %f2, %f3, %f99;")
    bad = bad.replace("\tmov.f32 %f1, 0f00000000;\n", "\tmov.f32 %f1, 0f00000000;\n" + "\tadd.f32 %f1, %f1, %q;\n" * 3)
    comp = compile_source(bad, "ptx", "sm_90a", cache=CompileCache(tmp_path))
    text = "\n".join(_compile_lines(EvalResult(workload="w", status="COMPILE_ERROR", compile=comp)))
    fma = next(n for n, ln in enumerate(bad.split("\n"), 1) if "%f99" in ln)
    assert f"- line {fma}: Unknown symbol '%f99'\n  `fma.rn.f32 %f1, %f2, %f3, %f99;`" in text, text
    # two messages on the same three lines: each quotes the first of them once, not three times
    assert "- lines 79, 80, 81: Unknown symbol '%q'\n  line 79: `add.f32 %f1, %f1, %q;`" in text
    assert text.count("`add.f32 %f1, %f1, %q;`") == 2, text
    long_line = with_source_text([CompileIssue(line=2, message="m")], "a\n" + "x" * 500)[0].text
    assert long_line == "x" * QUOTE_CHARS + " ..."
    assert with_source_text([CompileIssue(line=9, message="m")], "a\nb")[0].text == ""  # no such line: nothing quoted


def test_a_compile_log_shown_whole_names_no_host_folder():
    """A failed compile without a parsed error (a record from before every failure named one) is shown as its log's
    tail, which quotes where the toolchain is installed."""
    log = ("/home/alice/.venv/lib/python3.12/site-packages/nvidia/cuda_nvcc/bin/ptxas fatal   : Memory allocation "
           "failure")
    comp = CompileResult(status="error", arch="sm_90a", log=log)
    text = "\n".join(_compile_lines(EvalResult(workload="w", status="COMPILE_ERROR", compile=comp)))
    assert "/home/alice" not in text and "ptxas fatal   : Memory allocation failure" in text


def test_a_kernel_name_of_any_length_is_quoted_short():
    """The model names its kernels at any length ptxas takes; the profile and the sanitizer lines cut the name, the
    compile lines quoted it whole, once per kernel and again in the list of kernels the plan does not launch."""
    from ptxbench.tools.results import KernelResources

    long = "k" + "_" * 6000
    comp = CompileResult(status="ok", arch="sm_90a", kernels={long: KernelResources(name=long, registers=32),
                                                             "x" + long: KernelResources(name="x" + long)})
    text = "\n".join(_compile_lines(EvalResult(workload="w", status="COMPILED", compile=comp, launched=[long])))
    assert len(text) < 600 and "_" * 200 not in text and "- not launched by the plan: x" in text
