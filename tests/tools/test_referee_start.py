"""A referee that cannot start on its GPU (a CPU-only torch, no driver) says so to its worker, whose evaluations
report it as an infra error; it prints no traceback of its own at the user (tools/gpu/referee.py)."""
from __future__ import annotations

import multiprocessing as mp
import threading

import pytest


def test_a_referee_without_a_gpu_answers_every_request_with_why(monkeypatch, capfd):
    from ptxbench.tools.gpu import referee

    def no_gpu(index):
        raise AttributeError("module 'torch._C' has no attribute '_cuda_setDevice'")

    monkeypatch.setattr(referee.torch.cuda, "set_device", no_gpu)  # as on a CPU-only torch, also on a GPU machine
    worker_end, referee_end = mp.Pipe()
    serving = threading.Thread(target=referee.serve, args=(referee_end, 0), daemon=True)
    serving.start()
    client = referee.RefereeClient(worker_end, timeout_s=30)
    for _ in range(2):  # every request, not only the first
        with pytest.raises(referee.RefereeError, match="the referee could not start on GPU 0: AttributeError"):
            client.prepare("smoke_gemm_bf16_m256_n256_k512", 0, "normal")
    worker_end.send({"op": "exit"})
    serving.join(timeout=30)
    assert not serving.is_alive()
    assert "Traceback" not in capfd.readouterr().err


def test_a_working_referee_answers_in_order_and_reports_a_bad_request(monkeypatch):
    """The same loop serves a referee that started (here on the CPU): a request it cannot handle comes back as an
    error naming it, the next one is answered, and exit ends the loop."""
    from ptxbench.tools.gpu import referee

    monkeypatch.setattr(referee.RefereeCore, "warm_up", lambda self: 0.0)  # the smoke work is not what this checks
    worker_end, referee_end = mp.Pipe()
    serving = threading.Thread(target=referee.serve, args=(referee_end, -1), daemon=True)
    serving.start()
    client = referee.RefereeClient(worker_end, timeout_s=60)
    with pytest.raises(referee.RefereeError, match="unknown referee request 'no_such_op'"):
        client._send({"op": "no_such_op"})
        client._drain_to_last()
    assert client.prepare("smoke_gemm_bf16_m256_n256_k512", 0, "normal")  # the next request answered: a digest
    worker_end.send({"op": "exit"})
    serving.join(timeout=30)
    assert not serving.is_alive()
