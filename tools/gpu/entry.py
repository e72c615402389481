"""The worker process's entry point, importable without torch (the parent pickles a reference to it)."""
from __future__ import annotations


def main(conn, device_index: int, config: dict) -> None:
    from .worker import serve

    serve(conn, device_index, config)
