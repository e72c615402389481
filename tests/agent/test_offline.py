"""Without a network (an air-gapped cluster serving a model with vLLM): litellm takes its bundled price table, an
`hf:` tokenizer comes from the local cache or fails in one line, without the hub's minutes of retries, and a tiktoken
encoding from a local copy before any download. Nothing here reaches the network: the hub's address is a closed or
silent local port."""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest

# Records LITELLM_LOCAL_MODEL_COST_MAP at the moment litellm is imported, then stops the import (seconds saved):
# litellm reads the variable once, while it imports.
LITELLM_IMPORT = """
import os, sys
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm":
            print("AT_IMPORT", os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP"))
            raise ImportError("stopped here")
sys.meta_path.insert(0, Watch())
from ptxbench.agent.models.keys import key_problem
try:
    key_problem("cohere/command-r")  # not one of the usual providers: litellm is asked
except ImportError as exc:
    print("STOPPED", exc)
"""


@pytest.mark.parametrize("user", [None, "False"])
def test_litellm_is_imported_with_its_bundled_price_table_unless_the_user_chose(user):
    """Offline, `import litellm` fetched its price list from GitHub first (5 s and a warning behind a silent
    proxy); the switch must be in the environment before litellm is imported, and a user's own value kept."""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    if user is not None:
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = user
    done = subprocess.run([sys.executable, "-c", LITELLM_IMPORT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert f"AT_IMPORT {user or 'True'}" in done.stdout, done.stdout + done.stderr
    assert "STOPPED stopped here" in done.stdout  # the import seen was the one the key check made


class FakeAutoTokenizer:
    """transformers.AutoTokenizer with an empty or a filled hub cache; a download is a test failure."""
    calls: list[dict] = []
    cached = False

    @classmethod
    def from_pretrained(cls, name, **kwargs):
        cls.calls.append(kwargs)
        if not kwargs.get("local_files_only"):
            raise AssertionError(f"a download of {name} was tried")
        if not cls.cached:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
                          "them in the cached files.\nCheck your internet connection or see how to run the library "
                          "in offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.")
        return lambda text, add_special_tokens=False: {"input_ids": text.split()}


@pytest.fixture
def hub(monkeypatch):
    transformers = pytest.importorskip("transformers")
    from ptxbench.agent.export.tokens import counter

    FakeAutoTokenizer.calls, FakeAutoTokenizer.cached = [], False
    monkeypatch.setattr(transformers, "AutoTokenizer", FakeAutoTokenizer)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    counter.cache_clear()
    yield counter
    counter.cache_clear()


def _no_request(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("a request to the hub was made")
    monkeypatch.setattr("urllib.request.urlopen", refused)


def test_a_cached_hub_tokenizer_loads_from_the_cache_without_a_request(hub, monkeypatch):
    _no_request(monkeypatch)
    FakeAutoTokenizer.cached = True
    assert hub("hf:acme/tiny")("two words") == 2
    assert FakeAutoTokenizer.calls == [{"local_files_only": True}]


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_the_hubs_offline_switch_means_the_cache_only_and_one_line_saying_what_to_do(hub, monkeypatch, var):
    from ptxbench.agent.export.tokens import TokenizerUnavailable

    _no_request(monkeypatch)
    monkeypatch.setenv(var, "1")
    with pytest.raises(TokenizerUnavailable) as err:
        hub("hf:acme/tiny")
    message = str(err.value)
    assert "\n" not in message and f"{var} is set" in message
    assert "hf download acme/tiny" in message and "--tokenizer estimate" in message
    assert FakeAutoTokenizer.calls == [{"local_files_only": True}]


def test_a_silent_hub_is_asked_once_and_given_up_after_a_short_timeout(hub, monkeypatch):
    """Behind a proxy or firewall that never answers, the hub's own model_info waited for ever."""
    from huggingface_hub import constants

    from ptxbench.agent.export import hf_tokenizer
    from ptxbench.agent.export.tokens import TokenizerUnavailable

    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(hf_tokenizer, "PROBE_TIMEOUT_S", 0.5)
        start = time.monotonic()
        with pytest.raises(TokenizerUnavailable, match="cannot be reached .*timed out.*--tokenizer estimate"):
            hub("hf:acme/tiny")
    assert time.monotonic() - start < 3
    assert FakeAutoTokenizer.calls == [{"local_files_only": True}]


def test_a_hub_that_answers_at_all_counts_as_reachable(monkeypatch):
    """Any HTTP status means a network: the download goes ahead and says itself what is wrong (a gated repo)."""
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from threading import Thread

    from ptxbench.agent.export.hf_tokenizer import hub_unreachable

    answered: list[str] = []

    class NotFound(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, format, *args):  # kept off the test's output, and asked below
            answered.append(format % args)

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = HTTPServer(("127.0.0.1", 0), NotFound)
    serving = Thread(target=server.handle_request, daemon=True)
    serving.start()
    try:
        assert hub_unreachable(f"http://127.0.0.1:{server.server_address[1]}") is None
        serving.join(10)
    finally:
        server.server_close()
    assert len(answered) == 1 and '"HEAD ' in answered[0] and " 404 " in answered[0], answered  # the probe was answered


@pytest.mark.skipif(importlib.util.find_spec("litellm") is None,  # its copy is read, litellm never imported
                    reason="the encoding files come with litellm (the `llm` extra), which is not installed")
def test_a_tiktoken_encoding_litellm_carries_is_read_with_no_download_tried(monkeypatch, tmp_path):
    """tiktoken's download has no timeout: behind a proxy that never answers, `--tokenizer tiktoken:o200k_base`
    waited for ever before the copy litellm carries was read."""
    tiktoken = pytest.importorskip("tiktoken")
    import tiktoken.load
    import tiktoken.registry

    from ptxbench.agent.export.tokens import counter

    asked = []

    def silent_proxy(url):
        asked.append(url)
        raise ConnectionError(f"{url}: timed out")

    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(tiktoken.load, "read_file", silent_proxy)
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "o200k_base", raising=False)
    counter.cache_clear()
    try:
        assert counter("tiktoken:o200k_base")("hello world") == 2
    finally:
        counter.cache_clear()
    assert asked == [] and tiktoken.load.read_file is silent_proxy


# The real hub and transformers, the hub's address a closed port: before, each file was retried with back-off
# (1 + 2 + 4 + 8 + 8 s) and a screen of warnings, about 50 s for a miss and as long before a cached copy was used.
REAL_HUB = """
import sys, time
from ptxbench.agent.export.tokens import TokenizerUnavailable, counter
start = time.monotonic()
try:
    print("COUNT", counter(sys.argv[1])("hello hello world"))
except TokenizerUnavailable as exc:
    print("UNAVAILABLE", exc)
print("SECONDS", time.monotonic() - start)
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_real_hub(tmp_path, spec):
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and k not in ("HF_HUB_OFFLINE",
                                                                                           "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    try:
        done = subprocess.run([sys.executable, "-c", REAL_HUB, spec], env=env, capture_output=True, text=True,
                              timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{spec} took over 40 s with the hub out of reach")
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return lines, done.stderr


def test_with_the_real_hub_out_of_reach_a_miss_is_one_line_in_seconds(tmp_path):
    pytest.importorskip("transformers")
    lines, stderr = _run_real_hub(tmp_path, "hf:acme/tiny")
    assert "not in the hub's cache" in lines.get("UNAVAILABLE", ""), (lines, stderr)
    assert float(lines["SECONDS"]) < 20 and "Retrying" not in stderr, stderr


def test_with_the_real_hub_out_of_reach_its_cache_is_used_at_once(tmp_path):
    pytest.importorskip("transformers")
    from tiny_lm import build_tokenizer

    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    commit = "0" * 40
    tok = build_tokenizer(repo / "snapshots" / commit, ["hello world"] * 8)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / ".no_exist" / commit).mkdir(parents=True)  # as the hub records a tokenizer-only repo: no config.json
    (repo / ".no_exist" / commit / "config.json").touch()
    lines, stderr = _run_real_hub(tmp_path, "hf:acme/tiny")
    assert lines.get("COUNT") == str(len(tok("hello hello world", add_special_tokens=False)["input_ids"])), (lines,
                                                                                                             stderr)
    assert float(lines["SECONDS"]) < 20 and "Retrying" not in stderr, stderr
