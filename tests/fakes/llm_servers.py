"""Local HTTP servers that speak the Gemini REST API and the OpenAI chat-completions API (127.0.0.1 only).

The real google-genai and openai client libraries talk to them; each request is recorded (path, headers,
JSON body, the prompt text, whether a JSON reply was asked for) and answered from a script of `Reply`s,
then from a `responder(request) -> Reply` function. A reply can be an HTTP error (429, 500), malformed
text, or slow (to make the client time out). Servers stop on exit and refuse to serve more than
`max_requests` requests, so a runaway test ends.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Literal


@dataclass
class Reply:
    text: str = ""                 # the model's text (JSON or prose with code)
    status: int = 200
    delay: float = 0.0             # seconds before answering
    tokens: tuple[int, int] = (120, 80)


@dataclass
class Request:
    path: str
    headers: dict
    body: dict
    prompt: str
    system: str
    wants_json: bool
    schema: dict | None = None


@dataclass
class FakeLLMServer:
    api: Literal["gemini", "openai"]
    script: list[Reply] = field(default_factory=list)
    responder: Callable[[Request], Reply] | None = None
    max_requests: int = 200
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._stopping = threading.Event()

    # -- lifecycle
    def __enter__(self) -> "FakeLLMServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                req = server._parse(self.path, dict(self.headers), body)
                reply = server._next(req)
                end = time.monotonic() + reply.delay
                while time.monotonic() < end and not server._stopping.is_set():
                    time.sleep(0.02)
                status, payload = server._payload(reply, body)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        base = f"http://{host}:{port}"
        return base + "/v1" if self.api == "openai" else base

    # -- protocol
    def _parse(self, path: str, headers: dict, body: dict) -> Request:
        if self.api == "gemini":
            prompt = "\n".join(p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", []))
            system = "\n".join(p.get("text", "") for p in (body.get("systemInstruction") or {}).get("parts", []))
            gc = body.get("generationConfig") or {}
            schema = gc.get("responseSchema") or gc.get("responseJsonSchema")
            wants = gc.get("responseMimeType") == "application/json"
        else:
            msgs = body.get("messages", [])
            prompt = "\n".join(m.get("content", "") for m in msgs if m.get("role") == "user")
            system = "\n".join(m.get("content", "") for m in msgs if m.get("role") == "system")
            rf = body.get("response_format") or {}
            schema = (rf.get("json_schema") or {}).get("schema")
            wants = bool(rf)
        return Request(path=path, headers={k.lower(): v for k, v in headers.items()}, body=body, prompt=prompt,
                       system=system, wants_json=wants, schema=schema)

    def _next(self, req: Request) -> Reply:
        with self._lock:
            self.requests.append(req)
            if len(self.requests) > self.max_requests:
                return Reply(status=500, text="too many requests for this test server")
            if self.script:
                return self.script.pop(0)
        if self.responder is not None:
            return self.responder(req)
        return Reply(status=500, text="no scripted reply left")

    def _payload(self, r: Reply, body: dict) -> tuple[int, dict]:
        if r.status != 200:
            if self.api == "gemini":
                names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 400: "INVALID_ARGUMENT"}
                return r.status, {"error": {"code": r.status, "message": r.text or "error",
                                            "status": names.get(r.status, "UNKNOWN")}}
            return r.status, {"error": {"message": r.text or "error", "type": "server_error", "code": None}}
        a, b = r.tokens
        if self.api == "gemini":
            return 200, {"candidates": [{"content": {"role": "model", "parts": [{"text": r.text}]},
                                         "finishReason": "STOP", "index": 0}],
                         "usageMetadata": {"promptTokenCount": a, "candidatesTokenCount": b, "totalTokenCount": a + b},
                         "modelVersion": "fake"}
        return 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                     "model": body.get("model", "fake"),
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": a, "completion_tokens": b, "total_tokens": a + b}}
