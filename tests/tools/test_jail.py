"""The compiler jail (tools/jail.py): hostile solutions get a classified verdict quickly from a bounded
compiler, and no byte of a host file outside the allowed roots reaches a result, a log or the cache."""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from ptxbench.tools import jail
from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.sass import strip_ptx_comments
from ptxbench.workloads.solutions.faults import load_corpus

WORKLOAD, CORPUS = load_corpus()
PLAN = CORPUS["control_correct"]["source"].split("*/", 1)[0] + "*/\n"
KERNEL = ('extern "C" __global__ void gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, '
          "int M, int N, int K) {}\n")


@pytest.fixture
def secret_file(tmp_path: Path) -> tuple[Path, str]:
    token = "PTXBSECRET" + secrets.token_hex(8)
    path = tmp_path / "host_secret.h"
    path.write_text(f"{token} {token}_b {token}_c;\nint {token}_d = {token}_e;\n")
    return path, token


def _include_attacks(path: Path) -> dict[str, str]:
    return {
        "digraph": f'%:include "{path}"\n#include <cuda_bf16.h>\n{KERNEL}',
        "raw_string": f'#include <cuda_bf16.h>\nconst char* s = R"x(" /* )x";\n#include "{path}"\n// */\n{KERNEL}',
        "macro_name": f'#define P "{path}"\n#include <cuda_bf16.h>\n#include P\n{KERNEL}',
        "has_include": f'#include <cuda_bf16.h>\n#if __has_include("{path}")\nint found;\n#endif\n{KERNEL}',
        # behind a macro only nvcc defines: a dependency pass of the host compiler alone never took this branch
        "nvcc_macro": f'#include <cuda_bf16.h>\n#ifdef __CUDACC_VER_MAJOR__\n#include "{path}"\n#endif\n{KERNEL}',
        "dev_zero": f'%:include "/dev/zero"\n#include <cuda_bf16.h>\n{KERNEL}',
        "dev_stdin": f'%:include "/dev/stdin"\n#include <cuda_bf16.h>\n{KERNEL}',
    }


def _everything_written(cache: Path, *records) -> str:
    text = "\n".join(r.model_dump_json() for r in records)
    for p in cache.rglob("*"):
        if p.is_file():
            text += p.read_bytes().decode("utf-8", "replace")
    return text


@pytest.mark.parametrize("mode", jail.available_modes())
def test_host_files_never_reach_a_result_log_or_cache(mode, secret_file, tmp_path, monkeypatch):
    path, token = secret_file
    monkeypatch.setenv("PTXBENCH_JAIL", mode)
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    ev = LocalEvaluator()
    for name, code in _include_attacks(path).items():
        start = time.perf_counter()
        direct = compile_source(code, "cuda", "sm_90a", use_cache=False)  # past the source policy, straight to nvcc
        evaluated = ev.evaluate(WORKLOAD, PLAN + code, EvalOptions(no_gpu=True))
        elapsed = time.perf_counter() - start
        assert direct.jail == mode, name
        if name == "has_include":  # a jail hides the file (it compiles as if absent); `limits` refuses the test
            assert direct.status == ("error" if mode == "limits" else "ok"), direct.errors
        else:
            assert direct.status == "error", name
            assert evaluated.status == "COMPILE_ERROR", (name, evaluated.message)
        assert token not in _everything_written(tmp_path / "cache", direct, evaluated), name
        # /dev/zero and /dev/stdin end at once, not at the jail's 30 s CPU limit; two compiles of a small file take
        # 2-4 s, past 10 s on a loaded 2-core machine
        assert elapsed < 25, (name, elapsed)


