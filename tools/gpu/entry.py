"""The worker's and the referee's entry points, importable without torch (the parent pickles a reference to it).

Both processes run candidates' binaries (or judge their buffers) and need no API key: the keys leave their
environment before anything else happens."""
from __future__ import annotations


def _drop_keys() -> None:
    """The keys erased from this process's memory, not only from os.environ (keyless.py): a kernel on a GPU with
    pageable memory access reads host memory by address."""
    from ptxbench.tools.gpu.keyless import erase_secrets

    erase_secrets()


def main(conn, device_index: int, config: dict, referee_conn=None) -> None:
    _drop_keys()
    from .worker import serve

    serve(conn, device_index, config, referee_conn)


def referee_main(conn, device_index: int) -> None:
    _drop_keys()
    from .referee import serve

    serve(conn, device_index)
