"""Fresh, guarded device buffers for one run of a candidate.

Every tensor and scratch buffer gets its own allocation: [guard | data | guard]. The guards hold a
canary byte pattern that is checked after the run, so a write past either end of a buffer is
caught even without compute-sanitizer (torch's caching allocator would otherwise hide it in
slack). Outputs are poisoned with a NaN whose payload no arithmetic produces, so an element the
kernel never wrote is told apart from a NaN it computed; non-zeroed scratch is refilled with fresh
random bytes, so it holds no value a kernel could count on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GUARD_BYTES = 64 * 1024  # multiple of 1024 so data keeps the allocation's alignment (TMA wants 16, swizzle 1024)
CANARY = 0xA7
# Signalling-style NaNs with a distinctive payload (arithmetic yields 0x7FC0 / 0x7FC00000 instead).
POISON_BITS = {torch.bfloat16: 0x7FA5, torch.float16: 0x7DA5, torch.float32: 0x7FA5A5A5}
# Every float dtype a tensor the harness compares may have (a library's derived tensors included): viewing a 0-dim
# or strided tensor as bytes raises, as an integer of the same width does not.
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}
POISON_INT = 0x5A  # bytes of integer buffers that are not zeroed


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def poison_(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in POISON_BITS:
        t.view(INT_VIEW[t.dtype]).fill_(_signed(POISON_BITS[t.dtype], t.element_size()))
    else:
        t.view(torch.uint8).fill_(POISON_INT)
    return t


def garbage_(t: torch.Tensor) -> torch.Tensor:
    """Fresh random bytes. Scratch not asked to be zeroed is refilled outside the measured interval: with one known
    pattern there, a kernel could take the pattern for zero (an integer split-K workspace, counters) and get the
    zeroing `zero = true` would have timed for free."""
    t.view(torch.uint8).random_(0, 256)
    return t


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers of its width: compared with `!=`, -0.0 differs from 0.0 and every NaN from
    any other bit pattern, so an unchanged input is bit-identical, not merely equal."""
    return t.view(INT_VIEW.get(t.dtype, torch.uint8)) if t.is_floating_point() else t


def count_poison(t: torch.Tensor) -> int:
    """Elements still holding the poison pattern (never written by the kernel)."""
    if t.dtype not in POISON_BITS:
        return 0
    return int((t.view(INT_VIEW[t.dtype]) == _signed(POISON_BITS[t.dtype], t.element_size())).sum())


def _signed(bits: int, nbytes: int) -> int:
    top = 1 << (8 * nbytes)
    return bits - top if bits >= top // 2 else bits


@dataclass
class Guarded:
    name: str
    raw: torch.Tensor  # uint8, guard + data + guard
    data: torch.Tensor  # typed view of the middle

    @property
    def pointer(self) -> int:
        return self.data.data_ptr()

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def guard_counts(self) -> torch.Tensor:
        """[bytes changed in the guard before the data, after it], on the device (read without a host sync)."""
        head = self.raw[:GUARD_BYTES]
        tail = self.raw[GUARD_BYTES + self.nbytes:]
        return torch.stack([(head != CANARY).sum(), (tail != CANARY).sum()])

    def guard_damage(self) -> tuple[int, int]:
        """Bytes changed in the guard before and after the data."""
        before, after = self.guard_counts().tolist()
        return before, after


def allocate(name: str, shape: tuple[int, ...] | list[int], dtype: torch.dtype, device: str = "cuda") -> Guarded:
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    pad = (-nbytes) % 1024
    raw = torch.full((GUARD_BYTES + nbytes + pad + GUARD_BYTES,), CANARY, dtype=torch.uint8, device=device)
    data = raw[GUARD_BYTES:GUARD_BYTES + nbytes].view(dtype).view(tuple(shape))
    return Guarded(name, raw, data)


class BufferSet:
    """The buffers of one run: workload tensors (inputs copied in, outputs poisoned) and scratch."""

    def __init__(self, tensors: dict[str, Guarded], scratch: dict[str, Guarded], zero_scratch: list[str],
                 outputs: list[str]):
        self.tensors, self.scratch, self.zero_scratch, self.outputs = tensors, scratch, zero_scratch, outputs

    @property
    def all(self) -> dict[str, Guarded]:
        return {**self.tensors, **self.scratch}

    def pointers(self) -> dict[str, int]:
        return {n: g.pointer for n, g in self.all.items()}

    def nbytes(self) -> dict[str, int]:
        return {n: g.nbytes for n, g in self.all.items()}

    def load_inputs(self, inputs: dict[str, torch.Tensor]) -> None:
        for name, value in inputs.items():
            self.tensors[name].data.copy_(value)

    def reset(self) -> None:
        """Before every call: outputs poisoned, zeroed scratch zeroed, other scratch refilled with random bytes."""
        for name in self.outputs:
            poison_(self.tensors[name].data)
        for name, g in self.scratch.items():
            if name in self.zero_scratch:
                g.data.zero_()
            else:
                garbage_(g.data)

    def zero_scratch_(self) -> None:
        for name in self.zero_scratch:
            self.scratch[name].data.zero_()

    def guard_counts(self) -> torch.Tensor:
        """[buffers, 2] guard damage of every buffer (in `all` order), on the device: one read for the whole set."""
        return torch.stack([g.guard_counts() for g in self.all.values()])

    def damaged_guards(self, counts: list[list[int]] | None = None) -> list[str]:
        """What was written outside each buffer; `counts` as read from guard_counts() when the caller batched it."""
        counts = self.guard_counts().tolist() if counts is None else counts
        return [f"{name}: " + " and ".join(side for n, side in (
                    (before, f"{int(before)} bytes in the {GUARD_BYTES // 1024} KB before its start"),
                    (after, f"{int(after)} bytes in the {GUARD_BYTES // 1024} KB after its end")) if n)
                for name, (before, after) in zip(self.all, counts) if before or after]


def allocate_set(tensor_specs: list[tuple[str, tuple[int, ...], str, str]], scratch_specs: list[tuple[str, list[int], str, bool]],
                 device: str = "cuda") -> BufferSet:
    """tensor_specs: (name, shape, dtype, role); scratch_specs: (name, shape, dtype, zero)."""
    tensors = {n: allocate(n, shape, torch_dtype(dt), device) for n, shape, dt, _ in tensor_specs}
    scratch = {n: allocate(n, shape, torch_dtype(dt), device) for n, shape, dt, _ in scratch_specs}
    outputs = [n for n, _, _, role in tensor_specs if role == "output"]
    bs = BufferSet(tensors, scratch, [n for n, _, _, z in scratch_specs if z], outputs)
    bs.reset()
    return bs
