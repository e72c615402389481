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

from ptxbench.tools.gpu.buffers import count_poison
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


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["smoke_gemm_bf16_m256_n256_k512", "smoke_mha_fwd_d64_gqa_h4_kv2",
                                      "smoke_mha_bwd_d64_gqa_h4_kv2", "smoke_mha_bwd_d64"])
def test_every_library_call_writes_its_output_buffers_in_full_and_names_what_it_derived(workload):
    """On the GPU: the poison put into a library instance's output buffers before a call is gone after it (the
    library's outputs are not judged, so a buffer it wrote only in part would go unseen), and what it derived from
    its inputs is named: GQA's expanded K and V, the backward's forward pass and dO in its layout."""
    from ptxbench.tools.gpu.buffers import poison_

    wl = get_workload(workload)
    for name in [b.name for b in wl.baselines]:
        call = make_baseline(wl, name, make_inputs(wl, 9, "normal", "cuda"))
        for t in call.outputs.values():
            poison_(t)
        out = call()
        torch.cuda.synchronize()
        assert all(count_poison(t) == 0 for t in call.outputs.values()), (workload, name)
        assert all(any(o is t for o in out.values()) for t in call.outputs.values())  # returned as the outputs
        derived = set(call.derived)
        if wl.op == "gemm":
            assert not derived and set(call.outputs) == {"C"}
        elif wl.op == "mha_fwd":
            assert derived == {"K", "V"} and not call.outputs  # GQA: expanded; the outputs are new each call
        else:
            assert {"O", "LSE", "dO"} <= derived and ({"K", "V"} <= derived) == ("gqa" in workload)
            assert set(call.outputs) == ({"dK", "dV"} if "gqa" in workload else set())
