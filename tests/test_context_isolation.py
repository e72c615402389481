"""bench/context_isolation.py on the CPU: its probe kernels build with their loads and stores kept, and a question whose
process fails becomes a row saying so, not a crash of the whole probe (the questions themselves need a GPU:
bench/gpu_round.sh context-isolation)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import context_isolation as ci  # noqa: E402


def test_the_probe_kernels_build_and_keep_their_memory_operations():
    from ptxbench.tools.compile import compile_source

    comp = compile_source(ci.probe_source(), "cuda", "sm_90a")
    assert comp.status == "ok", comp.errors
    k = comp.kernels
    assert set(ci.KERNELS) <= set(k)
    assert k["copy_words"].sass_opcodes.get("LDG") and k["copy_words"].sass_opcodes.get("STG")
    assert k["fill_words"].sass_opcodes.get("STG")
    assert k["find_shared"].sass_opcodes.get("LDS") and k["find_local"].sass_opcodes.get("LDL")
    assert k["find_local"].stack >= 4096  # the frame the local question leaves and looks for


def test_a_question_whose_process_fails_is_a_row_not_a_crash(tmp_path):
    row = ci.run_question("far_read", str(tmp_path / "missing.cubin"), timeout=120)
    assert row["question"] == "far_read"
    assert row["process"].startswith("exit ") and row["process"] != "exit 0: (no output)"


def test_an_answer_printed_before_a_failing_exit_still_stands(monkeypatch):
    """A child that printed its answer and then died tearing down a faulted context: the answer is kept, with the
    exit status beside it."""
    done = subprocess.CompletedProcess([], 1, stdout='noise\n{"error": "CUDA_ERROR_ILLEGAL_ADDRESS", "words_read": null}\n',
                                       stderr="teardown failed")
    monkeypatch.setattr(ci.subprocess, "run", lambda *a, **k: done)
    row = ci.run_question("far_read", "x.cubin")
    assert row == {"question": "far_read", "error": "CUDA_ERROR_ILLEGAL_ADDRESS", "words_read": None, "exit": 1}


def test_the_table_names_every_answer():
    text = ci.table([{"question": "far_read", "error": "CUDA_ERROR_ILLEGAL_ADDRESS", "words_read": None},
                     {"question": "costs", "process": "timed out after 120 s"}])
    assert "| far_read | error CUDA_ERROR_ILLEGAL_ADDRESS, words_read None |" in text
    assert "| costs | process timed out after 120 s |" in text


def test_an_unknown_question_is_refused_before_anything_runs():
    out = subprocess.run([sys.executable, str(Path(ci.__file__)), "--only", "far_read,nope"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "unknown question(s) ['nope']" in out.stderr
