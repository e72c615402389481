"""Timed calls look like checked calls, and the judge is out of reach: the CPU-checkable parts.

The call protocol (tools/gpu/calls.py) with a fake candidate on CPU buffers, the output sketch and its
tolerance, module globals read from a real cubin, the referee's judgments in-process and across a real
process boundary, the seeds and the suspicious-timing rule. The GPU side (real kernels, the cheat corpus,
CUDA IPC) is in test_fault_corpus.py and test_gpu_evaluator.py, marked gpu.
"""
from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from ptxbench.tools.gpu.buffers import allocate_set, poison_
from ptxbench.tools.gpu.calls import CandidateCalls, InputSet, SKETCH_TOLERANCE, sign_rows, \
    sketch_tensors, to_sketch
from ptxbench.tools.gpu.ceilings import suspicious
from ptxbench.tools.gpu.referee import RefereeClient, RefereeCore, RefereeError, input_digest, serve
from ptxbench.tools.gpu.verdict import Failed
from ptxbench.workloads.inputs import make_inputs
from ptxbench.workloads.references import run_reference
from ptxbench.workloads.registry import get_workload

WL = get_workload("smoke_gemm_bf16_m256_n256_k512")


def sketch_of(t: torch.Tensor, key: int = 7, like=None):
    """The sketch of output `t`; like=a verified sketch: squashed with its scale, as a timed call's is."""
    return to_sketch(["C"], torch.stack(sketch_tensors({"C": t}, key, scales=like.scales() if like else None)).tolist())


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float().T).to(torch.bfloat16)


# ---- the sketch: honest run-to-run noise passes, skipped or shortened work does not ----
def test_sketch_accepts_rounding_noise_and_rejects_skipped_work():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(256, 256, generator=g).to(torch.bfloat16)
    verified = sketch_of(ref)
    assert sketch_of(ref.clone()).differs(verified) == ""
    # every element one bf16 ulp off (more than atomics reordering would ever do): still the same output
    ulp = ref.view(torch.int16) + torch.randint(0, 2, ref.shape, generator=g, dtype=torch.int16) * 2 - 1
    assert sketch_of(ulp.view(torch.bfloat16)).differs(verified) == ""
    # one tile of 16 x 256 (6%) left as zeros, or left as the NaN poison, or the whole output skipped
    zeros = ref.clone()
    zeros[:16] = 0
    assert "differs from the verified output" in sketch_of(zeros).differs(verified)
    poisoned = ref.clone()
    poison_(poisoned[:1, :8])
    assert "NaN" in sketch_of(poisoned).differs(verified)
    assert sketch_of(poison_(ref.clone())).differs(verified)
    # same norm, different values: a permuted output
    assert sketch_of(ref.flip(0)).differs(verified)


def test_rows_that_hold_little_of_the_norm_are_still_checked():
    """The attention forward's O: its spiked rows (one-hot on a long key) hold 96-99.6% of the norm, its plain rows
    (averages over thousands of keys) the rest. On raw values a timed call that wrote the plain rows a third short
    stayed within 2^-5 of the norm; the squashed projections (x / (|x| + c), c the verified mean |x|) see it, while
    every element one bf16 ulp off still matches."""
    g = torch.Generator().manual_seed(5)
    rows, d = 1024, 128
    spiked = torch.rand(rows, generator=g) < 1 / 16
    ref = torch.randn(rows, d, generator=g) * torch.where(spiked, 1.0, 0.016)[:, None]
    ref = ref.to(torch.bfloat16)
    assert float(ref[spiked].float().norm() ** 2 / ref.float().norm() ** 2) > 0.995
    verified = sketch_of(ref)
    ulp = ref.view(torch.int16) + torch.randint(0, 2, ref.shape, generator=g, dtype=torch.int16) * 2 - 1
    assert sketch_of(ulp.view(torch.bfloat16), like=verified).differs(verified) == ""
    short = torch.where(spiked[:, None], ref, ref * 0.67)  # the plain rows from a third fewer keys, say
    why = sketch_of(short, like=verified).differs(verified)
    assert "squashed" in why, why  # the raw projections alone passed it


