"""Token counting for the length cap: a tokenizer the user names, or a stated estimate."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

from . import hf_tokenizer


def _estimate(text: str) -> int:
    # About four characters a token for English and code in BPE vocabularies (stated, not measured per model).
    return (len(text) + 3) // 4


SPECS = "'tiktoken:<encoding>' or 'hf:<name or path>'"


class TokenizerUnavailable(ValueError):
    """A --tokenizer spec that names no tokenizer, or one that cannot be loaded here."""


def _tiktoken(name: str):
    """A local copy first (prompts/encodings.py), then tiktoken's own download: the user named this encoding."""
    from ptxbench.prompts.encodings import encoding

    enc = encoding(name, download=True)
    if enc is None:
        raise ModuleNotFoundError("tiktoken is not installed (pip install tiktoken)")
    return enc


def _load(kind: str, name: str) -> Callable[[str], int]:
    if kind == "tiktoken":
        enc = _tiktoken(name)
        return lambda text: len(enc.encode(text, disallowed_special=()))
    tok = hf_tokenizer.load(name)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


@lru_cache(maxsize=8)
def counter(spec: str) -> Callable[[str], int]:
    """'estimate', 'tiktoken:<encoding>' (e.g. tiktoken:o200k_base) or 'hf:<name or local path>'. A spec that names
    nothing, or a tokenizer that fails to load, raises TokenizerUnavailable (the CLI asks before reading any run)."""
    if spec == "estimate":
        return _estimate
    kind, _, name = spec.partition(":")
    if kind not in ("tiktoken", "hf"):
        raise TokenizerUnavailable(f"unknown tokenizer {spec!r}: use 'estimate', {SPECS}")
    if not name.strip():  # no default: an encoding chosen for the user may be fetched from the network
        raise TokenizerUnavailable(f"{spec!r} names no tokenizer: write {SPECS}, e.g. tiktoken:o200k_base")
    try:
        return _load(kind, name)
    except hf_tokenizer.Missing as exc:  # already says what to do, in one line
        raise TokenizerUnavailable(f"{spec!r} cannot be loaded: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # noqa: BLE001 - tiktoken, transformers and the hub raise many types: any means unusable
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        offline = ("; offline, a tokenizer loads only from a local copy (tiktoken: TIKTOKEN_CACHE_DIR; hf: a local "
                   "folder or the hub's cache), else use --tokenizer estimate") if _network_error(exc) else ""
        raise TokenizerUnavailable(f"{spec!r} cannot be loaded: {detail[:200]}{offline}") from None


def _network_error(exc: BaseException) -> bool:
    """Whether loading failed for want of a network: a download refused or unresolved (requests', urllib3's and the
    hub's words for it)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("connection", "name resolution", "nameresolution", "max retries", "couldn't connect",
                                   "offline", "temporary failure"))


def count_messages(messages: list[dict], spec: str) -> int:
    count = counter(spec)
    # A few tokens per message for the chat template's role markers.
    return sum(count(m["content"]) + 4 for m in messages)
