"""The launch plan a solution declares: which kernels run, in what order, with what arguments.

The harness owns every line of host code; the plan is data, and its expressions are strings that
only tools/solution/expr.py evaluates (over the workload's symbols and num_sms). The format is documented
for models in prompts/solution_format.md and for people in docs/solution-format.md.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
from typing import Literal

from pydantic import BaseModel, Field

Expr = int | float | str  # a literal or an expression string for tools/solution/expr.py
ScalarType = Literal["i32", "u32", "i64", "u64", "f32", "f64"]
Swizzle = Literal["none", "32B", "64B", "128B"]


class Scratch(BaseModel):
    """A device buffer the harness allocates for the candidate (exact size, fresh every run)."""

    name: str
    dtype: Literal["bfloat16", "float16", "float32", "int32", "int64", "uint8"]
    shape: list[Expr]
    zero: bool = Field(False, description="zero-filled before each launch sequence; otherwise filled with a NaN/garbage pattern")
    line: int = 0


class TensorMap(BaseModel):
    """A TMA descriptor encoded by the harness with cuTensorMapEncodeTiled and passed by value.

    Dimensions follow cuTensorMapEncodeTiled: the innermost (contiguous) dimension comes first.
    `dims` and `strides` default to the tensor's own row-major shape; give them to view a tensor
    differently (e.g. a [B,H,S,D] tensor as 2-D [B*H*S, D]: dims=["D", "B*H*S"]). `strides` are in
    elements and list the outer dimensions only (rank - 1 entries), as the driver expects (in bytes).
    """

    name: str
    tensor: str = Field(description="a workload tensor or a scratch buffer")
    box: list[Expr] = Field(description="box size per dimension, innermost first; each <= 256")
    dims: list[Expr] | None = None
    strides: list[Expr] | None = None
    elem_strides: list[Expr] | None = None
    swizzle: Swizzle = "none"
    l2_promotion: Literal["none", "64B", "128B", "256B"] = "none"
    oob_fill: Literal["zero", "nan"] = "zero"
    line: int = 0


class Arg(BaseModel):
    """One kernel parameter, in the order of the entry's parameter list."""

    kind: Literal["tensor", "scratch", "tmap", "scalar"]
    ref: str = Field(description="tensor/scratch/tmap name, or for scalars the expression")
    type: ScalarType | None = Field(None, description="scalar type (scalars only)")
    line: int = 0


class Launch(BaseModel):
    kernel: str = Field(description="the .entry / __global__ name")
    grid: list[Expr]
    block: list[Expr]
    cluster: list[Expr] | None = None
    smem: Expr = 0
    args: list[Arg]
    line: int = 0


class LaunchPlan(BaseModel):
    launches: list[Launch]
    scratch: list[Scratch] = Field(default_factory=list)
    tmaps: list[TensorMap] = Field(default_factory=list)


class Solution(BaseModel):
    """One file the model wrote: source text, its language and its parsed plan."""

    language: Literal["ptx", "cuda"]
    source: str
    plan: LaunchPlan
    arch: str = DEFAULT_ARCH
    warnings: list[str] = Field(default_factory=list, description="notes for the model that did not stop the solution (e.g. an unused scratch buffer)")


# ---- The plan with every expression evaluated (tools/solution/parse.py: resolve_plan). ----
# This is what the GPU worker reads: plain numbers only, nothing left to evaluate.


class ResolvedArg(BaseModel):
    kind: Literal["tensor", "scratch", "tmap", "scalar"]
    name: str = Field(description="tensor / scratch / tmap name; for scalars the expression text")
    type: ScalarType | None = Field(None, description="scalar type (scalars only)")
    value: int | float | None = Field(None, description="the scalar's value (scalars only), int for integer types")


class ResolvedLaunch(BaseModel):
    kernel: str
    grid: tuple[int, int, int] = Field(description="padded with 1s to three entries")
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] | None = Field(None, description="None: plain launch; else cuLaunchKernelEx with a cluster attribute")
    smem: int = Field(0, description="dynamic shared memory in bytes (set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES when > 48 KB)")
    args: list[ResolvedArg]


class ResolvedScratch(BaseModel):
    name: str
    dtype: Literal["bfloat16", "float16", "float32", "int32", "int64", "uint8"]
    shape: list[int]
    zero: bool
    nbytes: int


class ResolvedTensorMap(BaseModel):
    """Arguments for cuTensorMapEncodeTiled, innermost dimension first (interleave NONE)."""

    name: str
    tensor: str
    source: Literal["tensor", "scratch"] = Field(description="whether `tensor` names a workload tensor or a scratch buffer")
    dtype: Literal["bfloat16", "float16", "float32", "int32", "int64", "uint8"]
    rank: int
    dims: list[int] = Field(description="globalDim, innermost first")
    strides: list[int] = Field(description="outer-dimension strides in ELEMENTS (rank - 1 entries)")
    byte_strides: list[int] = Field(description="globalStrides as the driver wants them: strides * element size")
    box: list[int] = Field(description="boxDim, innermost first")
    elem_strides: list[int] = Field(description="elementStrides (1s by default)")
    swizzle: Swizzle
    l2_promotion: Literal["none", "64B", "128B", "256B"]
    oob_fill: Literal["zero", "nan"]


class ResolvedPlan(BaseModel):
    num_sms: int = Field(description="the SM count the expressions were evaluated with")
    launches: list[ResolvedLaunch]
    scratch: list[ResolvedScratch] = Field(default_factory=list)
    tmaps: list[ResolvedTensorMap] = Field(default_factory=list)


IssueKind = Literal["plan", "source", "format"]


class FormatIssue(BaseModel):
    """A problem with a reply or a solution file, located for the model to fix. `kind` is set where the
    issue is found; the evaluator decides a refused file's status from the kinds (tools/evaluate.py
    `_format_status`): any plan issue is PLAN_ERROR, else COMPILE_ERROR."""

    line: int | None
    message: str
    kind: IssueKind = Field(description="what is wrong: 'plan' (the /* ptxbench */ plan, or the plan against the "
                                        "kernels' signatures and the workload), 'source' (the code itself: the source "
                                        "policy, its size), 'format' (the reply holds no kernel file)")

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message