@pytest.mark.parametrize("marker", ["#line 1", "# 1", "%:line 1"])
def test_a_line_directive_never_shows_the_host_file_it_names(marker, secret_file, tmp_path, monkeypatch):
    # the host compiler (gcc -E under nvcc) would print line 2 of the named file under its #error; `limits` has no
    # filesystem view to hide it, so nvcc's log must quote nothing outside the solution
    path, token = secret_file
    monkeypatch.setenv("PTXBENCH_JAIL", "limits")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    code = f'{KERNEL}{marker} "{path}"\n#ifdef __CUDACC_VER_MAJOR__\n#error x\n#endif\n'
    direct = compile_source(code, "cuda", "sm_90a", use_cache=False)  # past the source policy, straight to nvcc
    evaluated = LocalEvaluator().evaluate(WORKLOAD, PLAN + code, EvalOptions(no_gpu=True))
    assert token not in _everything_written(tmp_path / "cache", direct, evaluated)
    assert direct.status == "error" and evaluated.status == "COMPILE_ERROR", (direct.errors, evaluated.message)
    assert "nvcc failed (status" in direct.errors[0].message and "#line and" in evaluated.message


def test_verdicts_do_not_depend_on_whether_a_host_path_exists(secret_file, tmp_path, monkeypatch):
    path, _ = secret_file
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    there = compile_source(f'#include "{path}"\n{KERNEL}', "cuda", use_cache=False)
    missing = compile_source(f'#include "{path.with_name("host_secreX.h")}"\n{KERNEL}', "cuda", use_cache=False)
    assert there.status == missing.status == "error"
    assert [e.message.replace("host_secreX", "host_secret") for e in missing.errors] == [e.message for e in there.errors]


@pytest.mark.parametrize("probe", [
    '#define CAT(a, b) a##b\n#if CAT(__has_in, clude)("{path}")\n#error found\n#endif\n',  # the name pasted
    '#define CAT(a, b) a %:%: b\n#if CAT(__has_in, clude)("{path}")\n#error found\n#endif\n',  # by the digraph
    '_Pragma("GCC dependency \\"{path}\\"")\n',  # stats the path: a missing one is a fatal error
    '#pragma GCC dependency "{path}"\n',  # the directive itself, which only the source policy refused
    '%:pragma GCC \\\n dependency "{path}"\n',
    '#if __has_inc\\\nlude("{path}")\n#error found\n#endif\n',  # spliced by the compiler before it reads names
    '#if __has_inc\\  \nlude("{path}")\n#error found\n#endif\n',  # spaces after the backslash: spliced all the same
    '#define S(x) #x\n#define P(x) _Pragma(S(x))\nP(GCC dependency "{path}")\n',
])
def test_limits_mode_verdicts_do_not_depend_on_whether_a_host_path_exists(probe, secret_file, tmp_path, monkeypatch):
    """`limits` has no filesystem view: a test of a host path that leaves no dependency (a pasted __has_include,
    _Pragma's GCC dependency) must be refused before the compiler answers it, whether the path is there or not."""
    path, _ = secret_file
    monkeypatch.setenv("PTXBENCH_JAIL", "limits")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    there = compile_source(probe.format(path=path) + KERNEL, "cuda", use_cache=False)
    missing = compile_source(probe.format(path=path.with_name("host_secreX.h")) + KERNEL, "cuda", use_cache=False)
    assert there.status == missing.status == "error", (there.errors, missing.errors)
    assert [e.message for e in missing.errors] == [e.message for e in there.errors]


@pytest.mark.parametrize("allowed", [
    '__device__ void f(float* x) {\n  _Pragma("unroll")\n  for (int i = 0; i < 4; ++i) x[i] = i;\n}\n',
    '#define UNROLL(n) _Pragma("unroll") for (int i = 0; i < n; ++i)\n__device__ void f(float* x) { UNROLL(4) x[i] = i; }\n',
    '// ## stage 1: load ##\n/* a ## in a comment pastes nothing; nor does _Pragma("GCC dependency") here */\n',
])
def test_limits_mode_compiles_what_the_source_policy_allows(allowed, tmp_path, monkeypatch):
    """The existence-test check refuses what could test a host path, not a kernel the source policy lets through:
    `_Pragma("unroll")` (its allow list) and a `##` or `_Pragma` inside a comment compile in `limits` as elsewhere."""
    from ptxbench.tools.solution.cuda_policy import check_cuda_source

    monkeypatch.setenv("PTXBENCH_JAIL", "limits")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    source = "#include <cuda_bf16.h>\n" + allowed + KERNEL
    assert check_cuda_source(source) == []
    result = compile_source(source, "cuda", use_cache=False)
    assert result.status == "ok", result.errors


