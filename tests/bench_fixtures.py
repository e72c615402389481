"""Shared pieces of the bench and Ray tests: tiny solutions for the smoke GEMM and a counting model."""
from __future__ import annotations

from ptxbench.agent.models.base import ModelReply

WL = "smoke_gemm_bf16_m256_n256_k512"
# A PTX solution that compiles (COMPILED in --no-gpu mode) and one that does not (COMPILE_ERROR).
NOOP = """/* ptxbench
language = "ptx"

[[launch]]
kernel = "noop"
grid = [1, 1, 1]
block = [32, 1, 1]
args = ["A", "B", "C"]
*/
.version 8.5
.target sm_90a
.address_size 64

.visible .entry noop(.param .u64 a, .param .u64 b, .param .u64 c)
{
    ret;
}
"""
GOOD = {"content": f"Here is the kernel.\n\n```ptx\n{NOOP}```\n"}
BAD = {"content": f"```ptx\n{NOOP.replace('ret;', 'bogus;')}```\n"}


class CountingModel:
    name = "scripted/py"

    def __init__(self, calls: list):
        self.calls = calls

    def query(self, request):
        self.calls.append(request.turn)
        return ModelReply(content=GOOD["content"], usage={"total_tokens": 10})