def test_sketch_signs_come_from_the_key_not_from_memory():
    x = torch.randn(4096).to(torch.bfloat16)
    a, b = sketch_tensors({"C": x}, 1), sketch_tensors({"C": x}, 2)
    assert float(a[0]) != float(b[0]) and float(a[2]) == float(b[2])  # projections change, the norm does not
    assert [float(v) for v in a] == [float(v) for v in sketch_tensors({"C": x}, 1)]
    assert SKETCH_TOLERANCE <= 2 ** -4


# ---- the call protocol with a fake candidate (kernels played by Python on CPU buffers) ----
class FakeCandidate:
    """Plays a kernel: `kernel(call_no, bufs)` writes the outputs; state outside the buffers persists on purpose
    (the protocol must not rely on resetting it: every call's output is verified)."""

    def __init__(self, kernel):
        self.kernel, self.launches, self.restored, self.scrubbed = kernel, 0, 0, 0

    def bind(self, bufs):
        return bufs

    def launch(self, bufs):
        self.launches += 1
        self.kernel(self.launches, bufs)

    def restore_globals(self):
        self.restored += 1

    def clear_unowned(self):
        self.scrubbed += 1


def honest(_n, bufs):
    bufs.tensors["C"].data.copy_(gemm(bufs.tensors["A"].data, bufs.tensors["B"].data))


def make_calls(kernel, n_sets: int = 2, key: int = 5) -> CandidateCalls:
    sets = []
    for k in range(n_sets):
        pristine = make_inputs(WL, 100 + k, "normal", "cpu")
        bufs = allocate_set([(t.name, WL.shape(t.name), t.dtype, t.role) for t in WL.tensors], [], device="cpu")
        bufs.load_inputs(pristine)
        sets.append(InputSet(k, 100 + k, bufs, pristine))
    return CandidateCalls(FakeCandidate(kernel), sets, key)


def run(calls: CandidateCalls, timed: int) -> None:
    """Checked call on every set (sketch becomes verified), then `timed` protocol calls in random set order."""
    for k in range(len(calls.sets)):
        calls.current = k
        calls.restore()
        calls.call()
        calls.verified[k] = calls.observe(k)
    for _ in range(timed):
        calls.prepare()
        calls.call()
        calls.check()


def test_every_call_starts_from_the_same_state():
    seen = []

    def kernel(_n, bufs):
        seen.append((bool(torch.isnan(bufs.tensors["C"].data.float()).all()), bufs.tensors["A"].data.clone()))
        honest(_n, bufs)

    calls = make_calls(kernel)
    run(calls, 12)
    assert all(poisoned for poisoned, _ in seen)  # outputs poisoned before every call, checked or timed
    assert calls.cand.restored == calls.cand.launches == 14  # module globals reset before every call
    assert calls.cand.scrubbed == 14  # and the memory no buffer holds overwritten (shared, local, unowned)
    assert calls.calls == 12 and {calls.sets.index(s) for s in calls.sets} == {0, 1}


def test_a_kernel_that_skips_work_in_a_timed_call_fails():
    def lazy(n, bufs):  # remembers its launches where no reset reaches (a Python counter here)
        if n <= 3:
            honest(n, bufs)

    calls = make_calls(lazy)
    with pytest.raises(Failed) as e:
        run(calls, 10)
    assert e.value.status == "INCORRECT_NAN" and "timed call 2" in e.value.message


def test_a_kernel_that_replays_another_inputs_result_fails():
    cache = {}

    def replay(n, bufs):  # computes once, then writes that output for any inputs
        if "C" not in cache:
            honest(n, bufs)
            cache["C"] = bufs.tensors["C"].data.clone()
        bufs.tensors["C"].data.copy_(cache["C"])

    calls = make_calls(replay)
    calls.current = 0
    calls.restore()
    calls.call()
    calls.verified[0] = calls.observe(0)
    calls.current = 1
    calls.restore()
    calls.call()
    # set 1's checked call is the referee's to judge; its sketch differs from set 0's verified one anyway
    assert calls.observe(1).differs(calls.verified[0]) == ""  # identical outputs for different inputs
    calls.verified[1] = sketch_of(gemm(calls.sets[1].pristine["A"], calls.sets[1].pristine["B"]), calls.key)
    with pytest.raises(Failed):
        for _ in range(20):
            calls.prepare()
            calls.call()
            calls.check()


