"""What a library instance keeps between calls besides its inputs, and how the harness covers it (CPU).

A kernel that found a tensor which outlives its call and which no check reads could keep a result there and copy it
back on a later call of the same input set. The candidate's own outputs are poisoned before every call and freed
memory is cleared; these tests hold the library's side to the same: its output buffers are poisoned before every
call of the evaluation that times it, and every other cached instance gives up its call (its buffers and derived
tensors freed, so the clear covers them) until its workload is evaluated again.
"""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch

from ptxbench.tools.gpu.buffers import bits, count_poison
from ptxbench.tools.gpu.calls import CandidateCalls
from ptxbench.tools.gpu.state import BaselineEntry, WorkerState
from ptxbench.workloads.baselines import LibraryCall, _made, make_baseline
from ptxbench.workloads.inputs import make_inputs
from ptxbench.workloads.registry import get_workload

SMOKE = get_workload("smoke_gemm_bf16_m256_n256_k512")


def test_the_gemm_library_names_its_output_buffer_and_derives_nothing():
    x = make_inputs(SMOKE, 5, "normal", "cpu")
    call = make_baseline(SMOKE, "cublas", x)
    assert isinstance(call, LibraryCall) and set(call.outputs) == {"C"} and call.derived == {}
    out = call()
    assert out["C"] is call.outputs["C"]  # the same buffer every call: live between calls
    torch.testing.assert_close(out["C"].float(), (x["A"].float() @ x["B"].float().T), rtol=2e-2, atol=2e-1)


def test_derived_tensors_are_the_ones_with_memory_of_their_own():
    x = {"K": torch.randn(2, 4, 8), "V": torch.randn(2, 4, 8)}
    copy = x["K"].repeat_interleave(2, dim=1)  # GQA's expanded K: memory of its own
    made = _made(x, K=copy, V=x["V"].contiguous(), view=x["K"][:, :2], empty=torch.empty(0), n=3)
    assert set(made) == {"K"} and made["K"] is copy  # views of an input (restored with it) and non-tensors are not


def test_the_library_outputs_are_poisoned_before_every_call():
    x = make_inputs(SMOKE, 5, "normal", "cpu")
    entry = BaselineEntry(make_baseline(SMOKE, "cublas", x), x, {k: v.clone() for k, v in x.items()}, seed=5)
    entry.fn()  # a result left in the buffer
    cand = SimpleNamespace(bind=lambda bufs: None, restore_globals=lambda: None, clear_unowned=lambda: None)
    calls = CandidateCalls(cand, [], key=1)
    calls.attach_library([entry])
    calls.library_prepare()
    c = entry.fn.outputs["C"]
    assert count_poison(c) == c.numel()  # every element, as a candidate's outputs
    calls.library_call()
    assert count_poison(c) == 0  # and the library writes it in full


@pytest.fixture
def cpu_state(monkeypatch):
    """A WorkerState whose instances live on the CPU (its cache filled by hand; the rebuild's sync a no-op)."""
    from ptxbench.tools.gpu import state as state_module

    monkeypatch.setattr(state_module.torch.cuda, "synchronize", lambda *a, **k: None)
    st = WorkerState(0, SimpleNamespace(total_memory=1 << 30))
    for index in range(2):
        x = make_inputs(SMOKE, 40 + index, "normal", "cpu")
        st.cache.put(("baseline", SMOKE.id, "cublas", "normal", index),
                     BaselineEntry(make_baseline(SMOKE, "cublas", x), x, {k: v.clone() for k, v in x.items()},
                                   seed=40 + index), 1)
    st.cache.put(("other", "kind"), object(), 1)
    return st


def test_idle_instances_give_up_their_call_and_get_it_back_on_next_use(cpu_state):
    kept = cpu_state.cache.peek(("baseline", SMOKE.id, "cublas", "normal", 0))
    idle = cpu_state.cache.peek(("baseline", SMOKE.id, "cublas", "normal", 1))
    buffer = weakref.ref(idle.fn.outputs["C"])
    assert cpu_state.release_idle(keep=[kept]) == 1
    gc.collect()
    assert kept.fn is not None and idle.fn is None
    assert buffer() is None  # its output buffer freed: on a GPU, memory the clear before every call overwrites
    assert cpu_state.release_idle(keep=[kept]) == 0  # released once
    again = cpu_state.baseline(SMOKE, "cublas", "normal", 1)
    assert again is idle and isinstance(idle.fn, LibraryCall)  # the same cached inputs, a new call on them
    out = idle.fn()["C"]
    torch.testing.assert_close(out.float(), idle.inputs["A"].float() @ idle.inputs["B"].float().T, rtol=2e-2, atol=2e-1)


