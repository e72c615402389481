"""A model call that cannot connect at all (agent/models/reach.py): on a machine without a network a hosted model's
first call was retried for about 75 s as a transient failure, then stopped on "Connection error.". Such a first call
now stops in seconds, not retried, in one line naming the host, or the proxy and the variable naming it; a host that
answered before, or an attempt after one that reached something, is still retried. Nothing here leaves this machine:
the names end in .invalid (never resolved, RFC 6761), the ports and proxies are closed local ones."""
from __future__ import annotations

import socket
import socketserver
import threading
import time
from contextlib import contextmanager

import pytest

from agent_helpers import offline_without_proxies
from openai_server import ScriptedServer
from ptxbench.agent.models.base import ModelRequest, ModelUnavailable
from ptxbench.agent.models.litellm_model import LiteLLMModel, _litellm

GOOD = {"content": "hello"}


@pytest.fixture(autouse=True)
def _no_proxy_and_a_key(monkeypatch):
    offline_without_proxies(monkeypatch)
    _litellm()  # imported before any clock starts


def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_line(model: LiteLLMModel) -> tuple[str, float, list]:
    """(the ModelUnavailable's line, the seconds it took, the back-offs reported) for one call."""
    retries: list = []
    model.on_retry = lambda *args: retries.append(args)
    start = time.monotonic()
    with pytest.raises(ModelUnavailable) as stopped:
        model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}], turn=1))
    return str(stopped.value), time.monotonic() - start, retries


def test_a_host_whose_name_does_not_resolve_stops_at_once_naming_it():
    line, seconds, retries = stop_line(LiteLLMModel("openai/m", api_base="http://x.invalid/v1"))
    assert line.startswith("cannot reach x.invalid (its name does not resolve; no proxy set: $HTTP_PROXY or "
                           "$ALL_PROXY unset): not retried; is this machine online"), line
    assert not retries and seconds < 5 and "\n" not in line


def test_a_refused_local_port_stops_at_once_naming_it():
    line, seconds, retries = stop_line(LiteLLMModel("openai/m", api_base=f"http://127.0.0.1:{closed_port()}/v1"))
    assert line.startswith("cannot reach 127.0.0.1 (connection refused; no proxy set"), line
    assert "is the server running" in line and not retries and seconds < 5


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy"])
def test_a_hosted_model_behind_a_proxy_out_of_reach_names_the_proxy_and_its_variable(monkeypatch, variable):
    """No --api-base: litellm calls api.openai.com, which only the proxy could reach; the proxy refuses. Its user and
    password stay out of the line."""
    port = closed_port()
    monkeypatch.setenv(variable, f"http://someone:secret@127.0.0.1:{port}")
    line, seconds, retries = stop_line(LiteLLMModel("openai/gpt-4o"))
    assert line.startswith(f"cannot reach the proxy 127.0.0.1:{port} that ${variable} names, to call api.openai.com "
                           "(connection refused): not retried"), line
    assert "secret" not in line and "someone" not in line and not retries and seconds < 5