def test_the_jail_hides_the_harness_environment(tmp_path, monkeypatch):
    from ptxbench.tools.toolchain import find_toolchain

    monkeypatch.setenv("SOME_PROVIDER_KEY", "sk-" + "x" * 30)
    tc = find_toolchain("sm_90a")
    with jail.Workspace() as wd:
        res = jail.run_in_jail(tc, ["/usr/bin/env"], wd, 10)
    assert res.returncode == 0 and "SOME_PROVIDER_KEY" not in res.output and "PATH=" in res.output


@pytest.mark.parametrize("mode", [m for m in jail.available_modes() if m != "limits"])
def test_a_jail_with_a_filesystem_view_has_no_network(mode, monkeypatch):
    """bwrap unshares the network with everything else; the unshare mode (the GPU machines') kept the host's, so a
    compiler that model text took over could reach the network there."""
    from ptxbench.tools.toolchain import find_toolchain

    monkeypatch.setenv("PTXBENCH_JAIL", mode)
    tc = find_toolchain("sm_90a")
    with jail.Workspace() as wd:
        res = jail.run_in_jail(tc, ["/bin/sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"], wd, 10)
    assert res.returncode == 0 and res.output.split() == ["lo"], res.output

def test_a_macro_bomb_is_stopped_by_the_limits_and_the_verdict_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    # this test's workspaces in a folder of its own: other compiles on the machine leave theirs in /tmp meanwhile
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(jail.tempfile, "tempdir", str(tmp_path / "tmp"))
    lines = ["#define A0 xx xx"] + [f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 31)]
    bomb = "\n".join(lines) + '\nextern "C" __global__ void k() { A30; }\n'
    start = time.perf_counter()
    first = compile_source(bomb, "cuda")
    took = time.perf_counter() - start
    busy = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))  # the bound is CPU time: a loaded machine stretches it
    # the jail's CPU limit stops it; the wall-clock bound leaves room for a slow 2-core machine, and an unbounded bomb
    # would run into nvcc's 120 s timeout instead
    assert first.status == "error" and took < (jail.Limits().cpu_s + 7) * busy, (took, first.errors)
    assert any("limit" in e.message for e in first.errors), first.errors
    again = compile_source(bomb, "cuda")
    assert again.cached and again.errors == first.errors
    assert not list(Path(jail.tempfile.gettempdir()).glob("ptxbench-compile-*/work/tmp/tmpxft*"))


def test_many_entries_are_refused_before_ptxas():
    entries = "".join(f".visible .entry k{i}() {{ ret; }}\n" for i in range(100_000))
    source = PLAN.replace('"cuda"', '"ptx"').replace('kernel = "gemm"', 'kernel = "k0"') + \
        ".version 8.0\n.target sm_90a\n.address_size 64\n" + entries
    start = time.perf_counter()
    result = LocalEvaluator().evaluate(WORKLOAD, source, EvalOptions(no_gpu=True))
    assert result.status in ("COMPILE_ERROR", "PLAN_ERROR") and time.perf_counter() - start < 10, result.message


def test_ptx_comment_stripping_is_linear():
    text = ".version 8.0\n" + "/* " * 40_000
    start = time.perf_counter()
    assert strip_ptx_comments(text).startswith(".version 8.0\n/*")
    assert time.perf_counter() - start < 1


