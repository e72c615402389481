"""Can a kernel on this GPU read and write its process's ordinary (pageable) host memory by address?

    python3 bench/pageable_probe.py            # one JSON line

It reads the driver's attributes (CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: HMM on Linux with the open kernel
modules, or ATS on Grace Hopper), the driver flavour and the nvidia_uvm HMM switch, then launches two one-thread PTX
kernels on the address of a malloc'ed host word: `peek` copies it to device memory, `poke` overwrites it. Where both
succeed, a candidate kernel reaches the GPU worker's host memory (tools/gpu/keyless.py erases the keys from it; the
worker reports the attribute in its limits).
"""
from __future__ import annotations

import ctypes
import json
import platform
from pathlib import Path

PTX = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry peek(.param .u64 src, .param .u64 dst) {
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [src];
  ld.param.u64 %rd2, [dst];
  ld.global.u64 %rd3, [%rd1];
  st.global.u64 [%rd2], %rd3;
  ret;
}
.visible .entry poke(.param .u64 dst, .param .u64 value) {
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [value];
  st.global.u64 [%rd1], %rd2;
  ret;
}
"""


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip().splitlines()[0]
    except OSError:
        return ""


def main() -> dict:
    import torch
    from cuda.bindings import driver as cu

    torch.empty(1, device="cuda")
    dev = cu.cuDeviceGet(0)[1]
    A = cu.CUdevice_attribute
    names = ["CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS", "CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES",
             "CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS", "CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED"]
    out: dict = {"gpu": torch.cuda.get_device_name(0), "kernel": platform.release(),
                 "driver": _read("/proc/driver/nvidia/version"),
                 "uvm_disable_hmm": _read("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm")}
    out["attributes"] = {n: int(cu.cuDeviceGetAttribute(getattr(A, n), dev)[1]) for n in names}
    err, module = cu.cuModuleLoadData(PTX.encode() + b"\0")
    peek, poke = cu.cuModuleGetFunction(module, b"peek")[1], cu.cuModuleGetFunction(module, b"poke")[1]
    host = ctypes.c_uint64(0x5EC2E7_0000_1234)  # a word on the ordinary heap of this process
    dst = torch.zeros(1, dtype=torch.int64, device="cuda")

    def launch(fn, a: int, b: int) -> str:
        args = [ctypes.c_uint64(a), ctypes.c_uint64(b)]
        ptrs = (ctypes.c_void_p * 2)(*[ctypes.addressof(x) for x in args])
        e = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(ptrs), 0)[0]
        e = cu.cuCtxSynchronize()[0] if e == cu.CUresult.CUDA_SUCCESS else e
        return e.name

    out["peek"] = launch(peek, ctypes.addressof(host), dst.data_ptr())
    if out["peek"] == "CUDA_SUCCESS":
        out["peek_read_host_value"] = int(dst.item()) == host.value
        out["poke"] = launch(poke, ctypes.addressof(host), 0x0DDBA11)
        out["poke_wrote_host_value"] = host.value == 0x0DDBA11
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(main()))
    except Exception as e:  # noqa: BLE001 - a probe reports, it does not fail the round
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
