"""Key masking never edits the kernel a model wrote: what is compiled is the kernel as written, and the trajectory's
kernel file is what was compiled.

The model's reply was masked by key shape before its kernel was extracted: `sk-` and 32 identifier characters (a
split-K subtraction chain, a long macro name, a comment) became '***', so the evaluator compiled text the model never
wrote, and the kernel file recorded it so.
"""
from __future__ import annotations

import os

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, StubEvaluator, events, of_type, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.records.rundir import sha256_text
from ptxbench.tools import redact

# kernel code of a key's shape: a split-K remainder in a comment, and a macro name
CODE = ("// rem = sk-k_tile_begin-k_tiles_per_split_rounded_up;\n"
        "// #define hf_accumulatorFragmentsForEveryWarpTile 1\n")
KERNEL = GOOD_PTX + CODE


@pytest.fixture(autouse=True)
def no_keys_here(monkeypatch):
    for name in [k for k in os.environ if redact.is_secret_name(k)]:
        monkeypatch.delenv(name)  # the shapes alone, not a value from this machine's environment


def _run(tmp_path, script, evaluator, **overrides):
    with ScriptedServer(script) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                retry_wait_s=0.01, turns=1, **overrides)
        return optimize(config, run_dir=tmp_path / "run", evaluator=evaluator)


def _kernel_files_match_their_results(tmp_path) -> list[str]:
    (folder,) = (tmp_path / "run" / "trajectories").iterdir()
    texts = []
    for e in of_type(events(tmp_path / "run"), "eval_result"):
        text = (folder / e.kernel_file).read_text()
        assert sha256_text(text) == e.kernel_sha256
        texts.append(text)
    return texts


def test_a_pipeline_kernel_of_a_keys_shape_is_compiled_and_saved_as_written(tmp_path):
    assert redact.scrub_text(CODE) != CODE  # the shapes do match: recorded messages mask them
    evaluator = StubEvaluator([1.0])
    _run(tmp_path, [reply(KERNEL)], evaluator)
    assert evaluator.sources == [KERNEL]
    assert _kernel_files_match_their_results(tmp_path) == [KERNEL]


def test_a_tools_kernel_of_a_keys_shape_is_compiled_and_saved_as_written(tmp_path):
    calls = [{"name": "compile", "arguments": {"source": KERNEL}}, {"name": "submit", "arguments": {"source": KERNEL}}]
    evaluator = StubEvaluator([1.0, 1.0])
    _run(tmp_path, [{"content": None, "tool_calls": calls}], evaluator, mode="tools")
    assert evaluator.sources == [KERNEL, KERNEL]
    assert _kernel_files_match_their_results(tmp_path) == [KERNEL, KERNEL]


def test_this_machines_key_echoed_in_a_kernel_stays_off_disk_and_the_file_is_what_was_compiled(tmp_path, monkeypatch):
    key = "sk-test-0123456789abcdefSECRETvalue"
    monkeypatch.setenv("PTXBENCH_TEST_API_KEY", key)
    evaluator = StubEvaluator([1.0])
    _run(tmp_path, [reply(KERNEL + f"// {key}\n")], evaluator, api_key_env="PTXBENCH_TEST_API_KEY")
    assert evaluator.sources == [KERNEL + "// ***\n"]
    assert _kernel_files_match_their_results(tmp_path) == evaluator.sources
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_a_reply_resumed_from_the_log_is_not_the_masked_record_of_its_kernel(tmp_path):
    """A kill after the model_call was recorded, before the step's checkpoint: the resumed step took the reply from
    the log, whose record masks key shapes, and compiled the masked kernel. It asks again instead."""
    def kill_at_the_model_call(event):
        if event.type == "model_call":
            raise KeyboardInterrupt("killed")

    with ScriptedServer([reply(KERNEL), reply(KERNEL)]) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                retry_wait_s=0.01, turns=1)
        with pytest.raises(KeyboardInterrupt):
            optimize(config, run_dir=tmp_path / "run", evaluator=StubEvaluator([]), listeners=[kill_at_the_model_call])
        evaluator = StubEvaluator([1.0])
        optimize(resume=tmp_path / "run", evaluator=evaluator)
    assert evaluator.sources == [KERNEL]
    assert _kernel_files_match_their_results(tmp_path) == [KERNEL]
