"""bench/wgmma_rates.py builds on the CPU: every shape and layout it times assembles for sm_90a to its 4 HGMMA a loop pass
(unrolled), without spills or ptxas warnings (a serialised wgmma would time the serialisation, not the shape). The
rates themselves need the GPU: bash bench/gpu_round.sh wgmma-rates."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import wgmma_rates  # noqa: E402


def test_every_variant_assembles_to_wgmma_without_spills_or_warnings():
    r = wgmma_rates.build()
    assert not r.warnings, r.warnings
    for name, (n, a, b) in wgmma_rates.VARIANTS.items():
        k = r.kernels[name]
        assert k.spill_stores == 0 and k.spill_loads == 0, name
        assert k.sass_opcodes.get("HGMMA", 0) % wgmma_rates.KSTEPS == 0 and k.sass_opcodes["HGMMA"] > 0, name
    src = wgmma_rates.source()
    assert "m64n80k16" in src and ", 1, 0;" in src  # the q80 question: n80 with an MN-major A
