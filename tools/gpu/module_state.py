"""A candidate module's global variables, put back to their load-time values before every call.

A kernel's module globals (`__device__` variables, PTX `.global` declarations) are the one place a
kernel owns that survives from one launch to the next: a launch counter, a flag, a key of the last
inputs, a copy of the last output. Resetting them before every call makes every call start from
the module as it was just loaded, so nothing a kernel remembers can tell one call from another.

The globals are read from the cubin's ELF symbol table (pyelftools): objects in `.nv.global`
(zero-filled at load) and `.nv.global.init` (initialised data), and the module's own constants
(`.const` / `__constant__`, in a `.nv.constant<bank>` section): a constant bank is device memory, and a
generic store through `cvta.const` writes it, so a constant is state a kernel could keep like any
global. Their device addresses and sizes come from the driver (cuModuleGetGlobal); the load-time bytes
of initialised globals and of constants are kept on the host, where a kernel cannot write them.
"""
from __future__ import annotations

import functools
import io
from dataclasses import dataclass

ZERO_SECTION = ".nv.global"
INIT_SECTION = ".nv.global.init"
CONST_PREFIX = ".nv.constant"  # .nv.constant3 holds the module's .const objects; bank 0 (the parameters) has none


@dataclass(frozen=True)
class GlobalSymbol:
    name: str
    size: int
    initialised: bool  # in .nv.global.init or a constant bank (restore its bytes) rather than .nv.global (zero it)


@functools.lru_cache(maxsize=4)
def module_globals(cubin: bytes) -> tuple[GlobalSymbol, ...]:
    """The global variables and constants of a cubin, from its ELF symbol table (pure Python; no GPU). Read once per
    cubin: the memory check and the module's restore both ask."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    sections = {i: s.name for i, s in enumerate(elf.iter_sections())}
    symtab = elf.get_section_by_name(".symtab")
    out = []
    for sym in symtab.iter_symbols() if symtab is not None else []:
        shndx = sym["st_shndx"]
        if sym["st_info"]["type"] != "STT_OBJECT" or not isinstance(shndx, int):
            continue
        section = sections.get(shndx, "")
        if sym.name and (section in (ZERO_SECTION, INIT_SECTION) or section.startswith(CONST_PREFIX)):
            out.append(GlobalSymbol(sym.name, int(sym["st_size"]), section != ZERO_SECTION))
    return tuple(out)


class ModuleState:
    """Device addresses of a loaded module's globals and what to write into them before each call."""

    def __init__(self, module, cubin: bytes):
        from cuda.bindings import driver as cu

        from .launch import check

        self.entries: list[tuple[int, int, bytes | None]] = []  # (device address, size, initial bytes or None = zero)
        for g in module_globals(cubin):
            ptr, size = check(cu.cuModuleGetGlobal(module, g.name.encode()), f"cuModuleGetGlobal({g.name})")
            size = int(size)
            initial = None
            if g.initialised and size:
                host = bytearray(size)
                check(cu.cuMemcpyDtoH(host, ptr, size), "cuMemcpyDtoH(module global)")
                initial = bytes(host)
            self.entries.append((int(ptr), size, initial))

    @property
    def nbytes(self) -> int:
        return sum(size for _, size, _ in self.entries)

    def restore(self, stream: int) -> None:
        """Enqueue on `stream`: every global back to its load-time value."""
        from cuda.bindings import driver as cu

        from .launch import check

        hstream = cu.CUstream(stream)
        for ptr, size, initial in self.entries:
            if not size:
                continue
            if initial is None:
                check(cu.cuMemsetD8Async(cu.CUdeviceptr(ptr), 0, size, hstream), "cuMemsetD8Async(module global)")
            else:
                check(cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(ptr), initial, size, hstream),
                      "cuMemcpyHtoDAsync(module global)")
