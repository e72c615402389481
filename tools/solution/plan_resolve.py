"""Evaluate every expression of a LaunchPlan for one workload and GPU, and check the numbers.

The same code validates a plan when it is parsed (with a placeholder SM count) and builds the
concrete plan the GPU worker launches (with the real one), so a plan that passed validation
resolves the same way on the GPU. Limits are the hardware's and cuTensorMapEncodeTiled's own, so a
plan that would fail inside the driver fails here with a line number instead.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ptxbench.workloads.arch import ArchProfile
from ptxbench.workloads.schema import DTYPE_BYTES, Workload
from .expr import ExprError, Number, evaluate, evaluate_int
from .plan import (Arg, Launch, LaunchPlan, ResolvedArg, ResolvedLaunch, ResolvedPlan, ResolvedScratch,
                   ResolvedTensorMap, Scratch, TensorMap)
from .plan_toml import MAX_PLAN_OBJECTS, KeyLines

MAX_SCRATCH_BYTES = 32 * 2**30
MAX_CLUSTERS = "max_clusters"  # the per-launch symbol: clusters of this launch's shape resident at once
SWIZZLE_BYTES = {"none": None, "32B": 32, "64B": 64, "128B": 128}
# cuTensorMapEncodeTiled takes the NaN out-of-bounds fill for floating-point data only (cuda.h)
NAN_FILL_DTYPES = ("bfloat16", "float16", "float32")
SCALAR_RANGES = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1), "u64": (0, 2**63 - 1)}
GRID_MAX = (2**31 - 1, 65535, 65535)
TMA_STRIDE_BYTES = 2**40  # cuTensorMapEncodeTiled: every global stride below it (one of 2**64 is no cuuint64 at all)
BLOCK_MAX = (1024, 1024, 64)


def _pad(values: list[int]) -> tuple[int, int, int]:
    return tuple(values + [1] * (3 - len(values)))


class _Skip(Exception):
    """An issue was recorded; stop resolving this object."""


def guaranteed_clusters(num_sms: int, size: int, arch: ArchProfile) -> int:
    """How many clusters of `size` CTAs are surely resident at once when each CTA fits on an SM.

    A cluster runs inside one GPC. A GPC of n SMs (n a multiple of the TPC's SM count) holds
    n // size clusters, leaving at most `waste` SMs idle; with at most arch.gpcs GPCs the total
    is at least ceil((num_sms - gpcs * waste) / size). Exact for sizes that divide a TPC (1, 2 on
    Hopper); a lower bound otherwise, replaced by the driver's cuOccupancyMaxActiveClusters figure
    when the caller has it (DeviceLimits.cluster_capacity).
    """
    if size <= 1:
        return num_sms
    if arch.tpc_sms % size == 0:
        waste = 0
    elif size % arch.tpc_sms == 0:
        waste = size - arch.tpc_sms
    else:
        waste = size - 1
    return max(0, min(num_sms // size, -(-(num_sms - arch.gpcs * waste) // size)))


class Resolver:
    def __init__(self, workload: Workload, num_sms: int, arch: ArchProfile, lines: KeyLines | None = None,
                 cluster_capacity: Mapping[int, int] | None = None):
        self.workload = workload
        self.symbols: dict[str, Number] = {**workload.symbols, "num_sms": num_sms}
        self.num_sms = num_sms
        self.arch = arch
        self.cluster_capacity = dict(cluster_capacity or {})
        self.lines = lines or KeyLines()
        self.issues: list[tuple[int | None, str]] = []
        self.warnings: list[str] = []
        self.tensors: dict[str, tuple[str, list[int]]] = {}
        for t in workload.tensors:
            try:
                self.tensors[t.name] = (t.dtype, [evaluate_int(d, self.symbols) for d in t.shape])
            except ExprError as e:  # a registry bug, not the model's: say so plainly
                self.issues.append((None, f"workload {workload.id}: shape of tensor {t.name} does not evaluate: {e}"))

    def fail(self, line: int, message: str) -> _Skip:
        self.issues.append((line, message))
        return _Skip()

    def max_clusters(self, cluster: tuple[int, int, int] | None) -> int:
        """The `max_clusters` symbol of a launch: clusters of its shape resident at once, one CTA per SM."""
        size = math.prod(cluster) if cluster else 1
        measured = int(self.cluster_capacity.get(size, 0))
        # The driver's figure where it was measured (a probe that failed reads 0: then the proven bound)
        return measured if measured > 0 else guaranteed_clusters(self.num_sms, size, self.arch)

    def num(self, expr, line: int, what: str, integral: bool = True) -> Number:
        try:
            return evaluate_int(expr, self.symbols) if integral else evaluate(expr, self.symbols)
        except ExprError as e:
            raise self.fail(line, f"{what}: {e}") from None

    def ints(self, exprs: list, line: int, what: str, lo: int, hi: int | None = None) -> list[int]:
        values = [self.num(e, line, f"{what}[{i}] = {e!r}") for i, e in enumerate(exprs)]
        for i, v in enumerate(values):
            if v < lo or (hi is not None and v > hi):
                bound = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
                raise self.fail(line, f"{what}[{i}] = {exprs[i]!r} is {v}; expected {bound}")
        return values

    def scratch(self, s: Scratch) -> ResolvedScratch:
        if s.name in self.tensors:
            raise self.fail(s.line, f"scratch buffer '{s.name}' has the name of a workload tensor; rename it")
        shape = self.ints(s.shape, self.lines.of(s.line, "shape"), f"scratch.{s.name}.shape", 1)
        nbytes = math.prod(shape) * DTYPE_BYTES[s.dtype]
        if nbytes > MAX_SCRATCH_BYTES:
            raise self.fail(self.lines.of(s.line, "shape"), f"scratch.{s.name} needs {nbytes} bytes; at most "
                                                            f"{MAX_SCRATCH_BYTES} (32 GiB) per buffer")
        return ResolvedScratch(name=s.name, dtype=s.dtype, shape=shape, zero=s.zero, nbytes=nbytes)

    def tmap(self, m: TensorMap, scratch: dict[str, ResolvedScratch]) -> ResolvedTensorMap:
        at = lambda key: self.lines.of(m.line, key)  # noqa: E731
        what = f"tmap.{m.name}"
        if m.tensor in self.tensors:
            dtype, shape, source = *self.tensors[m.tensor], "tensor"
        elif m.tensor in scratch:
            dtype, shape, source = scratch[m.tensor].dtype, scratch[m.tensor].shape, "scratch"
        else:
            raise self.fail(at("tensor"), f"{what}.tensor = '{m.tensor}' is neither a workload tensor "
                                          f"({', '.join(self.tensors)}) nor a scratch buffer ({', '.join(scratch) or 'none'})")
        esize, rank = DTYPE_BYTES[dtype], len(m.box)
        if m.oob_fill == "nan" and dtype not in NAN_FILL_DTYPES:
            raise self.fail(at("oob_fill"), f'{what}.oob_fill = "nan" needs a floating-point tensor, but {m.tensor} is '
                                            f'{dtype}: TMA fills an integer tensor with zeros (oob_fill = "zero")')
        box = self.ints(m.box, at("box"), f"{what}.box", 1, 256)
        if m.dims is None:
            if rank != len(shape):
                raise self.fail(at("box"), f"{what}.box has {rank} entries but {m.tensor} has rank {len(shape)} "
                                           f"(shape {shape}); give one box entry per dimension, or dims to view it differently")
            dims = shape[::-1]
        else:
            dims = self.ints(m.dims, at("dims"), f"{what}.dims", 1, 2**32)
        if m.strides is None:
            strides = [math.prod(dims[:i]) for i in range(1, rank)]
        else:
            strides = self.ints(m.strides, at("strides"), f"{what}.strides", 1)
        elem_strides = self.ints(m.elem_strides, at("elem_strides"), f"{what}.elem_strides", 1, 8) \
            if m.elem_strides is not None else [1] * rank
        numel = math.prod(shape)
        reach = 1 + sum((d - 1) * s for d, s in zip(dims, [1] + strides))
        if reach > numel:
            raise self.fail(at("dims"), f"{what}: dims {dims} with strides {strides} reach element {reach - 1} but "
                                        f"{m.tensor} has {numel} elements (shape {shape})")
        for i, s in enumerate(strides):
            if (s * esize) % 16:
                raise self.fail(at("strides") if m.strides else at("tensor"),
                                f"{what}: stride {i + 1} is {s} elements = {s * esize} bytes; TMA needs every outer "
                                "stride to be a multiple of 16 bytes")
            if s * esize >= TMA_STRIDE_BYTES:  # a dimension of extent 1 leaves any stride inside the tensor
                raise self.fail(at("strides") if m.strides else at("tensor"),
                                f"{what}: stride {i + 1} is {s} elements = {s * esize} bytes; TMA takes strides "
                                "below 2**40 bytes")
        if (box[0] * esize) % 16:
            raise self.fail(at("box"), f"{what}.box[0] = {box[0]} is {box[0] * esize} bytes; the inner box must be "
                                       "a multiple of 16 bytes")
        span = SWIZZLE_BYTES[m.swizzle]
        if span and box[0] * esize > span:
            raise self.fail(at("box"), f"{what}.box[0] = {box[0]} is {box[0] * esize} bytes; with swizzle {m.swizzle} "
                                       f"the inner box is at most {span} bytes ({span // esize} {dtype} elements)")
        return ResolvedTensorMap(name=m.name, tensor=m.tensor, source=source, dtype=dtype, rank=rank, dims=dims,
                                 strides=strides, byte_strides=[s * esize for s in strides], box=box,
                                 elem_strides=elem_strides, swizzle=m.swizzle, l2_promotion=m.l2_promotion,
                                 oob_fill=m.oob_fill)

    def arg(self, a: Arg, scratch: dict, tmaps: dict) -> ResolvedArg:
        if a.kind == "tensor":
            if a.ref not in self.tensors:
                hint = f" ('{a.ref}' is a scratch buffer: write scratch:{a.ref})" if a.ref in scratch else \
                    f" ('{a.ref}' is a tensor map: write tmap:{a.ref})" if a.ref in tmaps else \
                    f" ('{a.ref}' is a symbol: pass it as a scalar, e.g. i32:{a.ref})" if a.ref in self.symbols else ""
                raise self.fail(a.line, f"unknown tensor '{a.ref}'{hint}; the workload's tensors are "
                                        f"{', '.join(self.tensors)}")
            return ResolvedArg(kind="tensor", name=a.ref)
        if a.kind in ("scratch", "tmap"):
            table = scratch if a.kind == "scratch" else tmaps
            if a.ref not in table:
                raise self.fail(a.line, f"{a.kind}:{a.ref} is not declared; declare [{a.kind}.{a.ref}] "
                                        f"(declared: {', '.join(table) or 'none'})")
            return ResolvedArg(kind=a.kind, name=a.ref)
        integral = a.type not in ("f32", "f64")
        value = self.num(a.ref, a.line, f"{a.type}:{a.ref}", integral)
        if integral:
            lo, hi = SCALAR_RANGES[a.type]
            if not lo <= value <= hi:
                raise self.fail(a.line, f"{a.type}:{a.ref} is {value}, outside the {a.type} range {lo}..{hi}")
        else:
            value = float(value)
            if a.type == "f32" and abs(value) > 3.4e38:
                raise self.fail(a.line, f"f32:{a.ref} is {value}, too large for f32")
        return ResolvedArg(kind="scalar", name=a.ref, type=a.type, value=value)

    def launch(self, launch: Launch, scratch: dict, tmaps: dict) -> ResolvedLaunch:
        cluster = None
        if launch.cluster is not None:
            cluster = _pad(self.ints(launch.cluster, self.lines.of(launch.line, "cluster"), "cluster", 1))
        # The launch's other expressions may use max_clusters, which depends on its cluster shape.
        base = self.symbols
        self.symbols = {**base, MAX_CLUSTERS: self.max_clusters(cluster)}
        try:
            return self._launch(launch, scratch, tmaps, cluster)
        finally:
            self.symbols = base

    def _launch(self, launch: Launch, scratch: dict, tmaps: dict, cluster: tuple[int, int, int] | None) -> ResolvedLaunch:
        at = lambda key: self.lines.of(launch.line, key)  # noqa: E731
        pad = _pad
        grid = pad(self.ints(launch.grid, at("grid"), "grid", 1))
        block = pad(self.ints(launch.block, at("block"), "block", 1))
        for i, (g, b) in enumerate(zip(grid, block)):
            if g > GRID_MAX[i]:
                raise self.fail(at("grid"), f"grid[{i}] is {g}; at most {GRID_MAX[i]}")
            if b > BLOCK_MAX[i]:
                raise self.fail(at("block"), f"block[{i}] is {b}; at most {BLOCK_MAX[i]}")
        if math.prod(block) > self.arch.max_threads_per_block:
            raise self.fail(at("block"), f"block {list(block)} has {math.prod(block)} threads; a block has 1 to "
                                         f"{self.arch.max_threads_per_block}")
        if cluster is not None:
            if math.prod(cluster) > self.arch.max_cluster_size:
                raise self.fail(at("cluster"), f"cluster {list(cluster)} has {math.prod(cluster)} CTAs; at most "
                                               f"{self.arch.max_cluster_size}")
            for i, (g, c) in enumerate(zip(grid, cluster)):
                if g % c:
                    raise self.fail(at("cluster"), f"grid[{i}] = {g} is not a multiple of cluster[{i}] = {c}")
        smem = self.num(launch.smem, at("smem"), f"smem = {launch.smem!r}")
        if not 0 <= smem <= self.arch.max_smem_per_block:
            raise self.fail(at("smem"), f"smem is {smem} bytes; expected 0 to {self.arch.max_smem_per_block}")
        args = [self.arg(a, scratch, tmaps) for a in launch.args]
        return ResolvedLaunch(kernel=launch.kernel, grid=grid, block=block, cluster=cluster, smem=smem, args=args)

    def resolve(self, plan: LaunchPlan) -> ResolvedPlan | None:
        counts = {"scratch": len(plan.scratch), "tmap": len(plan.tmaps), "launch": len(plan.launches)}
        if over := [f"{n} [[{kind}]] entries; at most {MAX_PLAN_OBJECTS[kind]}"
                    for kind, n in counts.items() if n > MAX_PLAN_OBJECTS[kind]]:
            self.issues += [(None, f"the plan has {o}") for o in over]
            return None
        scratch = {s.name: r for s in plan.scratch if (r := self._try(self.scratch, s)) is not None}
        declared_scratch = {s.name for s in plan.scratch}
        tmaps = {m.name: r for m in plan.tmaps if (r := self._try(self.tmap, m, scratch)) is not None}
        declared_tmaps = {m.name for m in plan.tmaps}
        for name in declared_tmaps & declared_scratch:
            self.issues.append((None, f"'{name}' is both a tmap and a scratch buffer; give them different names"))
        # Arguments referring to a declared-but-broken object were already reported there.
        names = {"scratch": {n: scratch.get(n) for n in declared_scratch}, "tmap": {n: tmaps.get(n) for n in declared_tmaps}}
        launches = [self._try(self.launch, launch, names["scratch"], names["tmap"]) for launch in plan.launches]
        used = {(a.kind, a.ref) for launch in plan.launches for a in launch.args}
        used |= {("scratch", m.tensor) for m in plan.tmaps}
        for kind, declared in (("scratch", declared_scratch), ("tmap", declared_tmaps)):
            for name in sorted(declared):
                if (kind, name) not in used:
                    self.warnings.append(f"{kind}.{name} is declared but no launch uses it")
        if self.issues or None in launches:
            return None
        return ResolvedPlan(num_sms=self.num_sms, launches=launches, scratch=list(scratch.values()),
                            tmaps=list(tmaps.values()))

    def _try(self, fn: Callable, *args):
        try:
            return fn(*args)
        except _Skip:
            return None
