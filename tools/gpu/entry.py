"""The worker's and the referee's entry points, importable without torch (the parent pickles a reference to it).

Both processes run candidates' binaries (or judge their buffers) and need no API key: the keys leave their
environment before anything else happens."""
from __future__ import annotations


def _drop_keys() -> None:
    """The keys erased from this process's memory, not only from os.environ (keyless.py): a kernel on a GPU with
    pageable memory access reads host memory by address."""
    from ptxbench.tools.gpu.keyless import erase_secrets

    erase_secrets()


def _deaf_to_the_terminal() -> None:
    """Ctrl-C at the terminal reaches every process of its group, this one too. Stopping is the parent's to do (a bench
    lets the evaluations in flight finish and stops at the next model call, then ends its workers): a worker killed by
    it in the middle of a candidate read as the candidate's RUNTIME_ERROR."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(conn, device_index: int, config: dict, referee_conn=None) -> None:
    _deaf_to_the_terminal()
    _drop_keys()
    from .worker import serve

    serve(conn, device_index, config, referee_conn)


def referee_main(conn, device_index: int) -> None:
    _deaf_to_the_terminal()
    _drop_keys()
    from .referee import serve

    serve(conn, device_index)
