"""The correctness rule for one output tensor of one trial, and the checks that catch cheating.

An element fails when |out - ref| > atol AND |out - ref| > rtol * |ref| (PTXBench's rule); every
element must pass, no NaN/Inf may appear, and the relative Frobenius error ||out - ref|| / ||ref||
must stay under the workload's bound (this is what catches an all-zero output when the reference
is small enough for the element rule's absolute tolerance), over the whole tensor and over every block of
BLOCK_ELEMENTS consecutive elements (a query tile of O or dQ, a key tile of dK / dV): the attention outputs are
~0.03, so atol covers 40% of a typical element, and the whole tensor's norm is dominated by its largest rows
(a causal output's first rows), so a tensor-wide bound alone let a cheap computation on part of the tiles
through. Degenerate outputs (constant, all
zero, never written) and outputs that do not depend on the inputs (bit-identical across trials
with different inputs) are named in the note, and so is where the failing elements lie (the first and the last, the
worst block, as indices of the tensor). Rows the inputs scale down on purpose (the backward's damped dO rows) are judged
scaled back to their natural size (a `Weight` from workloads/inputs.judging_weights), where the element rule's atol
would otherwise pass anything. Works on CPU and GPU tensors alike.

Calibrated rule (FlashAttention's test convention): when the primary library baseline itself misses
the element rule on a tensor for these inputs (cuDNN's bf16 attention backward on 'spiky' inputs), or
comes within a factor NEAR_MISS of it (its worst element uses at least half of its allowance
max(atol, rtol * |ref|): cuDNN's bf16 backward on normal inputs, whose worst dQ element sits at the edge, so
that a kernel doing the same arithmetic failed about one input set in seventy where the library happened to
stay inside), a kernel as accurate as the library must not fail. The tensor then passes when its max abs error is at
most Tolerance.library_factor (2) x the library's + LIBRARY_ABS_SLACK, and its relative Frobenius error
at most max(max_rel_fro, library_factor x the library's); the verdict records rule "library_x2" and the
library's errors; every block's relative Frobenius error is held to max(max_rel_fro, library_factor x the library's
worst block's). NaN/Inf, never-written, constant / all-zero outputs and shape mismatches are never
rescued. The library's error is a `LibraryError` per tensor, asked for only when the strict rule
failed on the size of the error alone, so evaluation on inputs the library handles costs nothing extra.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..results import TrialStats
from ...workloads.inputs import Weight
from ...workloads.schema import Tolerance

# Absolute slack on the calibrated max-abs bound: errors are measured in float32, whose spacing is up to
# 7.6e-6 for values below 128 (spiky gradients reach ~20 at the smoke shapes), so a kernel that matches the
# library up to that rounding must not fail on it. It cannot hide a real error: the rule applies only when
# the library's max abs error exceeds atol (1e-2), so the bound is at least 2e-2 and the slack <= 0.05% of it.
LIBRARY_ABS_SLACK = 1e-5
# The share of the element rule's allowance the library's worst element must use for its error to set the bar:
# from there a kernel as accurate as the library (up to the factor) lands outside the rule by chance alone.
NEAR_MISS = 0.5
# The block rule: the relative Frobenius bound also holds on every run of this many consecutive elements (row-major:
# 64 query rows of O / dQ / dK / dV at D = 128, 128 at D = 64; 8192 LSE rows), each against its own reference norm.
# Honest bf16 attention (CPU mirrors at S = 4096, bf16 or fp32 P and dS, causal or not, normal or spiky) had its
# worst block at 4.5e-3 against 1e-2, normal inputs at 2.7e-3; the worst block of scaled fp8 P V or dS K is ~3.7e-2.
BLOCK_ELEMENTS = 8192
# A block's reference norm is floored at this share of a typical block's (the median block's), so a block the
# reference leaves nearly empty (a causal dV's last keys: about 1% of the RMS) is judged by an absolute yardstick
# instead of against noise.
BLOCK_FLOOR = 1 / 16


@dataclass(frozen=True)
class LibraryError:
    """The primary library baseline's error on one output tensor for one trial's inputs."""

    max_abs_err: float
    rel_fro_err: float
    passes_element_rule: bool
    baseline: str = ""
    # the worst element's error over its allowance max(atol, rtol * |ref|) (> 1: the element rule fails there)
    allowance_used: float | None = None
    # the largest relative Frobenius error over the blocks of BLOCK_ELEMENTS (block_errors)
    worst_block_rel_fro: float = 0.0

    @property
    def near_miss(self) -> bool:
        """Within the element rule, but with its worst element at NEAR_MISS or more of the allowance."""
        return self.passes_element_rule and (self.allowance_used or 0.0) >= NEAR_MISS

    @property
    def calibrates(self) -> bool:
        """The library misses (or nearly misses) the element rule with finite outputs: its error sets the bar."""
        finite = math.isfinite(self.max_abs_err) and math.isfinite(self.rel_fro_err)
        return finite and (not self.passes_element_rule or self.near_miss)


LibrarySource = LibraryError | Callable[[], LibraryError | None] | None


def element_failures(diff: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """True where an element fails PTXBench's rule: its error exceeds both atol and rtol * |ref|."""
    return (diff > tol.atol) & (diff > tol.rtol * ref.abs())


