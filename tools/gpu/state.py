"""What a worker keeps between candidates: device limits, ceilings, and an LRU of the library baselines.

The worker never holds an expected output: references and the library's error on a candidate's inputs
live in the referee process (referee.py). Cached here per (workload, baseline, dist, instance): the library
callable on inputs of the worker's own baseline seeds (drawn when the worker starts, never a candidate's), with a
pristine copy of them and of what the call derived from them (a backward's forward pass, GQA's expanded K and V: the
timed library calls get the same restore and checks as a candidate's, calls.py), and for the non-primary baselines
their timings. The protocol compares a library's inputs with their pristine copy after every call, which a kernel
that changed both alike would pass: so an evaluation also takes its library instances only once they match what
their seeds draw (derived tensors: their keyed digests, taken when they were made; `trusted_baseline`), and checks
them again during and after its timing (runner.audit). While another evaluation is timed an instance keeps only its
inputs: its call, with its output buffers and derived tensors, is released (`release_idle`) and built again on next
use. The budget is a share of the GPU's memory, so a sweep over every workload fits an 80 GB card.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch

from ...workloads.baselines import make_baseline
from ...workloads.inputs import make_inputs
from ...workloads.registry import get_workload
from ...workloads.schema import Workload
from .buffers import bits
from .cache import ByteLRU
from .limits import DeviceLimits


DERIVED = "derived:"  # the prefix of a derived tensor's name among an instance's inputs
DIGEST_CHUNK = 1 << 24  # elements a keyed digest takes at once (its int64 temporaries: 128 MB each)


@dataclass
class BaselineEntry:
    fn: object  # the library call (baselines.LibraryCall); None while released (WorkerState.release_idle)
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # the workload's, then DERIVED ones the call reads
    pristine: dict[str, torch.Tensor] = field(default_factory=dict)  # restored before every call, like a candidate's
    stats: dict = field(default_factory=dict)  # timing of a non-primary baseline, measured once
    seed: int | None = None  # what its inputs were drawn from
    # the derived tensors have no seed to be drawn again from: a keyed digest of each, taken when the call was built,
    # stands in for it; key and digests stay on the host
    digest_key: int = 0
    digests: dict[str, int] = field(default_factory=dict)


def keyed_digest(t: torch.Tensor, key: int) -> int:
    """The sum, modulo 2^64, of the tensor's elements as integers of their width, each times an odd 63-bit weight
    drawn from `key` on the tensor's device and dropped at once. Exact (an integer sum does not depend on its order);
    one changed element always moves it (an odd weight is invertible modulo 2^64), and changes that cancel (a swap,
    the same delta added to one element and taken from another) do so only with odds of about 2^-62. A kernel cannot
    aim for a change that keeps the sum: the weights exist only while the digest is taken, when no kernel runs."""
    flat = bits(t.detach()).reshape(-1)
    gen = torch.Generator(device=flat.device)
    gen.manual_seed(key)
    total = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, flat.numel(), DIGEST_CHUNK):
        part = flat[start:start + DIGEST_CHUNK].to(torch.int64)
        weights = torch.randint(-2**62, 2**62, part.shape, generator=gen, device=part.device, dtype=torch.int64) | 1
        total += (part * weights).sum()  # int64 products and sums wrap: arithmetic modulo 2^64
    return int(total)  # the one read back


def library_instance(wl: Workload, name: str, inputs: dict[str, torch.Tensor], seed: int | None) -> BaselineEntry:
    """A library instance on `inputs` with pristine copies: the workload's inputs, and the tensors its call derived
    from them (`LibraryCall.derived`), so both get the protocol's restore before every call and compare after it.
    A derived tensor the library's own call writes (found by its first call) is left out: restoring it is harmless,
    but comparing it would blame a candidate for the library's write."""
    entry = BaselineEntry(None, dict(inputs), {k: v.clone() for k, v in inputs.items()}, seed=seed)
    attach_call(entry, wl, name)
    return entry


def attach_call(entry: BaselineEntry, wl: Workload, name: str) -> None:
    """Build the instance's call on its workload inputs, run it once, and take in what it derived (see
    library_instance), with each derived tensor's keyed digest."""
    fn = make_baseline(wl, name, {t.name: entry.inputs[t.name] for t in wl.inputs})
    before = {n: t.clone() for n, t in fn.derived.items()}
    fn()
    device = next(iter(entry.inputs.values())).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    entry.fn = fn
    entry.digest_key = secrets.randbits(62)
    entry.digests = {}
    for n, t in fn.derived.items():
        # read, never written, by the library's call; and on the inputs' device (the per-call compare reads every
        # input in one transfer: a library's host-side scalars, such as an RNG seed it takes as a tensor, stay out)
        if t.device == device and torch.equal(bits(t), bits(before[n])):
            entry.inputs[DERIVED + n], entry.pristine[DERIVED + n] = t, before[n]
            entry.digests[DERIVED + n] = keyed_digest(before[n], entry.digest_key)


def detach_call(entry: BaselineEntry) -> None:
    """Drop the instance's call and its derived tensors (and their copies): only the workload's inputs stay."""
    entry.fn = None
    for n in [n for n in entry.inputs if n.startswith(DERIVED)]:
        del entry.inputs[n], entry.pristine[n]
    entry.digests = {}


