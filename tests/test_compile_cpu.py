"""bench/compile_cpu.py: the CPU time of a child process is read as the jail's `ulimit -t` counts it, and the table
states each source's share of the limit (the compiles themselves: bench/gpu_round.sh compile-cpu)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from compile_cpu import _cpu_of, table  # noqa: E402


def test_a_busy_child_is_counted_and_an_idle_one_is_not(tmp_path):
    busy, rc = _cpu_of([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"],
                       str(tmp_path))
    idle, rc2 = _cpu_of([sys.executable, "-c", "import time; time.sleep(0.4)"], str(tmp_path))
    assert rc == rc2 == 0 and busy >= 0.4 and idle < 0.3


def test_the_table_gives_each_tools_worst_loaded_share_of_the_limit():
    run = {"nvcc_s": 2.0, "ptxas_s": 1.0, "wall_s": 3.1, "ok": True}
    result = {"load": 16, "alone": {"w": [run, {**run, "nvcc_s": 2.2}]},
              "loaded": {"w": [{**run, "nvcc_s": 4.0}, {**run, "nvcc_s": 6.0, "ptxas_s": 2.0}]}}
    lines = table(result, 8).splitlines()
    assert lines[2] == "| w | nvcc | 2.10 (2.20) | 5.00 (6.00) | 75% |"
    assert lines[3] == "| w | ptxas | 1.00 (1.00) | 1.50 (2.00) | 25% |"
    assert "16 at once" in lines[0]
