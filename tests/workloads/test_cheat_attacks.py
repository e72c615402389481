"""Attacks on the call protocol beyond the fault corpus (tests/data/cheats/attacks, each file's header says what it
does and the verdict it must get; docs/timing-integrity.md says why).

On the CPU: every attack compiles through the project's own path, and what each relies on is in its binary (the
padding between its globals or constants, TMA beside plain loads, the clock read). On the GPU (`pytest -m gpu
tests/workloads/test_cheat_attacks.py`): the verdicts. A stash or a counter kept where no reset reaches would show as a
kernel timed faster than its own no-hit twin (the same text, its stash never hit), or as a count-keyed kernel that
stops writing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions

ATTACKS = Path(__file__).resolve().parents[1] / "data" / "cheats" / "attacks"
SMOKE = "smoke_gemm_bf16_m256_n256_k512"
# A stash that replays a whole output is a copy: far faster than the naive loop that fills it. Without one the cheat
# runs that loop plus a store per element, so it is no faster than its no-hit twin (run-to-run noise ~10%).
NO_GAIN = 0.8


def source(name: str) -> str:
    return (ATTACKS / name).read_text()


# attacks that reach module data or the memory past a kernel parameter through an address: refused when compiled
# (tools/module_data.py, tools/param_reach.py), with what the refusal names and the place it says lies there
POOL, DRIVER = "driver's pool of module data", "driver's memory"
REFUSED = {"global_padding_stash.cu": ("an address computed from module variable g_", POOL),
           "const_padding_counter.cu": ("`cvta.const.u64` makes a generic address of a constant", POOL),
           "global_tail_stash.cu": ("an address computed from module variable g_only", POOL),
           "param_tail_stash.cu": ("an address computed from a kernel parameter's", DRIVER),
           # the address laundered into a number the flow no longer followed (tools/address_use.py)
           "table_laundered_counter.cu": ("computes on the bits of an address of module variable g_only", POOL),
           "guarded_laundered_counter.cu": ("computes on the bits of an address of module variable g_only", POOL),
           "guarded_laundered_counter.ptx": ("`and.b64` computes on the bits of an address of module variable g_only",
                                             POOL),
           "unnamed_register_param_store.cu": ("writes through `[%pa+65536]`, an address computed from a kernel "
                                               "parameter's", DRIVER)}


def compiled(name: str):
    r = LocalEvaluator().evaluate(SMOKE, source(name), EvalOptions(no_gpu=True))
    assert r.status == "COMPILED", (name, r.status, r.message)
    return r


def raw_cubin(name: str) -> bytes:
    """The attack's cubin as nvcc and ptxas make it without the project's checks: the module layouts the restore of
    module data (module_state.py) still handles, for a counter a kernel names directly."""
    import subprocess
    import tempfile

    from ptxbench.tools.compile import nvcc_flags
    from ptxbench.tools.toolchain import find_toolchain

    tc = find_toolchain("sm_90a")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "a.cu").write_text(source(name))
        flags = [f for f in nvcc_flags("sm_90a") if f != "-ptx"]
        subprocess.run([tc.nvcc.path, "-cubin", *flags, "a.cu", "-o", "a.cubin"], cwd=d, check=True,
                       capture_output=True)
        return (Path(d) / "a.cubin").read_bytes()


def test_every_attack_compiles_or_is_refused_and_is_listed():
    files = sorted(p.name for p in ATTACKS.iterdir() if p.suffix in (".cu", ".ptx"))
    assert files == sorted(ATTACKS_EXPECTED), files
    for name in files:
        if name not in REFUSED:
            compiled(name)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_attack_through_an_address_of_module_data_or_a_parameter_is_refused_when_compiled(name):
    """The three stashes and counters that reach past module data's own bytes (the driver's pool beside it: 11.4x
    faster than its own no-hit twin on an H100, run 33), and the stash 64 KiB past a parameter's generic address, never
    run: the refusal names the place and the way out."""
    r = LocalEvaluator().evaluate(SMOKE, source(name), EvalOptions(no_gpu=True))
    assert r.status == "COMPILE_ERROR" and not r.gpu_evaluated, (r.status, r.message)
    messages = " ".join(e.message for e in r.compile.errors)
    said, place = REFUSED[name]
    assert said in messages and place in messages, messages
    assert all(e.line for e in r.compile.errors), [(e.line, e.message[:80]) for e in r.compile.errors]


def test_the_padding_stash_has_a_mebibyte_between_its_globals():
    from ptxbench.tools.gpu.module_state import module_sections

    cubin = raw_cubin("global_padding_stash.cu")
    (section,) = [s for s in module_sections(cubin) if s.name == ".nv.global"]
    offsets = sorted(g.offset for g in section.symbols)
    assert offsets == [0, 1 << 20] and sum(g.size for g in section.symbols) == 32 and section.size == (1 << 20) + 16


def test_the_constant_counter_sits_between_two_constants_4_kib_apart():
    from ptxbench.tools.gpu.module_state import module_sections

    cubin = raw_cubin("const_padding_counter.cu")
    (bank,) = [s for s in module_sections(cubin) if s.name.startswith(".nv.constant")]
    assert sorted(g.offset for g in bank.symbols) == [0, 4096] and bank.initialised


def test_the_local_probe_has_a_small_frame_and_reaches_below_it():
    grower = compiled("local_frame_grower.cu").compile.kernels["gemm"]
    probe = compiled("local_below_frame_stash.cu").compile.kernels["gemm"]
    assert grower.stack >= 3072 and probe.stack <= 64, (grower.stack, probe.stack)
    assert probe.sass_opcodes.get("LD", 0) >= 6 + 16 and probe.sass_opcodes.get("ST", 0) >= 6 + 16  # generic: the stash


def test_the_new_probes_keep_their_stash_and_the_twins_only_differ_in_the_key():
    """The above-frame probe's frame is 16 bytes and its 24 stash words are generic loads and stores; each twin is its
    probe with one comparison changed."""
    above = compiled("local_above_frame_stash.cu").compile.kernels["gemm"]
    assert above.stack <= 64 and above.sass_opcodes.get("LD", 0) >= 6 + 16 and above.sass_opcodes.get("ST", 0) >= 6 + 16
    for name, (test, never) in STASH_TESTS.items():
        text = source(name)
        assert text.count(test) == 1 and text.replace(test, never) != text, name


def test_the_profiler_tell_keeps_both_paths():
    ops = compiled("profiled_tma_only.cu").compile.kernels["gemm"].sass_opcodes
    assert ops.get("UTMALDG", 0) >= 2 and ops.get("LDG", 0) >= 2 and ops.get("LDS", 0) >= 2, ops


# file -> the verdict the harness must give (checked by the GPU tests below)
ATTACKS_EXPECTED = {
    "global_padding_stash.cu": "COMPILE_ERROR (a global's address kept in a register and offset past it)",
    "const_padding_counter.cu": "COMPILE_ERROR (a constant's generic address: cvta.const)",
    "clock_keyed_skip.cu": "INCORRECT_NAN (some call, checked or timed, wrote nothing)",
    "global_tail_stash.cu": "COMPILE_ERROR (a global named 64 KiB past its 16 bytes; 11.4x faster than its no-hit "
                            "twin when it ran, run 33)",
    "profiled_tma_only.cu": "PASSED, TMA not credited as executed (profile_faster: 0.73x its timed median on an H100, "
                            "run 33)",
    "local_frame_grower.cu": "PASSED (not an attack: leaves the worker's context with a 3 KiB local frame)",
    "local_above_frame_stash.cu": "PASSED no faster than its no-hit twin (run 34 found its stash again before the scrub "
                                  "wrote above the frame: INCORRECT_NUMERICAL)",
    "param_tail_stash.cu": "COMPILE_ERROR (an address a parameter's generic address reaches, written 64 KiB past it)",
    "table_laundered_counter.cu": "COMPILE_ERROR (g_only's address shifted and masked into a table's index)",
    "guarded_laundered_counter.cu": "COMPILE_ERROR (g_only's address masked and compared, bit by bit)",
    "guarded_laundered_counter.ptx": "COMPILE_ERROR (g_only's address masked and compared, bit by bit)",
    "unnamed_register_param_store.cu": "COMPILE_ERROR (a write 64 KiB past a parameter, through a register declared "
                                       "without `%`)",
    "local_below_frame_stash.cu": "after local_frame_grower.cu: PASSED no faster than its no-hit twin, or a failure "
                                  "(run 33 on an H100: 0.163 vs 0.159-0.164 ms; the scrub writes the reserved frame)",
}


# each probe's test for its own stash, which the twin makes compare against a value no call writes
STASH_TESTS = {"local_below_frame_stash.cu": ("if (magic == STASH_MAGIC", "if (magic == ~STASH_MAGIC"),
               "local_above_frame_stash.cu": ("if (magic == STASH_MAGIC", "if (magic == ~STASH_MAGIC")}


def twin_result(ev, name: str):
    """The evaluation of the attack's no-hit twin: its own text with the stash's magic compared against a value no
    call writes, so every load and store of the stash stays and none ever hits. Timed on the same worker, it is the
    comparison that leaves code generation out (run 32 compared local_below_frame_stash.cu with cheat_local_stash.cu,
    a different kernel, and read 28% where none of it need be the stash)."""
    text, (test, never) = source(name), STASH_TESTS[name]
    assert text.count(test) == 1, name
    return ev.evaluate(SMOKE, text.replace(test, never), EvalOptions(timeout_s=10, profile_on_pass=False))


def twin_ms(ev, name: str) -> float:
    """The no-hit twin's median time (it must pass)."""
    r = twin_result(ev, name)
    assert r.status == "PASSED" and r.timing is not None, r.message
    return r.timing.candidate.median_ms


