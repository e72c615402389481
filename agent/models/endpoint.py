"""Is an --api-base endpoint reachable? Asked once before a run starts, with each attempt shown, so an
unreachable server costs a few seconds and one line instead of a model call's minute of back-off.

    unreachable(api_base, attempts=3, wait_s=1.0, timeout_s=3.0, report=print)  None, or why it is not
    local_server(model)   (url, where it comes from) for a local server's model given no --api-base, or None
"""
from __future__ import annotations

import os
import socket
import time
from typing import Callable
from urllib.parse import urlparse

DEFAULT_PORTS = {"http": 80, "https": 443}
# Providers served by a server of the user's own: the variable litellm reads its address from, and the address it calls
# when that is unset too (litellm/main.py, llms/*/transformation.py); None where it has no default (lm_studio).
LOCAL_SERVERS = {"ollama": ("OLLAMA_API_BASE", "http://localhost:11434"),
                 "ollama_chat": ("OLLAMA_API_BASE", "http://localhost:11434"),
                 "llamafile": ("LLAMAFILE_API_BASE", "http://127.0.0.1:8080/v1"),
                 "lm_studio": ("LM_STUDIO_API_BASE", None),
                 "hosted_vllm": ("HOSTED_VLLM_API_BASE", None)}


def local_server(model: str) -> tuple[str, str] | None:
    """The address litellm sends `model` to when no --api-base is given, for a local server's provider (ollama/...),
    with where that address comes from; None for a hosted provider or where there is none to call."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider not in LOCAL_SERVERS:
        return None
    env, default = LOCAL_SERVERS[provider]
    if url := os.environ.get(env):
        return url, f"${env}"
    return (default, f"litellm's default for {provider}/ models") if default else None


def _address(api_base: str, flag: str = "--api-base") -> tuple[str, int] | str:
    not_url = f"{flag} {api_base!r} is not an http(s) URL; expected e.g. http://localhost:8000/v1"
    try:
        url = urlparse(api_base)
    except ValueError as exc:  # 'http://[::1' (an IPv6 bracket left open): a traceback before the probe
        return f"{not_url} ({exc})"
    if url.scheme not in DEFAULT_PORTS or not url.hostname:
        return not_url
    try:
        url.hostname.encode("idna")  # a host of bytes no resolver takes (not UTF-8, a space): getaddrinfo's traceback
        if any(c.isspace() for c in url.hostname):
            raise UnicodeError("a space in the host name")
    except UnicodeError as exc:
        return f"{not_url} (its host: {exc})"
    try:
        return url.hostname, url.port or DEFAULT_PORTS[url.scheme]
    except ValueError as exc:  # a port that is not a number
        return f"{flag} {api_base!r}: {exc}"


def bad_url(api_base: str, flag: str = "--api-base") -> str | None:
    """Why api_base is not a usable URL (no network), or None; `flag`: where it was given (an option, a variable)."""
    address = _address(api_base, flag)
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
