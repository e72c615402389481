"""What the CLI says on a machine that lacks what ptxbench needs, before anything is written: a Python older than
pyproject's requires-python, a dependency not installed, no ptxas, no litellm for an LLM model string, a model string
whose provider litellm does not know (a misspelt one), a hosted_vllm model with no server named. Each is one line on
stderr and exit status 2, not a traceback, nor a run folder that stops at its first step."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
W = "smoke_gemm_bf16_m256_n256_k512"
GOOD = str(ROOT / "tests/data/agent/good.ptx")


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def _one_line(result, words: str, status: int = 2) -> str:
    text = result.output
    assert "Traceback" not in text and (result.exception is None or isinstance(result.exception, SystemExit)), text
    assert result.exit_code == status, text
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], text
    return lines[0]


def _main(tmp_path, setup: str, *argv: str):
    """`ptxbench ARGV` in a fresh interpreter, `setup` run first (the console script's `main`, as installed)."""
    import subprocess

    # the entry point taken first, as the console script does (importing cli.main later shadows the name `main`)
    code = f"import sys\nfrom ptxbench.agent.cli import main as entry\n{setup}\nsys.argv[0] = 'ptxbench'\nentry()"
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()], done.stdout


def test_an_older_python_is_one_line_naming_the_version_needed(tmp_path):
    code, err, out = _main(tmp_path, "sys.version_info = (3, 10, 13, 'final', 0)", "workloads")
    assert code == 2 and len(err) == 1 and not out, err
    assert err[0].startswith("error: ptxbench needs Python 3.11 or later") and "3.10.13" in err[0], err


@pytest.mark.parametrize("missing,argv", [
    ("typer", ["workloads"]),  # imported at start
    ("langgraph", ["optimize", W, "--no-gpu", "--turns", "1", "--run-dir", "run", "--quiet"]),  # by the command
])
def test_a_dependency_not_installed_is_one_line_naming_it_and_the_install(tmp_path, missing, argv):
    code, err, _ = _main(tmp_path, f"sys.modules[{missing!r}] = None", *argv)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: the package {missing!r} that ptxbench needs is not installed"), err
    assert "pip install -e '.[all]'" in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_missing_module_of_ptxbench_itself_keeps_its_traceback(tmp_path):
    setup = ("import ptxbench.agent.cli.main as m\n"
             "def run(): raise ModuleNotFoundError('No module named ptxbench.agent.nope', name='ptxbench.agent.nope')\n"
             "m.app = run")
    code, err, _ = _main(tmp_path, setup, "workloads")
    assert code == 1 and "Traceback" in "\n".join(err), err  # a bug of ptxbench's, not the machine's
    assert err[-1] == "ModuleNotFoundError: No module named ptxbench.agent.nope", err


def test_a_gpu_package_missing_names_the_gpu_extra(tmp_path):
    setup = ("import ptxbench.agent.cli.main as m\n"
             "def run(): raise ModuleNotFoundError('No module named cuda', name='cuda.bindings')\n"
             "m.app = run")
    code, err, _ = _main(tmp_path, setup, "eval")
    assert code == 2 and len(err) == 1 and "the package 'cuda' that ptxbench needs" in err[0], err
    assert "pip install -e '.[all,gpu]'" in err[0], err


