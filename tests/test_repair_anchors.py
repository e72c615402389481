"""bench/repair_anchors.py on the CPU (--no-gpu, the check its README row names): its bench must get a run folder it
accepts and options it takes, so that a device call does not find the script broken."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_anchors_run_their_bench_in_a_new_run_folder_without_a_gpu(tmp_path):
    """The script wrote its bench.log into the run folder before the bench began, and the bench refused a new run's
    folder holding another file; with --no-gpu it also passed --profile, which the bench refuses beside --no-gpu."""
    run = tmp_path / "anchors" / "run"
    args = ["--run-dir", str(run), "--no-gpu", "--turns", "1", "--workloads", "smoke_gemm_bf16_m256_n256_k512"]
    for extra in ([], ["--resume"]):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "repair_anchors.py"), *args, *extra], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        anchors = json.loads((run.parent / "anchors.json").read_text())
        assert anchors["bench_rc"] == 0 and anchors["finished"] and anchors["turn0_evaluations"] > 0, anchors
    assert (run.parent / "run.bench.log").exists() and (run.parent / "run.tar.gz").exists()
    assert not (run / "bench.log").exists() and (run / "manifest.json").exists()
