"""The scripts that regenerate a checked-in file (prompts/helpers_sm90a.md, prompts/include/ptxbench/wgmma.cuh):
`--help` answers with usage and writes nothing (it rewrote the file before), an unknown option is refused, and
with no arguments each still writes its file, as their READMEs say."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sweeps import bench_script

ROOT = Path(__file__).resolve().parents[1]


def _wgmma_generator():
    return bench_script("gen_wgmma_header")


# (the command line, the file it generates)
GENERATORS = {
    "prompts.helpers": ([sys.executable, "-m", "ptxbench.prompts.helpers"], ROOT / "prompts" / "helpers_sm90a.md"),
    "gen_wgmma_header": ([sys.executable, str(ROOT / "bench" / "gen_wgmma_header.py")],
                         ROOT / "prompts" / "include" / "ptxbench" / "wgmma.cuh"),
}


@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("args, rc", [(["--help"], 0), (["-h"], 0), (["--out", "elsewhere"], 2)])
def test_help_or_an_unknown_option_writes_nothing(name, args, rc):
    command, generated = GENERATORS[name]
    before = (generated.stat().st_mtime_ns, generated.read_bytes())
    done = subprocess.run([*command, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == rc, done.stderr[-2000:]
    assert "usage:" in (done.stdout if rc == 0 else done.stderr)
    assert "wrote" not in done.stdout
    assert (generated.stat().st_mtime_ns, generated.read_bytes()) == before


def test_with_no_arguments_each_still_writes_its_file(tmp_path, monkeypatch):
    from ptxbench.prompts import helpers

    monkeypatch.setattr(helpers, "OUT", tmp_path / "helpers_sm90a.md")
    helpers.main([])
    assert helpers.OUT.read_text() == helpers.render()
    gen = _wgmma_generator()
    gen.HEADER = tmp_path / "wgmma.cuh"
    gen.main([])
    assert gen.HEADER.read_text() == gen.render()
