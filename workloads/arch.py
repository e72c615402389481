"""Architecture profiles: the ptxas target and the instruction families a kernel is expected to use.

A family is present in PTX when one of its PTX spellings appears, in SASS when one of its opcodes
appears in the disassembly, and executed when the hardware counted it (tools/profile).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class TargetFamily(BaseModel):
    name: str = Field(description="e.g. 'wgmma', 'tma', 'tcgen05'")
    ptx: list[str] = Field(description="PTX instruction prefixes, e.g. 'wgmma.mma_async'")
    sass: list[str] = Field(description="SASS opcode prefixes (the opcode's first dotted part is matched), e.g. 'HGMMA'")
    counters: list[str] = Field(default_factory=list, description="ncu metrics that count executions of the family")
    counter_opcodes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="instruction counters among `counters` -> the SASS opcodes they count: the runtime verdict "
        "(tools/profile/verdict.py) checks that a counter is non-zero exactly when those opcodes executed")
    work_counter: str = Field("", description="a metric among `counters` that measures the work the family did: "
                              "against the workload's `work` it tells a family that did the work from a token use")
    work: Literal["", "flops", "input_bytes"] = Field("", description="what `work_counter` is compared with")
    elsewhere: dict[str, float] = Field(
        default_factory=dict,
        description="ncu metrics that count the same work done another way -> units of `work` per count (an FFMA "
        "thread instruction is 2 FLOPs): collected with `counters`; when they hold a share of the workload's work, "
        "the family ran beside the real computation (a decoy), and the runtime verdict is a token")
    elsewhere_allowance: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="workload op -> {tensor name: multiple of that tensor's bytes} its honest kernels move another way "
        "by design (for a family whose `work` is bytes), added as a share of the work to the decoy threshold for "
        "that op's workloads (the attention backward reads O and dO with plain loads)")
    doc: str = ""

    @property
    def collected(self) -> list[str]:
        """Every metric a profile asks ncu for on this family's behalf: its counters and its `elsewhere` ones."""
        return self.counters + list(self.elsewhere)

    def in_ptx(self, ptx_text: str) -> bool:
        return any(spelling in ptx_text for spelling in self.ptx)

    def matches_opcode(self, opcode: str) -> bool:
        base = opcode.split(".", 1)[0]
        return any(base == s or (s.endswith("*") and base.startswith(s[:-1])) for s in self.sass)


class ArchProfile(BaseModel):
    name: str = Field(description="ptxas target, e.g. 'sm_90a'")
    gpus: list[str]
    ptx_version_min: str = Field(description="lowest PTX ISA .version that can target it")
    families: list[TargetFamily]
    max_smem_per_block: int = Field(description="bytes of dynamic + static shared memory a block may opt into")
    max_threads_per_block: int = 1024
    max_cluster_size: int = 8
    gpcs: int = Field(8, description="the most GPCs a GPU of this arch has (GH100: 8); a cluster never spans two")
    tpc_sms: int = Field(2, description="SMs per TPC: GPCs lose or keep whole TPCs, so each GPC's SM count is a multiple")
    doc: str = ""

    def family(self, name: str) -> TargetFamily:
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no target family {name!r}; it has {[f.name for f in self.families]}")


_TMA = TargetFamily(
    name="tma",
    ptx=["cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor"],
    sass=["UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED", "UTMAPF"],
    counters=["smsp__sass_inst_executed_op_tma_ld.sum", "smsp__sass_inst_executed_op_tma.sum",
              "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"],
    # op_tma: warp instructions UTMALDG, UTMASTG, UTMAREDG, UBLKCP.*, UBLKRED.* that executed with a
    # true predicate (gh100 and gb100 both have it); op_tma_ld: the loads alone (8 for 8 CTAs x 1 load,
    # FACTS.md). sm__inst_executed_pipe_tma_pred_on_any also counts other TMA-pipe work (descriptor
    # prefetch, commits: 315,656 vs 301,056 UTMA* on the reference GEMM), so it does not cross-check.
    counter_opcodes={"smsp__sass_inst_executed_op_tma.sum": ["UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED"]},
    # bytes TMA brought in from global memory: at least the inputs' once a kernel loads them with it (tiles re-read
    # make it more); a kernel with one token TMA load and its inputs read by plain loads brings in a few KB
    work_counter="l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
    work="input_bytes",
    # the inputs' bytes brought in another way, which a decoy computes its output from while TMA loads anything: the
    # bytes plain loads requested (as the roofline's L1 section counts them: an addcmul of three 16,777,216-float
    # tensors counts 201,326,592, ncu-metrics, run 17) and cp.async's sectors of 32 bytes (ncu names no byte counter
    # for LDGSTS; its sector counter is in ncu's query list for gh100, not yet collected on the GPU machine: a name a
    # collection rejects is dropped and the pass run again, runner.profile_command). A kernel that computes from them
    # re-reads its operand tiles, so their share is 1 or more (the smoke decoy: 256 at least); the honest references
    # read 0 this way, but for the backward (0.81-0.82 of its inputs' bytes: decoy-shares, run 17), hence its
    # allowance, in its tensors' bytes so that it scales with GQA's smaller K and V: O and dO read once by the
    # preprocessing (D = rowsum(O * dO)), and fp32 accumulators of dQ (the reference's) and of dK and dV (a kernel that
    # splits the queries or sums a KV group's heads) read once by their conversion to bf16, twice the output's bytes.
    # The reference's 0.81 is O + dO + dQ's accumulator; with every term an honest design may add, the MHA threshold
    # is 2.1 and the GQA h32/kv8 one 1.9, while a backward computed from plain loads re-reads Q and dO once per KV
    # block (32 times at S = 4096).
    # Global atomics that return the old value read an input as surely as a load (`atom.global.or.b32 r, [p], 0`
    # leaves it bit for bit), and count in neither counter above: their bytes, a name ncu knows on the H200 (run 18:
    # ncu-metrics, 0 on cuBLAS and addcmul); a reduction (`red`, an atomicAdd whose result is unused, the backward's
    # dQ) returns nothing and is not counted.
    elsewhere={"l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum": 1.0,
               "sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum": 32.0,
               "l1tex__t_bytes_pipe_lsu_mem_global_op_atom.sum": 1.0},
    elsewhere_allowance={"mha_bwd": {"O": 1.0, "dO": 1.0, "dQ": 2.0, "dK": 2.0, "dV": 2.0}},
    doc="Tensor Memory Accelerator bulk tensor copies (loads, stores, reductions).",
)