def test_a_write_into_any_input_set_is_caught_after_the_call():
    def scribble(n, bufs):
        honest(n, bufs)
        if n == 4:
            bufs.tensors["B"].data[3, 3] = 1.0

    calls = make_calls(scribble)
    with pytest.raises(Failed) as e:
        run(calls, 10)
    assert e.value.status == "INCORRECT_NUMERICAL" and "modified its input" in e.value.message


def test_a_write_into_a_guard_zone_is_caught_after_any_call():
    def overflow(n, bufs):
        honest(n, bufs)
        if n == 5:
            bufs.tensors["C"].raw[-1] = 0

    calls = make_calls(overflow)
    with pytest.raises(Failed) as e:
        run(calls, 10)
    assert e.value.status == "RUNTIME_ERROR" and "OUT_OF_BOUNDS_WRITE" in e.value.runtime_error


def test_an_honest_kernel_passes_every_timed_call():
    calls = make_calls(honest, n_sets=3)
    run(calls, 30)
    assert calls.calls == 30


# ---- the referee: expected outputs in another process ----
def test_referee_judges_outputs_and_inputs():
    core = RefereeCore("cpu")
    digest = core.prepare(WL.id, 42, "normal")
    x = make_inputs(WL, 42, "normal", "cpu")
    assert digest == input_digest(x)  # the worker and the referee draw the same inputs
    good = {"C": run_reference(WL, x)["C"].to(torch.bfloat16)}
    stats = core.judge(WL.id, 42, "normal", 0, good, x)
    assert all(s["passed"] for s in stats)
    touched = {n: t.clone() for n, t in x.items()}
    touched["A"][0, 0] += 1
    stats = core.judge(WL.id, 42, "normal", 0, good, touched)
    assert not stats[0]["passed"] and "modified its input(s) A" in stats[0]["note"]
    assert core.changed_inputs(WL.id, 42, "normal", touched) == ["A"]
    assert not core.judge(WL.id, 42, "normal", 0, {"C": torch.zeros_like(good["C"])}, x)[0]["passed"]


def test_referee_process_answers_in_order_and_reports_its_faults():
    ctx = mp.get_context("spawn")
    worker_end, referee_end = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(referee_end, -1), daemon=True)
    proc.start()
    try:
        client = RefereeClient(worker_end, timeout_s=120)
        client.prepare_async(WL.id, 1, "normal")
        client.prepare_async(WL.id, 2, "normal")
        x = make_inputs(WL, 2, "normal", "cpu")
        good = {"C": run_reference(WL, x)["C"].to(torch.bfloat16)}
        stats = client.judge(WL.id, 2, "normal", 1, good, x)
        assert stats[0]["passed"] and stats[0]["trial"] == 1
        assert client.digests[(WL.id, 2, "normal")] == input_digest(x) and (WL.id, 1, "normal") in client.digests
        with pytest.raises(RefereeError, match="KeyError|unknown workload|no workload"):
            client.judge("no_such_workload", 1, "normal", 0, good, x)
    finally:
        worker_end.send({"op": "exit"})
        proc.join(timeout=30)


def test_referee_gone_is_a_harness_fault():
    a, b = mp.Pipe()
    b.close()
    client = RefereeClient(a, timeout_s=1)
    with pytest.raises(RefereeError):
        client.prepare(WL.id, 1, "normal")


# ---- seeds and the suspicious-timing rule ----
def test_seeds_are_drawn_per_evaluation_unless_given():
    from ptxbench.tools.gpu.seeds import evaluation_seeds

    drawn = {tuple(evaluation_seeds(None, 3)) for _ in range(20)}
    assert len(drawn) > 15 and all(s[1] == s[0] + 1 for s in drawn)
    assert evaluation_seeds(77, 3) == [77, 78, 79]


def test_physically_impossible_timings_are_suspicious():
    assert suspicious(["above_roofline"])
    assert suspicious(["implausible_speedup"])
    assert not suspicious(["implausible_speedup", "library_overhead_bound"])
    assert suspicious(["implausible_speedup", "library_overhead_bound", "above_roofline"])
    assert not suspicious(["slow_candidate", "reduced_iterations"])


