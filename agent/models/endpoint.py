"""Is an --api-base endpoint reachable? Asked once before a run starts, with each attempt shown, so an
unreachable server costs a few seconds and one line instead of a model call's minute of back-off.

    unreachable(api_base, attempts=3, wait_s=1.0, timeout_s=3.0, report=print)  None, or why it is not
"""
from __future__ import annotations

import socket
import time
from typing import Callable
from urllib.parse import urlparse

DEFAULT_PORTS = {"http": 80, "https": 443}


def _address(api_base: str) -> tuple[str, int] | str:
    url = urlparse(api_base)
    if url.scheme not in DEFAULT_PORTS or not url.hostname:
        return f"--api-base {api_base!r} is not an http(s) URL; expected e.g. http://localhost:8000/v1"
    try:
        return url.hostname, url.port or DEFAULT_PORTS[url.scheme]
    except ValueError as exc:  # a port that is not a number
        return f"--api-base {api_base!r}: {exc}"


def bad_url(api_base: str) -> str | None:
    """Why api_base is not a usable URL (no network), or None."""
    address = _address(api_base)
    return address if isinstance(address, str) else None


def unreachable(api_base: str, attempts: int = 3, wait_s: float = 1.0, timeout_s: float = 3.0,
                report: Callable[[str], None] | None = None) -> str | None:
    """None once a TCP connection to the endpoint opens; else one line saying why, after `attempts` tries."""
    address = _address(api_base)
    if isinstance(address, str):
        return address
    reason = ""
    for attempt in range(1, attempts + 1):
        try:
            socket.create_connection(address, timeout=timeout_s).close()
            return None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
        if report is not None:
            more = f"; retrying in {wait_s:g} s" if attempt < attempts else ""
            report(f"{api_base}: attempt {attempt}/{attempts} failed ({reason}){more}")
        if attempt < attempts:
            time.sleep(wait_s)
    return f"cannot reach {api_base} ({reason}) after {attempts} attempts: is the server running at that address?"
