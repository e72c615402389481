"""Token counting for the length cap: a tokenizer the user names, or a stated estimate."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable


def _estimate(text: str) -> int:
    # About four characters a token for English and code in BPE vocabularies (stated, not measured per model).
    return (len(text) + 3) // 4


@lru_cache(maxsize=8)
def counter(spec: str) -> Callable[[str], int]:
    """'estimate', 'tiktoken:<encoding>' (e.g. tiktoken:o200k_base) or 'hf:<name or local path>'."""
    if spec == "estimate":
        return _estimate
    kind, _, name = spec.partition(":")
    if kind == "tiktoken":
        import tiktoken

        enc = tiktoken.get_encoding(name or "o200k_base")
        return lambda text: len(enc.encode(text, disallowed_special=()))
    if kind == "hf":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name)
        return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
    raise ValueError(f"unknown tokenizer {spec!r}: use 'estimate', 'tiktoken:<encoding>' or 'hf:<name or path>'")


def count_messages(messages: list[dict], spec: str) -> int:
    count = counter(spec)
    # A few tokens per message for the chat template's role markers.
    return sum(count(m["content"]) + 4 for m in messages)