def assert_no_gain(r, honest_ms: float, open_gap: str = "") -> None:
    """The attack PASSED no faster than the honest loop; `open_gap`: a gap measured and not yet closed (its xfail
    names it and the figures, so the GPU suite reports it every run instead of failing on it)."""
    assert r.status == "PASSED", f"{r.status}: {r.message} {r.runtime_error}"
    assert r.timing.verified_calls >= 2 * r.timing.input_sets, r.timing
    gained = r.timing.candidate.median_ms < NO_GAIN * honest_ms
    print(f"attack {r.timing.candidate.median_ms:.4f} ms, honest {honest_ms:.4f} ms")  # -rP / -s: the figures either way
    why = (f"timed at {r.timing.candidate.median_ms:.4f} ms against the same loop's {honest_ms:.4f} ms without the "
           f"stash: it replayed what an earlier call left")
    if gained and open_gap:
        pytest.xfail(f"open: {open_gap}; {why}")
    assert not gained, why


@pytest.mark.gpu
def test_the_padding_between_a_loaded_modules_globals_is_reset():
    """The section layout the restore assumes (each symbol at its section's base plus its ELF offset), on the driver:
    bytes written into the padding between two globals and between two constants are gone after a restore."""
    import torch
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.launch import check, load_module, unload_module
    from ptxbench.tools.gpu.module_state import ModuleState, module_sections, section_span

    torch.empty(1, device="cuda")  # the primary context, current on this thread
    cu.cuInit(0)
    for name in ("global_padding_stash.cu", "const_padding_counter.cu"):
        cubin = raw_cubin(name)
        module = load_module(cubin)
        try:
            state = ModuleState(module, cubin)
            for section in [s for s in module_sections(cubin) if len(s.symbols) >= 2]:  # padding between two symbols
                first = min(section.symbols, key=lambda g: g.offset)
                found = {g.name: int(check(cu.cuModuleGetGlobal(module, g.name.encode()), "cuModuleGetGlobal")[0])
                         for g in section.symbols}
                if section_span(section, found) is None:
                    # The driver placed the symbols apart from the ELF's layout (an H100's packs every global
                    # 256-byte aligned, the 1 MiB padding gone: run 32): no padding exists, each symbol is reset alone
                    assert all((p, g.size, ) in [(e[0], e[1]) for e in state.entries]
                               for g in section.symbols for p in [found[g.name]]), (name, section.name)
                    continue
                ptr = found[first.name]
                pad = int(ptr) + first.size + 48  # 4 KiB or more before the next symbol (the CPU tests above)
                stream = torch.cuda.current_stream().cuda_stream  # written as the restore writes, on the stream
                check(cu.cuMemsetD8Async(cu.CUdeviceptr(pad), 0xA5, 16, cu.CUstream(stream)), "cuMemsetD8Async")
                state.restore(stream)
                torch.cuda.synchronize()
                host = bytearray(16)
                check(cu.cuMemcpyDtoH(host, cu.CUdeviceptr(pad), 16), "cuMemcpyDtoH")
                assert bytes(host) == bytes(16), (name, section.name, bytes(host))
        finally:
            unload_module(module)


