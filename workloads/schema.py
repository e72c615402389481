"""Plain-data description of a workload: what a kernel must compute, on which tensors, and how it is judged.

No torch or CUDA import here, so scoring, export and the CLI read workloads on any machine.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

DType = Literal["bfloat16", "float16", "float32", "int32", "int64", "uint8"]
Role = Literal["input", "output"]
Op = Literal["gemm", "mha_fwd", "mha_bwd"]

DISTS = ("normal", "spiky")  # the input distributions (workloads/inputs.py draws them)

DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "uint8": 1}


class TensorSpec(BaseModel):
    """One named tensor the kernel reads or writes; shapes are row-major (last dim contiguous)."""

    name: str
    role: Role
    dtype: DType
    shape: list[str] = Field(description="dimension expressions over the workload's symbols, e.g. ['B', 'H', 'S', 'D']")
    doc: str = ""


class Tolerance(BaseModel):
    """PTXBench's element rule plus a relative Frobenius bound against a float32 reference.

    An element fails when |out - ref| > atol AND |out - ref| > rtol * |ref|; every element must pass.
    Where the primary library baseline itself misses the element rule on a trial's inputs (cuDNN's bf16
    attention backward on heavy-tailed inputs), or nearly misses it (its worst element uses half its allowance
    or more, as cuDNN's backward does on normal inputs), an output tensor is instead held to `library_factor` times
    the library's own max abs and relative Frobenius error on that tensor (FlashAttention's test convention):
    a kernel as accurate as the library must not be judged incorrect.
    """

    atol: float = 1e-2
    rtol: float = 1e-2
    max_rel_fro: float = 2e-2
    library_factor: float = Field(2.0, description="calibrated rule: at most this many times the library's own error")
    tensors: dict[str, dict[Literal["atol", "rtol", "max_rel_fro"], float]] = Field(
        default_factory=dict, description="per output tensor, the bounds that differ from the ones above (an fp32 "
        "output computed in fp32, such as the attention forward's LSE, is held to its own precision)")

    def for_tensor(self, name: str) -> "Tolerance":
        """The rule for one output tensor: these bounds with the tensor's own in place."""
        own = self.tensors.get(name)
        return self.model_copy(update={**own, "tensors": {}}) if own else self


class Baseline(BaseModel):
    """A library implementation timed against the candidate (see tools/gpu/baselines.py)."""

    name: str = Field(description="e.g. 'cublas', 'cudnn_sdpa', 'flash_sdpa'")
    primary: bool = Field(False, description="speedup is measured against the primary baseline")
    doc: str = ""


class Workload(BaseModel):
    id: str
    op: Op
    title: str
    symbols: dict[str, int | float] = Field(description="problem sizes and constants: M, N, K or B, H, S, D, scale...")
    tensors: list[TensorSpec]
    reference: str = Field(description="name of the torch reference in ptxbench.workloads.references")
    baselines: list[Baseline]
    tolerance: Tolerance = Tolerance()
    flops: float = Field(description="floating-point operations of one call (causal masking already halving it)")
    min_bytes: float = Field(description="fewest bytes one call must move through device memory")
    targets: dict[str, list[str]] = Field(description="arch name -> target instruction families the kernel should use")
    held_out: bool = Field(False, description="never used for tuning prompts or building training data by default")
    causal: bool = False
    tags: list[str] = Field(default_factory=list, description="e.g. 'main', 'held_out', 'smoke' (small shapes for tests)")
    trials: int = Field(3, description="correctness trials by default (fresh inputs each)")
    input_dist: list[Literal["normal", "spiky"]] = Field(
        default_factory=lambda: ["normal"], description="input distributions a kernel must be correct on: every "
        "evaluation checks its own (normal by default; it is also the timed one) and one more call on each other")
    doc: str = ""

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"workload {self.id} has no tensor {name!r}; it has {[t.name for t in self.tensors]}")

    @property
    def inputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "input"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "output"]

    def shape(self, name: str) -> tuple[int, ...]:
        """The concrete shape of a tensor (its dimension names resolved against the symbols)."""
        return tuple(int(self.symbols[d]) if d in self.symbols else int(d) for d in self.tensor(name).shape)

    @property
    def primary_baseline(self) -> Baseline:
        return next(b for b in self.baselines if b.primary)
