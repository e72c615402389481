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


def _raw_page(launches: list[tuple[str, float, float]]) -> str:
    """ncu's raw page (--csv --page raw) for launches of (kernel name, elapsed cycles, duration in us)."""
    head = ['"ID"', '"Process ID"', '"Kernel Name"', '"Grid Size"', '"Block Size"',
            '"gpc__cycles_elapsed.max"', '"gpu__time_duration.sum"', '"sm__cycles_active.avg"']
    units = ['""', '""', '""', '""', '""', '"cycle"', '"usecond"', '"cycle"']
    rows = [",".join(head), ",".join(units)]
    for i, (name, cycles, us) in enumerate(launches):
        rows.append(f'"{i}","77","{name}","(128, 1, 1)","(384, 1, 1)","{cycles:,.0f}","{us:,.2f}","{0.98 * cycles:,.1f}"')
    return "==PROF== Connected to process 77\n" + "\n".join(rows) + "\n"


def test_ncu_clocks_are_cycles_over_duration_in_the_planned_order():
    plan = gdp.ncu_plan(2)
    assert plan[:4] == ["cublas/randn", "ref/randn", "cublas/both_zero", "ref/both_zero"] and len(plan) == 8
    # the reference: 1.17 M cycles on either input, 1,600 MHz on randn, 1,800 on zeros; cuBLAS 1.5% more cycles
    launches = []
    for _ in range(2):
        launches += [("nvjet_tst_256x128", 1.1875e6, 1.1875e6 / 1580), ("gemm_bf16_tn", 1.17e6, 1.17e6 / 1600),
                     ("nvjet_tst_256x128", 1.1875e6, 1.1875e6 / 1800), ("gemm_bf16_tn", 1.17e6, 1.17e6 / 1800)]
    clocks = gdp.ncu_clocks(_raw_page(launches), plan)
    assert [r["kernel"] for r in clocks["ref/randn"]] == ["gemm_bf16_tn"] * 2
    ref = clocks["ref/randn"][0]
    assert ref["mhz"] == pytest.approx(1600, rel=1e-4) and ref["cycles"] == 1.17e6
    assert ref["ms"] == pytest.approx(1.17e6 / 1600 / 1000, rel=1e-4)
    assert clocks["cublas/both_zero"][1]["mhz"] == pytest.approx(1800, rel=1e-4)
    rows = gdp.ncu_table(clocks)
    randn = next(r for r in rows if r.startswith("| cuBLAS / reference, randn"))
    assert "| 1.0150 | 0.9875 |" in randn  # cycles 1.5% more, clock 1.25% lower
    with pytest.raises(ValueError, match="3 profiled kernels for 8 planned launches"):
        gdp.ncu_clocks(_raw_page(launches[:3]), plan)
