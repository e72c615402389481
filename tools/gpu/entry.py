"""The worker's and the referee's entry points, importable without torch (the parent pickles a reference to it).

Both processes run candidates' binaries (or judge their buffers) and need no API key: the keys leave their
environment before anything else happens."""
from __future__ import annotations

import os


def _drop_keys() -> None:
    from ptxbench.tools.redact import without_secrets

    keep = without_secrets(dict(os.environ))
    for name in [n for n in os.environ if n not in keep]:
        del os.environ[name]


def main(conn, device_index: int, config: dict, referee_conn=None) -> None:
    _drop_keys()
    from .worker import serve

    serve(conn, device_index, config, referee_conn)


def referee_main(conn, device_index: int) -> None:
    _drop_keys()
    from .referee import serve

    serve(conn, device_index)
