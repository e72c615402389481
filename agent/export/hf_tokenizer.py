"""A Hugging Face tokenizer for `--tokenizer hf:<name or path>` that finds out at once when it cannot be had.

Without a network the hub retried each file with back-off for about 50 s, printing two screens of warnings, and
behind a proxy or firewall that never answers it waited for ever. So: a local folder loads as it is; a hub name
loads from the hub's cache first (local_files_only, no request made); only on a miss, and unless HF_HUB_OFFLINE or
TRANSFORMERS_OFFLINE is set, is the hub asked once, with a short timeout, before the download. A tokenizer that
cannot be had is one line saying what to do (Missing).
"""
from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

PROBE_TIMEOUT_S = 5.0
# What a saved tokenizer's folder holds, one of them at least (fast, sentencepiece, BPE)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


class Missing(RuntimeError):
    """No such folder, or a hub name not in the local cache with the hub switched off or out of reach: the message
    says what to do."""


def offline_var() -> str | None:
    """The variable that switches the hub off, read as the hub reads it (1, ON, YES, TRUE)."""
    return next((v for v in OFFLINE_VARS if os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")), None)


def hub_unreachable(endpoint: str) -> str | None:
    """Why the hub cannot be reached, or None when it answers at all (any HTTP status). One request, no retries;
    urllib honours HTTPS_PROXY / NO_PROXY as the hub's client does."""
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None  # an answer: the network is there
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLError):
            return None  # a TLS answer (a certificate the hub's own client may trust): the download will say
        return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
    return None


@contextmanager
def _hub_off(constants):
    """The hub's own offline switch for a cache read: with local_files_only alone it still fetched its agent
    registry (3 s behind a proxy that never answers). The hub reads HF_HUB_OFFLINE once, at import, into this."""
    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


def _what_to_do(name: str, cache: str) -> str:
    return (f"fetch it where there is a network (`hf download {name}`) and copy the hub's cache to {cache} "
            f"(or set HF_HOME), or pass hf:<folder> holding the tokenizer files, or use --tokenizer estimate")


def load(name: str):
    """The tokenizer `name` names: a folder, or a hub repository id. Raises Missing when the hub is needed and
    cannot be had; anything else from transformers passes through."""
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    folder = Path(name).expanduser()
    if folder.exists() and not (folder.is_dir() and any((folder / f).is_file() for f in TOKENIZER_FILES)):
        # transformers' own words for it ("Couldn't instantiate the backend tokenizer from one of:") said nothing of it
        raise Missing(f"{name} holds no tokenizer files ({', '.join(TOKENIZER_FILES)}): give the folder a tokenizer "
                      "was saved to (tokenizer.save_pretrained(DIR)), a hub name, or use --tokenizer estimate")
    if folder.exists():
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if name.startswith(("/", ".", "~")):
        raise Missing(f"no folder {name}")
    try:
        with _hub_off(constants):
            return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except OSError:  # not in the cache (transformers' word for a miss); any other failure is the tokenizer's own
        pass
    cache = constants.HF_HUB_CACHE
    if var := offline_var():
        raise Missing(f"not in the hub's cache ({cache}) and {var} is set: {_what_to_do(name, cache)}")
    if why := hub_unreachable(constants.ENDPOINT):
        raise Missing(f"not in the hub's cache ({cache}) and {constants.ENDPOINT} cannot be reached ({why}); "
                         f"{_what_to_do(name, cache)}")
    return AutoTokenizer.from_pretrained(name)