def relative_frobenius(err_norm: float, ref_norm: float) -> float:
    return err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))


def block_errors(err: torch.Tensor, ref: torch.Tensor, size: int = BLOCK_ELEMENTS) -> tuple[float, int]:
    """The largest relative Frobenius error over runs of `size` consecutive elements (the last run may be shorter),
    each against max(its reference norm, BLOCK_FLOOR x the median block's reference norm), and that block's index.
    (0.0, 0) when the tensor is a single block: the whole-tensor error already judges it."""
    n = err.numel()
    if n <= size:
        return 0.0, 0
    e, r = err.reshape(-1).float(), ref.reshape(-1).float()
    full = (n // size) * size
    e_norm = torch.linalg.vector_norm(e[:full].reshape(-1, size), dim=1)
    r_norm = torch.linalg.vector_norm(r[:full].reshape(-1, size), dim=1)
    if full < n:
        e_norm = torch.cat([e_norm, torch.linalg.vector_norm(e[full:]).reshape(1)])
        r_norm = torch.cat([r_norm, torch.linalg.vector_norm(r[full:]).reshape(1)])
    typical = float(r_norm.median())  # robust to a few large blocks (a causal start)
    if typical == 0:
        typical = float(torch.linalg.vector_norm(r)) * math.sqrt(size / n)
    denom = torch.clamp(r_norm, min=BLOCK_FLOOR * typical)
    rel = torch.where(denom > 0, e_norm / torch.where(denom > 0, denom, torch.ones_like(denom)),
                      torch.where(e_norm > 0, torch.full_like(e_norm, float("inf")), torch.zeros_like(e_norm)))
    worst = int(torch.argmax(rel))
    return float(rel[worst]), worst


def library_error(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, baseline: str = "",
                  weight: Weight | None = None) -> LibraryError:
    """Measure the library's output against the float32 reference (a non-finite output never calibrates), in the
    units the candidate's is judged in (`weight`, as compare's)."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"library output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    o, r = weighted(out.float(), weight), weighted(ref.float(), weight)
    if not bool(torch.isfinite(o).all()):
        return LibraryError(float("inf"), float("inf"), False, baseline)
    diff = (o - r).abs()
    rel_fro = relative_frobenius(float(torch.linalg.vector_norm(o - r)), float(torch.linalg.vector_norm(r)))
    used = float((diff / torch.clamp(tol.rtol * r.abs(), min=tol.atol)).max()) if o.numel() and tol.atol > 0 else None
    return LibraryError(float(diff.max()) if o.numel() else 0.0, rel_fro,
                        not bool(element_failures(diff, r, tol).any()), baseline, used, block_errors(o - r, r)[0])


def output_digest(out: torch.Tensor) -> tuple[float, float, int]:
    """A cheap fingerprint of the output bits: equal digests mean (almost surely) identical outputs."""
    bits = out.reshape(-1).view(torch.uint8)
    pad = (-bits.numel()) % 4
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    words = bits.view(torch.int32).to(torch.float64)
    weights = (torch.arange(words.numel(), device=words.device, dtype=torch.float64) % 1009) + 1
    return float(words.sum()), float((words * weights).sum()), int(out.numel())


def weighted(x: torch.Tensor, weight: Weight | None) -> torch.Tensor:
    return x if weight is None else x * weight.factor.to(x.device)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, *, trial: int, tensor: str, dist: str = "normal",
            unwritten: int = 0, library: LibrarySource = None, weight: Weight | None = None) -> TrialStats:
    """Judge `out` (any float dtype) against the float32 reference `ref` of the same shape.

    `library` is the primary library's error on this tensor: a LibraryError, or a function returning one
    (called only when the strict rule fails on the size of the error alone, so the library runs only then).
    Without it the strict rule alone decides. `weight` (workloads/inputs.judging_weights): a power-of-two factor both
    are multiplied by first, so rows the inputs scaled down are judged at their natural size; the worst element's
    value and expected value are reported as written.
    """
    if tuple(out.shape) != tuple(ref.shape):
        return TrialStats(trial=trial, tensor=tensor, dist=dist, passed=False,
                          note=f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    o = out.float()
    finite = torch.isfinite(o)  # as written: a weight could only turn a huge finite value into inf
    n_nan = int(torch.isnan(o).sum())
    n_inf = int(torch.isinf(o).sum())
    o, r = weighted(o, weight), weighted(ref.float(), weight)  # the unweighted copy freed (the referee's memory)
    diff = (o - r).abs()
    diff = torch.where(finite, diff, torch.full_like(diff, float("inf")))
    bad = element_failures(diff, r, tol)
    n = o.numel()
    n_bad = int(bad.sum())
    finite_diff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = finite_diff / r.abs().clamp_min(1e-30)
    finite_err = torch.where(finite, o - r, torch.zeros_like(o))
    err_norm = float(torch.linalg.vector_norm(finite_err))
    rel_fro = relative_frobenius(err_norm, float(torch.linalg.vector_norm(r)))
    block_rel, block = block_errors(finite_err, r)
    # The worst element: a non-finite one first, else the largest excess over the tolerance.
    excess = diff - torch.maximum(torch.full_like(r, tol.atol), tol.rtol * r.abs())
    flat = int(torch.argmax(excess.reshape(-1)))
    worst_index = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(o.shape))] if n else None
    degenerate = degenerate_notes(o, r, finite, unwritten)
    all_finite = n_nan == 0 and n_inf == 0
    notes = list(degenerate)
    if rel_fro > tol.max_rel_fro and n_bad == 0 and all_finite:
        notes.append(f"every element is within the element rule but the relative Frobenius error {rel_fro:.3g} "
                     f"exceeds {tol.max_rel_fro:g}")
    elif block_rel > tol.max_rel_fro and all_finite:
        notes.append(block_note(block, block_rel, tol.max_rel_fro, tuple(o.shape), rel_fro))
    if n_bad:
        notes.append(failing_span(bad, n_bad))
    stats = TrialStats(
        trial=trial, tensor=tensor, dist=dist,
        passed=(n_bad == 0 and all_finite and rel_fro <= tol.max_rel_fro and block_rel <= tol.max_rel_fro
                and not degenerate),
        max_abs_err=float(finite_diff.max()) if n else 0.0,
        max_rel_err=float(rel.max()) if n else 0.0,
        rel_fro_err=rel_fro,
        frac_matched=(n - n_bad) / n if n else 1.0,
        n_nan=n_nan, n_inf=n_inf,
        worst_index=worst_index,
        worst_value=float(out.reshape(-1)[flat]) if n else None,  # as written, whatever the weight
        worst_expected=float(ref.reshape(-1)[flat]) if n else None,
        note="; ".join(notes),
    )
    if not stats.passed and all_finite and not degenerate and library is not None:  # NaN/Inf and degenerate outputs
        lib = library() if callable(library) else library  # are never rescued by the library's error
        stats = library_rule(stats, lib, tol, worst_block=(block, block_rel)) if lib is not None else stats
    if weight is not None and not stats.passed and bool((weight.factor != 1).any()):  # errors in its units: say so
        stats.note = "; ".join(filter(None, [stats.note, weight.why]))
    return stats


def index_of(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The multi-index of a row-major flat index."""
    out = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        out.append(i)
    return out[::-1]


def failing_span(bad: torch.Tensor, n_bad: int) -> str:
    """Where the failing elements lie: the first and the last in row-major order (a tile's edge shows there)."""
    flat = bad.reshape(-1)
    first = int(torch.argmax(flat.to(torch.uint8)))
    last = flat.numel() - 1 - int(torch.argmax(flat.flip(0).to(torch.uint8)))
    shape = tuple(bad.shape)
    if n_bad == 1:
        return f"1 element fails the element rule, at {index_of(first, shape)}"
    return (f"{n_bad} elements fail the element rule, the first at {index_of(first, shape)}, the last at "
            f"{index_of(last, shape)}")


def block_note(block: int, rel: float, bound: float, shape: tuple[int, ...], rel_fro: float) -> str:
    n = math.prod(shape)
    first, last = block * BLOCK_ELEMENTS, min((block + 1) * BLOCK_ELEMENTS, n) - 1
    return (f"elements {index_of(first, shape)}..{index_of(last, shape)} (consecutive, row-major) have a relative "
            f"Frobenius error of {rel:.3g}, over the bound {bound:g} that every block of {BLOCK_ELEMENTS} elements is "
            f"held to (the whole tensor's is {rel_fro:.3g}): part of the output is computed less accurately than the "
            f"rest")


def library_rule(stats: TrialStats, lib: LibraryError, tol: Tolerance,
                 worst_block: tuple[int, float] = (0, 0.0)) -> TrialStats:
    """Re-judge a tensor that failed the strict rule on the size of its error alone, against the library's error.
    `worst_block`: the output's worst block (index, relative Frobenius error), held to the library's worst block."""
    who = lib.baseline or "the library"
    finite = math.isfinite(lib.max_abs_err) and math.isfinite(lib.rel_fro_err)
    measured = {"library_max_abs_err": lib.max_abs_err if finite else None,
                "library_rel_fro_err": lib.rel_fro_err if finite else None}
    if not lib.calibrates:
        used = f", its worst element at {100 * lib.allowance_used:.0f}% of the allowance" if lib.allowance_used else ""
        why = (f"passes the element rule (max abs error {lib.max_abs_err:.3g}{used})" if lib.passes_element_rule
               else "gives non-finite values")
        note = f"{who} {why} on these inputs, so the strict rule applies"
        return stats.model_copy(update={**measured, "note": "; ".join(filter(None, [stats.note, note]))})
    factor = tol.library_factor
    abs_bound = factor * lib.max_abs_err + LIBRARY_ABS_SLACK
    fro_bound = max(tol.max_rel_fro, factor * lib.rel_fro_err)
    abs_ok, fro_ok = stats.max_abs_err <= abs_bound, stats.rel_fro_err <= fro_bound
    block, block_rel = worst_block
    block_bound = max(tol.max_rel_fro, factor * lib.worst_block_rel_fro)
    block_ok = block_rel <= block_bound
    rule = f"library_x{factor:g}"
    how = ("misses the element rule" if not lib.passes_element_rule else
           f"nearly misses the element rule (its worst element uses {100 * (lib.allowance_used or 0):.0f}% of the allowance)")
    note = (f"rule {rule}: {who} itself {how} on these inputs (max abs error {lib.max_abs_err:.3g}, "
            f"relative Frobenius error {lib.rel_fro_err:.3g}), so this output is held to {factor:g}x its error: max abs "
            f"error {stats.max_abs_err:.3g} {'<=' if abs_ok else '>'} {abs_bound:.3g}, relative Frobenius error "
            f"{stats.rel_fro_err:.3g} {'<=' if fro_ok else '>'} {fro_bound:.3g}")
    if not block_ok:
        note += (f"; block {block} ({BLOCK_ELEMENTS} elements from element {block * BLOCK_ELEMENTS}) has a relative "
                 f"Frobenius error of {block_rel:.3g} > {block_bound:.3g} (max({tol.max_rel_fro:g}, {factor:g} x the "
                 f"library's worst block, {lib.worst_block_rel_fro:.3g}))")
    return stats.model_copy(update={**measured, "rule": rule, "passed": abs_ok and fro_ok and block_ok, "note": note})


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