def test_a_tool_linked_from_a_bin_folder_in_home_does_not_bring_home_into_the_view(tmp_path, monkeypatch):
    """$PTXBENCH_CUDA_BIN=~/bin holding links to the CUDA tools: the folder above a tool's (kept for a wrapper script
    such as /usr/local/bin/nvcc) was the home folder, and every file in it (~/.ssh, ~/.config's keys) was in the
    compiler's view. The jail still runs the tools from there (nvcc's own headers it looks for beside the link, so
    only ptxas is run here)."""
    from ptxbench.tools import toolchain

    real = toolchain.find_toolchain("sm_90a")
    home, bin_dir = tmp_path / "home", tmp_path / "home" / "bin"
    bin_dir.mkdir(parents=True)
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    for name in toolchain.TOOL_NAMES:
        if (tool := getattr(real, name)) is not None:
            (bin_dir / name).symlink_to(os.path.realpath(tool.path))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(toolchain.ENV_BIN, str(bin_dir))
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    tc = toolchain.find_toolchain("sm_90a")
    roots = jail.allowed_roots([t.path for n in toolchain.TOOL_NAMES if (t := getattr(tc, n)) is not None])
    assert not [r for r in roots if home == r or home.is_relative_to(r)], roots
    ptx = (Path(__file__).parents[1] / "data" / "kernels" / "fma_sm90a.ptx").read_text()
    assert compile_source(ptx, "ptx", use_cache=False).status == "ok"


def _unshare_with_read_only_binds_refused(monkeypatch, remount_too: bool) -> None:
    """The unshare mode, its script's `mount` refusing every read-only bind (as some kernels and container runtimes
    do in a user namespace), and the remount to read-only too when `remount_too`; other mounts are real."""
    refuse_remount = '*remount,ro,bind*) echo "mount: $*: permission denied" >&2; return 32;;' if remount_too else ""
    fake = ('mount() {\n  case "$*" in\n    *"--rbind -o ro "*) echo "mount: $*: permission denied" >&2; return 32;;\n'
            f'    {refuse_remount}\n  esac\n  command mount "$@"\n}}\n')
    monkeypatch.setattr(jail, "_UNSHARE_SCRIPT", fake + jail._UNSHARE_SCRIPT)
    monkeypatch.setenv("PTXBENCH_JAIL", "unshare")


@pytest.mark.skipif("unshare" not in jail.available_modes(), reason="no user + mount namespaces here")
def test_a_refused_read_only_bind_is_remounted_read_only_never_left_writable(monkeypatch):
    """The script fell back to a plain bind when `mount --rbind -o ro` failed: the system folders and the toolchain's
    were writable in the jail, silently."""
    from ptxbench.tools.toolchain import find_toolchain

    _unshare_with_read_only_binds_refused(monkeypatch, remount_too=False)
    tc = find_toolchain("sm_90a")
    folders = ["/usr/lib", "/usr/include", os.path.dirname(os.path.realpath(tc.ptxas.path))]
    with jail.Workspace() as wd:
        res = jail.run_in_jail(tc, ["/bin/sh", "-c", 'for d in "$@"; do [ -w "$d" ] && echo "writable $d"; done; '
                                    '[ -w . ] && echo "the work folder is writable"', "probe", *folders], wd, 20)
    assert res.returncode == 0 and res.output == "the work folder is writable", res.output


@pytest.mark.skipif("unshare" not in jail.available_modes(), reason="no user + mount namespaces here")
def test_a_jail_that_cannot_mount_read_only_fails_to_start_and_the_compile_is_an_infra_error(monkeypatch, tmp_path):
    from ptxbench.tools.toolchain import ToolchainError, find_toolchain

    _unshare_with_read_only_binds_refused(monkeypatch, remount_too=True)
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    with jail.Workspace() as wd, pytest.raises(jail.JailError) as failed:
        jail.run_in_jail(find_toolchain("sm_90a"), ["/bin/true"], wd, 20)
    assert isinstance(failed.value, ToolchainError)
    assert "the compiler's jail could not start" in str(failed.value) and "read-only" in str(failed.value), failed.value
    code = "#include <cuda_bf16.h>\n" + KERNEL
    evaluated = LocalEvaluator().evaluate(WORKLOAD, PLAN + code, EvalOptions(no_gpu=True))
    assert evaluated.status == "INFRA_ERROR" and "read-only" in evaluated.message, evaluated.message


