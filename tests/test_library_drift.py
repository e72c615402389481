"""bench/library_drift.py's arithmetic and bench/gpu_sampler.py's clock / power readings, on made-up samples (the
script itself needs a GPU: bench/gpu_round.sh library-drift)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from gpu_sampler import GpuSampler  # noqa: E402
from library_drift import FIELDS, spread, summarize  # noqa: E402


def test_the_sampler_reads_the_extra_fields_and_averages_a_window():
    s = GpuSampler(extra=FIELDS)
    s.add_line("0, 100, 1980, 690.5, 61\n", 10.0)
    s.add_line("0, 100, 1755, 700.0, 66\n", 11.0)
    s.add_line("1, 0, 345, 80.0, 30\n", 11.0)       # another GPU
    s.add_line("0, 100, [N/A], 700.0, 66\n", 11.5)  # a reading nvidia-smi could not take: skipped
    s.add_line("0, 100, 1500, 650.0, 70\n", 20.0)   # outside the window
    w = s.window(9.5, 12.0)
    assert w == {"samples": 2, "clocks.sm": 1867.5, "power.draw": 695.2, "temperature.gpu": 63.5}
    assert s.window(30.0, 40.0) == {"samples": 0}
    assert len(s.samples) == 4 and s.summary()["1"]["busy_share"] == 0.0


def test_the_plain_sampler_still_reads_two_columns():
    s = GpuSampler()
    s.add_line("0, 37\n", 1.0)
    s.add_line("0, 37, 1980\n", 1.0)  # not what it asked for
    assert s.samples == [(1.0, 0, 37.0)] and s.extra_samples == []


def test_summary_spreads_and_the_clock_correlation():
    rows = [{"kernel_ms": 2.40, "library_ms": 2.41, "speedup": 1.004, "gpu": {"clocks.sm": 1980.0}},
            {"kernel_ms": 2.41, "library_ms": 2.49, "speedup": 1.033, "gpu": {"clocks.sm": 1900.0}},
            {"kernel_ms": 2.40, "library_ms": 2.52, "speedup": 1.050, "gpu": {"clocks.sm": 1850.0}},
            {"kernel_ms": None, "library_ms": None, "speedup": None, "gpu": {}}]  # a failed evaluation
    out = summarize(rows)
    assert out["evaluations"] == 4
    assert out["library_spread_pct"] == spread([2.41, 2.49, 2.52]) == 4.56
    assert out["candidate_spread_pct"] == 0.42
    assert out["library_vs_clock_correlation"] < -0.9  # slower library where the clock was lower
    flat = [dict(r, gpu={"clocks.sm": 1980.0}) for r in rows[:3]]
    assert "library_vs_clock_correlation" not in summarize(flat)  # no clock change: nothing to correlate
