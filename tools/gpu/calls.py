"""The one way a candidate is called: checked and timed calls are the same call (docs/timing-integrity.md).

Before every call, warm-up, probe, checked and timed alike, every buffer the candidate owns is put back to one
state: the inputs of every input set restored from their pristine copies (or, when the check after the previous
call found every one of them bit-identical to its copy, left as they are), every output of every set poisoned
(and every output buffer the library instances keep), scratch zeroed or poisoned, the module's globals back to
their load-time values, every SM's shared memory and every warp slot's local memory overwritten (scrub.py), and
so is the device memory no live buffer holds (unowned.py); then L2 is flushed (timing.py). After every call, once
it has finished: the guard zones of every set, the inputs of every set against their pristine copies, and a
sketch of the outputs (two random +-1 projections and the L2 norm, with signs drawn per evaluation from a key
kept on the host) against the sketch of the verified output of the same input set. The first call on each set is
the checked one: the referee (another process) judges its outputs in full, and its sketch becomes the verified
one. So a call that skips, shortens or replays work fails whenever it happens, and nothing the kernel can read
tells a checked call from a timed one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .buffers import BufferSet, bits, poison_
from .timing import L2Flush, Side, time_sides
from .verdict import Failed, check_guards

# A timed output's projections may differ from the verified output's by this share of its L2 norm. Honest
# run-to-run differences (atomics reordering fp32 sums, then rounding to bf16) move an element by about one
# bf16 ulp (<= 2^-7 of it), so a +-1 projection moves by at most ~2^-7 of the norm (one standard deviation even
# if every element moved): 2^-5 is four of those. Leaving 0.1% of a large output unwritten (NaN) or zero
# moves it by ~3% of the norm, and skipping work altogether leaves the NaN poison.
SKETCH_TOLERANCE = 2.0 ** -5
PROJECTIONS = 2
# The same projections of the output squashed elementwise, x / (|x| + c) with c the verified output's mean |x|: on
# raw values a few large elements hold the norm (the attention forward's spiked rows, one-hot on a long key: 96-99.6%
# of O's norm), so a timed call that wrote the other rows a third wrong stayed within 2^-5 of it. Squashed, each
# element counts for at most 1 and small ones count as x / c; an honest element's ulp moves its squashed value by at
# most 2^-7 of it (less where |x| > c), so the same tolerance holds.
SKETCH_FIELDS = 2 * PROJECTIONS + 4  # raw projections, norm, non-finite count, squashed projections, squashed norm, c


@dataclass
class InputSet:
    """One set of buffers with its own inputs (drawn from `seed`) and the pristine copy they are restored from."""

    index: int
    seed: int
    bufs: BufferSet
    pristine: dict[str, torch.Tensor]


@dataclass(frozen=True)
class Sketch:
    """Per output tensor: (projection 1, projection 2, L2 norm, non-finite count, the squashed output's projections
    and L2 norm, the squashing scale c)."""

    values: dict[str, tuple[float, ...]]

    def differs(self, verified: Sketch) -> str:
        """'' when this output matches the verified one within SKETCH_TOLERANCE, else what differs."""
        k = PROJECTIONS
        for name, mine in self.values.items():
            theirs = verified.values[name]
            nonfinite, vnonfinite = mine[k + 1], theirs[k + 1]
            if nonfinite:
                return f"{name} holds {int(nonfinite)} NaN/Inf values (unwritten elements keep the NaN poison)"
            if vnonfinite or not all(map(math.isfinite, theirs)):  # would make every comparison below pass
                return f"{name}: the verified output of these inputs is not finite, so no timed call can match it"
            for what, lo in (("", 0), ("squashed ", k + 2)):  # [projections..., norm] of the raw, then the squashed
                proj, norm = mine[lo:lo + k], mine[lo + k]
                vproj, vnorm = theirs[lo:lo + k], theirs[lo + k]
                bound = SKETCH_TOLERANCE * vnorm
                if abs(norm - vnorm) > bound or any(abs(p - v) > bound for p, v in zip(proj, vproj)):
                    return (f"{name} differs from the verified output of the same inputs ({what}L2 norm {norm:.6g} vs "
                            f"{vnorm:.6g}; {what}random projections {', '.join(f'{p:.6g}' for p in proj)} vs "
                            f"{', '.join(f'{v:.6g}' for v in vproj)}; allowed difference {bound:.3g})")
        return ""

    def scales(self) -> dict[str, float]:
        """Each output's squashing scale c: a timed call's output is squashed with its verified output's."""
        return {name: values[-1] for name, values in self.values.items()}


