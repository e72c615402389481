"""What a kernel's SASS already does, as named features, so feedback never recommends what is there.

Read from full mnemonics (`UTMALDG.2D.MULTICAST`, `SYNCS.PHASECHK.TRANS64.TRYWAIT`, ...) at compile
time and stored in KernelResources.sass_features; the profile's feedback joins them with the runtime
verdicts (was the TMA / wgmma path executed?) and the launch (a persistent grid).
"""
from __future__ import annotations

from .sass import SassInstruction

# feature -> (what it means, for the README and the feedback's "already does" note)
FEATURES = {
    "wgmma": "wgmma (HGMMA)",
    "tma_load": "TMA loads (UTMALDG)",
    "tma_multicast": "TMA multicast within a cluster",
    "tma_store": "a TMA-store epilogue (UTMASTG)",
    "tma_reduce": "TMA bulk reductions (UTMAREDG)",
    "mbarrier": "mbarriers (SYNCS)",
    "mbarrier_wait": "mbarrier waits (an mbarrier pipeline)",
    "setmaxnreg": "setmaxnreg register reallocation (warp specialisation)",
    "cluster": "thread-block clusters",
    "ldmatrix": "ldmatrix (LDSM)",
    "stmatrix": "stmatrix (STSM)",
    "bar_sync": "CTA-wide barriers (BAR)",
    "tcgen05": "tcgen05 tensor cores",
}


def sass_features(instructions: list[SassInstruction]) -> list[str]:
    found: set[str] = set()
    for ins in instructions:
        op, base = ins.opcode, ins.base
        if base == "HGMMA":
            found.add("wgmma")
        elif base == "UTMALDG":
            found.add("tma_load")
            if ".MULTICAST" in op:
                found |= {"tma_multicast", "cluster"}
        elif base == "UTMASTG":
            found.add("tma_store")
        elif base == "UTMAREDG":
            found.add("tma_reduce")
        elif base == "SYNCS":
            found.add("mbarrier")
            if ".PHASECHK" in op:
                found.add("mbarrier_wait")
        elif base == "USETMAXREG":
            found.add("setmaxnreg")
        elif base in ("UCGABAR_ARV", "UCGABAR_WAIT", "MAPA") or base.startswith("UCGABAR"):
            found.add("cluster")
        elif base == "LDSM":
            found.add("ldmatrix")
        elif base == "STSM":
            found.add("stmatrix")
        elif base == "BAR":
            found.add("bar_sync")
        elif base.startswith("UTC"):
            found.add("tcgen05")
    return [f for f in FEATURES if f in found]
