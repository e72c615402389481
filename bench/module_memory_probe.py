"""Where the driver puts a loaded module's globals, and what memory lies around them (GPU).

tests/data/cheats/attacks/global_tail_stash.cu keeps a whole output 64 KiB past a module's only global, and on an H100
that memory held it from one call to the next: no section reset reaches it. This probe reads, for the attack modules,
each global's address, the allocation the driver reports around it (cuMemGetAddressRange), and whether that allocation
is shared: a second module loaded after, and the modules cuBLAS and cuDNN load when first called, are looked up the
same way. It also tries a small synchronous and asynchronous memset at offsets past each global, to see which the
driver accepts. Prints one JSON document (and writes it with --json).

    python3 bench/module_memory_probe.py [--json PATH]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver_probe import json_args, primary_context  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = ROOT / "tests" / "data" / "cheats" / "attacks"
SMOKE = "smoke_gemm_bf16_m256_n256_k512"


def cubin_of(name: str) -> bytes:
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    r = LocalEvaluator().evaluate(SMOKE, (ATTACKS / name).read_text(), EvalOptions(no_gpu=True))
    assert r.status == "COMPILED", (name, r.status, r.message)
    return Path(r.compile.cubin_path).read_bytes()


def address_range(ptr: int):
    from cuda.bindings import driver as cu

    err, base, size = cu.cuMemGetAddressRange(cu.CUdeviceptr(ptr))
    return {"ok": err == cu.CUresult.CUDA_SUCCESS, "error": err.name, "base": int(base), "size": int(size)}


def memset_ok(ptr: int, n: int, stream) -> dict:
    from cuda.bindings import driver as cu

    out = {}
    (err,) = cu.cuMemsetD8(cu.CUdeviceptr(ptr), 0, n)
    out["sync"] = err.name
    (err,) = cu.cuMemsetD8Async(cu.CUdeviceptr(ptr), 0, n, cu.CUstream(stream))
    out["async"] = err.name
    cu.cuStreamSynchronize(cu.CUstream(stream))
    return out


def module_report(module, cubin: bytes, stream) -> dict:
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.module_state import module_sections

    report = {"sections": []}
    for section in module_sections(cubin):
        syms = []
        for g in section.symbols:
            err, ptr, size = cu.cuModuleGetGlobal(module, g.name.encode())
            ptr = int(ptr)
            entry = {"name": g.name, "elf_offset": g.offset, "size": int(size), "address": ptr,
                     "range": address_range(ptr)}
            # small writes past the symbol: where the driver lets the host write (and so where a reset could)
            entry["memset_past"] = {str(off): memset_ok(ptr + int(size) + off, 16, stream)
                                    for off in (48, 4096, 64 << 10, (1 << 20) + (64 << 10))}
            syms.append(entry)
        report["sections"].append({"name": section.name, "elf_size": section.size, "symbols": syms})
    return report


def main(argv: list[str] | None = None) -> int:
    args = json_args(__doc__, argv)
    import torch
    import torch.nn.functional as F

    from ptxbench.tools.gpu.launch import load_module

    primary_context()
    stream = torch.cuda.current_stream().cuda_stream
    doc = {"device": torch.cuda.get_device_name(), "modules": {}}
    loaded = {}
    for name in ("global_tail_stash.cu", "global_padding_stash.cu", "const_padding_counter.cu"):
        cubin = cubin_of(name)
        loaded[name] = (load_module(cubin), cubin)
        doc["modules"][name] = module_report(*loaded[name], stream)
    # the libraries load their own modules at first use: do they land in the same allocation?
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    q = torch.randn(1, 8, 256, 128, device="cuda", dtype=torch.bfloat16)
    F.scaled_dot_product_attention(q, q, q).sum().item()
    late = cubin_of("global_tail_stash.cu")
    doc["modules"]["global_tail_stash.cu (loaded after the libraries)"] = module_report(load_module(late), late, stream)
    doc["after_libraries"] = {name: [[address_range(s["address"]) for s in sec["symbols"]]
                                     for sec in doc["modules"][name]["sections"]] for name in loaded}
    text = json.dumps(doc, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
