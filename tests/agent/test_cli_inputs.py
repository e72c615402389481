"""Every bad input to every command: one line saying what is wrong, exit status 2 (usage) or 1 (a failed
run), no traceback, and nothing written (no run folder, no output folder) for input rejected up front."""
from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
W = "smoke_gemm_bf16_m256_n256_k512"
GOOD = str(ROOT / "tests/data/agent/good.ptx")
EXAMPLE_RUN = str(ROOT / "docs/examples/optimize-gemm-tuner")
SYNTH_RUN = str(ROOT / "docs/examples/synth-repairs/run")
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "MY_VLLM_KEY")

# (command line, exit status, words the one line must hold)
CASES = [
    # optimize
    (["optimize", "no_such_workload"], 2, "unknown workload"),
    (["optimize", W, "--arch", "sm_80"], 2, "unknown arch"),
    (["optimize", W, "--model", "builtin/nope"], 2, "builtin/tuner"),
    (["optimize", W, "--model", ""], 2, "--model is empty"),
    (["optimize", W, "--model", "../x y"], 2, "not a model string"),
    (["optimize", W, "--model", "replay/nowhere"], 2, "no trajectory.jsonl"),
    (["optimize", W, "--prompt", "nope"], 2, "unknown prompt variant"),
    (["optimize", W, "--mode", "nope"], 2, "--mode"),
    (["optimize", W, "--context", "nope"], 2, "--context"),
    (["optimize", W, "--turns", "0"], 2, "--turns"),
    (["optimize", W, "--turns", "10001"], 2, "--turns"),
    (["optimize", W, "--trials", "0"], 2, "--trials"),
    # each trial is an input set held on the GPU: 100000 was a PLAN_ERROR blamed on the kernel, or hours of checks
    (["optimize", W, "--trials", "100000"], 2, "less than or equal to 32"),
    (["optimize", W, "--l2-flush", "reed"], 2, "did you mean read?"),
    (["optimize", W, "--max-cost", "-1"], 2, "--max-cost"),
    (["optimize", W, "--model-timeout", "0"], 2, "--model-timeout"),
    (["optimize", W, "--bogus"], 2, "No such option"),
    (["optimize"], 2, "give a WORKLOAD"),
    (["optimize", "--resume", "/nonexistent/run"], 2, "no run at"),
    (["optimize", W, "--model", "openai/gpt-5"], 2, "OPENAI_API_KEY"),
    (["optimize", W, "--model", "anthropic/claude-opus-4-1"], 2, "ANTHROPIC_API_KEY"),
    (["optimize", W, "--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--api-key-env", "MY_VLLM_KEY"], 2,
     "MY_VLLM_KEY is not set"),
    (["optimize", W, "--model", "openai/m", "--api-base", "localhost:8000"], 2, "not an http(s) URL"),
    # tracebacks out of the URL's parse and the probe's name lookup
    (["optimize", W, "--model", "openai/m", "--api-base", "http://[::1"], 2, "not an http(s) URL; expected e.g. "
     "http://localhost:8000/v1 (Invalid IPv6 URL)"),
    (["optimize", W, "--model", "openai/m", "--api-base", "http://h\udcff/v1"], 2, "not an http(s) URL"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher", "openai/m", "--teacher-api-base",
      "http://a b/v1"], 2, "--teacher-api-base 'http://a b/v1' is not an http(s) URL"),
    (["optimize", W, "--run-dir", "f/run"], 2, "is a file"),
    # a device or a shell's <(...) pipe was "no such file"
    (["optimize", W, "--no-gpu", "--start-from", "/dev/null"], 2,
     "--start-from /dev/null: not a regular file (a device or a pipe); give the kernel's file"),
    (["optimize", W, "--no-gpu", "--start-from", "missing.ptx"], 2, "--start-from missing.ptx: no such file"),
    # an empty folder option is no '.': typer's Path made it the working directory, where the run was written
    (["optimize", W, "--no-gpu", "--run-dir", ""], 2, "--run-dir is empty"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--run-dir", ""], 2, "--run-dir is empty"),
    (["synth-repairs", "--run-dir", ""], 2, "--run-dir is empty"),
    (["score", EXAMPLE_RUN, "--re-evaluate", "--no-gpu", "--out-run", ""], 2, "--out-run is empty"),
    (["profile", W, GOOD, "--keep", ""], 2, "--keep is empty"),
    # more options given empty (an unset shell variable): taken as not given without a word (export ran with no teacher,
    # an LLM went to its provider's own endpoint), or made '.' by typer (--start-from "" was "a folder")
    (["optimize", W, "--no-gpu", "--start-from", ""], 2, "--start-from is empty: give the kernel file to start from"),
    (["optimize", "--resume", ""], 2, "--resume is empty: give the run folder to continue"),
    (["optimize", W, "--no-gpu", "--model", "openai/gpt-5", "--api-base", ""], 2, "--api-base is empty"),
    (["optimize", W, "--no-gpu", "--model", "openai/gpt-5", "--api-key-env", ""], 2, "--api-key-env is empty"),
    (["bench", "--models", "openai/m", "--workloads", W, "--no-gpu", "--api-base", ""], 2, "--api-base is empty"),
    (["bench", "--models", "openai/m", "--workloads", W, "--no-gpu", "--provider-limit", ""], 2,
     "--provider-limit is empty"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--backend", "ray", "--ray-address", ""], 2,
     "--ray-address is empty"),
    (["bench", "--track", "repair", "--models", "builtin/tuner", "--no-gpu", "--suite", ""], 2,
     "--suite is empty: give the suite folder, or leave it out for workloads/repairs"),
    (["repairs", "list", "--suite", ""], 2, "--suite is empty"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher", ""], 2,
     "--teacher is empty: name the litellm model, or leave it out for rows without reasoning"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher-api-base", ""], 2,
     "--teacher-api-base is empty"),
    # pyarrow writes parquet to no such path: "<the run>: 'utf-8' codec can't encode", exit 1, an empty --out left
    (["export", EXAMPLE_RUN, "--recipe", "kernelgen", "--out", "out\udcfe"], 2,
     "the path is not UTF-8 text, to which pyarrow writes no parquet file; name another folder, or --format jsonl"),
    # bench
    (["bench", "--models", "builtin/tuner", "--workloads", "nope", "--no-gpu"], 2, "unknown workload"),
    (["bench", "--workloads", W, "--no-gpu"], 2, "give --models and --workloads"),
    (["bench", "--models", "builtin/tuner", "--workloads", f"{W},{W}", "--no-gpu"], 2,
     f"--workloads names {W} twice: each is one cell of the matrix"),
    # an LLM's options beside models that call none: the --model forgotten, the server left alone without a word
    (["optimize", W, "--no-gpu", "--api-base", "http://localhost:8000/v1"], 2,
     "--api-base acts on an LLM's calls, and builtin/tuner makes none: name the LLM with --model"),
    (["optimize", W, "--no-gpu", "--model", "builtin/reference", "--temperature", "0.2", "--api-key-env", "K"], 2,
     "--api-key-env, --temperature act on an LLM's calls, and builtin/reference makes none"),
    (["optimize", W, "--no-gpu", "--max-tool-calls", "10"], 2, "--max-tool-calls bounds the tool calls of --mode tools"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--api-base", "http://localhost:8000/v1"], 2,
     "--api-base acts on an LLM's calls, and builtin/tuner makes none: name the LLM with --models"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--gpus", "2"], 2,
     "--gpus acts on the GPU run, which --no-gpu skips"),
    (["bench", "--track", "repair", "--no-gpu"], 2, "give --models (comma-separated; the repair track's tasks are"),
    (["bench", "--models", "builtin/tunr", "--workloads", W, "--no-gpu"], 2, "did you mean builtin/tuner"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--prompts", "basic,nope", "--no-gpu"], 2, "prompt"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--arch", "sm_80", "--no-gpu"], 2, "unknown arch"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--model-timeout", "0.5", "--no-gpu"], 2, "--model-timeout"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--mode", "x", "--no-gpu"], 2, "--mode"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--backend", "x", "--no-gpu"], 2, "--backend"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--provider-limit", "openai", "--no-gpu"], 2, "provider=N"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--provider-limit", "bultin=4", "--no-gpu"], 2,
     "--provider-limit bultin=4: no model of the matrix calls 'bultin': did you mean builtin?"),
    (["bench", "--models", "builtin/tuner,builtin/tuner", "--workloads", W, "--no-gpu"], 2, "--models names builtin/tuner twice"),
    (["bench", "--models", "openai/gpt-5", "--workloads", W, "--no-gpu"], 2, "OPENAI_API_KEY"),
    (["bench", "--workloads", W], 2, "--models"),
    # a list given empty (an unset shell variable) names nothing: --prompts "" ran the knowledge prompt without a word,
    # and the repair track's --workloads "" its suite's every task, where --models "" was refused
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--prompts", "", "--no-gpu"], 2,
     "--prompts '' names nothing: give comma-separated prompt variants"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--prompts", " , ", "--no-gpu"], 2,
     "--prompts ' , ' names nothing"),
    (["bench", "--models", "builtin/tuner", "--track", "repair", "--workloads", "", "--no-gpu"], 2,
     "--workloads '' names nothing: give comma-separated workload ids"),
    (["bench", "--models", "", "--workloads", W, "--no-gpu"], 2, "--models '' names nothing"),
    # options the run ignored without a word
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--suite", "workloads/repairs", "--no-gpu"], 2,
     "goes with --track repair"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--ray-address", "auto", "--no-gpu"], 2,
     "--ray-address goes with --backend ray"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--trajectories", "100000000"], 2,
     "Invalid value for '--trajectories'"),  # it expanded its matrix for half an hour, silent
    (["bench", "--resume"], 2, "--run-dir"),
    (["bench", "--resume", "--run-dir", "nowhere"], 2, "no bench run folder"),
    # compile, eval, profile
    (["compile", "missing.ptx"], 2, "does not exist"),
    (["compile", GOOD, "--arch", "sm_80"], 2, "--arch"),
    (["compile", GOOD, "--workload", "nope"], 2, "unknown workload"),
    (["compile", GOOD, "--language", "fortran"], 2, "--language"),
    # --workload compiles as eval does: --language cuda compiled a PTX file as PTX, and said so, without a word
    (["compile", GOOD, "--workload", W, "--language", "cuda"], 2,
     "--language cannot act with --workload, which checks and compiles the file as eval does"),
    (["compile", GOOD, "--workload", W, "--no-cache", "--language", "ptx"], 2,
     "--language and --no-cache cannot act with --workload"),
    (["compile", "bad.ptx"], 1, "error"),  # compile errors: listed, then exit 1
    (["compile", "seven.ptx", "--workload", W], 1, "parameters"),
    (["eval", "nope", GOOD], 2, "unknown workload"),
    (["eval", W, "missing.ptx"], 2, "does not exist"),
    (["eval", W, GOOD, "--arch", "sm_80"], 2, "unknown arch"),
    (["eval", W, GOOD, "--dist", "uniform"], 2, "--dist"),
    (["eval", W, GOOD, "--l2-flush", "clean"], 2, "--l2-flush 'clean': expected one of write, read"),
    (["eval", W, GOOD, "--sanitize", "leakcheck"], 2, "--sanitize"),
    (["eval", W, GOOD, "--trials", "0"], 2, "--trials"),
    (["eval", W, GOOD, "--trials", "100000"], 2, "--trials must be at most 32"),
    # nan passed `value <= 0` (a watchdog of nan seconds); inf is none
    (["eval", W, GOOD, "--no-gpu", "--timeout", "nan"], 2, "--timeout must be positive and finite, got nan"),
    (["profile", W, GOOD, "--timeout", "inf"], 2, "--timeout must be positive and finite, got inf"),
    (["synth-repairs", "--timeout-s", "nan"], 2, "--timeout-s must be positive and finite, got nan"),
    # torch's generator takes 64 bits: every input set after the first failed on the GPU, an INFRA_ERROR of the
    # harness's own (a bench's trajectories retried, then left out of the scores)
    (["eval", W, GOOD, "--seed", "18446744073709551615"], 2,
     "--seed must be a whole number from 0 to 2**63 - 1 (it seeds the evaluation's input sets), got 18446744073709551615"),
    (["eval", W, GOOD, "--seed", "-1"], 2, "--seed must be a whole number from 0 to 2**63 - 1"),
    (["profile", W, GOOD, "--seed", "18446744073709551615"], 2, "--seed must be a whole number from 0 to 2**63 - 1"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--seed", "18446744073709551615"], 2,
     "--seed must be a whole number from 0 to 2**63 - 1"),
    # past ~1e10 s a wait overflows the clock that keeps it: --model-timeout 1e11 failed every model call as a server
    # error (6 attempts, an infra stop), profile's ncu subprocess raised OverflowError
    (["optimize", W, "--no-gpu", "--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--model-timeout", "1e11"],
     2, "--model-timeout must be at most 604800 seconds (a week), got 1e+11"),
    (["optimize", W, "--no-gpu", "--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--retry-wait", "1e11"],
     2, "--retry-wait must be at most 604800 seconds (a week)"),
    (["bench", "--models", "openai/m", "--workloads", W, "--api-base", "http://127.0.0.1:9/v1", "--model-timeout", "1e11"],
     2, "--model-timeout must be at most 604800 seconds (a week)"),
    (["profile", W, GOOD, "--timeout", "1e11"], 2, "--timeout must be at most 604800 seconds (a week)"),
    (["eval", W, GOOD, "--timeout", "1e11"], 2, "--timeout must be at most 604800 seconds (a week)"),
    (["synth-repairs", "--timeout", "1e11"], 2, "--timeout must be at most 604800 seconds (a week)"),
    (["profile", "nope", GOOD], 2, "unknown workload"),
    (["profile", W, "missing.ptx"], 2, "does not exist"),
    (["profile", W, GOOD, "--arch", "sm_80"], 2, "--arch"),
    # export, score, report, synth-repairs, workloads
    (["export", "/nonexistent", "--recipe", "fixit", "--out", "out"], 2, "no run folder"),
    # a dataset written among a run's records (score and report read trajectories/x as a damaged trajectory), as
    # report's --out and --run-dir refuse theirs
    (["export", EXAMPLE_RUN, "--recipe", "kernelgen", "--out", "a_run/trajectories/x"], 2,
     "--out a_run/trajectories/x is inside the run "),
    (["export", EXAMPLE_RUN, "--recipe", "kernelgen", "--out", "a_run/trajectories/../x"], 2, "is inside the run "),
    (["export", EXAMPLE_RUN, "--recipe", "kernelgen", "--out", "a_run"], 2, "--out a_run is a run folder: name a "
     "folder outside it"),
    (["export", EXAMPLE_RUN, "--recipe", "nope", "--out", "out"], 2, "--recipe"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--format", "csv"], 2, "--format"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--tokenizer", "gpt2"], 2, "--tokenizer"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--test-workloads", "nope"], 2, "--test-workloads"),
    # an unset shell variable: no test split was exported without a word (and " , " named the workload " ")
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--test-workloads", ""], 2,
     "--test-workloads '' names nothing: give comma-separated workload ids, or leave it out for no test split"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--test-workloads", " , "], 2,
     "--test-workloads ' , ' names nothing"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--min-speedup", "nan"], 2,
     "--min-speedup must be a finite number, 0 or more, got nan"),  # nan passed `< 0`, and kept no row without a word
    (["export", EXAMPLE_RUN, "--recipe", "fixit"], 2, "--out"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", ""], 2, "--out is empty"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--tokenizer", "tiktoken:nope"], 2,
     "--tokenizer 'tiktoken:nope' cannot be loaded"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--tokenizer", "tiktoken:"], 2, "names no tokenizer"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--tokenizer", "hf:/nonexistent/tok"], 2,
     "--tokenizer 'hf:/nonexistent/tok' cannot be loaded"),
    # the teacher writes prose: a builtin/ or replay/ model was litellm's late error after --out was made, exit 1
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher-api-base", "http://localhost:8000/v1"], 2,
     "--teacher-api-base goes with --teacher"),
    (["export", EXAMPLE_RUN, "--recipe", "kernelgen", "--out", "out", "--teacher", "openai/gpt-5"], 2,
     "--teacher writes reasoning before the fix of each Fixit row: it goes with --recipe fixit"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher", "builtin/tuner"], 2,
     "--teacher builtin/tuner: the teacher writes reasoning"),
    (["score", "/nonexistent"], 2, "no run folder"),
    (["score", "."], 2, "not a run folder"),
    (["score", EXAMPLE_RUN, "--out-run", "x"], 2, "--re-evaluate"),
    (["report", "/nonexistent"], 2, "no run folder"),
    (["report", EXAMPLE_RUN, "--out", "f"], 2, "is a file"),
    (["report", EXAMPLE_RUN, "--out", ""], 2, "--out is empty"),
    (["synth-repairs", "nope"], 2, "unknown workload"),
    (["synth-repairs", "--mutations", "nope"], 2, "unknown bug class"),
    # an unset shell variable named no class: every class was listed, and synthesized on a GPU, without a word
    (["synth-repairs", "--list", "--mutations", ""], 2, "--mutations '' names nothing: give comma-separated bug classes"),
    (["synth-repairs", "--list", "--mutations", " , "], 2, "--mutations ' , ' names nothing"),
    # EvalOptions refused it only once the run's manifest was written, in a traceback (eval's bound, said up front)
    (["synth-repairs", "--trials", "100"], 2, "--trials must be at most 32"),
    (["synth-repairs", "--run-dir", EXAMPLE_RUN], 2, "holds an optimize run; choose another folder"),
    # --list evaluates and writes nothing: the synthesis run's options beside it were taken and dropped without a word
    (["synth-repairs", "--list", "--trials", "2"], 2,
     "--trials acts on the synthesis run, which --list skips (it evaluates and writes nothing): drop it, or --list"),
    (["synth-repairs", "--list", "--timeout", "5", "--run-dir", "r"], 2, "--run-dir, --timeout act on the synthesis run"),
    (["synth-repairs", "--list", "--timeout-s", "5"], 2, "--timeout-s acts on the synthesis run, which --list skips"),
    # evaluated twice on the GPU, and each pair counted twice in the table and the pair count
    (["synth-repairs", "--list", W, W], 2, f"WORKLOADS names {W} twice: each is synthesized once"),
    (["synth-repairs", "--list", "--mutations", "wrong_swizzle,wrong_swizzle"], 2,
     "--mutations names wrong_swizzle twice"),
    # a misspelt --suite was told to build the committed suite, at workloads/repairs, on a GPU
    (["repairs", "list", "--suite", "workloads/repair"], 2,
     "no repair suite at workloads/repair: it does not exist; give the folder a suite build wrote (the committed one is"),
    (["repairs", "show", "x", "--suite", "f"], 2, "no repair suite at f: it is a file; give the folder a suite build"),
    (["bench", "--track", "repair", "--models", "builtin/tuner", "--no-gpu", "--suite", "f"], 2,
     "no repair suite at f: it is a file"),
    (["synth-repairs"], 2, "GPU"),  # this machine has none: said up front, nothing written
    (["workloads", "--bogus"], 2, "No such option"),
    (["nope"], 2, "No such command"),
]