# Elements of an output a sketch takes per pass: its working memory (SketchSpace) is this size, whatever the output's.
SKETCH_CHUNK = 1 << 24


class SketchSpace:
    """The device memory every sketch works in, poisoned as soon as the sketch is taken.

    A sketch needs a float copy of the output and its +-1 signs. Left in blocks the caching allocator frees but keeps
    mapped, they would be in the next call's reach: a kernel that scanned for them would find the previous call's
    output (a replay of its own set's result whenever the same set came twice) or the signs (an output built to match
    the sketch without the work). Here they live in buffers the protocol owns and overwrites with NaN (and False)
    before any kernel runs again; what else a sketch allocates is a few scalars and per-element finiteness flags."""

    def __init__(self, device, chunk: int = SKETCH_CHUNK):
        self.chunk = chunk
        self.x = torch.empty(chunk, dtype=torch.float32, device=device)
        self.y = torch.empty(chunk, dtype=torch.float32, device=device)  # the squashed copy
        self.c = torch.ones((), dtype=torch.float32, device=device)
        self.heads = torch.empty(PROJECTIONS * chunk, dtype=torch.bool, device=device)
        self.rows = torch.empty(PROJECTIONS * chunk, dtype=torch.float32, device=device)
        self.one = torch.ones((), dtype=torch.float32, device=device)
        self.poison()

    def poison(self) -> None:
        self.x.fill_(float("nan"))
        self.y.fill_(float("nan"))
        self.rows.fill_(float("nan"))
        self.heads.fill_(False)

    def holds_nothing(self) -> bool:
        """True when nothing of a sketch is left: every float NaN, every sign False (a test's question)."""
        return bool(torch.isnan(self.x).all() and torch.isnan(self.y).all() and torch.isnan(self.rows).all()
                    and not self.heads.any())


