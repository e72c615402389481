"""Keys stay out of the processes that run a candidate: the GPU worker and referee, ncu and compute-sanitizer."""
from __future__ import annotations

import os
import subprocess
import sys

from ptxbench.tools import redact
from ptxbench.tools.profile.candidate import device_env
from ptxbench.tools.profile.runner import _run


def test_without_secrets_drops_key_names_registered_names_and_copies_of_keys(monkeypatch):
    monkeypatch.setattr(redact, "_REGISTERED", {"LLM_ENDPOINT_CRED"})
    env = {"OPENAI_API_KEY": "sk-abcdefghijklmnopqrstu", "HF_TOKEN": "hf_x" * 6, "LLM_ENDPOINT_CRED": "plain-value-1",
           "COPY_OF_IT": "sk-abcdefghijklmnopqrstu", "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0,1",
           "prompt_tokens_seen": "12"}
    kept = redact.without_secrets(env)
    assert kept == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0,1", "prompt_tokens_seen": "12"}


def test_a_replay_environment_has_no_keys_and_one_device(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "key-value-123456")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    env = device_env(1, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    assert "ANTHROPIC_API_KEY" not in env and "key-value-123456" not in env.values()
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert env.get("PATH") == os.environ.get("PATH")


def test_a_profiled_process_reads_no_stdin():
    # a tool that reads stdin gets end-of-file at once instead of blocking on the harness's own stdin
    rc, out = _run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], 10)
    assert rc == 0 and out.strip() == "''"


def test_the_gpu_worker_entry_drops_keys_before_serving(tmp_path):
    code = ("import os; from ptxbench.tools.gpu import entry; entry._drop_keys(); "
            "print(sorted(k for k in os.environ if k in ('MY_API_KEY', 'SAFE_VALUE')))")
    env = {**os.environ, "MY_API_KEY": "secret-value-987654", "SAFE_VALUE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['SAFE_VALUE']"


def test_key_shapes_mask_provider_keys_and_leave_kernel_code_alone(monkeypatch):
    """A model's reply is masked before its kernel is compiled: a key shape that also matched kernel code turned a
    split-K expression (`sk-num_k_tiles_done`, 16 characters after `sk-`) or a long `hf_` name into '***', and the
    kernel failed to compile for text the model never wrote. Real keys are longer than any such code."""
    for name in [k for k in os.environ if redact.is_secret_name(k)]:
        monkeypatch.delenv(name)  # the shapes alone, not a value from this machine's environment
    code = ("int rem = sk-num_k_tiles_done; float hf_accumulatorFragmentsAB = 0.f; int d = xai-blockOffsetElementsAB;\n"
            "int e = sk-k_tile_offset_in_bytes_128;")
    assert redact.scrub_text(code) == code
    keys = ["sk-" + "aB3" * 16, "sk-proj-" + "x9_Yz-" * 25 + "Q", "sk-ant-api03-" + "Qw7-" * 24 + "AA", "sk-" + "0f" * 16,
            "hf_" + "Ab1" * 11 + "C", "xai-" + "Zz9" * 27, "AIza" + "Sy" * 17 + "X"]
    for key in keys:
        assert redact.scrub_text(f"the key {key} here") == "the key *** here", key
