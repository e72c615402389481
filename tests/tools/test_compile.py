"""Compiling real kernels with ptxas (and nvcc for `cuda`): errors by line, resources, SASS, targets,
the cache and the `ptxbench compile` command."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.tools.solution.language import detect_language
from ptxbench.tools.cache import CompileCache, cache_key
from ptxbench.tools.compile import compile_source, include_dir
from ptxbench.tools.compile_log import loc_line_map, nvcc_failure, parse_nvcc_log, parse_ptxas_log, static_ptx_checks
from ptxbench.tools.results import CompileResult
from ptxbench.tools.sass import strip_ptx_comments
from ptxbench.workloads.registry import get_workload

KERNELS = Path(__file__).parents[1] / "data" / "kernels"


def kernel(name: str) -> str:
    return (KERNELS / name).read_text()


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("ptxbench-cache")
        mp.setenv("PTXBENCH_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def wgmma() -> CompileResult:
    return compile_source(kernel("wgmma_sm90a.ptx"), "ptx", "sm_90a")


# ---- real compiles ---------------------------------------------------------------------------

def test_wgmma_kernel_has_hgmma_in_sass(wgmma):
    assert wgmma.status == "ok", wgmma.errors
    k = wgmma.kernels["wgmma_kernel"]
    assert k.sass_opcodes["HGMMA"] == 1
    assert k.registers > 32 and k.smem_static == 4096 and k.spill_stores == 0
    assert wgmma.targets["wgmma"].in_ptx and wgmma.targets["wgmma"].in_sass
    assert not wgmma.targets["tma"].in_ptx and not wgmma.targets["tma"].in_sass
    assert Path(wgmma.cubin_path).read_bytes()[:4] == b"\x7fELF"
    assert "ptxas" in wgmma.tools and len(wgmma.ptx_sha256) == 64


def test_tma_kernel_has_utmaldg():
    r = compile_source(kernel("tma_copy_sm90a.ptx"), "ptx", "sm_90a")
    assert r.status == "ok", r.errors
    assert r.kernels["tma_copy"].sass_opcodes["UTMALDG"] == 1
    assert r.targets["tma"].in_ptx and r.targets["tma"].in_sass and r.targets["tma"].sass_count == 1
    assert not r.targets["wgmma"].in_sass


def test_tcgen05_kernel_for_sm100a():
    r = compile_source(kernel("tcgen05_sm100a.ptx"), "ptx", "sm_100a")
    assert r.status == "ok", r.errors
    ops = r.kernels["tcgen05_kernel"].sass_opcodes
    assert ops["UTCHMMA"] == 1 and ops["UTCBAR"] == 1 and ops["LDTM"] == 1
    assert r.targets["tcgen05"].in_ptx and r.targets["tcgen05"].in_sass and r.targets["tcgen05"].sass_count >= 3


def test_plain_fma_kernel_has_no_targets():
    r = compile_source(kernel("fma_sm90a.ptx"), "ptx", "sm_90a")
    assert r.status == "ok"
    assert r.kernels["fma_kernel"].sass_opcodes["FFMA"] == 1
    assert not any(t.in_ptx or t.in_sass for t in r.targets.values())


def test_syntax_error_reports_its_line():
    r = compile_source(kernel("syntax_error.ptx"), "ptx", "sm_90a")
    assert r.status == "error" and r.cubin_path is None
    assert r.errors[0].line == 25
    assert "movv" in r.errors[0].message
    assert "Ptx assembly aborted" not in " ".join(e.message for e in r.errors)


def test_sm90_target_with_wgmma_is_an_error_that_says_so():
    r = compile_source(kernel("wgmma_sm90.ptx"), "ptx", "sm_90a")
    assert r.status == "error"
    first = r.errors[0]
    assert first.line == 5
    assert first.message.startswith("wgmma needs `.target sm_90a`; the file declares sm_90 (line 5)")
    assert any("not supported on .target 'sm_90'" in e.message for e in r.errors[1:])  # ptxas's own words follow
    assert r.targets["wgmma"].in_ptx and not r.targets["wgmma"].in_sass


def test_old_ptx_version_for_sm100a_is_an_error():
    src = kernel("tcgen05_sm100a.ptx").replace(".version 8.6", ".version 8.5")
    version_line = src.splitlines().index(".version 8.5") + 1
    r = compile_source(src, "ptx", "sm_100a")
    assert r.status == "error"
    assert r.errors[0].line == version_line
    assert "needs PTX `.version 8.6` or later; the file declares 8.5" in r.errors[0].message


def test_wgmma_on_sm100a_is_named():
    r = compile_source(kernel("wgmma_sm90a.ptx"), "ptx", "sm_100a")
    assert r.status == "error"
    assert any("wgmma is an sm_90a instruction" in e.message for e in r.errors)


def test_workload_narrows_the_target_families():
    w = get_workload("gemm_bf16_m8192_n7168_k5120")
    r = compile_source(kernel("tma_copy_sm90a.ptx"), "ptx", "sm_90a", workload=w.id)
    assert set(r.targets) == set(w.targets["sm_90a"])


# ---- cuda -> PTX -> cubin ------------------------------------------------------------------

def test_cuda_source_goes_through_ptx_to_cubin():
    r = compile_source(kernel("inline_ptx_sm90a.cu"), "cuda", "sm_90a")
    assert r.status == "ok", r.errors
    assert r.language == "cuda" and "nvcc" in r.tools
    assert r.kernels["scale_add"].sass_opcodes["FFMA"] >= 1
    ptx = Path(r.cubin_path).with_name("kernel.ptx").read_text()
    assert ".target sm_90a" in ptx and "fma.rn.f32" in ptx


def test_cuda_errors_map_to_solution_lines():
    src = kernel("inline_ptx_sm90a.cu")
    lines = src.splitlines()
    call_line = next(i for i, ln in enumerate(lines, 1) if "out[i] = fma_asm" in ln)
    asm_line = next(i for i, ln in enumerate(lines, 1) if "asm volatile" in ln)
    front = compile_source(src.replace("out[i] = fma_asm", "out[i] = nope + fma_asm"), "cuda", "sm_90a")
    assert front.status == "error"
    assert (front.errors[0].line, front.errors[0].message) == (call_line, 'identifier "nope" is undefined')
    asm = compile_source(src.replace("fma.rn.f32 %0", "fmaa.rn.f32 %0"), "cuda", "sm_90a")
    assert asm.status == "error"
    assert asm.errors[0].line == asm_line  # the asm statement, found through the PTX .loc directives
    assert "fmaa" in asm.errors[0].message and "generated PTX line" in asm.errors[0].message


def test_include_dir_resolves_from_the_package():
    d = include_dir()
    assert d.name == "include" and d.parent.joinpath("solution_format.md").is_file()


# ---- cache -----------------------------------------------------------------------------------

def test_second_compile_is_a_cache_hit(wgmma):
    again = compile_source(kernel("wgmma_sm90a.ptx"), "ptx", "sm_90a")
    assert again.cached and not wgmma.cached
    assert again.cubin_path == wgmma.cubin_path and again.kernels == wgmma.kernels
    fresh = compile_source(kernel("wgmma_sm90a.ptx"), "ptx", "sm_90a", use_cache=False)
    assert not fresh.cached and fresh.kernels == wgmma.kernels


def test_cache_key_changes_with_every_input():
    base = ("src", "ptx", "sm_90a", ["-v"], {"ptxas": "13.5.37"})
    keys = {cache_key(*base)}
    keys.add(cache_key("src2", *base[1:]))
    keys.add(cache_key(base[0], "cuda", *base[2:]))
    keys.add(cache_key(*base[:2], "sm_100a", *base[3:]))
    keys.add(cache_key(*base[:3], ["-v", "-O0"], base[4]))
    keys.add(cache_key(*base[:4], {"ptxas": "13.0.88"}))
    assert len(keys) == 6


def test_cache_is_safe_under_concurrent_writers(tmp_path):
    cache = CompileCache(tmp_path)
    result = CompileResult(status="ok", arch="sm_90a")
    blobs = [bytes([i]) * 4096 for i in range(8)]
    threads = [threading.Thread(target=cache.put, args=("ab" * 32, result, b)) for b in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hit = cache.get("ab" * 32)
    assert hit is not None and hit.cached
    assert Path(hit.cubin_path).read_bytes() in blobs  # one whole write, never a mix
    assert not [p for p in cache.entry_dir("ab" * 32).iterdir() if p.name.endswith(".tmp")]
    Path(hit.cubin_path).unlink()
    assert cache.get("ab" * 32) is None  # an ok result without its cubin is a miss



def test_a_wall_clock_timeout_is_not_cached():
    """How long a compile takes on the wall clock depends on the machine's load and the caller's timeout, not on the
    source: a timeout under load, or under a short timeout_s, was served to every later compile of the text."""
    src = kernel("inline_ptx_sm90a.cu").replace("scale_add", "scale_add_hurried")
    hurried = compile_source(src, "cuda", "sm_90a", timeout_s=0.05, use_cache=False)
    assert hurried.status == "error" and "timed out" in hurried.errors[0].message, hurried.errors
    again = compile_source(src, "cuda", "sm_90a")
    assert again.status == "ok" and not again.cached, again.errors


def test_a_limit_verdict_is_not_served_under_other_limits(monkeypatch):
    """A limit hit is cached (the same text hits the same limit again), so the limits are part of the key: a refusal
    under $PTXBENCH_JAIL_AS_MB=64 (or an old, lower default) was served after the limit was raised."""
    from ptxbench.tools import limit_hit

    src = kernel("inline_ptx_sm90a.cu").replace("scale_add", "scale_add_limits")
    # nvcc needs more than 64 MB for any kernel: taken as the kernel's verdict here (the smallest-kernel probe passes)
    monkeypatch.setattr(limit_hit, "smallest_fits", lambda *a, **k: True)
    monkeypatch.setenv("PTXBENCH_JAIL_AS_MB", "64")
    starved = compile_source(src, "cuda", "sm_90a")
    assert starved.status == "error" and "memory limit (64 MB" in starved.errors[0].message, starved.errors
    monkeypatch.delenv("PTXBENCH_JAIL_AS_MB")
    again = compile_source(src, "cuda", "sm_90a")
    assert again.status == "ok" and not again.cached, again.errors


def test_a_cuda_verdict_is_not_served_after_the_host_compiler_changed(monkeypatch):
    """nvcc preprocesses with the jail's gcc, and refuses a gcc newer than it supports: a verdict made with one gcc (an
    `unsupported GNU version` error for every file) was served after gcc was replaced."""
    from ptxbench.tools import compile as compile_module

    src = kernel("inline_ptx_sm90a.cu").replace("scale_add", "scale_add_host")
    assert compile_module.host_compiler_identity()  # this machine's gcc, found as nvcc finds it
    first = compile_source(src, "cuda", "sm_90a")
    monkeypatch.setattr(compile_module, "host_compiler_identity", lambda: "/usr/bin/gcc-99 1")
    again = compile_source(src, "cuda", "sm_90a")
    assert first.status == again.status == "ok" and not again.cached

# ---- log parsing -------------------------------------------------------------------------------

PTXAS_V = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90a'
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for k1
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0], 8 bytes cmem[2]
ptxas warning : Registers are spilled to local memory in function 'k1', 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Compiling entry function 'k2' for 'sm_90a'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""


def test_ptxas_fatal_with_a_line_is_an_error_at_that_line():
    log = ("ptxas solution.ptx, line 44; fatal   : Parsing error near '.version 8.0': syntax error\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    errors, warnings, kernels = parse_ptxas_log(log)
    assert [(e.line, e.message) for e in errors] == [(44, "Parsing error near '.version 8.0': syntax error")]
    assert not warnings and not kernels


def test_ptxas_resources_per_entry():
    errors, warnings, kernels = parse_ptxas_log(PTXAS_V)
    assert not errors and "spilled" in warnings[0].message
    assert set(kernels) == {"k1", "k2"}
    k1 = kernels["k1"]
    assert (k1.registers, k1.stack, k1.spill_stores, k1.spill_loads, k1.smem_static) == (255, 24, 8, 12, 1024)
    assert k1.cmem == {"cmem[0]": 380, "cmem[2]": 8}
    assert kernels["k2"].registers == 40 and kernels["k2"].smem_static == 0


def test_nvcc_log_keeps_only_the_solution_files_diagnostics():
    log = (
        'solution.cu(3): error: expected a ";"\n'
        "solution.cu(9): warning #177-D: variable \"x\" was declared but never referenced\n"
        "solution.cu:12:2: error: #error from the host compiler\n"
        "ptxbench/wgmma.cuh(12): error: bad thing\n"
        "/proc/1/environ:1:2: error: #error x\n"
        "    1 | OPENAI_API_KEY=sk-secret\n"
    )
    errors, warnings = parse_nvcc_log(log, "solution.cu")
    assert [(e.line, e.message) for e in errors] == [(3, 'expected a ";"'), (12, "#error from the host compiler")]
    assert warnings[0].line == 9 and warnings[0].severity == "warning"
    assert parse_nvcc_log(log.split("ptxbench/", 1)[1], "solution.cu") == ([], [])  # never the raw log
    assert "sk-secret" not in nvcc_failure(1).message and "status 1" in nvcc_failure(1).message
    # the project's own headers are public text: a helper called wrongly is named, with no line of the solution
    from ptxbench.tools.compile import project_headers

    headers = project_headers()
    assert "ptxbench/wgmma.cuh" in headers
    errors, _ = parse_nvcc_log(log.replace("ptxbench/wgmma.cuh", "/opt/x/include/ptxbench/wgmma.cuh"), "solution.cu",
                               headers)
    assert (None, "ptxbench/wgmma.cuh(12): bad thing") in [(e.line, e.message) for e in errors]
    assert not any("sk-secret" in e.message or "environ" in e.message for e in errors)


def test_numbers_past_int_limits_in_logs_and_ptx_are_not_read():
    huge = "9" * 5000
    assert parse_nvcc_log(f"solution.cu({huge}): error: x\n", "solution.cu") == ([], [])
    assert static_ptx_checks(f".version 8{huge}.0\n.target sm_100a\n", "sm_100a") == []
    assert loc_line_map(f'.file 1 "solution.cu"\n.loc 1 {huge} 0\nadd.f32 a;', "solution.cu")(3)[0] is None


def test_loc_map_uses_the_solution_file_only():
    ptx = '.file 1 "/tmp/x/solution.cu"\n.file 2 "/usr/include/h.h"\n.loc 1 7 0\nadd.f32 a;\n.loc 2 99 1\nmul.f32 b;'
    to_source = loc_line_map(ptx, "solution.cu")
    assert to_source(4)[0] == 7 and to_source(6)[0] == 7
    assert "mul.f32 b;" in to_source(6)[1]
    assert to_source(1)[0] is None


def test_static_checks():
    assert static_ptx_checks(strip_ptx_comments(kernel("wgmma_sm90a.ptx")), "sm_90a") == []
    assert static_ptx_checks(strip_ptx_comments(kernel("tcgen05_sm100a.ptx")), "sm_100a") == []
    setmaxnreg = ".version 8.0\n.target sm_90\n.address_size 64\n.entry k() {\n setmaxnreg.inc.sync.aligned.u32 240;\n}"
    (issue,) = static_ptx_checks(setmaxnreg, "sm_90a")
    assert issue.line == 2 and issue.message.startswith("setmaxnreg needs `.target sm_90a`; the file declares sm_90")
    # lines counted at \n only, as ptxas counts them: a form feed is whitespace there
    (issue,) = static_ptx_checks(setmaxnreg.replace(".version 8.0", ".version 8.0\f\u2028"), "sm_90a")
    assert issue.line == 2
    to_source = loc_line_map('.file 1 "solution.cu"\f\n.loc 1 7 0\nadd.f32 a;', "solution.cu")
    assert to_source(3)[0] == 7 and "add.f32 a;" in to_source(3)[1]
    # a plain kernel may declare the family target: only arch-specific instructions need the 'a'
    assert static_ptx_checks(kernel("fma_sm90a.ptx").replace("sm_90a", "sm_90"), "sm_90a") == []


# ---- the command ----------------------------------------------------------------------------

runner = CliRunner()


def test_cli_json_for_wgmma():
    res = runner.invoke(app, ["compile", str(KERNELS / "wgmma_sm90a.ptx"), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["status"] == "ok" and d["errors"] == []
    k = d["kernels"]["wgmma_kernel"]
    assert k["sass_opcodes"]["HGMMA"] == 1 and k["registers"] > 0 and k["spills"] == 0 and k["smem"] == 4096
    assert d["targets"]["wgmma"] == {"in_ptx": True, "in_sass": True, "sass_count": 1}
    assert "ptxas" in d["tools"]


def test_cli_json_for_tcgen05_on_sm100a():
    res = runner.invoke(app, ["compile", str(KERNELS / "tcgen05_sm100a.ptx"), "--arch", "sm_100a", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["status"] == "ok" and d["targets"]["tcgen05"]["in_ptx"] and d["targets"]["tcgen05"]["in_sass"]


def test_cli_reports_errors_and_exits_one():
    res = runner.invoke(app, ["compile", str(KERNELS / "syntax_error.ptx"), "--json"])
    assert res.exit_code == 1
    d = json.loads(res.output)
    assert d["status"] == "error" and d["errors"][0]["line"] == 25
    text = runner.invoke(app, ["compile", str(KERNELS / "wgmma_sm90.ptx")])
    assert text.exit_code == 1 and "wgmma needs" in text.output and "error" in text.output
    assert runner.invoke(app, ["compile", str(KERNELS / "fma_sm90a.ptx")]).exit_code == 0


def test_cli_exits_nonzero_when_tools_are_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CUDA_BIN", str(tmp_path))
    res = runner.invoke(app, ["compile", str(KERNELS / "fma_sm90a.ptx")])
    assert res.exit_code == 2
    assert "no ptxas" in res.output


def test_language_detection():
    plan_cuda = '/* ptxbench\nlanguage = "cuda"\n[[launch]]\nkernel = "k"\n*/\nextern "C" __global__ void k() {}'
    assert detect_language(plan_cuda, Path("reply.txt")) == "cuda"
    assert detect_language('/* ptxbench\nlanguage = "ptx"\n*/\n.version 8.0', Path("x.cu")) == "ptx"
    assert detect_language(kernel("fma_sm90a.ptx"), Path("solution")) == "ptx"
    assert detect_language("__global__ void k() {}", Path("solution")) == "cuda"
    assert detect_language("anything", Path("k.cu")) == "cuda"


def test_knowledge_pack_register_a_wgmma_line_assembles_as_written():
    """The knowledge pack's register-sourced wgmma (attention's O += P V) is copied verbatim into a kernel."""
    from ptxbench import prompts

    line = next(ln for ln in prompts.load("knowledge_sm90a").splitlines() if "m64n16k16" in ln).strip().strip("`")
    ptx = "\n".join([
        ".version 8.0", ".target sm_90a", ".address_size 64",
        ".visible .entry pv_step(.param .u64 p_out)", ".reqntid 128, 1, 1", "{",
        "    .reg .pred p;", "    .reg .b32 %r<6>;", "    .reg .f32 %f<9>;", "    .reg .b64 %rd<4>;",
        "    .shared .align 1024 .b8 tile_v[4096];",
        "    mov.u32 %r5, tile_v;", "    shr.u32 %r5, %r5, 4;", "    cvt.u64.u32 %rd1, %r5;",
        "    or.b64 %rd1, %rd1, 4611686293305294848;  // SBO 1024 B (64 << 32) | 128B swizzle (1 << 62)",
        *[f"    mov.f32 %f{i}, 0f00000000;" for i in range(1, 9)],
        *[f"    mov.b32 %r{i}, 0;" for i in range(1, 5)],
        "    setp.ne.b32 p, %r1, 0;",
        "    wgmma.fence.sync.aligned;",
        "    " + line,
        "    wgmma.commit_group.sync.aligned;", "    wgmma.wait_group.sync.aligned 0;",
        "    ld.param.u64 %rd2, [p_out];", "    cvta.to.global.u64 %rd2, %rd2;",
        *[f"    st.global.f32 [%rd2+{4 * (i - 1)}], %f{i};" for i in range(1, 9)],
        "    ret;", "}", ""])
    r = compile_source(ptx, "ptx", "sm_90a")
    assert r.status == "ok", r.errors
    assert r.kernels["pv_step"].sass_opcodes.get("HGMMA") == 1


def test_a_key_in_the_model_text_never_reaches_the_compile_cache(tmp_path, monkeypatch):
    from ptxbench.tools.cache import CompileCache

    secret = "zz-cache-key-0123456789abcdef"
    monkeypatch.setenv("PTXBENCH_TEST_API_KEY", secret)
    src = (KERNELS / "fma_sm90a.ptx").read_text() + f"\n// echoed: {secret}\n"
    cache = CompileCache(tmp_path / "cache")
    r = compile_source(src, "ptx", "sm_90a", cache=cache)
    assert r.status == "ok"
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*") if p.suffix in (".ptx", ".json"))
    assert stored and secret not in stored


SYSCALL_PTX = """.version 8.0
.target sm_90a
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.extern .func (.param .b64 func_retval0) malloc (.param .b64 malloc_param_0);
.global .align 1 .b8 fmt[4] = {104, 105, 10, 0};
.visible .entry k(.param .u64 out)
{
  .reg .b64 %rd<8>; .reg .b32 %r<4>;
  mov.u64 %rd1, fmt;
  cvta.global.u64 %rd2, %rd1;
  mov.u64 %rd3, 0;
  { .param .b64 p0; st.param.b64 [p0], %rd2; .param .b64 p1; st.param.b64 [p1], %rd3; .param .b32 rv;
    call.uni (rv), vprintf, (p0, p1); ld.param.b32 %r1, [rv]; }
  { .param .b64 q0; st.param.b64 [q0], 4096; .param .b64 rv2;
    call.uni (rv2), malloc, (q0); ld.param.b64 %rd4, [rv2]; }
  ld.param.u64 %rd5, [out];
  st.global.u64 [%rd5], %rd4;
  ret;
}
"""


def test_device_system_calls_are_refused_in_ptx_and_in_cuda():
    """ptxas assembles calls to vprintf and malloc and leaves them to the driver: printf would put the model's bytes on
    the host's stdout, malloc's heap would keep a result from one call to the next. Refused, named, with the line."""
    r = compile_source(SYSCALL_PTX, "ptx", "sm_90a", use_cache=False)
    assert r.status == "error" and r.cubin_path is None
    named = {e.line: e.message for e in r.errors}
    assert "vprintf" in named[4] and "malloc" in named[5] and "system call" in named[4]
    # CUDA: printf and malloc are refused by the source policy; an inline PTX call reaches the generated module
    cu = r'''
extern "C" __global__ void k(unsigned long long* out) {
  unsigned long long p;
  asm volatile("{ .extern .func (.param .b64 rv) malloc (.param .b64 n);\n"
               "  .param .b64 n0; st.param.b64 [n0], 4096; .param .b64 r0;\n"
               "  call.uni (r0), malloc, (n0); ld.param.b64 %0, [r0]; }" : "=l"(p));
  *out = p;
}
'''
    r = compile_source(cu, "cuda", "sm_90a", use_cache=False)
    assert r.status == "error" and any("malloc" in e.message and e.line is None for e in r.errors), r.errors


def test_a_system_call_declared_without_extern_is_refused_from_the_cubin():
    """ptxas also leaves a bare `.func` prototype (no `.extern`, no body) and `.extern.func` to the driver; the
    cubin's symbol table names every such function however the text spelled it, so both are refused too."""
    from ptxbench.tools.cubin_symbols import undefined_functions

    bare = SYSCALL_PTX.replace(".extern .func (.param .b32", ".func (.param .b32").replace(
        ".extern .func (.param .b64", ".extern.func (.param .b64")
    # the format string's address passed on is refused before ptxas runs (module_data.py): a parameter instead, so
    # the cubin is made and read
    bare = bare.replace("mov.u64 %rd1, fmt;", "ld.param.u64 %rd1, [out];")
    assert ".extern .func" not in bare
    r = compile_source(bare, "ptx", "sm_90a", use_cache=False)
    assert r.status == "error" and r.cubin_path is None
    named = {e.line: e.message for e in r.errors}
    assert "vprintf" in named[4] and "system call" in named[4] and "malloc" in named[5], r.errors
    # an honest module references no function it does not define (the smoke reference, as the driver would load it)
    from ptxbench.agent.models.builtin import reference_source

    ref = reference_source("smoke_gemm_bf16_m256_n256_k512")
    ok = compile_source(ref, detect_language(ref), "sm_90a", "smoke_gemm_bf16_m256_n256_k512")
    assert ok.status == "ok" and undefined_functions(Path(ok.cubin_path).read_bytes()) == []


