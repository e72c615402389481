"""The L2 flush each timed call starts from (tools/gpu/timing.L2Flush): written, as the field usually does it, or read,
which leaves the same cold L2 with clean lines. The mode travels from the command line and the trajectory's config
through EvalOptions to the GPU worker's job, and comes back in the timing record. The GPU test at the end measures
what the mode changes."""
from __future__ import annotations

import pytest

from ptxbench.agent.loop.optimize import eval_options
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import gpu_job
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.messages import GpuJob
from ptxbench.tools.gpu.timing import L2_FLUSH_MODES, L2Flush
from ptxbench.tools.results import Timing


def test_the_default_is_the_written_flush_everywhere():
    assert L2_FLUSH_MODES == ("write", "read")
    assert EvalOptions().l2_flush == GpuJob(workload="w").l2_flush == OptimizeConfig(workload="w").l2_flush == "write"
    assert L2Flush(1 << 20).mode == "write"
    assert Timing.model_validate({"candidate": {"median_ms": 1.0, "ci_low_ms": 1.0, "ci_high_ms": 1.0, "n": 1}}
                                 ).l2_flush == "write"  # records written before the option read as they were measured


def test_a_read_flush_travels_from_the_config_to_the_gpu_job():
    options = eval_options(OptimizeConfig(workload="gemm_bf16_m64_n7168_k5120", l2_flush="read"))
    assert options.l2_flush == "read"
    job = gpu_job("gemm_bf16_m64_n7168_k5120", b"cubin", {}, options.model_copy(update={"iters": 7}))
    assert job.l2_flush == "read" and job.iters == 7
    assert GpuJob.model_validate_json(job.model_dump_json()).l2_flush == "read"  # as the worker receives it


def test_an_unknown_mode_is_refused_at_every_door():
    with pytest.raises(ValueError, match="expected one of write, read"):
        L2Flush(1 << 20, "clean")
    for model, fields in ((EvalOptions, {}), (GpuJob, {"workload": "w"}), (OptimizeConfig, {"workload": "w"})):
        with pytest.raises(ValueError):
            model(**fields, l2_flush="clean")


@pytest.mark.gpu
def test_a_read_flush_spares_a_memory_bound_call_the_write_back():
    """A read of 73 MB (the decode GEMMs' B) after each flush: the written flush leaves about 50 MB of dirty lines that
    the read pays the write-back of, so it runs well slower than after the read flush (19-26% on the H200, round 30 of
    bench/results/gemm_sweep.md); a call that touches no memory is level."""
    import torch

    from ptxbench.tools.gpu.timing import Side, time_sides

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    big = torch.randn(7168, 5120, device="cuda", dtype=torch.bfloat16)
    one = torch.zeros(1, device="cuda")
    sides = [Side(lambda: big.sum()), Side(lambda: one.add_(1.0))]
    times = {mode: time_sides(sides, flush=L2Flush(max(2 * l2, 64 << 20), mode), warmup=3, iters=30, trials=1)
             for mode in L2_FLUSH_MODES}
    med = {mode: [sorted(t)[len(t) // 2] for t in ts] for mode, ts in times.items()}
    assert med["read"][0] < 0.9 * med["write"][0], med
    assert med["read"][1] == pytest.approx(med["write"][1], rel=0.25, abs=0.002), med
