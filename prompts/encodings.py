"""tiktoken encodings read from local copies first: the user's TIKTOKEN_CACHE_DIR, else the o200k / cl100k / p50k
files litellm carries. tiktoken's own download has no timeout, so behind a proxy that never answers (an air-gapped
cluster) it waits for ever; only an explicit choice of the user (export's --tokenizer) may go on to download, and then
with a timeout."""
from __future__ import annotations

import importlib.util
import os
import threading
from contextlib import contextmanager
from pathlib import Path

# tiktoken reads its files through one module-level function, swapped below while an encoding loads: one load at a time
_LOADING = threading.Lock()
# (connect, read) seconds for an encoding's download: a proxy that never answers fails in seconds, not never
DOWNLOAD_TIMEOUT_S = (10, 60)


class _NotLocal(Exception):
    """tiktoken asked for a download while only local copies were to be read."""


@contextmanager
def bundled_cache():
    """Point tiktoken at litellm's bundled encoding files while one loads, unless the user chose a cache."""
    spec = importlib.util.find_spec("litellm")
    bundled = Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers" if spec else None
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    if old is None and bundled is not None and bundled.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)


@contextmanager
def _reading(load, read):
    """tiktoken's file reader replaced by read(tiktoken's reader, path) while an encoding loads."""
    fetch = load.read_file
    load.read_file = lambda path: read(fetch, path)
    try:
        yield
    finally:
        load.read_file = fetch


def _local_only(fetch, path: str) -> bytes:
    if "://" in path:
        raise _NotLocal(path)
    return fetch(path)


def _bounded(fetch, path: str) -> bytes:
    """tiktoken's own download, but with a timeout."""
    if not path.startswith(("http://", "https://")):
        return fetch(path)
    import requests

    resp = requests.get(path, timeout=DOWNLOAD_TIMEOUT_S)
    resp.raise_for_status()
    return resp.content


def encoding(name: str, download: bool = False):
    """The tiktoken encoding `name` from a local copy; with download=True, a download when there is none (into
    tiktoken's own cache, not litellm's folder). None when tiktoken is not installed or, without download, no local
    copy holds the encoding or the one there cannot be read (with download, that raises)."""
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        return None
    with _LOADING:
        try:
            with _reading(tiktoken.load, _local_only), bundled_cache():
                return tiktoken.get_encoding(name)
        except _NotLocal:
            if not download:
                return None
        except Exception:  # noqa: BLE001 - a local copy that cannot be read: the counts' estimate, or the export says why
            if download:
                raise
            return None
        with _reading(tiktoken.load, _bounded):
            return tiktoken.get_encoding(name)
