"""A small real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions API, for agent tests.

It answers POST /v1/chat/completions (non-streaming) from a script, so the real litellm path is
exercised end to end. Script items (one per request, in order; `default` answers once it runs out):

    {"content": "...", "reasoning_content": "...", "tool_calls": [{"name": "compile", "arguments": {...}}]}
    {"content": "...", "finish_reason": "length"}    a reply the server cut (max_tokens reached)
    {"status": 429}  or  {"status": 500}            an error reply (rate limit, server error)
    {"status": 429, "retry_after": 3}               the same with a Retry-After header (seconds)
    {"hang": True}                                  hold the request until the server stops (a run killed in flight)
    {"raw": {...}}                                  this body as the 200 answer, as it is (a hostile or broken server)

`port` fixes the port (0: any free one), so a provider can go down and come back where a recorded run expects it.
`requests` keeps every request body received (errors included), so tests count model calls.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class ScriptedServer:
    def __init__(self, script: list[dict[str, Any]] | None = None,
                 default: dict[str, Any] | Callable[[dict], dict[str, Any]] | None = None, port: int = 0):
        self.port = port  # 0: any free port; a fixed one plays a provider coming back where it was
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.request_seen = threading.Condition(self.lock)
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "ScriptedServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                """Silent: keeps test output clean."""

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                item = server._next(body)
                if item.get("hang"):
                    server.stopping.wait(120)
                    return
                if "raw" in item:
                    self._send(200, item["raw"])
                    return
                if "status" in item:
                    headers = {"Retry-After": str(item["retry_after"])} if "retry_after" in item else {}
                    self._send(item["status"], {"error": {"message": item.get("message", "scripted error"),
                                                          "type": "rate_limit_error" if item["status"] == 429 else "server_error"}},
                               headers)
                    return
                self._send(200, server._completion(body, item))

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    # -- script ------------------------------------------------------------------------------
    def _next(self, body: dict) -> dict[str, Any]:
        with self.lock:
            self.requests.append(body)
            self.request_seen.notify_all()
            if self.script:
                return self.script.pop(0)
        if callable(self.default):
            return self.default(body)
        return self.default or {"content": ""}

    def wait_for_requests(self, n: int, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.request_seen.wait(left)
        return True

    def _completion(self, body: dict, item: dict[str, Any]) -> dict[str, Any]:
        n = len(self.requests)
        message: dict[str, Any] = {"role": "assistant", "content": item.get("content")}
        if item.get("reasoning_content"):
            message["reasoning_content"] = item["reasoning_content"]
        if item.get("refusal"):  # OpenAI's structured refusal: content null, the text here
            message["refusal"] = item["refusal"]
        calls = item.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                              else json.dumps(c["arguments"])}}
                for i, c in enumerate(calls)]
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
        completion_tokens = len(item.get("content") or "") // 4 + 10
        return {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": item.get("finish_reason") or ("tool_calls" if calls else "stop")}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