# The target every command and config defaults to (one place; the CLI options read it from the configs).
DEFAULT_ARCH = "sm_90a"

SM90A = ArchProfile(
    name="sm_90a",
    gpus=["H100", "H200"],
    ptx_version_min="8.0",
    families=[
        TargetFamily(
            name="wgmma",
            ptx=["wgmma.mma_async"],
            sass=["HGMMA"],
            counters=["sm__inst_executed_pipe_tensor_op_gmma.sum", "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"],
            # gmma pipe: warp-level HGMMA executions (40 for 1 CTA x 4 warps x 10 issues, FACTS.md);
            # ops_path ... bf16_dst_fp32: the bf16 HGMMA FLOPs (2*M*N*K for a GEMM).
            counter_opcodes={"sm__inst_executed_pipe_tensor_op_gmma.sum": ["HGMMA"]},
            # exactly 601,295,421,440 = 2 x 8192 x 7168 x 5120 on the main GEMM's reference (gemm_sweep round 13)
            work_counter="sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",
            work="flops",
            # the same FLOPs done another way, which a decoy computes its output with while wgmma runs on anything:
            # on the CUDA cores (the roofline section's fp32 counters, per thread instruction with a true predicate;
            # an addcmul of 16,777,216 floats counts 16,777,216 FFMA on the H200) and on the tensor cores' warp-level
            # path (mma.sync: HMMA ops, which count no HGMMA: 0 on a cuBLAS wgmma GEMM; ncu-metrics, run 17). Not the
            # half-precision HFMA / HADD counters: ptxas also emits HFMA2.MMA as a register move and HADD2.F32 as the
            # half-to-float conversion, so torch's fp32 randn counted 0.53-0.58 HFMA per element and its fp16 addcmul
            # 3 HADD per element (ncu-metrics, run 17) with no half arithmetic at all: an honest kernel's moves and
            # conversions would count as work done elsewhere.
            elsewhere={"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2.0,
                       "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1.0,
                       "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1.0,
                       "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum": 1.0,
                       "sm__ops_path_tensor_op_hmma_src_fp16.sum": 1.0,
                       # and in the other precisions a bf16 product is exact in: fp64 on the CUDA cores (DFMA / DADD /
                       # DMUL, the double roofline's counters) and on the tensor cores (DMMA), tf32 mma.sync (8 of
                       # bf16's 8 mantissa bits fit), int8 mma.sync (a product split into its bytes); without them a
                       # GEMM done in doubles beside a token wgmma read as wgmma that did the work
                       "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": 2.0,
                       "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": 1.0,
                       "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum": 1.0,
                       "sm__ops_path_tensor_src_fp64.sum": 1.0,
                       "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum": 1.0,
                       "sm__ops_path_tensor_op_imma_src_int8.sum": 1.0},
            doc="Warpgroup-level asynchronous matrix multiply (Hopper tensor cores).",
        ),
        _TMA,
    ],
    max_smem_per_block=232448,
    doc="Hopper. wgmma and setmaxnreg need the 'a' (architecture-specific) target.",
)

SM100A = ArchProfile(
    name="sm_100a",
    gpus=["B200"],
    ptx_version_min="8.6",
    families=[
        TargetFamily(
            name="tcgen05",
            ptx=["tcgen05.mma", "tcgen05.ld", "tcgen05.st", "tcgen05.alloc", "tcgen05.commit", "tcgen05.cp"],
            sass=["UTC*", "LDTM", "STTM"],
            # Names from ncu 2025.3.1's gb100 metric list (--query-metrics --chip gb100, read on the H200
            # machine); not yet measured on a B200. op_utcmma counts the UTC*MMA warp instructions.
            counters=["sm__inst_executed_pipe_tc.sum", "smsp__sass_inst_executed_op_utcmma.sum",
                      "smsp__sass_inst_executed_op_utccp.sum"],
            counter_opcodes={"smsp__sass_inst_executed_op_utcmma.sum": ["UTC*MMA"]},
            doc="Fifth-generation tensor core instructions with tensor memory (Blackwell).",
        ),
        _TMA,
    ],
    max_smem_per_block=232448,
    doc="Blackwell B200. tcgen05 needs PTX .version 8.6 or later.",
)

ARCHS: dict[str, ArchProfile] = {a.name: a for a in (SM90A, SM100A)}


def get_arch(name: str) -> ArchProfile:
    try:
        return ARCHS[name]
    except KeyError:
        raise KeyError(f"unknown arch {name!r}; known: {sorted(ARCHS)}") from None
