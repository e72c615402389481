"""The worker's and the referee's entry points, importable without torch (the parent pickles a reference to it)."""
from __future__ import annotations


def main(conn, device_index: int, config: dict, referee_conn=None) -> None:
    from .worker import serve

    serve(conn, device_index, config, referee_conn)


def referee_main(conn, device_index: int) -> None:
    from .referee import serve

    serve(conn, device_index)