def test_text_the_parsers_cannot_read_is_a_compile_error_not_an_exception(monkeypatch):
    """compile_source is a library entry point: what parse_solution refuses may still reach it."""
    fma = kernel("fma_sm90a.ptx")
    lone = compile_source(fma + "// \ud800\n", "ptx", "sm_90a", use_cache=False)  # a JSON "\\ud800"
    assert lone.status == "error" and "UTF-8" in lone.errors[0].message and lone.errors[0].line == fma.count("\n") + 1
    version = fma.replace(".version ", ".version 8" + "0" * 5000, 1)  # past int()'s 4,300 digits
    assert compile_source(version, "ptx", "sm_90a", use_cache=False).status == "error"
    from ptxbench.tools import compile as compile_module

    def unreadable(*args):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(compile_module, "static_ptx_checks", unreadable)
    r = compile_source(fma, "ptx", "sm_90a", use_cache=False)
    assert r.status == "error" and "could not be read" in r.errors[0].message and r.cubin_path is None


def test_the_decoy_probes_build_with_their_decoy_and_their_target_in_the_sass():
    """The GPU decoy tests' probes (tests/data/profile/solutions) stay buildable: each runs its target family in one
    kernel and does the work another way in another (FFMA beside wgmma, plain loads beside TMA)."""
    from ptxbench.tools.solution.language import detect_language

    probes = Path(__file__).parents[1] / "data" / "profile" / "solutions"
    expect = {"wgmma_decoy.ptx": ("wgmma", "HGMMA", "FFMA"), "tma_decoy.cu": ("tma", "UTMALDG", "LDG")}
    for name, (family, target_op, decoy_op) in expect.items():
        text = (probes / name).read_text()
        r = compile_source(text, detect_language(text, probes / name), "sm_90a", "smoke_gemm_bf16_m256_n256_k512")
        assert r.status == "ok", (name, r.errors)
        ops = {k: set(res.sass_opcodes) for k, res in r.kernels.items()}
        assert r.targets[family].in_sass, name
        assert any(any(op.split(".")[0] == target_op for op in o) for o in ops.values()), (name, ops)
        decoys = [k for k, o in ops.items() if any(op.split(".")[0] == decoy_op for op in o)]
        targets = [k for k, o in ops.items() if any(op.split(".")[0] == target_op for op in o)]
        assert decoys and targets and set(decoys) != set(targets), (name, ops)  # the work and the target apart


