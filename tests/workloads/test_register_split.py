"""workloads/solutions/register_split.py: the templates' producer / consumer register split comes from the CTA's pool
(threads x the launch's registers), so no point of either template's space can ask setmaxnreg.inc for registers the
pool never holds (tools/regpool.py's arithmetic; the backward's dq_writer hung on the H200 at 32 / 240 / 240)."""
from __future__ import annotations

import itertools

from ptxbench.tools.regpool import SetmaxnregMoves, pool_shortfall
from ptxbench.workloads.solutions import attention_template, gemm_template
from ptxbench.workloads.solutions.register_split import consumer_regs, launch_regs


def test_launch_registers_are_what_ptxas_gives_one_cta_per_sm():
    assert [launch_regs(t) for t in (128, 256, 384, 512)] == [248, 248, 168, 128]


def test_every_split_fits_the_pool_and_32_at_384_threads_is_232():
    for consumers, producer in itertools.product((1, 2, 3), range(24, 57, 8)):
        threads = 128 * (consumers + 1)
        c = consumer_regs(producer, consumers)
        assert c % 8 == 0 and c <= 240
        assert pool_shortfall(launch_regs(threads), threads, SetmaxnregMoves([producer], [c])) == 0, (consumers, producer)
    assert consumer_regs(24, 2) == 240 and consumer_regs(32, 2) == 232  # the SM's 65,536 would have said 240


def test_every_template_point_takes_its_split_from_the_pool():
    for module in (gemm_template, attention_template):
        space = module.PARAM_SPACE if hasattr(module, "PARAM_SPACE") else module.OPTION_SPACE
        for producer in space.get("producer_regs", [24, 40]):
            for consumers in space.get("consumers", [2]):
                p = module.default_params().model_copy(update={"producer_regs": producer, "consumers": consumers})
                assert p.consumer_regs == consumer_regs(producer, consumers), (module.__name__, producer, consumers)
