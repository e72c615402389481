"""Hardware and software fingerprint of the worker's GPU, recorded in every EvalResult."""
from __future__ import annotations

import platform


def read(device_index: int = 0) -> dict:
    import torch
    from cuda.bindings import driver as cu

    props = torch.cuda.get_device_properties(device_index)
    err, version = cu.cuDriverGetVersion()
    driver = f"{version // 1000}.{version % 1000 // 10}" if err == cu.CUresult.CUDA_SUCCESS else ""
    return {
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "driver": _nvidia_driver() or driver,
        "cuda_runtime": torch.version.cuda or "",
        "torch": torch.__version__,
        "cudnn": str(torch.backends.cudnn.version() or ""),
        "host": platform.node(),
    }


def _nvidia_driver() -> str:
    """The kernel driver's version string (e.g. 580.159.04), from the proc file the driver exposes."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
    except OSError:
        return ""
    for token in first.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit():
            return token
    return ""