def test_cli_json_records_the_jail_mode():
    from ptxbench.tools.jail import jail_mode

    res = runner.invoke(app, ["compile", str(KERNELS / "fma_sm90a.ptx"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["jail"] == jail_mode() != ""


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_an_empty_cuda_file_is_an_error_as_an_empty_ptx_is(tmp_path, text):
    for name in ("e.ptx", "e.cu"):
        (tmp_path / name).write_text(text)
        res = runner.invoke(app, ["compile", str(tmp_path / name), "--json"])
        assert res.exit_code == 1, (name, res.output)
        d = json.loads(res.output)
        assert d["status"] == "error" and d["errors"][0]["line"], (name, d["errors"])
    assert d["errors"][0]["line"] == 1 and "empty" in d["errors"][0]["message"] and d["kernels"] == {}
    assert compile_source(text, "cuda").status == "error"


@pytest.mark.parametrize("language, line", [
    ("ptx", ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n  mov.u32 %r1, {t};\n  ret;\n}\n"),
    ("cuda", 'extern "C" __global__ void k() { int x = {t}; }\n'),
])
def test_a_compiler_message_quoting_a_huge_token_is_cut(language, line):
    """ptxas and nvcc quote an undefined name whole: one of 200,000 characters made a 100 KB feedback, each message
    of it twice the 64 KB log's worth, sent back with every later prompt; a message is cut as a plan issue's is."""
    result = compile_source(line.replace("{t}", "z" * 200_000), language, use_cache=False)
    assert result.status == "error" and result.errors
    assert all(len(e.message) <= 700 for e in result.errors + result.warnings), [len(e.message) for e in result.errors]
    assert any("zzz" in e.message for e in result.errors)


@pytest.mark.parametrize("body", [
    # EDG names the header of a previous definition by its absolute path
    "__device__ __nv_bfloat16 __hadd(const __nv_bfloat16 a, const __nv_bfloat16 b) { return a; }\n"
    "__device__ int __float2bfloat16;\n"
    'extern "C" __global__ void k(__nv_bfloat16* p) { }\n',
    # an asm statement that ends its function makes ptxas refuse nvcc's own `.file` lines, which the message quotes
    'extern "C" __global__ void k(__nv_bfloat16* p) { asm volatile("ret;\\n}\\n.file 2 \\"a\\"\\n.file 1 \\"b\\"\\n'
    '.func d()\\n{\\n"); *p = __float2bfloat16(p[1]); }\n',
])
def test_compiler_messages_name_no_host_path(body):
    """What the model reads names files by their base name: nvcc's messages carried the toolchain's install path
    (a user's home, a venv) and the compile's work folder."""
    from ptxbench.tools.toolchain import find_toolchain

    result = compile_source("#include <cuda_bf16.h>\n" + body, "cuda", use_cache=False)
    messages = " ".join(e.message for e in result.errors + result.warnings)
    assert result.status == "error" and ("cuda_bf16.h" in messages or "solution.cu" in messages), messages
    tool_dir = str(Path(find_toolchain().ptxas.path).parents[1])
    assert tool_dir not in messages and "ptxbench-compile-" not in messages and "/tmp/" not in messages, messages


def test_host_paths_are_cut_to_file_names_and_nothing_else_is_touched():
    from ptxbench.tools.compile_log import without_host_paths

    assert without_host_paths("(declared at line 4 of /home/ann/.venv/nvidia/cu13/bin/../include/cuda_bf16.h)") == \
        "(declared at line 4 of cuda_bf16.h)"
    kept = "a/b/c and x / y, see https://docs.nvidia.com/cuda/index.html, ptxbench/wgmma.cuh(3)"
    assert without_host_paths(kept) == kept


def test_a_ptx_file_stopped_by_a_jail_limit_is_not_assembled_again(monkeypatch):
    """The model's own text is assembled again when the line-annotated one fails; a run the jail's CPU limit stopped
    was run again too, and the plain text hits the same limit: a ptxas CPU bomb cost twice the limit."""
    from ptxbench.tools import compile as compile_module
    from ptxbench.tools.toolchain import ProcResult

    runs = []

    def over_the_cpu_limit(tc, argv, workdir, timeout_s, **kw):
        runs.append(argv)
        return ProcResult(returncode=-24)

    monkeypatch.setattr(compile_module, "run_in_jail", over_the_cpu_limit)
    from ptxbench.tools import limit_hit

    monkeypatch.setattr(limit_hit, "smallest_fits", lambda *a, **k: True)  # the smallest kernel assembles
    result = compile_source(kernel("fma_sm90a.ptx"), "ptx", "sm_90a", use_cache=False)
    assert result.status == "error" and "CPU-time limit" in result.errors[0].message, result.errors
    assert len(runs) == 1, runs


QUOTED_LIMIT_PHRASES = {
    # the line nvcc's front end quotes under its error holds the phrase
    "quoted_line": '__global__ void k(float* x) { const char* s = "out of memory"; x[0] = undefined_thing; }\n',
    # the located message itself quotes the model's text
    "static_assert": '__global__ void k() { static_assert(sizeof(int) == 3, "CPU time limit std::bad_alloc"); }\n',
    # a raw string's line breaks give the phrase lines of their own, a blank one and a fake caret before them
    "raw_string_lines": '__global__ void k() { static_assert(sizeof(int) == 3, R"(x\n\n  ^\nvirtual memory exhausted: '
                        'Cannot allocate memory\ngcc: fatal error: Killed signal terminated program cc1plus\n'
                        'File size limit)"); }\n',
    # the host compiler's preprocessing pass locates #error and says its text on the same line
    "hash_error": "#error memory exhausted, signal 25\n__global__ void k() {}\n",
}


@pytest.mark.parametrize("name", sorted(QUOTED_LIMIT_PHRASES))
def test_a_limit_phrase_in_the_models_text_is_the_ordinary_compile_error(name):
    """The compiler quotes the model's text (the source line under an error, a static_assert's or #error's message):
    a phrase of the jail's limits in it made a plain compile error read as a CPU, memory or output-size limit hit."""
    result = compile_source(QUOTED_LIMIT_PHRASES[name], "cuda", "sm_90a", use_cache=False)
    assert result.status == "error" and result.errors, result
    assert all(e.line == 1 and not e.message.startswith("nvcc ") for e in result.errors), result.errors


@pytest.mark.parametrize("log, said", [
    ("gcc: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.", "CPU-time limit"),
    ("virtual memory exhausted: Cannot allocate memory", "memory limit"),
    # after the front end's warnings, their quoted source and caret: the kill comes after them
    ('solution.cu(3): warning #177-D: variable "out" was declared but never referenced\n  int out;\n      ^\n\n'
     "nvcc error   : 'cicc' died due to signal 24 (CPU time limit exceeded)", "CPU-time limit"),
])
def test_a_tools_own_limit_line_is_still_a_limit_hit(log, said):
    from ptxbench.tools.limit_hit import limit_hit as _limit_hit
    from ptxbench.tools.toolchain import ProcResult

    assert said in _limit_hit("nvcc", ProcResult(returncode=1, stderr=log), 120.0)


def test_ptxas_out_of_memory_is_its_own_line_a_limit_hit():
    """ptxas says `Memory allocation failure` when the jail's address space runs out: it read as an ordinary compile
    error, shown to the model as its own; a located line that quotes the phrase is still no limit hit."""
    from ptxbench.tools.limit_hit import limit_hit as _limit_hit
    from ptxbench.tools.toolchain import ProcResult

    ran_out = "ptxas fatal   : Memory allocation failure\nptxas fatal   : Ptx assembly aborted due to errors"
    assert "memory limit" in _limit_hit("ptxas", ProcResult(returncode=255, stderr=ran_out), 60.0)
    quoted = "ptxas solution.ptx, line 3; error   : Memory allocation failure\nptxas fatal   : Ptx assembly aborted"
    assert _limit_hit("ptxas", ProcResult(returncode=255, stderr=quoted), 60.0) == ""


def test_ptxas_past_the_jails_address_space_gets_the_memory_limit_verdict(monkeypatch):
    """A long straight-line kernel: ptxas needs a few hundred MB for it, so 100 MB runs it out of memory."""
    n = 40000
    body = "".join(f" add.f32 %f{i}, %f{i - 1}, %f0;\n" for i in range(1, n + 1))
    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry big(.param .u64 p)\n{\n"
           f" .reg .f32 %f<{n + 1}>;\n .reg .b64 %rd<2>;\n ld.param.u64 %rd1, [p];\n ld.global.f32 %f0, [%rd1];\n"
           f"{body} st.global.f32 [%rd1], %f{n};\n ret;\n}}\n")
    monkeypatch.setenv("PTXBENCH_JAIL_AS_MB", "100")
    result = compile_source(ptx, "ptx", "sm_90a", use_cache=False)
    assert result.status == "error" and "memory limit (100 MB" in result.errors[0].message, result.errors


@pytest.mark.parametrize("rc, log, crash", [
    (139, "", "SIGSEGV"), (-11, "", "SIGSEGV"), (135, "", "SIGBUS"), (-6, "", "SIGABRT"),
    (1, "Segmentation fault", "Segmentation fault"),
    (1, "nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)", "died due to signal 11"),
    (1, "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus: error while loading shared libraries: libzstd.so.1: failed to map "
        "segment from shared object\nnvcc fatal   : Failed to preprocess host compiler properties.", "failed to map segment"),
])
def test_a_compiler_that_crashes_under_the_address_space_limit_hit_the_memory_limit(rc, log, crash):
    from ptxbench.tools.limit_hit import limit_hit
    from ptxbench.tools.toolchain import ProcResult

    said = limit_hit("ptxas", ProcResult(returncode=rc, stderr=log), 60.0)
    assert said.startswith(f"ptxas crashed ({crash}), most likely at its memory limit ("), said


def test_a_crash_the_model_quotes_is_no_limit_hit():
    from ptxbench.tools.limit_hit import limit_hit
    from ptxbench.tools.toolchain import ProcResult

    quoted = 'solution.cu(3): error: static assertion failed with "Segmentation fault"\n  static_assert(0);\n  ^\n'
    assert limit_hit("nvcc", ProcResult(returncode=1, stderr=quoted), 120.0) == ""


def _ptxas_crashes_on_the_solution(monkeypatch) -> None:
    """ptxas dies of SIGSEGV (status 139, no output) on the solution's file; the smallest-kernel probe runs for real."""
    from ptxbench.tools import compile as compile_module, limit_hit
    from ptxbench.tools.toolchain import ProcResult

    real = compile_module.run_in_jail
    monkeypatch.setattr(limit_hit, "_SMALLEST_FITS", {})
    monkeypatch.setattr(compile_module, "run_in_jail", lambda tc, argv, workdir, *a, **k: real(tc, argv, workdir, *a, **k)
                        if "smallest" in (workdir / "solution.ptx").read_text() else ProcResult(returncode=139))


def test_ptxas_killed_by_sigsegv_is_the_memory_limits_verdict_and_cached(monkeypatch, tmp_path):
    """`ptxas exited with status 139: no output` was the source's compile error. A crash on this file under the
    limits the smallest kernel passes is the memory limit's verdict; deterministic for the same file under the same
    limits (the cache key holds them), it is cached as ptxas's out-of-memory verdict is."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    _ptxas_crashes_on_the_solution(monkeypatch)
    ptx = kernel("wgmma_sm90a.ptx")
    result = compile_source(ptx, "ptx", "sm_90a")
    assert result.status == "error" and len(result.errors) == 1, result.errors
    assert result.errors[0].message.startswith("ptxas crashed (SIGSEGV), most likely at its memory limit (2048 MB"), \
        result.errors
    assert compile_source(ptx, "ptx", "sm_90a").cached


def test_an_address_space_ptxas_crashes_in_on_any_kernel_is_an_infra_error(monkeypatch, tmp_path):
    """Under 40 MB ptxas dies of SIGSEGV on every module, an empty kernel too: not the source's verdict (it was cached
    as `ptxas exited with status 139`), but the limits' fault, named, never cached."""
    from ptxbench.tools.limit_hit import LimitsBelowTheTool

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXBENCH_JAIL_AS_MB", "40")
    ptx = kernel("wgmma_sm90a.ptx")
    for _ in range(2):  # never cached
        with pytest.raises(LimitsBelowTheTool, match=r"below what ptxas needs for any kernel: on the smallest one too, "
                                                     r"ptxas crashed \(SIGSEGV\), most likely at its memory limit"):
            compile_source(ptx, "ptx", "sm_90a")
