"""The scrub that overwrites shared and local memory before every call (tools/gpu/scrub.py).

On the CPU: the kernels are assembled by the pinned ptxas and their SASS really stores (an assembler that proves
nobody reads a store drops it: it did, for a first local scrub that wrote one value everywhere), over the frame asked
for, within 32 registers (two 1024-thread CTAs on every SM: every warp slot); the grids cover every SM. On the GPU:
a kernel finds in shared and local memory what the previous kernel left there, and after the scrub finds none of it.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ptxbench.tools.gpu.scrub import (LOCAL_BLOCK, MIN_FRAME, SHARED_PTX, ScrubShape, frame_bytes, local_fill,
                                      local_ptx)

H200 = ScrubShape(sm_count=132, threads_per_sm=2048, smem_bytes=232448)


def test_the_frame_covers_the_candidate_and_the_stack_limit():
    assert frame_bytes(0, 1024) == MIN_FRAME == 1024  # a kernel with no frame still addresses the default stack
    assert frame_bytes(0, 0) == 1024
    assert frame_bytes(1500, 1024) == 1536 and frame_bytes(64, 8192) == 8192 and frame_bytes(65537, 1024) == 73728
    assert local_fill(1024) == (-1 - 1024) & 0xFFFFFFFF
    for frame in (1024, 65536):  # fill + offset stays a negative 32-bit integer over the whole frame
        assert all((local_fill(frame) + off) & 0xFFFFFFFF >= 0x80000000 for off in (0, frame - 16))
    with pytest.raises(ValueError):
        local_ptx(1000)


def test_the_frame_reserves_at_most_an_eighth_more_than_the_candidates_own():
    """The driver reserves the scrub's frame for every thread the GPU holds: a power of two nearly doubled a 130 KB
    frame (69 GB on an H100, refused though the candidate's own 35 GB fits). Still few variants: eight an octave."""
    frames = {}
    for need in range(1024, 512 * 1024 + 1, 16):
        frame = frame_bytes(need, 1024)
        assert need <= frame <= need * 9 // 8 and frame % 16 == 0, (need, frame)
        local_ptx(frame)
        frames.setdefault(frame.bit_length(), set()).add(frame)
    assert frame_bytes(130 * 1024, 1024) * 2048 * 132 < 40e9
    assert max(len(v) for v in frames.values()) <= 8


def test_the_grids_occupy_every_sm_and_every_warp_slot():
    assert H200.shared_grid == 132  # one CTA per SM: each asks for more than half an SM's shared memory
    assert 2 * H200.smem_bytes > 228 * 1024
    assert H200.local_grid == 264 and H200.local_grid * LOCAL_BLOCK == 132 * 2048
    assert H200.local_bytes_written(1024) == 132 * 2048 * 1024  # 277 MB at the default stack


def _assemble(text: str, tmp_path, name: str) -> tuple[str, str]:
    from ptxbench.tools.toolchain import find_toolchain

    tc = find_toolchain("sm_90a")
    src = tmp_path / f"{name}.ptx"
    src.write_text(text)
    out = subprocess.run([tc.ptxas.path, "-arch=sm_90a", "-v", str(src), "-o", str(src) + ".cubin"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sass = subprocess.run([tc.nvdisasm.path, str(src) + ".cubin"], capture_output=True, text=True, timeout=60).stdout
    return out.stderr, sass


def _looped(sass: str, store: str) -> bool:
    """The store sits in a loop: a branch after it jumps back to a label before it."""
    lines = sass.splitlines()
    at = next(i for i, line in enumerate(lines) if store in line)
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    return any(labels.get(m.group(1), len(lines)) <= at
               for line in lines[at + 1:] if (m := re.search(r"BRA `\((\.L_x_\d+)\)", line)))


def test_the_shared_scrub_stores_in_a_loop(tmp_path):
    info, sass = _assemble(SHARED_PTX, tmp_path, "shared")
    assert "STS.128" in sass and _looped(sass, "STS.128")
    # and one word per thread over the CTA's reserved shared memory, from its special registers
    assert "%reserved_smem_offset_begin" in SHARED_PTX and re.search(r"\bSTS\b(?!\.128)", sass)


@pytest.mark.parametrize("frame", [1024, 4096, 65536])
def test_the_local_scrub_writes_its_whole_frame_within_32_registers(tmp_path, frame):
    info, sass = _assemble(local_ptx(frame), tmp_path, f"local{frame}")
    assert f"{frame} bytes stack frame" in info
    registers = int(re.search(r"Used (\d+) registers", info).group(1))
    assert registers <= 32  # 2 x 1024 threads x 32 registers = an SM's 64K: both CTAs resident
    assert "STL.128" in sass and _looped(sass, "STL.128") and "LDL" in sass
    # and above its frame to the local window's top, through the generic address, bounded by `isspacep.local`
    assert "ST.E.128" in sass and _looped(sass, "ST.E.128") and "QSPC.E.L" in sass


def test_under_the_sanitizer_the_pass_above_the_frame_stops_where_it_starts(tmp_path, monkeypatch):
    """compute-sanitizer's memcheck read the stores above the frame as invalid __local__ writes and aborted the
    replay before the candidate ran (run 36): its replay scrubs the frame alone, the same kernel with a bound of 0."""
    above, alone = local_ptx(1024), local_ptx(1024, above_frame=False)
    assert f"setp.ge.u64 %p3, %rd7, {1 << 24};" in above and "setp.ge.u64 %p3, %rd7, 0;" in alone
    assert above.replace(str(1 << 24), "0") == alone
    info, sass = _assemble(alone, tmp_path, "alone")
    assert "1024 bytes stack frame" in info and "STL.128" in sass
    from ptxbench.tools import sanitize

    seen = []
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/bin/true")
    monkeypatch.setattr("ptxbench.tools.profile.runner._run", lambda argv, *a, **k: (seen.append(argv), (0, ""))[1])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    sanitize.sanitize_candidate("smoke_gemm_bf16_m256_n256_k512", "// cuda", language="cuda", cubin_path=cubin,
                                tools=["memcheck"])
    assert seen and "--no-scrub-above" in seen[0] and "--exact" in seen[0]
    from ptxbench.tools.profile import replay

    parsed = {}
    monkeypatch.setattr(replay, "replay", lambda *a, **k: parsed.update(k) or 0)
    source = tmp_path / "s.cu"
    source.write_text("// cuda")
    assert replay.main(["--workload", "w", "--source", str(source), "--cubin", str(cubin), "--no-scrub-above"]) == 0
    assert parsed["scrub_above"] is False
    replay.main(["--workload", "w", "--source", str(source), "--cubin", str(cubin)])
    assert parsed["scrub_above"] is True


LEFTOVER_CU = (Path(__file__).resolve().parents[1] / "data" / "kernels" / "leftover.cu").read_text()
# Frames of the probe: smaller than the scrub's least (the scrub's frame must cover one laid out smaller), and one
# that sets the scrub's frame itself.
FRAMES = (256, 4096)


def _leftover_module(frame: int):
    from ptxbench.tools.compile import compile_source

    comp = compile_source(f"#define FRAME {frame}\n" + LEFTOVER_CU, "cuda", "sm_90a")
    assert comp.status == "ok", comp.errors
    return comp


@pytest.mark.parametrize("frame", FRAMES)
def test_the_leftover_probe_compiles_with_its_loads_kept(frame):
    """The GPU test's probe kernels: their loads of memory they never wrote must survive the compiler."""
    k = _leftover_module(frame).kernels
    assert k["find_local"].stack >= frame and k["leave_local"].stack >= frame
    assert k["find_local"].sass_opcodes.get("LDL", 0) >= 1 and k["leave_local"].sass_opcodes.get("STL", 0) >= 1
    assert k["find_shared"].sass_opcodes.get("LDS") and k["leave_shared"].sass_opcodes.get("STS")
    assert k["find_reserved"].sass_opcodes.get("LDS") and k["leave_reserved"].sass_opcodes.get("STS")
    assert k["find_local"].registers <= 32 and k["leave_local"].registers <= 32  # two CTAs per SM: every warp slot
    # above a 16-byte frame, through a generic pointer, as local_above_frame_stash.cu keeps its stash
    assert k["find_above"].stack <= 64 and k["find_above"].sass_opcodes.get("LD", 0) >= 1
    assert k["leave_above"].sass_opcodes.get("ST", 0) >= 1 and k["find_above"].registers <= 32


@pytest.mark.gpu
@pytest.mark.parametrize("frame", FRAMES)
def test_a_kernel_finds_what_the_last_left_on_chip_and_after_the_scrub_nothing(frame):
    """Shared and local memory outlive a kernel (the channel the scrub closes), and the scrub leaves none of it: with
    the scrub's frame as the evaluator picks it (frame_bytes of the kernel's frame and the context's stack limit)."""
    import ctypes
    import secrets

    import torch

    from ptxbench.tools.gpu.inprocess import in_process_worker
    from ptxbench.tools.gpu.launch import get_function, launch_1d, load_module, set_dynamic_smem, stack_limit

    comp = _leftover_module(frame)
    with in_process_worker() as state:
        lim = state.limits
        module = load_module(open(comp.cubin_path, "rb").read())
        fns = {n: get_function(module, n) for n in ("leave_local", "find_local", "leave_shared", "find_shared",
                                                     "leave_reserved", "find_reserved", "leave_above", "find_above")}
        for n in ("leave_shared", "find_shared", "leave_reserved", "find_reserved"):
            set_dynamic_smem(fns[n], lim.max_smem_optin)
        stream = torch.cuda.current_stream().cuda_stream
        hits = torch.zeros(1, dtype=torch.int32, device="cuda")
        words = lim.max_smem_optin // 4

        def launch(name: str, grid: int, smem: int, values: list) -> None:
            launch_1d(fns[name], grid, 1024, smem, stream, values)

        def found(kind: str, scrub: bool) -> int:
            tag = secrets.randbits(31) | 1
            hits.zero_()
            if kind == "local":
                launch("leave_local", 2 * lim.sm_count, 0, [ctypes.c_uint32(tag)])
            elif kind == "above":
                launch("leave_above", 2 * lim.sm_count, 0, [ctypes.c_uint32(tag), ctypes.c_int32(0)])
            elif kind == "reserved":  # one CTA per SM (all the dynamic shared memory), as the scrub's
                launch("leave_reserved", lim.sm_count, lim.max_smem_optin, [ctypes.c_uint32(tag)])
            else:
                launch("leave_shared", lim.sm_count, lim.max_smem_optin, [ctypes.c_uint32(tag), ctypes.c_uint32(words)])
            if scrub:
                state.on_chip_scrub().run(stream, frame_bytes(fns["find_local"].local_bytes, stack_limit()))
            ptr = ctypes.c_uint64(hits.data_ptr())
            if kind in ("local", "above"):
                launch(f"find_{kind}", 2 * lim.sm_count, 0, [ptr, ctypes.c_uint32(tag), ctypes.c_int32(0)])
            elif kind == "reserved":
                launch("find_reserved", lim.sm_count, lim.max_smem_optin, [ptr, ctypes.c_uint32(tag)])
            else:
                launch("find_shared", lim.sm_count, lim.max_smem_optin, [ptr, ctypes.c_uint32(tag), ctypes.c_uint32(words)])
            torch.cuda.synchronize()
            return int(hits.item())

        kinds = ("shared", "local", "reserved", "above")
        stale = {kind: found(kind, scrub=False) for kind in kinds}
        after = {kind: found(kind, scrub=True) for kind in kinds}
        scrub, scrub_frame = state.on_chip_scrub(), frame_bytes(fns["find_local"].local_bytes, stack_limit())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(21):  # the scrub's cost per call (the first a warm-up)
            start.record()
            scrub.run(stream, scrub_frame)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times = sorted(times[1:])
    print(f"\nframe {frame}: found without the scrub {stale}, after it {after}; the scrub of a {scrub_frame}-byte frame "
          f"and above it: median {times[10]:.3f} ms [{times[0]:.3f}, {times[-1]:.3f}] over 20 runs")
    assert after == {"shared": 0, "local": 0, "reserved": 0, "above": 0}, (stale, after)
    # Without the scrub the next kernel finds them: all of shared memory on every SM (run 16 on an H200: 7,670,784
    # words, 132 x 227 KB), and local memory at a 4 KB frame; at 256 bytes none was found (run 16), so only the
    # 4 KB frame asks for it.
    assert stale["shared"] == lim.sm_count * words, stale
    assert stale["local"] > 0 or frame < MIN_FRAME, stale
    assert stale["above"] > 0, stale  # the memory above a frame outlives a kernel too (the scrub's pass above its own)