def _bwrap_that_fails_to_start(monkeypatch, tmp_path: Path) -> None:
    """A bwrap first on PATH that runs the real one with a bind of a missing folder: it reports the sandbox's pid and
    then stops with `bwrap: Can't find source path ...`, status 1, before the tool (as with user namespaces refused)."""
    fake = tmp_path / "fakebin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nexec {jail.shutil.which("bwrap")} --ro-bind /no-such-folder /no-such-folder "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("PTXBENCH_JAIL", "bwrap")


@pytest.mark.skipif("bwrap" not in jail.available_modes(), reason="no working bwrap here")
def test_a_bwrap_that_cannot_start_is_an_infra_error_never_the_models_compile_error(monkeypatch, tmp_path):
    """bwrap's own failure (its `bwrap: ...` line, status 1) came back as the tool's output: the model was shown it as
    its compile error, and the verdict was cached."""
    from ptxbench.tools.toolchain import ToolchainError, find_toolchain

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    code = "#include <cuda_bf16.h>\n" + KERNEL
    with pytest.MonkeyPatch.context() as failing:
        _bwrap_that_fails_to_start(failing, tmp_path)
        with jail.Workspace() as wd, pytest.raises(jail.JailError) as failed:
            jail.run_in_jail(find_toolchain("sm_90a"), ["/bin/true"], wd, 20)
        assert isinstance(failed.value, ToolchainError)
        assert "could not start (bwrap: Can't find source path /no-such-folder" in str(failed.value), failed.value
        evaluated = LocalEvaluator().evaluate(WORKLOAD, PLAN + code, EvalOptions(no_gpu=True))
        assert evaluated.status == "INFRA_ERROR" and "bwrap: " in evaluated.message, evaluated.message
    monkeypatch.setenv("PTXBENCH_JAIL", "bwrap")
    again = compile_source(code, "cuda", "sm_90a")
    assert again.status == "ok" and not again.cached, again.errors


@pytest.mark.skipif("bwrap" not in jail.available_modes(), reason="no working bwrap here")
def test_a_tool_that_says_bwrap_and_fails_is_its_own_result(monkeypatch):
    """Only bwrap's report that it never ran the tool makes a JailError: a tool's own `bwrap: ` line and status 1 (text
    the model could make a compiler print) stay the tool's result."""
    from ptxbench.tools.toolchain import find_toolchain

    monkeypatch.setenv("PTXBENCH_JAIL", "bwrap")
    with jail.Workspace() as wd:
        res = jail.run_in_jail(find_toolchain("sm_90a"), ["/bin/sh", "-c", 'echo "bwrap: no" >&2; exit 1'], wd, 20)
    assert res.returncode == 1 and res.output == "bwrap: no", res


@pytest.mark.parametrize("mode", [m for m in jail.available_modes() if m != "limits"])
def test_a_jail_runs_under_a_temporary_folder_with_a_space(mode, monkeypatch, tmp_path):
    """The unshare script made its mount points with one mkdir of a space-separated list: under a TMPDIR with a space
    none was made, and every compile stopped with `cannot bind /usr/bin`, an infra error."""
    from ptxbench.tools.toolchain import find_toolchain

    monkeypatch.setenv("PTXBENCH_JAIL", mode)
    (tmp_path / "my temp").mkdir()
    monkeypatch.setattr(jail.tempfile, "tempdir", str(tmp_path / "my temp"))
    with jail.Workspace() as wd:
        res = jail.run_in_jail(find_toolchain("sm_90a"), ["/bin/sh", "-c", "pwd"], wd, 20)
    assert res.returncode == 0 and res.output == str(wd), res.output


