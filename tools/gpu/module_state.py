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

A section is reset whole where the driver keeps the ELF's layout: ptxas aligns each symbol as declared, and the
padding between two would be the module's memory but no symbol's. The section's base is each symbol's address less
its offset in the section (the ELF symbol's value); where the driver's addresses disagree with that layout the symbols
alone are reset. On an H100 (580.159.04, bench/results/run32) the driver keeps it only within a constant bank: it packs
every module's globals into one pool 256-byte aligned whatever their declared alignment (two globals aligned to 1 MiB
in the ELF lie 256 bytes apart), registers each as a range of its own, and so there is no padding between them, and
the bytes past a module's last global are the pool's, which no reset reaches: a kernel may not reach them, since a
module variable's address never leaves its bytes (tools/module_data.py refuses it at compile time).
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
    section: str = ""
    offset: int = 0  # where it starts in its section (the ELF symbol's value)
    managed: bool = False  # `__managed__`: the driver may place it outside the section (its own managed allocation)


@dataclass(frozen=True)
class DataSection:
    """One section of a module's writable data: its symbols and the padding between them."""

    name: str
    size: int
    initialised: bool
    symbols: tuple[GlobalSymbol, ...]


# st_other's bit that nvcc sets on a `__managed__` global (`.attribute(.managed)` in PTX)
MANAGED_OTHER = 0x4


def section_span(section: DataSection, addresses: dict[str, int]) -> tuple[int, int] | None:
    """(device address, bytes) of the whole section, from its symbols' device addresses: each address less the
    symbol's offset must name one base. Managed globals do not vote (the driver may give them memory of their own,
    and one placed elsewhere must not turn the section's reset back into the symbols'); they are reset by symbol too.
    None when the others disagree, none is left, or a lone symbol lies past the section's start, where nothing shows
    that the bytes before it are the section's (the symbols are then reset one by one)."""
    placed = [g for g in section.symbols if not g.managed]
    if any(g.name not in addresses for g in placed):
        return None
    if len(placed) == 1 and placed[0].offset != 0:  # one address cannot show the section is laid out whole
        return None
    bases = {addresses[g.name] - g.offset for g in placed}
    if len(bases) != 1:
        return None
    base = bases.pop()
    size = max([section.size] + [g.offset + g.size for g in placed])
    return (base, size) if base > 0 and size > 0 else None


@functools.lru_cache(maxsize=4)
def module_globals(cubin: bytes) -> tuple[GlobalSymbol, ...]:
    """The global variables and constants of a cubin, from its ELF symbol table (pure Python; no GPU). Read once per
    cubin: the memory check and the module's restore both ask."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    sections = {i: s.name for i, s in enumerate(elf.iter_sections())}
    symtab = elf.get_section_by_name(".symtab")
    out = []
    raw = symtab.data() if symtab is not None else b""
    width, other_at = (int(symtab["sh_entsize"]), 5 if elf.elfclass == 64 else 13) if symtab is not None else (0, 0)
    for i, sym in enumerate(symtab.iter_symbols() if symtab is not None else []):
        shndx = sym["st_shndx"]
        if sym["st_info"]["type"] != "STT_OBJECT" or not isinstance(shndx, int):
            continue
        section = sections.get(shndx, "")
        if sym.name and (section in (ZERO_SECTION, INIT_SECTION) or section.startswith(CONST_PREFIX)):
            out.append(GlobalSymbol(sym.name, int(sym["st_size"]), section != ZERO_SECTION, section,
                                    int(sym["st_value"]), bool(raw[i * width + other_at] & MANAGED_OTHER)))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def module_sections(cubin: bytes) -> tuple[DataSection, ...]:
    """The sections that hold the module's globals and constants, each with its size (symbols and padding)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    by_section: dict[str, list[GlobalSymbol]] = {}
    for g in module_globals(cubin):
        by_section.setdefault(g.section, []).append(g)
    out = []
    for name, symbols in by_section.items():
        sec = elf.get_section_by_name(name)
        size = int(sec["sh_size"]) if sec is not None else 0
        out.append(DataSection(name, size, name != ZERO_SECTION, tuple(symbols)))
    return tuple(out)


class ModuleState:
    """Device addresses of a loaded module's globals and what to write into them before each call."""

    def __init__(self, module, cubin: bytes):
        from cuda.bindings import driver as cu

        from .launch import check

        self.entries: list[tuple[int, int, bytes | None]] = []  # (device address, size, initial bytes or None = zero)
        for section in module_sections(cubin):
            found = {}
            for g in section.symbols:
                ptr, size = check(cu.cuModuleGetGlobal(module, g.name.encode()), f"cuModuleGetGlobal({g.name})")
                found[g.name] = (int(ptr), int(size))
            span = section_span(section, {name: ptr for name, (ptr, _) in found.items()})
            spans = ([span] + [found[g.name] for g in section.symbols if g.managed] if span is not None
                     else list(found.values()))
            for ptr, size in spans:
                initial = None
                if section.initialised and size:  # read before any launch: the load-time bytes, padding included
                    host = bytearray(size)
                    check(cu.cuMemcpyDtoH(host, cu.CUdeviceptr(ptr), size), "cuMemcpyDtoH(module global)")
                    initial = bytes(host)
                self.entries.append((ptr, size, initial))

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