# ---- module globals, read from a real cubin ----
def test_module_globals_are_found_in_the_cubin():
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.gpu.module_state import module_globals

    ptx = """.version 8.0
.target sm_90a
.address_size 64
.global .align 4 .u32 counter = 7;
.global .align 8 .b8 stash[4096];
.const .align 4 .b8 kept[64];
.visible .entry k(.param .u64 p) {
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.global.u32 %r1, [counter]; add.u32 %r1, %r1, 1; st.global.u32 [counter], %r1;
  st.global.u32 [stash], %r1;
  ld.const.u32 %r1, [kept+4]; st.global.u32 [stash+4], %r1;
  ret;
}
"""
    result = compile_source(ptx, "ptx", "sm_90a")
    assert result.status == "ok", result.errors
    found = {g.name: g for g in module_globals(open(result.cubin_path, "rb").read())}
    assert found["counter"].initialised and found["counter"].size == 4
    assert not found["stash"].initialised and found["stash"].size == 4096
    # a constant's load-time bytes go back too (a generic store into one is refused at compile: module_data.py)
    assert found["kept"].initialised and found["kept"].size == 64
    assert set(found) == {"counter", "stash", "kept"}


def test_the_library_gets_the_same_restore_and_checks_and_a_write_into_it_is_caught():
    from ptxbench.tools.gpu.state import BaselineEntry

    lib_inputs = make_inputs(WL, 999, "normal", "cpu")
    entry = BaselineEntry(lambda: {"C": gemm(lib_inputs["A"], lib_inputs["B"])}, lib_inputs,
                          {k: v.clone() for k, v in lib_inputs.items()})

    def stray(n, bufs):
        honest(n, bufs)
        if n == 6:
            lib_inputs["A"][0, 0] += 1  # a far write that lands in the library's inputs

    calls = make_calls(stray)
    calls.attach_library([entry])
    with pytest.raises(Failed) as e:
        run(calls, 3)
        for _ in range(10):
            calls.library_prepare()
            calls.library_check(calls.library_call())
            calls.prepare()
            calls.call()
            calls.check()
    assert e.value.status == "RUNTIME_ERROR" and "library" in e.value.message


def test_timing_suspect_is_a_failure_everywhere():
    from ptxbench.agent.loop.feedback import STATUS_HEADINGS
    from ptxbench.tools.results import MODEL_FAILURES, EvalResult, Timing, TimingStat

    stat = TimingStat(median_ms=0.1, ci_low_ms=0.1, ci_high_ms=0.1, n=150)
    r = EvalResult(workload=WL.id, status="TIMING_SUSPECT", gpu_evaluated=True, input_seed=5,
                   timing=Timing(candidate=stat, speedup=5.3, flags=["implausible_speedup", "above_roofline"],
                                 recheck_speedup=5.2))
    assert not r.passed and "TIMING_SUSPECT" in MODEL_FAILURES and "not counted as correct" in STATUS_HEADINGS[r.status]
    assert EvalResult.model_validate_json(r.model_dump_json()).input_seed == 5


# ---- the cheaper protocol is the same protocol ----
def test_inputs_found_bit_identical_are_not_copied_again_and_new_ones_are():
    calls = make_calls(honest)
    copies = []
    for s in calls.sets:
        load = s.bufs.load_inputs
        s.bufs.load_inputs = lambda inputs, load=load: (copies.append(1), load(inputs))
    run(calls, 6)
    assert len(copies) == 2  # the first restore only: every later check found the inputs untouched
    fresh = make_inputs(WL, 999, "normal", "cpu")
    calls.set_pristine(0, fresh)
    calls.prepare()
    assert torch.equal(calls.sets[0].bufs.tensors["A"].data, fresh["A"]) and len(copies) == 4


def test_an_input_zero_turned_negative_is_a_changed_input():
    """-0.0 == 0.0, so an equality check would miss it and the sign bit would carry state from call to call."""
    def sign_flip(n, bufs):
        honest(n, bufs)
        if n == 4:
            bufs.tensors["A"].data[0, 0] = -0.0

    calls = make_calls(sign_flip)
    for s in calls.sets:
        s.pristine["A"][0, 0] = 0.0
        s.bufs.tensors["A"].data[0, 0] = 0.0
    with pytest.raises(Failed) as e:
        run(calls, 10)
    assert "modified its input" in e.value.message and "A of input set" in e.value.message


