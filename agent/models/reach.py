"""A model call whose connection could not be opened at all: the host's name does not resolve, the connection is
refused, there is no route, or the proxy the environment names is out of reach in one of those ways.

On a machine without a network such a call was retried as a transient failure for about 75 s, then stopped on an
unhelpful "Connection error.". No TCP probe before the run can tell it (behind an HTTPS proxy a direct connection
fails though the calls would go through), so the first call is the probe: until a destination has answered once in
this process, such a failure is said at once in one line naming the host, or the proxy and its variable, and not
retried. Once it has answered, the network works and the same failure may be a blip: retried as before (a local
server restarting mid-bench). So is a proxy that is up but refuses the tunnel (its CONNECT answered 502 or 503: its
own network is down): no request reached the provider. Timeouts, 429 and 5xx answers to the request itself (a
provider's, or a proxy's that forwarded a plain-HTTP request) stay transient.

    cannot_connect(exc)   that line, or None for any other failure
    answered(key)         a destination (an --api-base, or a provider) answered in this process
    has_answered(key)
    unreachable(exc)      the line, when `exc` (the model's ModelUnavailable) is one cannot_connect said: the bench
                          stops calling a model it never reached on it (agent/bench/unreached.py)
"""
from __future__ import annotations

import errno
import os
import socket
import urllib.request
from urllib.parse import urlsplit

# the variables httpx (litellm's client) reads a proxy from, lowercase first as urllib reads them
PROXY_VARIABLES = {"https": ("https_proxy", "HTTPS_PROXY"), "http": ("http_proxy", "HTTP_PROXY"),
                   "all": ("all_proxy", "ALL_PROXY")}
NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")

REFUSED = "connection refused"

_answered: set[str] = set()
_said: set[str] = set()  # the lines cannot_connect gave, as given and as a model's error carries them (scrubbed)


def answered(key: str) -> None:
    _answered.add(key)


def has_answered(key: str) -> bool:
    return key in _answered


def unreachable(exc: BaseException) -> str | None:
    """`exc`'s text when it is a line cannot_connect gave (a call whose connection could not open at all), else None:
    told apart by the line itself, since the model's error carries it without its cause."""
    text = str(exc)
    return text if text in _said else None


def _remember(line: str) -> str:
    from ...tools.redact import scrub_text

    _said.update((line, scrub_text(line)))
    return line


def _chain(exc: BaseException | None):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _why(exc: BaseException) -> str | None:
    """What stopped the connection from opening, where it is one no retry soon mends; None for anything else."""
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            return "its name does not resolve"
        if isinstance(e, ConnectionRefusedError):
            return REFUSED
        if isinstance(e, OSError) and e.errno == errno.ENETUNREACH:
            return "network is unreachable"
        if isinstance(e, OSError) and e.errno == errno.EHOSTUNREACH:  # an --api-base machine on the LAN that is off
            return "no route to host"
    return None


def _tunnel_refused(exc: BaseException) -> str | None:
    """The proxy's answer when it refused to open the tunnel (httpx's ProxyError: a CONNECT answered other than 2xx,
    so the provider never saw the request), else None."""
    import httpx

    for e in _chain(exc):
        if isinstance(e, httpx.ProxyError):
            return " ".join(str(e).split())[:80] or "refused"  # the proxy's status line, its reason its own text
    return None


def _url(exc: BaseException) -> str:
    """The URL the client tried (httpx keeps it on its error; litellm's own errors carry a placeholder)."""
    import httpx

    for e in _chain(exc):
        if isinstance(e, httpx.HTTPError):
            try:
                return str(e.request.url)
            except RuntimeError:  # an error raised outside a request
                continue
    return ""


def _given(names) -> list[str]:
    """Those of the variables `names` set to something."""
    return [n for n in names if os.environ.get(n, "").strip()]


def _route(url: str) -> tuple[str, str]:
    """How the environment sends `url`, as httpx (litellm's client) does: (the proxy's host:port, the variable naming
    it), or ('', why it goes directly)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    scheme = parts.scheme if proxies.get(parts.scheme) else "all"
    proxy = proxies.get(scheme)
    if not proxy:
        unset = " or ".join(f"${n}" for n in (PROXY_VARIABLES.get(parts.scheme, ("", ""))[1], "ALL_PROXY") if n)
        return "", f"no proxy set: {unset} unset"
    if parts.hostname and urllib.request.proxy_bypass_environment(parts.hostname, proxies):
        return "", f"${(_given(NO_PROXY_VARIABLES) or ['NO_PROXY'])[0]} leaves it out of the proxy"
    variable = next((n for n in _given(PROXY_VARIABLES[scheme]) if os.environ[n].strip() == proxy.strip()),
                    PROXY_VARIABLES[scheme][1])
    where = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:  # host and port only: a proxy URL may carry a user and password
        return f"{where.hostname}:{where.port or (443 if where.scheme == 'https' else 80)}", variable
    except ValueError:  # a port that is no number
        return where.hostname or "?", variable


def cannot_connect(exc: BaseException, fallback_host: str = "") -> str | None:
    """One line for a call whose connection could not be opened (see the module's note), or None."""
    refused = _tunnel_refused(exc)
    why = _why(exc)
    if why is None and refused is None:
        return None
    url = _url(exc)
    host = urlsplit(url).hostname or fallback_host or "the provider"
    proxy, how = _route(url) if url else ("", "")
    if refused is not None:
        named = f"the proxy {proxy} that ${how} names" if proxy else "the proxy"
        return _remember(f"{named} refused to open a connection to {host} ({refused}): not retried; the proxy is up "
                         f"but does not reach {host}: check its network, or add {host} to $NO_PROXY to call it directly")
    if proxy:
        return _remember(f"cannot reach the proxy {proxy} that ${how} names, to call {host} ({why}): not retried; "
                         f"check ${how}, or add {host} to $NO_PROXY to call it directly")
    ask = ("is the server running, at that address?" if why == REFUSED else
           "is this machine online, or does it reach the network through a proxy ($HTTPS_PROXY)?")
    return _remember(f"cannot reach {host} ({why}{'; ' + how if how else ''}): not retried; {ask}")
