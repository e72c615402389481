"""Library baselines as zero-argument callables: `make_baseline(workload, name, inputs)()` runs one call. Each is a
LibraryCall, which also names what the instance keeps between calls besides its inputs (its output buffers, what it
derived from the inputs), so that the harness can cover that memory as it covers a candidate's.

Everything that is not the library call itself (transposed views, output buffers, the forward pass a
backward needs, GQA's expanded K/V) is done once when the callable is built, so timing sees only the
library kernel(s) -- and, for a GQA backward, the sum of the library's per-query-head dK/dV over each
group: that sum is the workload's output, so a candidate pays for it too. The attention ops are the aten
entry points SDPA dispatches to, called directly (no autograd: inputs are detached). Each call returns the
workload's outputs by tensor name.

The aten schemas used (torch 2.11 and 2.13 agree; tests check them against the installed torch):
  _scaled_dot_product_cudnn_attention(query, key, value, attn_bias?, compute_log_sumexp, dropout_p,
      is_causal, return_debug_mask, *, scale) -> (output, logsumexp[B,H,S,1], cum_seq_q, cum_seq_k,
      max_q, max_k, philox_seed, philox_offset, debug_attn_mask)
  _scaled_dot_product_cudnn_attention_backward(grad_out, query, key, value, out, logsumexp,
      philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
      is_causal, *, scale) -> (dq, dk, dv)
  _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask,
      *, scale) -> (output, logsumexp[B,H,S], cum_seq_q, cum_seq_k, max_q, max_k, rng_state, unused,
      debug_attn_mask)
  _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
      cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
      -> (grad_query, grad_key, grad_value)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .schema import Workload


@dataclass(eq=False)
class LibraryCall:
    """One library instance, callable: `run` makes one call and returns the workload's outputs by name. Beside its
    inputs it keeps tensors between calls, named so the harness can cover them (tools/gpu/calls.py, state.py):
    `outputs`, buffers every call writes in full; `derived`, what the build made from the inputs and every call reads
    (a backward's forward pass, dO in the library's layout, GQA's expanded K and V)."""

    run: Callable[[], dict[str, torch.Tensor]]
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    derived: dict[str, torch.Tensor] = field(default_factory=dict)

    def __call__(self) -> dict[str, torch.Tensor]:
        return self.run()


def _made(x: dict[str, torch.Tensor], **made) -> dict[str, torch.Tensor]:
    """The tensors among `made` that are not views of an input (their own memory, kept by the instance)."""
    inputs = {t.untyped_storage().data_ptr() for t in x.values()}
    return {n: t for n, t in made.items()
            if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() not in inputs}


# Argument names of the aten ops as called below, in schema order (checked by tests/workloads/test_references.py).
ATEN_SIGNATURES: dict[str, list[str]] = {
    "_scaled_dot_product_cudnn_attention": [
        "query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal", "return_debug_mask", "scale"],
    "_scaled_dot_product_cudnn_attention_backward": [
        "grad_out", "query", "key", "value", "out", "logsumexp", "philox_seed", "philox_offset", "attn_bias",
        "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal", "scale"],
    "_scaled_dot_product_flash_attention": [
        "query", "key", "value", "dropout_p", "is_causal", "return_debug_mask", "scale"],
    "_scaled_dot_product_flash_attention_backward": [
        "grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k",
        "dropout_p", "is_causal", "philox_seed", "philox_offset", "scale"],
}


def _cublas(w: Workload, x: dict[str, torch.Tensor]) -> LibraryCall:
    a, b_t = x["A"].detach(), x["B"].detach().T
    c = torch.empty(a.shape[0], b_t.shape[1], dtype=a.dtype, device=a.device)
    result = {"C": c}

    def run() -> dict[str, torch.Tensor]:
        torch.matmul(a, b_t, out=c)
        return result

    return LibraryCall(run, outputs={"C": c})


def _qkv(w: Workload, x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V detached; GQA's K and V expanded to the query heads (query head i reads KV head i // group)."""
    q, k, v = (x[n].detach().contiguous() for n in ("Q", "K", "V"))
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return q, k, v


def _group_sum(x: dict[str, torch.Tensor]) -> tuple[Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
                                                     dict[str, torch.Tensor]]:
    """The backward's outputs as the workload declares them: with GQA, dK and dV [B, H, S, D] summed over each
    group's query heads into preallocated [B, HKV, S, D] buffers (bf16 out, fp32 accumulation inside torch.sum);
    returns the reduction and those buffers."""
    hkv, h = x["K"].shape[1], x["Q"].shape[1]
    if hkv == h:
        return (lambda r: r), {}
    sums = {n: torch.empty(x[n[1:]].shape, dtype=x[n[1:]].dtype, device=x[n[1:]].device) for n in ("dK", "dV")}

    def reduce(r: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for n, out in sums.items():  # query head i = j * group + g belongs to KV head j
            torch.sum(r[n].reshape(out.shape[0], hkv, h // hkv, *out.shape[2:]), dim=2, out=out)
        return {"dQ": r["dQ"], **sums}

    return reduce, sums


def _cudnn_fwd(q, k, v, causal: bool, scale: float):
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)


def _flash_fwd(q, k, v, causal: bool, scale: float):
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)


def _lse3(lse: torch.Tensor) -> torch.Tensor:
    return lse.squeeze(-1) if lse.dim() == 4 else lse  # cuDNN returns [B, H, S, 1]


def _attention_fwd(fwd) -> Callable[[Workload, dict[str, torch.Tensor]], LibraryCall]:
    def build(w: Workload, x: dict[str, torch.Tensor]) -> LibraryCall:
        q, k, v = _qkv(w, x)
        causal, scale = w.causal, float(w.symbols["scale"])

        def run() -> dict[str, torch.Tensor]:
            r = fwd(q, k, v, causal, scale)
            return {"O": r[0], "LSE": _lse3(r[1])}

        return LibraryCall(run, derived=_made(x, Q=q, K=k, V=v))  # GQA's expanded K and V

    return build


def _cudnn_bwd(w: Workload, x: dict[str, torch.Tensor]) -> LibraryCall:
    q, k, v = _qkv(w, x)
    causal, scale = w.causal, float(w.symbols["scale"])
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = _cudnn_fwd(q, k, v, causal, scale)
    grad_out = torch.empty_like(out).copy_(x["dO"].detach())  # dO laid out like the library's O
    outputs, sums = _group_sum(x)

    def run() -> dict[str, torch.Tensor]:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            grad_out, q, k, v, out, lse, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0, causal, scale=scale)
        return outputs({"dQ": dq, "dK": dk, "dV": dv})

    return LibraryCall(run, outputs=sums, derived=_made(x, Q=q, K=k, V=v, O=out, LSE=lse, dO=grad_out, cum_q=cum_q,
                                                         cum_k=cum_k, seed=seed, offset=offset))


def _flash_bwd(w: Workload, x: dict[str, torch.Tensor]) -> LibraryCall:
    q, k, v = _qkv(w, x)
    causal, scale = w.causal, float(w.symbols["scale"])
    out, lse, cum_q, cum_k, max_q, max_k, rng_state, unused, _ = _flash_fwd(q, k, v, causal, scale)
    grad_out = torch.empty_like(out).copy_(x["dO"].detach())
    outputs, sums = _group_sum(x)

    def run() -> dict[str, torch.Tensor]:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad_out, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, causal, rng_state, unused, scale=scale)
        return outputs({"dQ": dq, "dK": dk, "dV": dv})

    return LibraryCall(run, outputs=sums, derived=_made(x, Q=q, K=k, V=v, O=out, LSE=lse, dO=grad_out, cum_q=cum_q,
                                                         cum_k=cum_k, rng_state=rng_state, unused=unused))


BUILDERS: dict[tuple[str, str], Callable[[Workload, dict[str, torch.Tensor]], LibraryCall]] = {
    ("gemm", "cublas"): _cublas,
    ("mha_fwd", "cudnn_sdpa"): _attention_fwd(_cudnn_fwd),
    ("mha_fwd", "flash_sdpa"): _attention_fwd(_flash_fwd),
    ("mha_bwd", "cudnn_sdpa"): _cudnn_bwd,
    ("mha_bwd", "flash_sdpa"): _flash_bwd,
}


@torch.no_grad()
def make_baseline(workload: Workload, name: str, inputs: dict[str, torch.Tensor]) -> LibraryCall:
    """A callable running one call of baseline `name` on these inputs (setup, e.g. a backward's forward, runs now)."""
    known = [b.name for b in workload.baselines]
    if name not in known:
        raise KeyError(f"workload {workload.id} has no baseline {name!r}; it has {known}")
    builder = BUILDERS.get((workload.op, name))
    if builder is None:
        raise KeyError(f"no baseline {name!r} for op {workload.op!r}; built: {sorted(BUILDERS)}")
    return builder(workload, inputs)
