"""tiktoken encodings from local copies only, unless a download is asked for (prompts/encodings.py): the prompt
sizes and a turn's feedback never wait on tiktoken's download, which has no timeout."""
from __future__ import annotations

import threading
from contextlib import nullcontext

import pytest

tiktoken = pytest.importorskip("tiktoken")
import tiktoken.load  # noqa: E402
import tiktoken.registry  # noqa: E402


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No local copy of any encoding (an empty cache, no bundled files) and a network that records what is asked."""
    asked: list[str] = []

    def network(url):
        asked.append(url)
        raise ConnectionError(f"Max retries exceeded with url: {url}")

    def download(url, timeout=None):  # tiktoken's own passes none: a proxy that never answers held it for ever
        asked.append(("with a timeout" if timeout else "without a timeout", url))
        raise ConnectionError(f"Max retries exceeded with url: {url}")

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(tiktoken.load, "read_file", network)
    monkeypatch.setattr("requests.get", download)
    monkeypatch.setattr("ptxbench.prompts.encodings.bundled_cache", nullcontext)
    for name in ("cl100k_base", "o200k_base"):
        monkeypatch.delitem(tiktoken.registry.ENCODINGS, name, raising=False)
    return asked


def test_without_a_local_copy_no_download_is_tried(offline):
    from ptxbench.prompts.encodings import encoding

    assert encoding("cl100k_base") is None and offline == []
    assert tiktoken.load.read_file.__name__ == "network"  # tiktoken's reader is given back


def test_a_download_is_tried_only_when_asked_and_with_a_timeout(offline):
    from ptxbench.prompts.encodings import encoding

    with pytest.raises(ConnectionError):
        encoding("cl100k_base", download=True)
    ((how, url),) = offline
    assert how == "with a timeout" and url.startswith("https://")


def test_the_feedback_counts_by_estimate_without_a_download(offline, monkeypatch):
    """A turn's feedback asked tiktoken for cl100k, whose download hangs for ever behind a proxy that never answers."""
    from ptxbench.tools.profile import feedback

    monkeypatch.setattr(feedback._encoder, "cache_clear", feedback._encoder.cache_clear)
    feedback._encoder.cache_clear()
    try:
        assert feedback.count_tokens("x" * 40) == 10 and offline == []
    finally:
        feedback._encoder.cache_clear()


def test_the_prompt_sizes_count_without_a_download(offline):
    from ptxbench.prompts import size

    size.encoder.cache_clear()
    try:
        assert size.encoder() is None and offline == []
    finally:
        size.encoder.cache_clear()


def test_loads_on_threads_give_tiktoken_its_reader_back(tmp_path, monkeypatch):
    """Threads loading at once (a bench's trajectories) leave tiktoken's reader as it was, not the local-only one."""
    from ptxbench.prompts.encodings import encoding

    monkeypatch.setattr("ptxbench.prompts.encodings.bundled_cache", nullcontext)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    original = tiktoken.load.read_file
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    threads = [threading.Thread(target=encoding, args=("cl100k_base",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert tiktoken.load.read_file is original
