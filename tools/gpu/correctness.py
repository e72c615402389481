"""The correctness rule for one output tensor of one trial, and the checks that catch cheating.

An element fails when |out - ref| > atol AND |out - ref| > rtol * |ref| (PTXBench's rule); every
element must pass, no NaN/Inf may appear, and the relative Frobenius error ||out - ref|| / ||ref||
must stay under the workload's bound (this is what catches an all-zero output when the reference
is small enough for the element rule's absolute tolerance). Degenerate outputs (constant, all
zero, never written) and outputs that do not depend on the inputs (bit-identical across trials
with different inputs) are named in the note. Works on CPU and GPU tensors alike.
"""
from __future__ import annotations

import torch

from ..results import TrialStats
from ...workloads.schema import Tolerance


def output_digest(out: torch.Tensor) -> tuple[float, float, int]:
    """A cheap fingerprint of the output bits: equal digests mean (almost surely) identical outputs."""
    bits = out.reshape(-1).view(torch.uint8)
    pad = (-bits.numel()) % 4
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    words = bits.view(torch.int32).to(torch.float64)
    weights = (torch.arange(words.numel(), device=words.device, dtype=torch.float64) % 1009) + 1
    return float(words.sum()), float((words * weights).sum()), int(out.numel())


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, *, trial: int, tensor: str, dist: str = "normal",
            unwritten: int = 0) -> TrialStats:
    """Judge `out` (any float dtype) against the float32 reference `ref` of the same shape."""
    if tuple(out.shape) != tuple(ref.shape):
        return TrialStats(trial=trial, tensor=tensor, dist=dist, passed=False,
                          note=f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    o = out.float()
    r = ref.float()
    finite = torch.isfinite(o)
    n_nan = int(torch.isnan(o).sum())
    n_inf = int(torch.isinf(o).sum())
    diff = (o - r).abs()
    diff = torch.where(finite, diff, torch.full_like(diff, float("inf")))
    bad = (diff > tol.atol) & (diff > tol.rtol * r.abs())
    n = o.numel()
    n_bad = int(bad.sum())
    finite_diff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = finite_diff / r.abs().clamp_min(1e-30)
    ref_norm = float(torch.linalg.vector_norm(r))
    err_norm = float(torch.linalg.vector_norm(torch.where(finite, o - r, torch.zeros_like(o))))
    rel_fro = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    # The worst element: a non-finite one first, else the largest excess over the tolerance.
    excess = diff - torch.maximum(torch.full_like(r, tol.atol), tol.rtol * r.abs())
    flat = int(torch.argmax(excess.reshape(-1)))
    worst_index = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(o.shape))] if n else None
    notes = degenerate_notes(o, r, finite, unwritten)
    passed = n_bad == 0 and n_nan == 0 and n_inf == 0 and rel_fro <= tol.max_rel_fro and not notes
    if rel_fro > tol.max_rel_fro and n_bad == 0 and n_nan == 0 and n_inf == 0:
        notes.append(f"every element is within the element rule but the relative Frobenius error {rel_fro:.3g} "
                     f"exceeds {tol.max_rel_fro:g}")
    return TrialStats(
        trial=trial, tensor=tensor, dist=dist, passed=passed,
        max_abs_err=float(finite_diff.max()) if n else 0.0,
        max_rel_err=float(rel.max()) if n else 0.0,
        rel_fro_err=rel_fro,
        frac_matched=(n - n_bad) / n if n else 1.0,
        n_nan=n_nan, n_inf=n_inf,
        worst_index=worst_index,
        worst_value=float(o.reshape(-1)[flat]) if n else None,
        worst_expected=float(r.reshape(-1)[flat]) if n else None,
        note="; ".join(notes),
    )


def degenerate_notes(o: torch.Tensor, r: torch.Tensor, finite: torch.Tensor, unwritten: int) -> list[str]:
    """Outputs no real kernel writes when the reference is not itself degenerate."""
    notes: list[str] = []
    n = o.numel()
    if unwritten:
        notes.append(f"{unwritten} of {n} elements were never written (still the NaN poison)")
        return notes
    if n < 2 or not bool(finite.all()):
        return notes
    ref_varies = bool((r != r.reshape(-1)[0]).any())
    if not ref_varies:
        return notes
    if not bool(o.any()) and bool(r.any()):
        notes.append("all-zero output")
    elif not bool((o != o.reshape(-1)[0]).any()):
        notes.append(f"constant output (every element is {float(o.reshape(-1)[0]):g})")
    return notes


def replay_note(digest: tuple[float, float, int], earlier: dict[int, tuple[float, float, int]]) -> str:
    """Non-empty when this trial's output is bit-identical to an earlier trial's (whose inputs differed)."""
    for trial, d in earlier.items():
        if d == digest:
            return (f"output is bit-identical to trial {trial}'s although the inputs differ: the output does not "
                    f"depend on the inputs (replayed or cached from an earlier call)")
    return ""