@pytest.mark.parametrize("argv", [
    ["optimize", W, "--no-gpu", "--turns", "1", "--run-dir", "runs/r"],
    ["optimize", W, "--turns", "1", "--run-dir", "runs/r"],
    ["bench", "--models", "builtin/tuner", "--workloads", W, "--trajectories", "1", "--turns", "1", "--no-gpu",
     "--run-dir", "runs/r"],
    ["eval", W, GOOD, "--no-gpu"],
    ["eval", W, GOOD],
    ["synth-repairs", "--run-dir", "runs/r"],
    ["score", str(ROOT / "docs/examples/optimize-gemm-tuner"), "--re-evaluate", "--no-gpu", "--out-run", "runs/r"],
], ids=lambda a: " ".join(a[:4]))
def test_no_ptxas_is_one_line_before_a_run_is_made(workdir, monkeypatch, argv):
    """Without a toolchain every evaluation was an INFRA_ERROR: optimize made its run and stopped after the first
    model call, a bench ended with every trajectory infra-failed and exit status 0, eval printed the verdict table."""
    from ptxbench.tools.evaluate import LocalEvaluator

    monkeypatch.setenv("PTXBENCH_CUDA_BIN", str(workdir / "no-cuda-here"))
    monkeypatch.setattr("ptxbench.agent.cli.preflight.no_gpu_reason", lambda: None)  # a GPU: only ptxas is missing
    monkeypatch.setattr(LocalEvaluator, "pool", property(lambda self: pytest.fail("a GPU worker was started")))
    monkeypatch.setattr(LocalEvaluator, "start_in_background", lambda self: pytest.fail("a GPU worker was started"))
    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: None)
    before = _files(workdir)
    result = CliRunner().invoke(app, argv)
    line = _one_line(result, "cannot compile here: no ptxas that supports sm_90a")
    assert "pip install nvidia-cuda-nvcc" in line and "PTXBENCH_CUDA_BIN" in line, line
    assert _files(workdir) == before, "a refused run left files behind"


def test_a_resumed_run_without_ptxas_is_refused_before_it_goes_on(workdir, monkeypatch):
    first = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "1", "--run-dir", "runs/r", "--quiet"])
    assert first.exit_code == 0, first.output
    monkeypatch.setenv("PTXBENCH_CUDA_BIN", str(workdir / "no-cuda-here"))
    log = next((workdir / "runs/r/trajectories").glob("*/trajectory.jsonl"))
    before = log.read_bytes()
    _one_line(CliRunner().invoke(app, ["optimize", "--resume", "runs/r", "--quiet"]), "cannot compile here")
    assert log.read_bytes() == before


@pytest.mark.parametrize("model,words", [
    ("opnai/gpt-5", "litellm knows no provider 'opnai': did you mean openai/gpt-5?"),
    ("hosted_vlm/Qwen/Qwen3-32B", "did you mean hosted_vllm/Qwen/Qwen3-32B?"),
    ("hosted_vllm/Qwen/Qwen3-32B", "give its URL with --api-base"),
])
def test_a_model_string_litellm_cannot_route_is_one_line_before_a_run_is_made(workdir, monkeypatch, model, words):
    """A misspelt provider failed the first call (LLM Provider NOT provided) and stopped the run as an infra failure
    that a --resume would repeat; a hosted_vllm model with no --api-base was retried as a connection error."""
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    before = _files(workdir)
    result = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "1", "--model", model])
    _one_line(result, words)
    assert _files(workdir) == before


def test_an_llm_model_without_litellm_installed_is_one_line(workdir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setitem(sys.modules, "litellm", None)  # not importable
    before = _files(workdir)
    result = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "1", "--model", "openai/gpt-5"])
    _one_line(result, "litellm, which is not installed in this Python: pip install -e '.[llm]'")
    assert _files(workdir) == before


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("argv", [
    ["compile", GOOD],
    ["eval", W, GOOD, "--no-gpu"],
    ["optimize", W, "--no-gpu", "--turns", "1", "--run-dir", "runs/r"],
    ["bench", "--models", "builtin/tuner", "--workloads", W, "--trajectories", "1", "--turns", "1", "--no-gpu",
     "--run-dir", "runs/r"],
], ids=lambda a: " ".join(a[:2]))
def test_a_compile_cache_that_cannot_be_written_is_one_line_naming_the_variable(workdir, monkeypatch, argv):
    """Every cubin lands in the compile cache: one that cannot be made (a read-only home, $PTXBENCH_CACHE on a virtual
    file system) ended every command that compiles in the traceback of its first compile."""
    monkeypatch.setenv("PTXBENCH_CACHE", "/proc/ptxbench-no-cache")  # /proc takes no new folders, not even root's
    before = _files(workdir)
    line = _one_line(CliRunner().invoke(app, argv), "cannot write the compile cache /proc/ptxbench-no-cache "
                                                    "($PTXBENCH_CACHE): ")
    assert line.endswith("point $PTXBENCH_CACHE at a folder you can write"), line
    assert _files(workdir) == before