def _generator(key: int, index: int, device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed((key * 1_000_003 + index) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


def sign_rows(key: int, index: int, n: int, device) -> torch.Tensor:
    """The PROJECTIONS x n matrix of +-1 signs for output `index` under `key` when the output fits in one pass
    (n <= SKETCH_CHUNK; longer outputs continue the same stream pass by pass). Drawn afresh on every call and never
    kept: a copy kept on the device between calls would be memory a kernel could overwrite (the judge's signs set to
    its liking) or read (an output built to match them)."""
    heads = torch.randint(0, 2, (PROJECTIONS, n), generator=_generator(key, index, device), device=device,
                          dtype=torch.bool)
    return torch.where(heads, torch.ones((), device=device), -torch.ones((), device=device))


def sketch_tensors(outputs: dict[str, torch.Tensor], key: int, space: SketchSpace | None = None,
                   scales: dict[str, float] | None = None) -> list[torch.Tensor]:
    """Device scalars per output, in name order: [p1, p2, norm, nonfinite, s1, s2, squashed norm, c] (SKETCH_FIELDS);
    signs drawn afresh from `key`, pass by pass through `space` (one made for the call when none is given), which is
    poisoned before this returns. `scales`: each output's squashing scale c (a timed call: its verified output's), so
    the sketch takes one pass; without one, c is the output's own mean |x|, taken in a pass of its own first (the
    checked call's)."""
    if space is None:
        first = next(iter(outputs.values()))
        space = SketchSpace(first.device, min(SKETCH_CHUNK, max(t.numel() for t in outputs.values())))
    space.one.fill_(1.0)  # device memory a kernel could reach: set after the call, never trusted from before it
    parts = []
    for i, (name, out) in enumerate(sorted(outputs.items())):
        flat = out.reshape(-1)
        chunks = [(start, min(space.chunk, flat.numel() - start)) for start in range(0, flat.numel(), space.chunk)]
        if scales is not None and name in scales:
            space.c.fill_(scales[name])
        else:
            magnitude = torch.zeros((), dtype=torch.float64, device=flat.device)
            for start, m in chunks:
                magnitude += space.x[:m].copy_(flat[start:start + m]).abs_().sum().to(torch.float64)
            space.c.copy_(magnitude / max(flat.numel(), 1))
        space.c.clamp_(min=torch.finfo(torch.float32).tiny)  # an all-zero output: still a scale to divide by
        gen = _generator(key, i, flat.device)
        proj = torch.zeros(PROJECTIONS, dtype=torch.float64, device=flat.device)
        squashed = torch.zeros(PROJECTIONS, dtype=torch.float64, device=flat.device)
        square = torch.zeros((), dtype=torch.float64, device=flat.device)
        ssquare = torch.zeros((), dtype=torch.float64, device=flat.device)
        nonfinite = torch.zeros((), dtype=torch.float64, device=flat.device)
        for start, m in chunks:  # both projections of the raw and the squashed output, their norms, non-finite count
            x, y = space.x[:m], space.y[:m]
            x.copy_(flat[start:start + m])
            torch.abs(x, out=y)
            y.add_(space.c)
            torch.div(x, y, out=y)
            heads = space.heads[:PROJECTIONS * m].view(PROJECTIONS, m)
            torch.randint(0, 2, (PROJECTIONS, m), generator=gen, out=heads)
            rows = space.rows[:PROJECTIONS * m].view(PROJECTIONS, m)
            torch.where(heads, space.one, -space.one, out=rows)
            proj += (rows @ x).to(torch.float64)
            squashed += (rows @ y).to(torch.float64)
            square += torch.dot(x, x).to(torch.float64)
            ssquare += torch.dot(y, y).to(torch.float64)
            nonfinite += (~torch.isfinite(x)).sum().to(torch.float64)
        parts += list(proj.unbind())
        parts.append(square.sqrt())  # a non-finite output fails on its count first
        parts.append(nonfinite)
        parts += list(squashed.unbind())
        parts.append(ssquare.sqrt())
        parts.append(space.c.to(torch.float64))
    space.poison()
    return parts


def to_sketch(names: list[str], values: list[float]) -> Sketch:
    width = SKETCH_FIELDS
    return Sketch({n: tuple(values[i * width:(i + 1) * width]) for i, n in enumerate(sorted(names))})


class CandidateCalls:
    """The call protocol for one candidate over its input sets; its methods are a timing.Side."""

    def __init__(self, cand, sets: list[InputSet], key: int):
        self.cand, self.sets, self.key = cand, sets, key
        self.bindings = [cand.bind(s.bufs) for s in sets]
        self.verified: dict[int, Sketch] = {}
        self.current = 0
        self.calls = 0  # calls checked against a verified sketch
        self.order = np.random.default_rng(key)
        self.library: list = []  # state.BaselineEntry instances timed against the candidate (attach_library)
        self.library_current = 0
        # True while the last check found every input bit-identical to its pristine copy (then copying them back
        # before the next call would change nothing); any new source of inputs clears it.
        self.inputs_pristine = False
        first = sets[0].bufs.tensors[next(iter(sets[0].bufs.outputs))].data if sets else None
        numel = max((s.bufs.tensors[n].data.numel() for s in sets for n in s.bufs.outputs), default=1)
        self.space = SketchSpace(first.device if first is not None else "cpu", min(SKETCH_CHUNK, numel))

    def attach_library(self, entries: list) -> None:
        """The library instances the candidate is timed against: they get the same restore and checks, so both
        sides of every pair see the same GPU work before and after their call."""
        self.library = entries
        self.inputs_pristine = False

    def set_pristine(self, k: int, pristine: dict[str, torch.Tensor]) -> None:
        """Give set k new inputs (drawn for a later check): the next restore copies them in."""
        self.sets[k].pristine = pristine
        self.inputs_pristine = False

    # ---- the Side interface: prepare (outside the interval) -> call (measured) -> check (outside) ----
    def restore(self) -> None:
        """Every buffer of every set, and the module's globals, back to the state before any call. The inputs are
        copied back unless the check after the last call found all of them bit-identical to their copies."""
        if not self.inputs_pristine:
            for s in self.sets:
                s.bufs.load_inputs(s.pristine)
            for entry in self.library:
                for name, t in entry.inputs.items():
                    t.copy_(entry.pristine[name])
        self.inputs_pristine = False  # the coming call may write them: the check after it says whether it did
        for s in self.sets:
            s.bufs.reset()
        for entry in self.library:  # the library's output buffers too: no result outlives a call there either
            for t in getattr(entry.fn, "outputs", {}).values():
                poison_(t)
        self.cand.restore_globals()
        self.cand.clear_unowned()  # shared and local memory, and device memory no live buffer holds: overwritten

    def prepare(self) -> None:
        """Pick the next input set at random (timed calls), then restore."""
        self.current = int(self.order.integers(len(self.sets)))
        self.restore()

    def call(self) -> None:
        s = self.sets[self.current]
        s.bufs.zero_scratch_()  # the plan asked for zeroed scratch: that work is the candidate's, so it is timed
        self.cand.launch(self.bindings[self.current])

    def check(self, _out=None) -> None:
        sketch = self.observe(self.current)
        verified = self.verified.get(self.current)
        if verified is None:
            raise RuntimeError(f"input set {self.current} was timed before it was checked")
        self.calls += 1
        why = sketch.differs(verified)
        if why:
            status = "INCORRECT_NAN" if "NaN" in why else "INCORRECT_NUMERICAL"
            raise Failed(status, f"timed call {self.calls} (input set {self.current}): {why}. Every call gets the "
                                 f"same inputs, outputs and state as the checked one, so the kernel did different "
                                 f"work when it was timed")

    # ---- the library's side of each pair: the same preparation and checks around its own call ----
    def library_prepare(self) -> None:
        self.library_current = int(self.order.integers(len(self.library)))
        self.restore()

    def library_call(self):
        return self.library[self.library_current].fn()

    def library_check(self, out) -> None:
        # the same GPU work as a candidate's timed check (one pass: a scale given; the values are not compared)
        self._read_and_check_state(sketch_tensors(out, self.key, self.space, dict.fromkeys(out, 1.0)))

    # ---- checks after a call ----
    def _input_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        pairs = [(f"{n} of input set {s.index}", s.bufs.tensors[n].data, x) for s in self.sets for n, x in s.pristine.items()]
        return pairs + [(f"{n} of the library's inputs", t, e.pristine[n]) for e in self.library for n, t in e.inputs.items()]

    def _read_and_check_state(self, extra: list[torch.Tensor]) -> list[float]:
        """Guard zones of every set, every input (of every set and of the library) against its pristine copy bit for
        bit, and `extra` device scalars, read back in one transfer; raises on a damaged guard or a changed input,
        else returns the values of `extra`."""
        pairs = self._input_pairs()
        parts = [s.bufs.guard_counts().reshape(-1).to(torch.float64) for s in self.sets]
        if pairs:
            parts.append(torch.stack([(bits(now) != bits(was)).any() for _, now, was in pairs]).to(torch.float64))
        if extra:
            parts.append(torch.stack(extra))
        values = torch.cat(parts).tolist()
        pos = 0
        for s in self.sets:
            n = len(s.bufs.all)
            check_guards(s.bufs, [values[pos + 2 * j:pos + 2 * j + 2] for j in range(n)])
            pos += 2 * n
        changed = [what for (what, _, _), bad in zip(pairs, values[pos:pos + len(pairs)]) if bad]
        if any("library" in c for c in changed):
            raise Failed("RUNTIME_ERROR", f"out-of-bounds write: the kernel wrote into {', '.join(changed)}",
                         runtime_error="OUT_OF_BOUNDS_WRITE: library baseline inputs")
        if changed:
            raise Failed("INCORRECT_NUMERICAL", f"the kernel modified its input(s): {', '.join(changed)}")
        self.inputs_pristine = True
        return values[pos + len(pairs):]

    def observe(self, k: int) -> Sketch:
        """After a call on set k: the state checks and the sketch of set k's outputs, read back together."""
        outputs = {n: self.sets[k].bufs.tensors[n].data for n in self.sets[k].bufs.outputs}
        verified = self.verified.get(k)  # a timed call is squashed as its verified output was
        values = self._read_and_check_state(sketch_tensors(outputs, self.key, self.space,
                                                           verified.scales() if verified else None))
        return to_sketch(list(outputs), values)

    def checked_call(self, k: int, flush: L2Flush) -> tuple[float, Sketch]:
        """The first call on set k: the same preparation, flush and events as a timed call; returns (ms, sketch)."""
        self.current = k
        out: dict = {}
        side = Side(self.call, self.restore, lambda _o: out.setdefault("sketch", self.observe(k)))
        ms = time_sides([side], flush=flush, warmup=0, iters=1, trials=1)[0][0]
        return ms, out["sketch"]
