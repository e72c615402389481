"""Finding ptxas / nvcc / nvdisasm / cuobjdump, choosing among versions, and killing slow tools."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ptxbench.tools.toolchain import ENV_BIN, ToolchainError, find_candidates, find_toolchain, run_tool, toolchain_report


def _fake_tool(folder: Path, name: str, version: str) -> Path:
    """A shell script that answers --version like the CUDA tools do."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version.rsplit('.', 1)[0]}, V{version}'\n")
    p.chmod(0o755)
    return p


def test_finds_a_real_ptxas_with_its_version():
    tc = find_toolchain("sm_90a")
    assert Path(tc.ptxas.path).is_file()
    assert tc.ptxas.version_tuple >= (12, 0)
    assert tc.nvdisasm is not None or tc.cuobjdump is not None
    tools = tc.tools()
    assert tools["ptxas"] == f"{tc.ptxas.path} ({tc.ptxas.version})"


def test_companions_come_from_the_ptxas_directory_when_it_has_them():
    tc = find_toolchain("sm_90a")
    folder = Path(tc.ptxas.path).parent
    for tool in (tc.nvcc, tc.nvdisasm, tc.cuobjdump):
        if tool is not None and (folder / tool.name).is_file():
            assert Path(tool.path).parent == folder


def test_env_override_is_used_alone(monkeypatch):
    real = find_toolchain("sm_90a").ptxas
    monkeypatch.setenv(ENV_BIN, str(Path(real.path).parent))
    tc = find_toolchain("sm_90a")
    assert tc.ptxas.source == "env"
    assert Path(tc.ptxas.path).parent == Path(real.path).parent


def test_env_override_without_ptxas_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_BIN, str(tmp_path))
    with pytest.raises(ToolchainError, match="no ptxas that supports sm_100a.*pip install nvidia-cuda-nvcc"):
        find_toolchain("sm_100a")


def test_newest_ptxas_that_supports_the_target_wins(monkeypatch, tmp_path):
    _fake_tool(tmp_path / "new", "ptxas", "99.1.0")
    _fake_tool(tmp_path / "old", "ptxas", "11.8.89")
    monkeypatch.delenv(ENV_BIN, raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "old"), str(tmp_path / "new"), os.environ["PATH"]]))
    versions = {c.version for c in find_candidates("ptxas")}
    assert {"99.1.0", "11.8.89"} <= versions
    assert find_toolchain("sm_100a").ptxas.version == "99.1.0"
    # An old ptxas alone cannot serve sm_100a (needs CUDA 12.8).
    monkeypatch.setenv(ENV_BIN, str(tmp_path / "old"))
    with pytest.raises(ToolchainError, match="found: .*11.8.89"):
        find_toolchain("sm_100a")


def test_nvcc_is_not_newer_than_ptxas_from_another_folder(monkeypatch, tmp_path):
    _fake_tool(tmp_path / "a", "ptxas", "98.0.1")
    _fake_tool(tmp_path / "b", "nvcc", "99.0.0")
    _fake_tool(tmp_path / "c", "nvcc", "97.5.0")
    monkeypatch.delenv(ENV_BIN, raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / d) for d in "abc"] + [os.environ["PATH"]]))
    tc = find_toolchain("sm_90a")
    assert tc.ptxas.version == "98.0.1"
    assert tc.nvcc is not None and tc.nvcc.version == "97.5.0"


def test_report_lists_chosen_tools_and_candidates():
    report = toolchain_report("sm_90a")
    assert report["error"] is None
    assert report["chosen"]["ptxas"]["version"]
    assert any(c["path"] == report["chosen"]["ptxas"]["path"] for c in report["candidates"]["ptxas"])


def test_timeout_kills_the_whole_process_group():
    start = time.monotonic()
    res = run_tool(["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
    assert res.timed_out and res.returncode != 0
    assert "timed out" in res.stderr
    assert time.monotonic() - start < 10


def test_a_capped_run_keeps_only_the_head_and_tail_of_a_flood_in_memory():
    """Model text makes nvcc print gigabytes (a warning per template instantiation, each quoting a long name): one
    source held 3.4 GB in the harness, which read the whole output before cutting it to max_chars."""
    import tracemalloc

    from ptxbench.tools.textcap import cap_text

    flood = "yes 'warning: a line of a long compiler log' | head -c 100000000"
    tracemalloc.start()
    try:
        res = run_tool(["sh", "-c", f"{flood}; {flood} >&2"], timeout_s=60, max_chars=10_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000, peak
    whole = subprocess.run(["sh", "-c", flood], capture_output=True, text=True).stdout
    assert res.returncode == 0 and res.stdout == res.stderr == cap_text(whole, 10_000)


def test_a_capped_run_keeps_short_output_whole_with_its_line_ends():
    res = run_tool(["sh", "-c", r"printf 'a\r\nb\rc\n\303\251\377'; printf 'err' >&2"], timeout_s=10, max_chars=1000)
    assert (res.stdout, res.stderr) == ("a\nb\nc\né\ufffd", "err")