def test_the_signs_are_drawn_afresh_for_every_sketch_and_kept_nowhere():
    """A copy kept on the device would be judge state a kernel could overwrite between calls."""
    x = torch.randn(3000).to(torch.bfloat16)
    assert not [name for name in vars(make_calls(honest)) if "sign" in name]  # the protocol keeps no signs
    first = [float(v) for v in sketch_tensors({"C": x}, 9)]
    rows = sign_rows(9, 0, 3000, "cpu")
    assert first[:2] == [float(v) for v in (rows @ x.float())] and set(rows.unique().tolist()) == {-1.0, 1.0}
    assert first == [float(v) for v in sketch_tensors({"C": x}, 9)]


def test_a_verified_sketch_that_is_not_finite_matches_nothing():
    ref = torch.randn(64, 64).to(torch.bfloat16)
    nan_verified = to_sketch(["C"], [float("nan")] * 2 + [1.0, 0.0] + [0.0, 0.0, 1.0, 1.0])
    assert "not finite" in sketch_of(ref).differs(nan_verified)


def test_the_referee_warms_up_on_what_a_first_judgment_does_and_keeps_nothing(monkeypatch):
    import ptxbench.tools.gpu.referee as referee_module

    core = RefereeCore("cpu")
    calls = []
    real = referee_module.judge_outputs
    monkeypatch.setattr(referee_module, "judge_outputs", lambda *a, **k: calls.append(a[3].id) or real(*a, **k))
    assert core.warm_up() > 0 and calls == list(referee_module.WARM_UP_WORKLOADS)
    assert core.data == {} and core.library == {}  # nothing of it stays to be mistaken for a real set
    monkeypatch.setattr(referee_module, "WARM_UP_WORKLOADS", ("no_such_workload",))
    assert core.warm_up() >= 0  # a warm-up that cannot run is skipped, the referee still serves


# ---- nothing a check computes stays where the next call could read it ----
def test_a_sketch_leaves_neither_the_output_nor_its_signs_behind():
    """The float copy of an output and its signs live only in the protocol's SketchSpace, poisoned before any kernel
    runs again: in freed blocks of the caching allocator they would hand the next call the previous output, or the
    signs an output could be built to match."""
    calls = make_calls(honest)
    run(calls, 4)
    assert calls.space.holds_nothing()
    calls.library_check({"C": gemm(calls.sets[0].pristine["A"], calls.sets[0].pristine["B"])})
    assert calls.space.holds_nothing()


def test_a_sketch_in_passes_is_the_sketch_of_the_whole_output():
    """Outputs longer than the space are sketched pass by pass: the same norm as the whole output's, projections
    on signs that continue one stream, and still no match for an output with a tile skipped."""
    from ptxbench.tools.gpu.calls import SketchSpace

    g = torch.Generator().manual_seed(3)
    ref = torch.randn(64, 1000, generator=g).to(torch.bfloat16)
    small = SketchSpace("cpu", chunk=4096)  # 16 passes, the last one partial
    whole = sketch_tensors({"C": ref}, 11)
    parts = sketch_tensors({"C": ref}, 11, small)
    assert small.holds_nothing()
    assert float(parts[2]) == pytest.approx(float(torch.linalg.vector_norm(ref.double())), rel=1e-5)
    assert float(parts[2]) == pytest.approx(float(whole[2]), rel=1e-5) and float(parts[3]) == 0.0
    verified = to_sketch(["C"], [float(v) for v in parts])
    again = to_sketch(["C"], [float(v) for v in sketch_tensors({"C": ref.clone()}, 11, small)])
    assert again.differs(verified) == ""  # deterministic pass by pass
    skipped = ref.clone()
    skipped[:4] = 0
    assert "differs" in to_sketch(["C"], [float(v) for v in sketch_tensors({"C": skipped}, 11, small)]).differs(verified)
    nan = ref.clone()
    nan[-1, -1] = float("nan")  # in the last, partial pass
    assert float(sketch_tensors({"C": nan}, 11, small)[3]) == 1.0