def _unshare_with_mount(monkeypatch, cases: str) -> None:
    """The unshare mode, its script's `mount` a shell function that handles `cases` (case patterns of "$*") its own
    way and passes every other mount to the real one."""
    fake = f'mount() {{\n  case "$*" in\n{cases}\n  esac\n  command mount "$@"\n}}\n'
    monkeypatch.setattr(jail, "_UNSHARE_SCRIPT", fake + jail._UNSHARE_SCRIPT)
    monkeypatch.setenv("PTXBENCH_JAIL", "unshare")


# util-linux before 2.27: `mount --rbind -o ro SRC DST` binds and ignores ro, and says nothing
OLD_UTIL_LINUX = '    *"--rbind -o ro "*) command mount --rbind "$4" "$5"; return;;'
# the host has a mount under /usr/include: a recursive bind brings it along, and ro reaches only the bind's top
NESTED_UNDER_INCLUDE = ('    "--rbind -o ro /usr/include "*) command mount "$@" && command mount --bind "$4/{sub}" "$5/{sub}";'
                        ' return;;')


def _writable_in_the_jail(folders: list[str], prefix: str = "ptxbench-compile-") -> str:
    from ptxbench.tools.toolchain import find_toolchain

    with jail.Workspace(prefix=prefix) as wd:
        res = jail.run_in_jail(find_toolchain("sm_90a"), ["/bin/sh", "-c", 'for d in "$@"; do [ -w "$d" ] && '
                               'echo "writable $d"; done; [ -w . ] && echo "the work folder is writable"', "probe",
                               *folders], wd, 20)
    assert res.returncode == 0, res.output
    return res.output


@pytest.mark.skipif("unshare" not in jail.available_modes(), reason="no user + mount namespaces here")
@pytest.mark.parametrize("prefix", ["ptxbench-compile-", "ptxbench compile\\x-"])  # mountinfo escapes both
def test_a_read_only_bind_that_old_util_linux_left_writable_is_made_read_only(monkeypatch, prefix):
    """`mount --rbind -o ro` succeeded without ro (util-linux before 2.27): the system folders and the toolchain's
    were writable in the jail, and nothing looked at the view the mounts made."""
    from ptxbench.tools.toolchain import find_toolchain

    _unshare_with_mount(monkeypatch, OLD_UTIL_LINUX)
    folders = ["/usr/lib", "/usr/include", os.path.dirname(os.path.realpath(find_toolchain("sm_90a").ptxas.path))]
    assert _writable_in_the_jail(folders, prefix) == "the work folder is writable"


@pytest.mark.skipif("unshare" not in jail.available_modes(), reason="no user + mount namespaces here")
def test_a_mount_nested_under_a_read_only_bind_is_made_read_only(monkeypatch):
    """A recursive bind brings the host's mounts under a folder along, and ro (or the remount) reached only its top:
    a nested mount stayed writable."""
    sub = next(p.name for p in sorted(Path("/usr/include").iterdir()) if p.is_dir() and not p.is_symlink())
    _unshare_with_mount(monkeypatch, NESTED_UNDER_INCLUDE.format(sub=sub))
    assert _writable_in_the_jail([f"/usr/include/{sub}", "/usr/include"]) == "the work folder is writable"


@pytest.mark.skipif("unshare" not in jail.available_modes(), reason="no user + mount namespaces here")
def test_a_writable_mount_that_cannot_be_remounted_read_only_stops_the_jail(monkeypatch):
    _unshare_with_mount(monkeypatch, OLD_UTIL_LINUX + '\n    *remount,ro,bind*) return 32;;')
    with pytest.raises(jail.JailError, match=r"could not start \(cannot build the view: cannot mount /\S+ read-only"):
        _writable_in_the_jail(["/usr/lib"])