def _fake_builder(writes_derived: bool = False):
    """A library call on the smoke GEMM that derived a tensor from its inputs (as a backward derives its forward
    pass): B scaled, read by every call; `writes_derived`: the call also writes it (as no library here does)."""
    def build(wl, name, x):
        b2 = x["B"] * 2
        c = torch.empty(x["A"].shape[0], x["B"].shape[0], dtype=x["A"].dtype)

        def run():
            if writes_derived:
                b2.add_(1)
            torch.matmul(x["A"], b2.T, out=c)
            return {"C": c}

        # and a scalar on another device than the inputs (as a library's RNG seed can be): never compared
        return LibraryCall(run, outputs={"C": c}, derived={"B2": b2, "seed": torch.zeros(1, device="meta")})
    return build


def test_derived_tensors_get_the_restore_and_compare_of_inputs(monkeypatch):
    from ptxbench.tools.gpu import state as state_module
    from ptxbench.tools.gpu.state import DERIVED, changed_inputs, library_instance
    from ptxbench.tools.gpu.verdict import Failed

    monkeypatch.setattr(state_module, "make_baseline", _fake_builder())
    entry = library_instance(SMOKE, "cublas", make_inputs(SMOKE, 5, "normal", "cpu"), seed=5)
    live = entry.fn.derived["B2"]
    assert entry.inputs[DERIVED + "B2"] is live and torch.equal(entry.pristine[DERIVED + "B2"], live)
    assert set(entry.digests) == {DERIVED + "B2"} and changed_inputs(entry, SMOKE, "normal") == []
    assert DERIVED + "seed" not in entry.inputs  # the per-call compare reads every input in one transfer
    cand = SimpleNamespace(bind=lambda bufs: None, restore_globals=lambda: None, clear_unowned=lambda: None)
    calls = CandidateCalls(cand, [], key=1)
    calls.attach_library([entry])
    live[0, 0] += 7  # a kernel's write into what the library reads: caught after the call
    with pytest.raises(Failed) as failed:
        calls.library_check(calls.library_call())
    assert failed.value.runtime_error == "OUT_OF_BOUNDS_WRITE: library baseline inputs"
    calls.library_prepare()  # and put back before the next call
    assert torch.equal(live, entry.pristine[DERIVED + "B2"])
    live[1, 1] += 7
    entry.pristine[DERIVED + "B2"][1, 1] += 7  # both alike: the per-call compare passes, the digest does not
    assert changed_inputs(entry, SMOKE, "normal") == [DERIVED + "B2"]


def test_a_derived_tensor_the_library_writes_is_left_out_of_the_compare(monkeypatch):
    from ptxbench.tools.gpu import state as state_module
    from ptxbench.tools.gpu.state import library_instance

    monkeypatch.setattr(state_module, "make_baseline", _fake_builder(writes_derived=True))
    entry = library_instance(SMOKE, "cublas", make_inputs(SMOKE, 5, "normal", "cpu"), seed=5)
    assert set(entry.inputs) == {"A", "B"} and entry.digests == {}  # no candidate is blamed for the library's write


def test_a_released_instance_drops_its_derived_tensors_and_takes_new_ones_when_built_again(cpu_state, monkeypatch):
    from ptxbench.tools.gpu import state as state_module
    from ptxbench.tools.gpu.state import DERIVED, library_instance

    monkeypatch.setattr(state_module, "make_baseline", _fake_builder())
    entry = library_instance(SMOKE, "cublas", make_inputs(SMOKE, 40, "normal", "cpu"), seed=40)
    cpu_state.cache.put(("baseline", SMOKE.id, "cublas", "normal", 0), entry, 1)
    old = weakref.ref(entry.pristine[DERIVED + "B2"])
    cpu_state.release_idle()
    gc.collect()
    assert set(entry.inputs) == set(entry.pristine) == {"A", "B"} and entry.digests == {} and old() is None
    assert cpu_state.baseline(SMOKE, "cublas", "normal", 0) is entry
    assert set(entry.inputs) == {"A", "B", DERIVED + "B2"} and entry.inputs[DERIVED + "B2"] is entry.fn.derived["B2"]


