"""A module's globals are reset section by section, padding included (tools/gpu/module_state.py).

ptxas aligns each global as declared, so two globals aligned to 1 MiB lie 1 MiB apart in the ELF and the bytes between
them would be the module's memory but no symbol's, room for a whole output (tests/data/cheats/attacks/
global_padding_stash.cu). A driver that keeps that layout gets the section reset whole; an H100's packs the globals
256-byte aligned instead (bench/results/run32), so there each is reset alone and no padding exists. On the CPU: the cubin's sections and the spans a restore writes,
with the driver stubbed (fixture `runner`) and laying the sections out as the ELF says. On the GPU
(tests/workloads/test_cheat_attacks.py): bytes written into the padding of a loaded module are gone after a restore.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ptxbench.tools.compile import compile_source

PADDED_PTX = """.version 8.0
.target sm_90a
.address_size 64
.global .align 65536 .b8 zero_lo[16];
.global .align 65536 .b8 zero_hi[16];
.global .align 4096 .u32 init_lo = 1;
.global .align 4096 .u32 init_hi = 2;
.const .align 4096 .u32 const_lo = 3;
.const .align 4096 .u32 const_hi = 4;
.visible .entry k(.param .u64 p) {
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  ld.global.u32 %r1, [zero_lo]; ld.global.u32 %r2, [zero_hi]; ld.global.u32 %r3, [init_lo];
  ld.global.u32 %r4, [init_hi]; ld.const.u32 %r5, [const_lo]; ld.const.u32 %r6, [const_hi];
  add.u32 %r1, %r1, %r2; add.u32 %r1, %r1, %r3; add.u32 %r1, %r1, %r4; add.u32 %r1, %r1, %r5; add.u32 %r1, %r1, %r6;
  st.global.u32 [zero_lo], %r1; st.global.u32 [zero_hi], %r1; st.global.u32 [init_lo], %r1; st.global.u32 [init_hi], %r1;
  ret;
}
"""


@pytest.fixture(scope="module")
def cubin() -> bytes:
    result = compile_source(PADDED_PTX, "ptx", "sm_90a")
    assert result.status == "ok", result.errors
    return open(result.cubin_path, "rb").read()


def test_every_section_is_found_with_the_padding_between_its_symbols(cubin):
    from ptxbench.tools.gpu.module_state import module_sections

    sections = {s.name: s for s in module_sections(cubin)}
    zero, init = sections[".nv.global"], sections[".nv.global.init"]
    const = next(s for name, s in sections.items() if name.startswith(".nv.constant"))
    for section, gap in ((zero, 65536), (init, 4096), (const, 4096)):
        offsets = sorted(g.offset for g in section.symbols)
        assert offsets[-1] - offsets[0] >= gap and section.size >= offsets[-1] + 4, (section, offsets)
        assert sum(g.size for g in section.symbols) < section.size  # the symbols alone leave the padding out
    assert not zero.initialised and init.initialised and const.initialised


def test_the_span_is_the_section_when_the_addresses_agree_with_its_layout():
    from ptxbench.tools.gpu.module_state import DataSection, GlobalSymbol, section_span

    sec = DataSection(".nv.global", 65540, False, (GlobalSymbol("lo", 4, False, ".nv.global", 0),
                                                   GlobalSymbol("hi", 4, False, ".nv.global", 65536)))
    assert section_span(sec, {"lo": 0x7000_0000, "hi": 0x7000_0000 + 65536}) == (0x7000_0000, 65540)
    assert section_span(sec, {"lo": 0x7000_0000, "hi": 0x7100_0000}) is None  # laid out otherwise: by symbol
    assert section_span(sec, {"lo": 0x7000_0000}) is None
    lone = DataSection(".nv.global", 65540, False, (GlobalSymbol("hi", 4, False, ".nv.global", 65536),))
    assert section_span(lone, {"hi": 0x7000_0000 + 65536}) is None  # nothing says the 64 KiB before it are the module's
    first = DataSection(".nv.global", 65540, False, (GlobalSymbol("lo", 4, False, ".nv.global", 0),))
    assert section_span(first, {"lo": 0x7000_0000}) == (0x7000_0000, 65540)


class StubDriver:
    """The driver calls ModuleState makes, over a device of sections laid out at the addresses the ELF gives."""

    def __init__(self, monkeypatch, cubin: bytes):
        from cuda.bindings import driver as cu  # the stub (fixture `runner`), or the real module: patched for the test

        from ptxbench.tools.gpu.module_state import module_sections

        self.where, self.memsets, self.copies = {}, [], []
        for i, section in enumerate(module_sections(cubin)):
            base = 0x7000_0000_0000 + i * (1 << 24)
            for j, g in enumerate(section.symbols):  # a managed global in managed memory of its own, far away
                self.where[g.name] = (0x9000_0000_0000 + j * 4096 if g.managed else base + g.offset, g.size)
        ok = cu.CUresult.CUDA_SUCCESS
        for name, fn in (("CUdeviceptr", lambda x: x), ("CUstream", lambda x: x),
                         ("cuModuleGetGlobal", lambda module, name: (ok, *self.where[name.decode()])),
                         ("cuMemcpyDtoH", lambda host, ptr, size: (ok,)),
                         ("cuMemsetD8Async", lambda ptr, value, size, stream: self.memsets.append((ptr, size)) or (ok,)),
                         ("cuMemcpyHtoDAsync", lambda ptr, data, size, stream: self.copies.append((ptr, size)) or (ok,))):
            monkeypatch.setattr(cu, name, fn)

    def covered(self, start: int, end: int) -> bool:
        return any(a <= start and end <= a + n for a, n in self.memsets + self.copies)


def test_a_restore_writes_the_padding_between_globals_and_constants(runner, monkeypatch, cubin):
    from ptxbench.tools.gpu.module_state import ModuleState, module_sections

    driver = StubDriver(monkeypatch, cubin)
    ModuleState(SimpleNamespace(), cubin).restore(0)
    for section in module_sections(cubin):
        lo, hi = sorted(section.symbols, key=lambda g: g.offset)[::len(section.symbols) - 1]
        start, end = driver.where[lo.name][0] + lo.size, driver.where[hi.name][0]  # the padding between them
        assert driver.covered(start, end), (section.name, hex(start), hex(end), driver.memsets, driver.copies)


MANAGED_PTX = """.version 8.0
.target sm_90a
.address_size 64
.global .align 65536 .b8 lo[16];
.global .attribute(.managed) .align 65536 .b8 kept[16];
.global .align 65536 .b8 hi[16];
.visible .entry k(.param .u64 p) {
  .reg .b32 %r<4>;
  ld.global.u32 %r1, [lo]; ld.global.u32 %r2, [kept]; ld.global.u32 %r3, [hi];
  add.u32 %r1, %r1, %r2; add.u32 %r1, %r1, %r3;
  st.global.u32 [lo], %r1; st.global.u32 [kept], %r1; st.global.u32 [hi], %r1;
  ret;
}
"""


def test_a_managed_global_placed_elsewhere_leaves_the_section_reset_whole(runner, monkeypatch):
    """A `__managed__` global may live in managed memory of its own, away from its section: were it counted, the
    section's symbols would disagree on its base and the reset fall back to the symbols, padding left again."""
    from ptxbench.tools.gpu.module_state import ModuleState, module_sections

    result = compile_source(MANAGED_PTX, "ptx", "sm_90a")
    assert result.status == "ok", result.errors
    cubin = open(result.cubin_path, "rb").read()
    (section,) = module_sections(cubin)
    assert [g.name for g in section.symbols if g.managed] == ["kept"]
    driver = StubDriver(monkeypatch, cubin)
    ModuleState(SimpleNamespace(), cubin).restore(0)
    placed = sorted((g for g in section.symbols if not g.managed), key=lambda g: g.offset)
    start, end = driver.where[placed[0].name][0], driver.where[placed[-1].name][0] + placed[-1].size
    assert driver.covered(start, end) and driver.covered(*(lambda a, n: (a, a + n))(*driver.where["kept"]))
