"""`optimize --resume DIR`: an option the resumed run fixes, given with another value than DIR's run recorded, is
refused in one line (exit status 2, nothing written); the same value is accepted; a folder that several runs share
says which trajectory --resume continues."""
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = "smoke_gemm_bf16_m256_n256_k512"
CLI = [sys.executable, "-m", "ptxbench.agent"]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("resume_options")
    done = _cli(cwd, "optimize", WORKLOAD, "--no-gpu", "--turns", "2", "--run-dir", "r", "--quiet")
    assert done.returncode == 0, done.stderr
    return cwd


@pytest.mark.parametrize("args, said", [
    (["smoke_mha_fwd_d64"], "WORKLOAD smoke_mha_fwd_d64 differs from its " + WORKLOAD),
    (["--model", "builtin/reference"], "--model builtin/reference differs from its builtin/tuner"),
    (["--prompt", "expert"], "--prompt expert differs from its knowledge"),
    (["--mode", "tools"], "--mode tools differs from its pipeline"),
    (["--arch", "sm_100a"], "--arch sm_100a differs from its sm_90a"),
    (["--turns", "5"], "--turns 5 differs from its 2; the turn limit"),
    (["--run-dir", "elsewhere"], "--run-dir elsewhere names another folder"),
])
def test_resume_refuses_a_different_option(run, args, said):
    before = _snapshot(run)
    done = _cli(run, "optimize", "--resume", "r", *args, "--quiet")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: --resume continues r's run: ") and said in done.stderr
    assert _snapshot(run) == before  # nothing written


def test_resume_accepts_the_recorded_values(run):
    done = _cli(run, "optimize", WORKLOAD, "--resume", "r", "--turns", "2", "--no-gpu", "--model", "builtin/tuner",
                "--quiet")
    assert done.returncode == 0, done.stderr
    assert "stop: turn_limit" in done.stdout and done.stderr == ""


def test_resume_of_a_shared_folder_names_the_trajectory(run):
    second = _cli(run, "optimize", WORKLOAD, "--no-gpu", "--turns", "1", "--run-dir", "r", "--quiet")
    assert second.returncode == 0, second.stderr
    done = _cli(run, "optimize", "--resume", "r", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"note: r holds 2 trajectories; --resume continues the newest, "
                                        f"{WORKLOAD}__builtin-tuner__knowledge__01"]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("bench_resume_options")
    done = _cli(cwd, "bench", "--models", "builtin/tuner", "--workloads", WORKLOAD, "--trajectories", "1", "--turns", "1",
                "--no-gpu", "--run-dir", "b", "--no-report")
    assert done.returncode == 0, done.stderr
    return cwd


@pytest.mark.parametrize("args, said", [
    (["--turns", "5"], "--turns 5: bench --resume goes on with the matrix b's run recorded (--turns 1)"),
    (["--models", "builtin/reference"], "--models builtin/reference: bench --resume goes on with the matrix b's run "
                                        "recorded (--models builtin/tuner)"),
    (["--workloads", "mha_fwd_d128"], "--workloads mha_fwd_d128:"),
    (["--prompts", "basic"], "--prompts basic:"),
    (["--trajectories", "3"], "--trajectories 3:"),
    (["--profile", "full"], "--profile full:"),
])
def test_bench_resume_refuses_a_matrix_option_the_run_recorded_otherwise(bench_run, args, said):
    """`bench --resume --turns 5` went on with the recorded turns without a word, as every matrix option given with
    --resume was dropped; optimize --resume refuses such an option, and so does bench now."""
    before = _snapshot(bench_run)
    done = _cli(bench_run, "bench", "--run-dir", "b", "--resume", "--no-report", *args)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {said}"), done.stderr
    assert "drop it, or start a new --run-dir" in lines[0]
    assert _snapshot(bench_run) == before


def test_bench_resume_takes_the_first_command_again_and_its_runtime_options(bench_run):
    done = _cli(bench_run, "bench", "--models", "builtin/tuner", "--workloads", WORKLOAD, "--trajectories", "1",
                "--turns", "1", "--no-gpu", "--run-dir", "b", "--resume", "--no-report", "--parallel", "2")
    assert done.returncode == 0, done.stderr
