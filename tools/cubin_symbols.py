"""What an assembled cubin leaves to the driver (the functions it calls but does not define), and the kernels it
defines.

The PTX-level check (compile_log.system_calls) reads `.extern .func` declarations, but ptxas also accepts a bare
`.func` prototype (no `.extern`, no body) or `.extern.func` and leaves the name to the driver just the same, which
resolves the device system calls (vprintf, malloc, free, __assertfail, the device runtime's launch entry points).
The symbol table is where every such name ends up, however the source spelled it, so the cubin is read after
ptxas and any undefined function refuses the module.
"""
from __future__ import annotations

import io


def _elf(cubin: bytes):
    """The parsed cubin and its symbol table (None where it has none)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    return elf, elf.get_section_by_name(".symtab")


def undefined_functions(cubin: bytes) -> list[str]:
    """Names of the functions the cubin references without defining them, in symbol-table order."""
    _, symtab = _elf(cubin)
    if symtab is None:
        return []
    return [s.name for s in symtab.iter_symbols()
            if s.name and s["st_shndx"] == "SHN_UNDEF" and s["st_info"]["type"] == "STT_FUNC"]


def entry_kernels(cubin: bytes) -> set[str]:
    """Names of the kernels the cubin defines (what cuModuleGetFunction finds): functions with a body whose parameter
    bank, `.nv.constant0.<name>`, exists; a device function has none. A kernel the source only declares, or hides
    from the compiler (`#if 0`, a string), is not among them."""
    elf, symtab = _elf(cubin)
    if symtab is None:
        return set()
    sections = {s.name for s in elf.iter_sections()}
    return {s.name for s in symtab.iter_symbols()
            if s.name and s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"
            and f".nv.constant0.{s.name}" in sections}
