"""bench/gemm_data_power.py on the CPU: the clock and cycles a traced launch's slots give (trace_clk: per CTA its SM,
start ns, start cycles, then (ns, cycles) after each tile), with slots never written left out; and the traced variant
records both counters after each tile's last wgmma."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gemm_data_power as gdp  # noqa: E402
import gemm_diagnose as gd  # noqa: E402
from ptxbench.workloads.solutions.gemm_template import default_params, render  # noqa: E402

POISON = int.from_bytes(b"\x5a" * 8, "little")


def _cta(sm: int, t0: int, mhz: list[float], tile_ns: int = 50_000) -> list[int]:
    """One CTA's slots: tiles of tile_ns each at the given clocks, then poison to 32 slots."""
    row, t, c = [sm, t0, 1_000_000], t0, 1_000_000
    for f in mhz:
        t += tile_ns
        c += round(f * tile_ns / 1000)
        row += [t, c]
    return row + [POISON] * (32 - len(row))


def test_the_clock_is_cycles_over_nanoseconds_per_tile_and_per_cta():
    rows = [_cta(0, 0, [1600.0] * 14), _cta(1, 1_000, [1800.0] * 7 + [1600.0] * 7)]
    c = gdp.clock_summary(rows, POISON)
    assert c["ctas"] == 2 and c["tile_mhz_median"] == pytest.approx(1600.0)
    assert c["cta_mhz_min"] == pytest.approx(1600.0) and c["cta_mhz_max"] == pytest.approx(1700.0)
    assert c["cta_cycles_median"] == pytest.approx((14 * 80_000 + 7 * 90_000 + 7 * 80_000) / 2)
    assert c["span_ms"] == pytest.approx((1_000 + 14 * 50_000) / 1e6)


def test_ctas_that_never_ran_are_left_out():
    rows = [_cta(3, 0, [1650.0] * 14), [POISON] * 32, _cta(4, 0, [1650.0] * 14)]
    assert gdp.clock_summary(rows, POISON)["ctas"] == 2


def test_the_traced_variant_records_time_and_cycles_after_each_tile():
    edits, changes = gd.VARIANTS["trace_clk"]
    text = gd.edited(render(default_params().model_copy(update=changes)), edits)
    assert text.count("%%clock64") == 2 and text.count("%%globaltimer") == 2
    assert 'shape = ["num_sms", 32]' in text  # a row for every SM, whatever the grid
    assert "my_trace[3 + 2 * traced] = now; my_trace[4 + 2 * traced] = clk;" in text
    for name in ("trace_clk_132", "trace_clk_c2", "trace_clk_nodefer"):  # the neighbours build on their own points
        e, ch = gd.VARIANTS[name]
        assert e is edits and gd.edited(render(default_params().model_copy(update=ch)), e).count("%%clock64") == 2
