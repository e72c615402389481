"""A compiler killed from outside the jail (SIGTERM, SIGINT, SIGHUP: a shutdown, a supervisor) says nothing about the
source: the compile runs once more; killed again it is INFRA_ERROR; either way nothing is cached, so a later compile
of the same text is not served a stale failure. A compiler that crashes on its input (SIGSEGV) stays the source's
compile error (the memory limit's, most likely), and is cached as one."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools import compile as compile_module
from ptxbench.tools.compile import CompilerKilled, compile_source
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.toolchain import ProcResult
from ptxbench.workloads.solutions.faults import load_corpus

KERNELS = Path(__file__).parents[1] / "data" / "kernels"
KERNEL, CUDA_KERNEL = (KERNELS / "fma_sm90a.ptx").read_text(), (KERNELS / "inline_ptx_sm90a.cu").read_text()
WORKLOAD, CORPUS = load_corpus()
REAL_JAIL = compile_module.run_in_jail


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))


def kill(monkeypatch, tool: str, times: int, code: int) -> list[str]:
    """The first `times` runs of `tool` (nvcc or ptxas) end with `code`, as if killed; returns the tools run, in order."""
    real, ran = REAL_JAIL, []

    def jail(tc, argv, workdir, timeout_s, **kw):
        name = Path(argv[0]).name
        ran.append(name)
        if name == tool and ran.count(name) <= times:
            return ProcResult(returncode=code, stderr="")
        return real(tc, argv, workdir, timeout_s, **kw)

    monkeypatch.setattr(compile_module, "run_in_jail", jail)
    return ran


@pytest.mark.parametrize("code", [-15, 143, -2, -1])
def test_one_kill_from_outside_is_compiled_again(monkeypatch, code):
    ran = kill(monkeypatch, "nvcc", 1, code)
    result = compile_source(CUDA_KERNEL, "cuda")
    assert result.status == "ok" and result.cubin_path and not result.cached
    assert ran.count("nvcc") == 2  # the killed run, then the one that compiled
    assert compile_source(CUDA_KERNEL, "cuda").cached  # the good result is the one kept


def test_killed_twice_is_the_machines_failure_and_nothing_is_cached(monkeypatch):
    kill(monkeypatch, "ptxas", 99, -15)
    with pytest.raises(CompilerKilled, match="SIGTERM"):
        compile_source(KERNEL, "ptx")
    monkeypatch.setattr(compile_module, "run_in_jail", REAL_JAIL)
    again = compile_source(KERNEL, "ptx")
    assert again.status == "ok" and not again.cached  # no failure was stored for this text


def test_an_evaluation_whose_nvcc_is_killed_twice_is_infra_error(monkeypatch):
    kill(monkeypatch, "nvcc", 99, 143)
    result = LocalEvaluator().evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(no_gpu=True))
    assert result.status == "INFRA_ERROR" and "nvcc was killed by SIGTERM" in result.message
    assert not result.gpu_evaluated


def test_a_compiler_that_crashes_on_its_input_is_a_cached_compile_error(monkeypatch):
    from ptxbench.tools import limit_hit

    kill(monkeypatch, "ptxas", 99, -11)
    monkeypatch.setattr(limit_hit, "smallest_fits", lambda *a, **k: True)  # only this input crashes it
    result = compile_source(KERNEL, "ptx")
    assert result.status == "error" and "ptxas crashed (SIGSEGV), most likely at its memory limit" in \
        result.errors[0].message, result.errors
    monkeypatch.setattr(compile_module, "run_in_jail", REAL_JAIL)
    assert compile_source(KERNEL, "ptx").cached  # SIGSEGV is the input's doing: the same text fails the same way


def test_ptxbench_compile_says_the_compiler_was_killed_and_exits_1(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli import app

    kill(monkeypatch, "ptxas", 99, -15)
    (tmp_path / "k.ptx").write_text(KERNEL)
    out = CliRunner().invoke(app, ["compile", str(tmp_path / "k.ptx"), "--json"])
    assert out.exit_code == 1 and '"status": "compiler_killed"' in out.output and "SIGTERM" in out.output