def changed_inputs(entry: BaselineEntry, wl: Workload, dist: str) -> list[str]:
    """The inputs of a library instance that are no longer, bit for bit, what its seed draws, and the derived tensors
    whose keyed digest moved: in its live copy or in the pristine one the protocol restores from. A kernel that wrote
    both alike would pass the protocol's own compare and leave the library timed on data of its choosing (inputs that
    draw more power run slower under the power limit) or keep a result there for its next call."""
    if entry.seed is None or not entry.inputs:
        return []
    device = next(iter(entry.inputs.values())).device
    truth = make_inputs(wl, entry.seed, dist, str(device))
    changed = [name for name, t in truth.items()
               if not (torch.equal(bits(entry.inputs[name]), bits(t))
                       and torch.equal(bits(entry.pristine[name]), bits(t)))]
    return changed + [name for name, digest in entry.digests.items()
                      if keyed_digest(entry.inputs[name], entry.digest_key) != digest
                      or keyed_digest(entry.pristine[name], entry.digest_key) != digest]


def cached_instances(cache: ByteLRU, besides: list[BaselineEntry] = ()) -> list[tuple[tuple, BaselineEntry]]:
    """(key, entry) of every library instance in `cache` but those in `besides`, read without reordering the LRU."""
    skip = {id(entry) for entry in besides}
    found = [(key, cache.peek(key)) for key in cache.keys() if key[0] == "baseline"]
    return [(key, entry) for key, entry in found if id(entry) not in skip]


def _instance_key(wl: Workload, name: str, dist: str, index: int = 0) -> tuple:
    """A library instance's key in the worker's cache (cached_instances reads its workload and dist back)."""
    return ("baseline", wl.id, name, dist, index)


def _free(_key, _value) -> None:
    torch.cuda.empty_cache()


class WorkerState:
    def __init__(self, device_index: int, limits: DeviceLimits, cache_share: float = 0.4,
                 ceilings: dict[str, float] | None = None):
        self.device_index = device_index
        self.limits = limits
        self.cache = ByteLRU(int(limits.total_memory * cache_share), on_evict=_free)
        self.ceilings = dict(ceilings or {})
        self.jobs = 0
        self.baseline_seed = secrets.randbelow(2**31)
        self.referee = None  # RefereeClient: the process that holds the expected outputs (set by the worker)
        self._scrub = None
        self.reserved_frame = 0  # the largest local frame the driver has reserved for this context (runner.py)

    def on_chip_scrub(self):
        """The worker's shared- and local-memory scrub kernels (scrub.py), loaded on first use."""
        if self._scrub is None:
            from .scrub import OnChipScrub, ScrubShape

            self._scrub = OnChipScrub(ScrubShape(self.limits.sm_count, self.limits.max_threads_per_sm,
                                                 self.limits.max_smem_optin))
        return self._scrub

    def baseline(self, wl: Workload, name: str, dist: str, index: int = 0) -> BaselineEntry:
        """The library on the worker's own baseline inputs (same shapes and distribution as a candidate's); `index`
        gives instances on distinct inputs and buffers, so the library rotates among sets as a candidate does."""

        def make():
            before = torch.cuda.memory_allocated()
            inputs = make_inputs(wl, self.baseline_seed + index, dist, "cuda")
            entry = library_instance(wl, name, inputs, self.baseline_seed + index)
            return entry, max(0, torch.cuda.memory_allocated() - before)

        entry = self.cache.get_or_make(_instance_key(wl, name, dist, index), make)
        if entry.fn is None:  # released while other work was timed: built again on the inputs it kept
            attach_call(entry, wl, name)
        return entry

    def measured_stats(self, wl: Workload, name: str, dist: str) -> dict | None:
        """A non-primary library's timing measured earlier in this worker (`BaselineEntry.stats`), without building
        its call again: None when it has not been timed yet."""
        entry = self.cache.get(_instance_key(wl, name, dist))
        return entry.stats if entry is not None and entry.stats else None

    def release_idle(self, keep: list[BaselineEntry] = ()) -> int:
        """Drop the library call of every cached instance outside `keep` (this evaluation's): its output buffers and
        the tensors it derived from its inputs (a backward's forward pass, dO in its layout), with their copies, are
        freed, so the clear before every call (unowned.py) overwrites that memory instead of leaving a kernel live
        tensors that no check of this evaluation covers. The inputs stay cached (the audit compares them with their
        seeds); the call is built again when its workload is next evaluated. Returns how many were released."""
        attached = [entry for _, entry in cached_instances(self.cache, besides=keep) if entry.fn is not None]
        for entry in attached:
            detach_call(entry)
        return len(attached)

    def trusted_baseline(self, wl: Workload, name: str, dist: str, index: int = 0) -> BaselineEntry:
        """`baseline`, made again when a cached instance's inputs are no longer what its seed draws (an earlier
        candidate's stray write that its own evaluation did not catch must not reach a later candidate's timing)."""
        entry = self.baseline(wl, name, dist, index)
        if changed_inputs(entry, wl, dist):
            self.cache.drop(_instance_key(wl, name, dist, index))
            entry = self.baseline(wl, name, dist, index)
        return entry

    def tampered_baselines(self, checked: list[BaselineEntry] = ()) -> list[tuple]:
        """The keys of every cached library instance, of any workload, whose inputs (live or pristine) are no longer
        what their seeds draw; `checked`: instances the caller has just compared itself (not drawn again). They are
        live tensors no protocol compare covers while another workload is evaluated: a kernel could keep a result
        there between its calls (runner.audit)."""
        return [key for key, entry in cached_instances(self.cache, besides=checked)
                if changed_inputs(entry, get_workload(key[1]), key[3])]

    def get_ceilings(self) -> dict[str, float]:
        if not self.ceilings:
            from .ceilings import measure

            self.ceilings = measure()
        return self.ceilings
