"""The launch gate (tools/gpu/gate.py): its PTX on the CPU, and on the GPU that it holds the start event until the host
opens it, so the host's own delay is never timed."""
from __future__ import annotations

import re
import subprocess

import pytest

from ptxbench.tools.gpu.gate import GATE_PTX, LIMIT_NS


def test_the_gate_polls_the_host_word_and_gives_up_after_its_limit(tmp_path):
    from ptxbench.tools.toolchain import find_toolchain

    tc = find_toolchain("sm_90a")
    src = tmp_path / "gate.ptx"
    src.write_text(GATE_PTX)
    out = subprocess.run([tc.ptxas.path, "-arch=sm_90a", "-v", str(src), "-o", str(src) + ".cubin"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sass = subprocess.run([tc.nvdisasm.path, str(src) + ".cubin"], capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"\bLDG\.E\.STRONG\.SYS\b", sass)  # a volatile load: read again on every pass, from host memory
    assert "NANOSLEEP" in sass and "SR_GLOBALTIMER" in sass  # a pause between polls; the global timer read
    assert re.search(r"\b(REDG|ATOMG)\.E\.ADD", sass)  # the give-up counted
    assert 1_000_000 <= LIMIT_NS <= 1_000_000_000  # far above an enqueue, far below a hang


@pytest.mark.gpu
def test_the_host_delay_before_a_call_is_not_timed_and_a_gate_left_shut_gives_up():
    """A host that dawdles 2 ms between the start event and the call: without the gate the interval holds the 2 ms;
    with it, the kernel's own time. A gate never opened lets the GPU go after LIMIT_NS and counts one stall."""
    import time

    import torch

    from ptxbench.tools.gpu.gate import launch_gate

    gate, stream = launch_gate(), torch.cuda.current_stream().cuda_stream
    a = torch.randn(2048, 2048, device="cuda")
    torch.matmul(a, a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(gated: bool) -> float:
        torch.cuda.synchronize()
        ticket = gate.close(stream) if gated else None
        start.record()
        time.sleep(0.002)  # the host, late
        torch.matmul(a, a)
        end.record()
        if gated:
            gate.open(ticket)
        end.synchronize()
        return start.elapsed_time(end)

    plain = min(timed(False) for _ in range(5))
    gated = min(timed(True) for _ in range(5))
    print(f"\nmatmul 2048^3 with a 2 ms host delay: {plain:.3f} ms without the gate, {gated:.3f} ms with it")
    assert plain >= 2.0 and gated < 1.0
    stalls = gate.stalls()
    gate.close(stream)  # never opened
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    waited = time.perf_counter() - t0
    assert gate.stalls() == stalls + 1 and LIMIT_NS / 1e9 * 0.9 <= waited < 1.0