@pytest.mark.gpu
def test_a_kernel_that_skips_by_the_clock_fails():
    from gpu_helpers import shared_evaluator

    r = shared_evaluator().evaluate(SMOKE, source("clock_keyed_skip.cu"), EvalOptions(timeout_s=10, profile_on_pass=False))
    assert r.status == "INCORRECT_NAN", f"{r.status}: {r.message}"


@pytest.mark.gpu
def test_a_stash_below_the_local_frame_gains_nothing():
    """A probe: whether local memory below a candidate's own frame, within the frame an earlier candidate made the
    context reserve, survives the scrub. One worker (its own pool): the grower's evaluation, then the probe's no-hit
    twin (twin_ms), then the probe. A CUDA kernel's frame lies below the stack pointer at the top of the thread's
    local window (run 33: the 16-byte frame at local 0xfffc50, the 3 KiB one at 0xfff060), as does the scrub's, so a
    scrub of the reserved frame covers what lies below a small one."""
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        grown = ev.evaluate(SMOKE, source("local_frame_grower.cu"), EvalOptions(timeout_s=10, time=False,
                                                                                 profile_on_pass=False))
        assert grown.status == "PASSED", grown.message
        honest = twin_ms(ev, "local_below_frame_stash.cu")
        r = ev.evaluate(SMOKE, source("local_below_frame_stash.cu"), EvalOptions(timeout_s=10, profile_on_pass=False))
    finally:
        ev.close()
    if r.status != "PASSED":  # nothing mapped below the frame (a fault), or caught: no gain either way
        assert r.status in ("RUNTIME_ERROR", "INCORRECT_NUMERICAL", "INCORRECT_NAN"), f"{r.status}: {r.message}"
        return
    assert_no_gain(r, honest)