def test_a_proxy_whose_name_does_not_resolve_is_named(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    line, _, retries = stop_line(LiteLLMModel("openai/m", api_base="http://x.invalid/v1"))
    assert line.startswith("cannot reach the proxy proxy.invalid:3128 that $HTTP_PROXY names, to call x.invalid (its "
                           "name does not resolve)"), line
    assert not retries


def test_a_host_no_proxy_leaves_out_is_said_to_be_called_directly(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("no_proxy", "localhost,.invalid")
    line, _, retries = stop_line(LiteLLMModel("openai/m", api_base="http://x.invalid/v1"))
    assert line.startswith("cannot reach x.invalid (its name does not resolve; $no_proxy leaves it out of the "
                           "proxy)"), line
    assert not retries


@contextmanager
def gateway_down_proxy(status: str = "502 Bad Gateway"):
    """A proxy that is up but reaches nothing beyond it: every request it gets (a CONNECT, or a plain-HTTP request to
    forward) is answered with `status`. Yields its port, the request lines it read and each request's header lines."""
    seen: list[str] = []
    headers: list[list[str]] = []  # each request's header lines, read to its blank line
    clients = _litellm().in_memory_llm_clients_cache  # litellm keeps its clients, each with the proxy it was made with:
    clients.flush_cache()  # none made before this proxy, and none through it kept for later tests

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            seen.append(self.rfile.readline().decode().strip())
            headers.append([])
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                headers[-1].append(line.decode().strip())
            self.wfile.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as proxy:
        proxy.daemon_threads = True
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            yield proxy.server_address[1], seen, headers
        finally:
            proxy.shutdown()
            clients.flush_cache()


@pytest.mark.parametrize("status", ["502 Bad Gateway", "503 Service Unavailable"])
def test_a_proxy_that_refuses_the_tunnel_stops_at_once_naming_the_host_and_the_proxy(monkeypatch, status):
    """The proxy is up but its own network is not: it answers the CONNECT with a 5xx. No request reached the provider
    and no retry soon mends it; it was retried for about 75 s."""
    with gateway_down_proxy(status) as (port, seen, headers):
        monkeypatch.setenv("HTTPS_PROXY", f"http://someone:secret@127.0.0.1:{port}")
        line, seconds, retries = stop_line(LiteLLMModel("openai/gpt-4o"))
    assert seen == ["CONNECT api.openai.com:443 HTTP/1.1"], seen
    assert any(h.lower().startswith("proxy-authorization: basic ") for h in headers[0]), headers  # the URL's user
    assert line.startswith(f"the proxy 127.0.0.1:{port} that $HTTPS_PROXY names refused to open a connection to "
                           f"api.openai.com ({status}): not retried"), line
    assert "$NO_PROXY" in line and "secret" not in line and "\n" not in line
    assert not retries and seconds < 5


def test_a_5xx_answer_through_a_proxy_that_forwarded_the_request_is_still_retried(monkeypatch):
    """A plain-HTTP request goes through the proxy without a tunnel: its 502 is an answer to the request itself, as a
    provider's own 5xx is, and stays transient."""
    with gateway_down_proxy() as (port, seen, headers):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        line, _, retries = stop_line(LiteLLMModel("openai/m", api_base="http://x.invalid/v1", max_attempts=3,
                                                  retry_wait_s=0.01))
    assert len(seen) == 3 and seen[0].startswith("POST http://x.invalid/v1/chat/completions"), seen
    assert all("host: x.invalid" in [h.lower() for h in request] for request in headers), headers  # forwarded, whole
    assert len(retries) == 2 and "after 3 attempts" in line and "not retried" not in line, line


def test_a_host_that_answered_before_is_retried_when_it_goes_away():
    """A local server restarting mid-run (or a network blip once calls went through): retried, as any outage."""
    with ScriptedServer(default=GOOD) as server:
        model = LiteLLMModel("openai/m", api_base=server.base_url, max_attempts=3, retry_wait_s=0.01)
        assert model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}], turn=1)).content == "hello"
    line, _, retries = stop_line(model)
    assert len(retries) == 2 and "after 3 attempts" in line, line


def test_a_host_that_went_away_after_an_attempt_reached_it_is_retried():
    """The first attempt's 503 came from the server: a refusal on the next attempt is a restart, not a machine
    offline."""
    with ScriptedServer(script=[{"status": 503}], default=GOOD) as server:
        model = LiteLLMModel("openai/m", api_base=server.base_url, max_attempts=3, retry_wait_s=0.01)
        model.sleep = lambda seconds: server.__exit__(None, None, None)  # gone before the second attempt
        line, _, retries = stop_line(model)
    assert len(retries) == 2 and "after 3 attempts" in line and "not retried" not in line, line


def test_a_server_error_on_the_first_call_is_still_retried():
    with ScriptedServer(script=[{"status": 503}], default=GOOD) as server:
        model = LiteLLMModel("openai/m", api_base=server.base_url, max_attempts=3, retry_wait_s=0.01)
        reply = model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}], turn=1))
    assert reply.content == "hello" and reply.attempts == 2


def test_optimize_with_a_hosted_model_and_its_proxy_out_of_reach_stops_in_seconds(tmp_path, monkeypatch):
    """The whole run: an infra stop after one attempt, its line naming the proxy, and the --resume that goes on."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    port = closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    start = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--model", "openai/gpt-4o",
                                      "--no-gpu", "--turns", "1", "--run-dir", str(tmp_path / "run")])
    seconds = time.monotonic() - start
    text = " ".join(result.output.split())
    assert f"stop: infra_error (cannot reach the proxy 127.0.0.1:{port} that $HTTPS_PROXY names, to call " \
           "api.openai.com (connection refused): not retried" in text, result.output
    assert "attempt 1/6 failed" not in text and "ptxbench optimize --resume" in text and seconds < 15