def test_a_timed_secondary_library_is_not_built_again_for_its_figure(cpu_state, monkeypatch):
    """A non-primary library is timed once per worker; later evaluations read its figure without building its call
    again (for a backward, a forward pass and copies of its outputs) only to release it before their timing."""
    entry = cpu_state.cache.peek(("baseline", SMOKE.id, "cublas", "normal", 0))
    assert cpu_state.measured_stats(SMOKE, "cublas", "normal") is None  # not timed yet: the runner builds and times
    entry.stats = {"median_ms": 0.5}
    cpu_state.release_idle()
    monkeypatch.setattr(cpu_state, "baseline", lambda *a, **k: pytest.fail("built again"))
    assert cpu_state.measured_stats(SMOKE, "cublas", "normal") == {"median_ms": 0.5} and entry.fn is None
    assert cpu_state.measured_stats(SMOKE, "cudnn_sdpa", "normal") is None  # never made


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_a_float_tensor_of_any_shape_compares_by_its_bits(dtype):
    """Derived tensors come 0-dim (a seed) or strided (O in the library's layout): their bits are read as integers
    of their width, never as bytes (which raises for such views), for every float dtype, float64 included."""
    for t in (torch.tensor(1.5, dtype=dtype), torch.randn(4, 6, dtype=dtype).t(), torch.zeros(2, dtype=dtype)):
        b = bits(t)
        assert b.shape == t.shape and b.element_size() == t.element_size() and not b.is_floating_point()
    assert (bits(torch.tensor(-0.0, dtype=dtype)) != bits(torch.tensor(0.0, dtype=dtype))).item()


def test_the_keyed_digest_is_exact_in_chunks_and_moves_with_any_element(monkeypatch):
    from ptxbench.tools.gpu import state as state_module
    from ptxbench.tools.gpu.state import keyed_digest

    t = torch.randn(1000, dtype=torch.bfloat16)
    whole = keyed_digest(t, 1234)
    monkeypatch.setattr(state_module, "DIGEST_CHUNK", 64)
    assert keyed_digest(t, 1234) == whole  # chunked or not, the same integer
    for i in (0, 511, 999):
        u = t.clone()
        u[i] = -u[i] if u[i] != 0 else 1.0
        assert keyed_digest(u, 1234) != whole
    assert keyed_digest(t, 99) != whole  # another key, other weights
    # Changes that cancel under +1 / -1 signs half the time: two elements swapped, or one delta moved between two.
    words = torch.randint(-2**15, 2**15, (4096,), dtype=torch.int16, generator=torch.Generator().manual_seed(7))
    base = keyed_digest(words, 1234)
    pairs = torch.randint(0, 4096, (200, 2), generator=torch.Generator().manual_seed(8))
    for i, j in pairs.tolist():
        if words[i] == words[j]:
            continue
        swapped, moved = words.clone(), words.clone()
        swapped[i], swapped[j] = words[j], words[i]
        moved[i] += 1
        moved[j] -= 1
        assert keyed_digest(swapped, 1234) != base and keyed_digest(moved, 1234) != base, (i, j)


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["smoke_gemm_bf16_m256_n256_k512", "smoke_mha_fwd_d64_gqa_h4_kv2",
                                      "smoke_mha_bwd_d64_gqa_h4_kv2", "smoke_mha_bwd_d64"])
def test_every_library_call_writes_its_output_buffers_in_full_and_names_what_it_derived(workload):
    """On the GPU: the poison put into a library instance's output buffers before a call is gone after it (the
    library's outputs are not judged, so a buffer it wrote only in part would go unseen), and what it derived from
    its inputs is named: GQA's expanded K and V, the backward's forward pass and dO in its layout."""
    from ptxbench.tools.gpu.buffers import poison_
    from ptxbench.tools.gpu.state import DERIVED, changed_inputs, library_instance

    wl = get_workload(workload)
    for name in [b.name for b in wl.baselines]:
        entry = library_instance(wl, name, make_inputs(wl, 9, "normal", "cuda"), seed=9)
        call = entry.fn
        # every derived tensor on the GPU is read, never written, by the library's call: all restored and compared
        on_gpu = {n for n, t in call.derived.items() if t.is_cuda}
        assert {"O", "LSE", "dO"} & set(call.derived) <= on_gpu, call.derived  # what the backward's call reads
        assert set(entry.digests) == {DERIVED + n for n in on_gpu}, (workload, name)
        for t in call.outputs.values():
            poison_(t)
        out = call()
        torch.cuda.synchronize()
        assert all(count_poison(t) == 0 for t in call.outputs.values()), (workload, name)
        assert all(any(o is t for o in out.values()) for t in call.outputs.values())  # returned as the outputs
        assert changed_inputs(entry, wl, "normal") == []  # and, after more calls, still what was made
        derived = set(call.derived)
        if wl.op == "gemm":
            assert not derived and set(call.outputs) == {"C"}
        elif wl.op == "mha_fwd":
            assert derived == {"K", "V"} and not call.outputs  # GQA: expanded; the outputs are new each call
        else:
            assert {"O", "LSE", "dO"} <= derived and ({"K", "V"} <= derived) == ("gqa" in workload)
            assert set(call.outputs) == ({"dK", "dV"} if "gqa" in workload else set())