@pytest.mark.gpu
def test_a_stash_above_the_frame_is_never_found():
    """The local memory between a kernel's stack pointer and its window's top outlives a kernel: run 34 found this
    probe's stash there again (INCORRECT_NUMERICAL, a stale one replayed). The scrub writes it before every call, so
    the probe never finds it: it passes, at its own no-hit twin's speed, every time. On a pool of its own. (The memory
    past a parameter's generic address, param_tail_stash.cu, is refused when compiled: tools/param_reach.py.)"""
    name = "local_above_frame_stash.cu"
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        twin = twin_result(ev, name)
        runs = [ev.evaluate(SMOKE, source(name), EvalOptions(timeout_s=10, profile_on_pass=False)) for _ in range(3)]
    finally:
        ev.close()
    print(f"{name}: twin {twin.status}, probe {[r.status for r in runs]}")
    assert twin.status == "PASSED", twin.message
    for r in runs:
        assert r.status == "PASSED", f"{r.status}: {r.message}"
        assert_no_gain(r, twin.timing.candidate.median_ms)


@pytest.mark.gpu
def test_tma_run_only_under_the_profiler_is_not_credited():
    """Unlike profile_gap_tma.cu (tests/tools/test_profile_gpu.py), whose profiled call leaves C unwritten, this one's
    profiled call computes C exactly: the output check passes, and the counters show TMA doing all of the input traffic.
    No timed call ran TMA, so the verdict must not be `executed`. Whatever the profiled call's time says (the bounds of
    candidate.py), the range check runs its two launches back to back, as when timed (tools/profile/range_check.py):
    there the plain-load path runs, and TMA's bytes read next to none."""
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        r = ev.evaluate(SMOKE, source("profiled_tma_only.cu"), EvalOptions())
    finally:
        ev.close()
    assert r.status == "PASSED" and r.profile_level == "verdict", r.message
    assert r.profile["output_passed"] is True, r.profile  # the profiled call's output is the evaluated one's
    tma = r.targets_runtime["tma"]
    assert tma.counter_values.get("smsp__sass_inst_executed_op_tma_ld.sum", 0) > 0, tma  # TMA ran under the profiler
    profiled_ms = sum(k["duration_us"] for k in r.profile["kernels"]) / 1000.0
    rc = r.profile.get("range_check")
    print(f"profiled {profiled_ms:.4f} ms, timed median {r.timing.candidate.median_ms:.4f} ms: "
          f"{profiled_ms / r.timing.candidate.median_ms:.2f}x; range check {rc}; tma {tma.verdict}: {tma.reason}")
    assert rc is not None and rc["ok"] and rc["launches"] == 2, rc
    assert "tma" in rc["short"] and rc["range_values"]["tma"] < 0.01 * rc["kernel_sums"]["tma"], rc
    assert {"profile_slower", "profile_faster", "profile_range_short"} & set(r.timing.flags), r.timing.flags
    assert tma.verdict != "executed" and "not credited" in tma.reason, tma.reason
    assert r.target_executed is False