def test_library_inputs_changed_alike_with_their_copy_are_found_by_their_seed():
    """The protocol compares a library's inputs with their pristine copy; a kernel that wrote both alike passes that
    compare, so an evaluation also checks them against what their seed draws (state.changed_inputs)."""
    from ptxbench.tools.gpu.cache import ByteLRU
    from ptxbench.tools.gpu.state import BaselineEntry, changed_inputs

    inputs = make_inputs(WL, 4242, "normal", "cpu")
    entry = BaselineEntry(lambda: None, inputs, {k: v.clone() for k, v in inputs.items()}, seed=4242)
    assert changed_inputs(entry, WL, "normal") == []
    entry.inputs["B"][7, 7] = -entry.inputs["B"][7, 7] - 1  # what a far write does to both, alike
    entry.pristine["B"][7, 7] = entry.inputs["B"][7, 7]
    assert changed_inputs(entry, WL, "normal") == ["B"]
    assert changed_inputs(BaselineEntry(lambda: None, inputs, dict(inputs)), WL, "normal") == []  # no seed: untracked
    dropped = []
    cache = ByteLRU(100, on_evict=lambda k, v: dropped.append(k))
    cache.put("a", 1, 10)
    cache.drop("a")
    cache.drop("missing")
    assert dropped == ["a"] and "a" not in cache and cache.total == 0


@pytest.mark.gpu
def test_no_freed_block_holds_an_output_or_the_signs_after_the_checks():
    """On the GPU the caching allocator keeps freed blocks mapped: after checked and timed calls (candidate and
    library), none of them may hold a float copy of an output or a run of +-1 signs."""
    import numpy as np
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.state import BaselineEntry

    sets = []
    for k in range(2):
        pristine = make_inputs(WL, 300 + k, "normal", "cuda")
        bufs = allocate_set([(t.name, WL.shape(t.name), t.dtype, t.role) for t in WL.tensors], [], device="cuda")
        bufs.load_inputs(pristine)
        sets.append(InputSet(k, 300 + k, bufs, pristine))
    calls = CandidateCalls(FakeCandidate(honest), sets, 77)
    lib = make_inputs(WL, 999, "normal", "cuda")
    calls.attach_library([BaselineEntry(lambda: {"C": gemm(lib["A"], lib["B"])}, lib, {k: v.clone() for k, v in lib.items()})])
    run(calls, 6)
    for _ in range(3):
        calls.library_prepare()
        calls.library_check(calls.library_call())
    torch.cuda.synchronize()
    # read to the host first: a float copy made on the GPU here would be a freed block of the test's own
    outputs = [s.bufs.tensors["C"].data.cpu().float().reshape(-1)[:256].numpy().view(np.uint32) for s in sets]
    signs = {np.float32(1.0).view(np.uint32), np.float32(-1.0).view(np.uint32)}
    leftovers = []
    for seg in torch.cuda.memory_snapshot():
        address = seg["address"]
        for block in seg["blocks"]:
            start, size = block.get("address", address), block["size"]
            address = start + size
            if block["state"] != "inactive" or size < 4096:
                continue
            words = np.empty(size // 4, dtype=np.uint32)
            assert cu.cuMemcpyDtoH(words, cu.CUdeviceptr(start), size)[0] == cu.CUresult.CUDA_SUCCESS
            if np.isin(words, list(signs)).mean() > 0.25:
                leftovers.append(f"signs in a freed block of {size} bytes")
            for out in outputs:
                hits = np.flatnonzero(words == out[0])
                if any(np.array_equal(words[h:h + 256], out) for h in hits[:64]):
                    leftovers.append(f"an output's float copy in a freed block of {size} bytes")
    assert not leftovers, leftovers


def test_the_sketchs_constant_one_is_set_after_the_call_not_trusted_from_before():
    """The +1 the signs are built from lives in device memory a kernel could reach: zeroed, every projection would
    read 0 and a timed call would need to match only the output's norm. It is set again by every sketch."""
    from ptxbench.tools.gpu.calls import SketchSpace

    ref = torch.randn(32, 100, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    space = SketchSpace("cpu", chunk=1024)
    honest_sketch = [float(v) for v in sketch_tensors({"C": ref}, 7, space)]
    space.one.zero_()  # what a stray write would leave
    assert [float(v) for v in sketch_tensors({"C": ref}, 7, space)] == honest_sketch
    assert abs(honest_sketch[0]) > 0 and abs(honest_sketch[1]) > 0
