"""What the driver probes of bench/ share (module_memory_probe.py, module_pool_layout.py, local_slot_probe.py): the
`--json PATH` argument, and torch's primary context made current with the driver API initialised, so a probe's
cuModule* and launch calls act on the context torch's tensors live in."""
from __future__ import annotations

import argparse
from pathlib import Path


def json_args(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the findings here")
    return ap.parse_args(argv)


def primary_context():
    """The driver bindings, with torch's primary context current on this thread."""
    import torch
    from cuda.bindings import driver as cu

    torch.empty(1, device="cuda")
    cu.cuInit(0)
    return cu