def test_export_takes_test_workloads_written_with_a_space_after_the_comma(tmp_path):
    """`--test-workloads "a, b"` named the workload " b": refused as one no trajectory has, beside a list that showed b."""
    mha_run = str(ROOT / "docs/examples/tuner-climb-mha_fwd_d128/run3")
    result = CliRunner().invoke(app, ["export", EXAMPLE_RUN, mha_run, "--recipe", "kernelgen", "--format", "jsonl",
                                      "--out", str(tmp_path / "out"), "--test-workloads",
                                      "gemm_bf16_m8192_n7168_k5120, mha_fwd_d128"])
    assert result.exit_code == 0, result.output
    import json

    rows = [json.loads(line) for line in (tmp_path / "out" / "test.jsonl").read_text().splitlines()]
    assert {r["workload"] for r in rows} == {"gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128"}
    assert not (tmp_path / "out" / "train.jsonl").exists()


@pytest.mark.parametrize("what", ["--start-from", "--model replay/"])
def test_a_path_of_other_bytes_than_utf8_is_refused_before_the_run(workdir, what):
    """A file or run folder whose name is not UTF-8 (Python's lone surrogates) passed every check, then ended the run in
    a traceback: the start kernel's path at turn 0 (its JSON record), the replay's model string at its first checkpoint
    (the trajectory id, an SQLite key)."""
    gemm = "gemm_bf16_m8192_n7168_k5120"
    if what == "--start-from":
        odd = workdir / "k\udcfd.ptx"
        odd.write_text(Path(GOOD).read_text())
        argv = ["optimize", W, "--start-from", str(odd)]
    else:
        odd = workdir / "r\udcff"
        shutil.copytree(EXAMPLE_RUN, odd)
        argv = ["optimize", gemm, "--model", f"replay/{odd}"]
    before = _files(workdir)
    result = CliRunner().invoke(app, [*argv, "--no-gpu", "--quiet", "--turns", "1", "--run-dir", "run"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "is not UTF-8 text" in lines[0] and "Traceback" not in result.output, result.output
    assert _files(workdir) == before


@pytest.mark.parametrize("run, argv, words", [
    (SYNTH_RUN, ["bench", "--resume", "--run-dir"], "holds a synth-repairs run, not a bench run"),
    (SYNTH_RUN, ["optimize", "--resume"], "holds a synth-repairs run: --resume continues optimize runs"),
    (EXAMPLE_RUN, ["bench", "--resume", "--run-dir"], "holds an optimize run, not a bench run: continue it with"),
], ids=["bench synth", "optimize synth", "bench optimize"])
def test_a_sealed_run_of_another_command_is_refused_as_that(tmp_path, run, argv, words):
    """A sealed run that the command cannot continue was sent to `seal --undo` first, to be refused as another
    command's run once unsealed."""
    from ptxbench.agent.records.sealing import seal_run

    sealed = tmp_path / "run"
    shutil.copytree(run, sealed)
    seal_run(sealed)
    result = CliRunner().invoke(app, [*argv, str(sealed)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and words in lines[0], result.output
    assert "--undo" not in lines[0], lines[0]


@pytest.mark.parametrize("argv", [["cache"], ["cache", "--clear"], ["cache", "--json"]])
@pytest.mark.parametrize("where", ["f", "f/cache"])
def test_a_compile_cache_that_is_a_file_is_said_to_be_one(workdir, monkeypatch, argv, where):
    """$PTXBENCH_CACHE naming a file read as an empty cache ('0 entries'), and --clear removed nothing, without a word."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(workdir / where))
    result = CliRunner().invoke(app, argv)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == (f"error: the compile cache {workdir / where} ($PTXBENCH_CACHE): {workdir / 'f'} is a file, not "
                        "a folder; point $PTXBENCH_CACHE at a folder"), lines[0]


@pytest.mark.parametrize("where", ["trajectories/new", "re", "report/re"])
def test_a_re_evaluation_is_not_written_inside_a_run(tmp_path, where):
    """`score RUN --re-evaluate --out-run RUN/trajectories/new` wrote the new run among RUN's trajectories, as a
    trajectory folder holding a whole run; optimize's and bench's --run-dir refuse a folder inside a run."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE_RUN, run)
    (run / "report").mkdir()
    before = _files(run)
    result = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu", "--out-run", str(run / where)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == f"error: --out-run {run / where} is inside the run {run}: name a folder outside it", lines[0]
    assert _files(run) == before


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", str(tmp_path / "runs"))
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "f").write_text("a file where a folder should be\n")
    (tmp_path / "a_run" / "trajectories").mkdir(parents=True)  # a run with no trajectory yet
    (tmp_path / "a_run" / "manifest.json").write_text('{"command": "bench", "trajectories": []}\n')
    (tmp_path / "bad.ptx").write_text((ROOT / "tests/data/kernels/syntax_error.ptx").read_text())
    seven = Path(GOOD).read_text()
    assert seven.count('"i32:K"') == 1
    (tmp_path / "seven.ptx").write_text(seven.replace('"i32:K"', '"i32:K", "i32:K"'))
    return tmp_path


def _gpu_here() -> bool:
    return os.system("nvidia-smi -L >/dev/null 2>&1") == 0


# `synth-repairs` without a GPU is a bad input only where there is none
_NO_GPU_CASE = pytest.mark.skipif(_gpu_here(), reason="synth-repairs refuses only on a machine without a GPU")


@pytest.mark.parametrize("argv,status,words",
                         [pytest.param(*c, marks=_NO_GPU_CASE) if c[0] == ["synth-repairs"] else c for c in CASES],
                         ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_line(workdir, argv, status, words):
    before = _files(workdir)
    start = time.monotonic()
    result = CliRunner().invoke(app, argv)
    assert time.monotonic() - start < 15
    text = result.output
    assert "Traceback" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == status, text
    if argv[0] == "compile" and status == 1:  # a compile report, not an error line: at least it says what failed
        assert words in text
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), text
        assert words in lines[0], text
    assert _files(workdir) == before, "rejected input left files behind"


_OPTIMIZE = ["optimize", W, "--no-gpu"]
_BENCH = ["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu"]


@pytest.mark.parametrize("argv,option,value", [
    # a budget meant as none (inf) was kept, on a --resume too (its runtime options replace the recorded config's
    # unchecked); nan and budgets of 0 or less were refused by the config, in a line of its own wording
    *[(_OPTIMIZE, "--max-wall", v) for v in ("inf", "nan", "-1", "0")],
    *[(_OPTIMIZE, "--max-cost", v) for v in ("inf", "0")],
    (_OPTIMIZE, "--model-timeout", "inf"),
    *[(_OPTIMIZE, "--target-speedup", v) for v in ("inf", "nan", "-1")],
    (_OPTIMIZE, "--retry-wait", "inf"), (_OPTIMIZE, "--temperature", "inf"),
    (["optimize", "--resume", "/nonexistent/run"], "--model-timeout", "inf"),
    (_BENCH, "--model-timeout", "inf"),
    *[(_BENCH, "--target-speedup", v) for v in ("inf", "nan")],
    (_BENCH + ["--backend", "ray"], "--ray-placement-wait", "inf"),
    (["bench", "--resume", "--run-dir", "nowhere"], "--model-timeout", "inf"),
])
def test_number_options_are_finite(workdir, argv, option, value):
    """A number option of optimize or bench that no run can keep (inf, nan, a budget of 0 or less) is one line naming
    the option, exit 2, before anything is written."""
    before = _files(workdir)
    result = CliRunner().invoke(app, argv + [option, value])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {option} must be "), result.output
    assert _files(workdir) == before


@pytest.mark.parametrize("argv,words", [
    (["bench", "--models", "gpt5", "--workloads", W, "--no-gpu"], "error: --models 'gpt5' names no provider"),
    (["export", EXAMPLE_RUN, "--recipe", "fixit", "--out", "out", "--teacher", "gpt5"], "error: --teacher 'gpt5' names no provider"),
], ids=["bench", "export"])
def test_a_bare_model_name_is_refused_naming_the_option_that_gave_it(workdir, argv, words):
    """As test_bad_input_is_one_line, with no time bound: litellm is imported to look the provider up. The line named
    --model, an option neither command has."""
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and result.output.startswith(words) and len(result.output.splitlines()) == 1, result.output
    assert _files(workdir) == {Path("f"), Path("bad.ptx"), Path("seven.ptx"), Path("a_run"), Path("a_run/trajectories"),
                               Path("a_run/manifest.json")}


def test_unreachable_endpoint_shows_its_attempts_and_gives_up_in_one_line(workdir):
    start = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", W, "--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--quiet"])
    assert time.monotonic() - start < 15
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1
    assert [line.split(": attempt ")[1][:3] for line in lines[:-1]] == ["1/3", "2/3", "3/3"]
    assert "refused" in lines[0].lower()
    assert lines[-1].startswith("error: cannot reach http://127.0.0.1:9/v1")
    assert not (workdir / "runs").exists()


@pytest.mark.parametrize("model,env", [("ollama/qwen3", "OLLAMA_API_BASE"), ("ollama_chat/qwen3", "OLLAMA_API_BASE"),
                                       ("llamafile/m", "LLAMAFILE_API_BASE"), ("lm_studio/m", "LM_STUDIO_API_BASE")])
def test_a_local_servers_model_without_api_base_probes_the_address_litellm_would_call(workdir, monkeypatch, model, env):
    """`--model ollama/qwen3` with no --api-base goes to litellm's default (OLLAMA_API_BASE, else localhost:11434):
    with no server there, a run was made and its first turn spent a minute of back-off on six refused calls, then
    stopped as an infra failure. That address is probed before a run is made, as an --api-base is."""
    monkeypatch.setenv(env, "http://127.0.0.1:9/v1")
    start = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--model", model, "--quiet"])
    assert time.monotonic() - start < 15
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert [line.split(": attempt ")[1][:3] for line in lines[:-1]] == ["1/3", "2/3", "3/3"], result.output
    assert lines[-1].startswith("error: cannot reach http://127.0.0.1:9/v1") and env in lines[-1], lines[-1]
    assert not (workdir / "runs").exists()


def test_ollamas_default_address_is_the_one_litellm_calls(monkeypatch):
    from ptxbench.agent.models.endpoint import local_server

    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    monkeypatch.delenv("LM_STUDIO_API_BASE", raising=False)
    assert local_server("ollama/qwen3") == ("http://localhost:11434", "litellm's default for ollama/ models")
    assert local_server("lm_studio/m") is None and local_server("openai/gpt-5") is None  # no default: not probed


def test_resume_refuses_a_bench_run_before_anything_starts(tmp_path):
    from ptxbench.agent.cli import inputs
    from ptxbench.agent.loop.optimize import RunFolderInUse, optimize
    from ptxbench.agent.records.rundir import write_manifest

    bench = tmp_path / "bench"
    write_manifest(bench, {"command": "bench", "config": {"models": ["builtin/tuner"]}, "trajectories": ["t"]})
    with pytest.raises(inputs.BadInput, match="holds a bench run.*ptxbench bench --resume"):
        inputs.resumable(bench, "--resume")
    with pytest.raises(RunFolderInUse, match="holds a bench run"):
        optimize(resume=bench)
    result = CliRunner().invoke(app, ["optimize", "--resume", str(bench)])
    assert result.exit_code == 2 and "holds a bench run" in result.output and "Traceback" not in result.output
    assert "turn" not in result.output.lower()  # refused before the live view drew anything
    write_manifest(bench, {"command": "optimize", "trajectories": []})
    with pytest.raises(inputs.BadInput, match="no config to continue"):
        inputs.resumable(bench, "--resume")
    assert sorted(p.name for p in bench.iterdir()) == ["manifest.json"]


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _to_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _corrupt_gzip(log: Path) -> None:
    import gzip

    packed = bytearray(gzip.compress(log.read_bytes()))
    for i in range(40, len(packed) - 20, 7):
        packed[i] ^= 0x55
    log.with_name(log.name + ".gz").write_bytes(bytes(packed))
    log.unlink()


# A small run damaged in one way: a recorded config field of the wrong type, or a file that is not what its name says.
CONFIG_DAMAGE = {"l2_flush int": {"l2_flush": 7}, "l2_flush list": {"l2_flush": ["a"]}, "synthetic_bug int": {"synthetic_bug": 5},
                 "repair_task int": {"repair_task": 5}, "start_from int": {"repair_task": "x__y", "start_from": 5}}
DISK_DAMAGE = {
    "manifest not JSON": lambda run, t: (run / "manifest.json").write_text("{oops"),
    "manifest a list": lambda run, t: (run / "manifest.json").write_text("[1, 2]"),
    "manifest fields": lambda run, t: (run / "manifest.json").write_text('{"gpu": "H100", "config": [1]}'),
    "manifest a folder": lambda run, t: _to_folder(run / "manifest.json"),
    "manifest binary": lambda run, t: (run / "manifest.json").write_bytes(bytes(range(200, 256))),
    "trajectories a file": lambda run, t: (shutil.rmtree(t.parent), t.parent.write_text("x")),
    "log not UTF-8": lambda run, t: _append(t / "trajectory.jsonl", b"\xff\xfe\n"),
    "log gzipped": lambda run, t: (t / "trajectory.jsonl").write_bytes(gzip.compress((t / "trajectory.jsonl").read_bytes())),
    "sealed log corrupt": lambda run, t: _corrupt_gzip(t / "trajectory.jsonl"),
    "sealed log plain": lambda run, t: (t / "trajectory.jsonl").rename(t / "trajectory.jsonl.gz"),
    "log a folder": lambda run, t: _to_folder(t / "trajectory.jsonl"),
    "kernel a folder": lambda run, t: _to_folder(t / "kernels" / "turn_02.ptx"),
    "kernel not UTF-8": lambda run, t: (t / "kernels" / "turn_02.ptx").write_bytes(b"\xff\xfe"),
    "log nested deep": lambda run, t: _append(t / "trajectory.jsonl", b"[" * 200_000 + b"]" * 200_000 + b"\n"),
}
READERS = [["score"], ["score", "--json"], ["report", "--out", "{out}/report"],
           ["export", "--recipe", "kernelgen", "--out", "{out}/data", "--format", "jsonl"], ["seal"], ["seal", "--undo"]]


@pytest.mark.parametrize("kind", [*CONFIG_DAMAGE, *DISK_DAMAGE])
def test_a_damaged_run_ends_every_reader_in_one_line(tmp_path, kind):
    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.records.rundir import write_manifest

    run = tmp_path / "run"
    write_manifest(run, {"command": "bench"})
    TrajectoryBuilder(run, "t0", "m/a", "gemm", config=CONFIG_DAMAGE.get(kind, {})).turn(1, "COMPILE_ERROR") \
        .turn(2, "PASSED", 1.5, True).stop()
    DISK_DAMAGE.get(kind, lambda run, t: None)(run, run / "trajectories" / "t0")
    for argv in READERS:
        argv = [argv[0], str(run), *(a.format(out=tmp_path / "out") for a in argv[1:])]
        result = CliRunner().invoke(app, argv)
        assert result.exception is None or isinstance(result.exception, SystemExit), (argv, repr(result.exception))
        assert "Traceback" not in result.output, (argv, result.output)
        if result.exit_code:
            lines = [line for line in result.output.splitlines() if line.strip()]
            assert result.exit_code == 1 and lines[-1].startswith("error: ") and str(run) in lines[-1], (argv, result.output)


def test_model_text_is_printed_as_text_not_as_rich_markup(tmp_path):
    """A plan's text is quoted by the plan errors: an argument "[/x]" raised rich's MarkupError from `ptxbench eval`
    (a traceback where the verdict belongs) and "[name]" vanished as an unknown style."""
    src = (ROOT / "workloads/solutions/faults/control_correct.cu").read_text()
    bad = tmp_path / "a[b]x.cu"  # the user's own file name is printed too
    bad.write_text(src.replace('"i32:K"]', '"i32:K", "[/x]", "[bold]"]', 1))
    r = CliRunner().invoke(app, ["eval", W, str(bad), "--no-gpu"])
    assert r.exit_code == 0 and "PLAN_ERROR" in r.output and '"[/x]"' in r.output, r.output
    r = CliRunner().invoke(app, ["compile", str(bad), "--workload", W])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert '"[/x]"' in r.output, r.output


def test_compile_with_a_workload_prints_a_plans_control_characters_escaped(tmp_path):
    """TOML's "\\u001b" puts an ESC into a plan argument, and the plan errors quote it: `compile --workload` printed
    them raw (a kernel file from a recorded run retitled or cleared the terminal), where eval escapes them."""
    src = (ROOT / "workloads/solutions/faults/control_correct.cu").read_text()
    bad = tmp_path / "k.cu"
    bad.write_text(src.replace('"i32:K"]', '"i32:K", "\\u001b]0;owned\\u0007\\u001b[2J"]', 1))
    r = CliRunner().invoke(app, ["compile", str(bad), "--workload", W])
    assert r.exit_code == 1 and "is not a tensor name" in r.output, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output and "\\x1b]0;owned" in r.output, r.output


def test_the_live_view_shows_an_error_that_looks_like_markup():
    from rich.console import Console

    from ptxbench.agent.cli.cmd_optimize import LiveView

    view = LiveView("run [/t]")
    view.note = "error in tool: [/x] \x1b]0;title\x07"
    view.rows.append(("1", "PLAN_ERROR [/y]", "-", "-", "0", "0", "1"))
    console = Console(record=True, width=200)
    console.print(view.render())
    shown = console.export_text()
    assert "[/x]" in shown and "[/y]" in shown and "\x1b]0" not in shown


def test_a_bench_of_several_models_on_one_local_server_needs_no_key(workdir):
    """--api-base serves every model of the matrix: the second openai/ model is as keyless as the first (it was checked
    as if no --api-base were given, and the bench refused to start for a missing OPENAI_API_KEY)."""
    from openai_server import ScriptedServer
    from ptxbench.agent.cli.cmd_bench import check_matrix

    with ScriptedServer() as server:
        check_matrix(["openai/first", "openai/second"], [W], ["knowledge"], "sm_90a", server.base_url, report=print)


def test_bench_resume_checks_the_recorded_models_key_before_anything_runs(workdir):
    """A resumed bench in a shell without the key: one line, as a new bench says it. Every trajectory went on to fail
    on its own (a line each, after its retries), and a bench of a local server that is down retried for minutes."""
    from ptxbench.agent.bench.matrix import BenchConfig, expand
    from ptxbench.agent.records.rundir import write_manifest

    config = BenchConfig(models=["openai/gpt-5"], workloads=[W], trajectories=2, turns=1, no_gpu=True)
    write_manifest(workdir / "b", {"command": "bench", "config": config.model_dump(mode="json"),
                                   "trajectories": [c.trajectory_id() for c in expand(config)]})
    before = _files(workdir)
    result = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", "b"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "OPENAI_API_KEY" in lines[0], result.output
    assert _files(workdir) == before


def test_optimize_resume_checks_the_recorded_models_key_before_anything_runs(workdir):
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.records.rundir import write_manifest

    config = OptimizeConfig(workload=W, model="openai/gpt-5", no_gpu=True, turns=1)
    write_manifest(workdir / "r", {"command": "optimize", "config": config.model_dump(mode="json"),
                                   "trajectories": [config.trajectory_id()]})
    before = _files(workdir)
    result = CliRunner().invoke(app, ["optimize", "--resume", "r", "--quiet"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "OPENAI_API_KEY" in lines[0], result.output
    assert _files(workdir) == before


def test_model_timeout_bounds_a_silent_server_and_a_resume_may_change_it_and_the_endpoint(workdir, monkeypatch):
    """A server that never answers: --model-timeout bounds each call (the fixed 600 s held a turn for up to an hour
    over six attempts). The run stops as an infra failure after its attempts. --resume may give another timeout and
    another --api-base (a local server restarted elsewhere: the run's circumstances, not its task, as a bench resume
    takes them), and the run finishes there."""
    from agent_helpers import reply
    from openai_server import ScriptedServer

    from ptxbench.agent.loop import optimize as loop

    seen = []
    real = loop.make_model

    def spy(config, on_retry=None):
        seen.append((config.model_timeout_s, config.api_base))
        return real(config, on_retry=on_retry)

    monkeypatch.setattr(loop, "make_model", spy)
    with ScriptedServer([], default={"hang": True}) as silent:
        t0 = time.monotonic()
        first = CliRunner().invoke(app, ["optimize", W, "--model", "openai/m", "--api-base", silent.base_url, "--no-gpu",
                                         "--turns", "1", "--model-timeout", "1", "--retry-wait", "0", "--quiet",
                                         "--run-dir", "r"])
        took = time.monotonic() - t0
        assert first.exit_code == 1 and "infra_error" in first.output, first.output
        assert took < 60 and len(silent.requests) == 6, (took, len(silent.requests))
    retries = [line for log in (workdir / "r").rglob("trajectory.jsonl") for line in log.read_text().splitlines()
               if '"model_retry"' in line]
    assert len(retries) == 5 and all("imeout" in r or "timed out" in r for r in retries), retries[:2]
    with ScriptedServer([], default=reply(Path(GOOD).read_text())) as back:
        again = CliRunner().invoke(app, ["optimize", "--resume", "r", "--model-timeout", "2", "--api-base",
                                         back.base_url, "--quiet"])
        assert again.exit_code == 0 and "stop: turn_limit" in again.output, again.output
        assert len(back.requests) == 1
    assert seen == [(1.0, silent.base_url), (2.0, back.base_url)]


def test_the_openai_key_going_to_another_server_is_said(monkeypatch):
    """openai/<model> with --api-base sends OPENAI_API_KEY to that server (litellm's way; a proxy may need it), over
    plain HTTP too, without a word: a note now says where it goes and how not to send it."""
    from ptxbench.agent.cli import inputs

    lines: list[str] = []
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    inputs.credentials("openai/m", "http://10.0.0.7:8000/v1", None, report=lines.append, probe=False)
    assert lines == ["note: OPENAI_API_KEY is sent to http://10.0.0.7:8000 in the clear (http) with every call; unset it "
                     "for a server that needs no key, or name another variable with --api-key-env"]
    lines.clear()
    inputs.credentials("openai/m", "http://127.0.0.1:8000/v1", None, report=lines.append, probe=False)
    assert len(lines) == 1 and "in the clear" not in lines[0]  # the loopback never leaves the machine
    lines.clear()
    for api_base, env in (("https://api.openai.com/v1", None), ("http://10.0.0.7:8000/v1", "OPENAI_API_KEY")):
        inputs.credentials("openai/m", api_base, env, report=lines.append, probe=False)
    monkeypatch.delenv("OPENAI_API_KEY")
    inputs.credentials("openai/m", "http://10.0.0.7:8000/v1", None, report=lines.append, probe=False)
    assert lines == []  # OpenAI itself, a key the user named, or no key at all: nothing to say
