"""bench/lazy_threshold.py's source edit, CPU model and table, on made-up readings (the timing needs a GPU:
bench/gpu_round.sh lazy-threshold)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from lazy_threshold import rescaled_share, table, with_threshold  # noqa: E402


def test_the_edit_changes_the_one_constant_of_the_forward_references():
    from ptxbench.agent.models.builtin import reference_source
    for w in ("mha_fwd_d128", "mha_fwd_d128_causal"):
        src = reference_source(w)
        out = with_threshold(src, 64)
        assert "constexpr float LAZY_THRESHOLD = 64.f;" in out and "LAZY_THRESHOLD = 8.f" not in out
        assert len(out) == len(src) + 1 and out.replace("= 64.f;", "= 8.f;") == src


def test_a_source_without_the_lazy_rescale_is_refused():
    from ptxbench.agent.models.builtin import reference_source
    with pytest.raises(SystemExit, match="not one"):
        with_threshold(reference_source("mha_fwd_d64"), 64)  # D = 64 keeps rescale="always"


def test_plain_heads_never_rescale_and_sharp_heads_rescale_less_at_higher_thresholds():
    plain = [rescaled_share(t, q_scale=1.0, warps=8)[0] for t in (8, 64)]
    sharp = [rescaled_share(t, q_scale=32.0, warps=8) for t in (8, 32, 64)]
    assert plain == [0.0, 0.0]
    shares = [s for s, _ in sharp]
    assert shares[0] > 0.3 and shares[0] > shares[1] > shares[2]
    assert all(top <= t + 1e-9 for (_, top), t in zip(sharp, (8, 32, 64)))  # P never above 2^threshold


def test_the_table_compares_medians_and_says_whether_the_readings_separate():
    row = lambda r, t, ms, st="PASSED": {"round": r, "threshold": t, "status": st, "kernel_ms": ms,  # noqa: E731
                                         "library_ms": 2.4, "speedup": 2.4 / ms if ms else None, "ci": [1.0, 1.2]}
    rows = [row(0, 8, 2.20), row(0, 64, 2.18), row(1, 64, 2.185), row(1, 8, 2.21), row(2, 32, None, "FAILED")]
    text = table("mha_fwd_d128", rows)
    assert "| 64 | 2.1825 | -1.02% | yes |" in text
    assert "| 2 | 32 | FAILED | - | - | - |" in text and "| 32 | - | - | - |" in text
    rows.append(row(2, 64, 2.215))
    assert "| 64 | 2.1850 | -0.91% | no |" in table("mha_fwd_d128", rows)
