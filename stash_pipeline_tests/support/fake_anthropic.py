"""A local stand-in for the Anthropic Messages API: scripted responses, recorded requests."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tool_use_message(tool_input: dict[str, Any], name: str = "record_preferences") -> dict:
    return {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_fake", "name": name, "input": tool_input}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 50},
    }


def text_message(text: str) -> dict:
    return {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 5},
    }


def error_body(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


class FakeAnthropic:
    """Answers POST /v1/messages with the next scripted (status, body); records each request."""

    def __init__(self):
        self.responses: deque[tuple[int, dict | bytes]] = deque()
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.split("?")[0] != "/v1/messages":
                    return self._send(404, error_body("not_found_error", self.path))
                fake.requests.append(json.loads(body))
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if not fake.responses:
                    return self._send(500, error_body("api_error", "no scripted response left"))
                self._send(*fake.responses.popleft())

            def _send(self, status: int, payload: dict | bytes):
                # Bytes go out as they are: a provider answering garbage.
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{len(fake.requests)}")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    def reply(self, status: int, body: dict | bytes) -> None:
        self.responses.append((status, body))

    def reply_tool(self, tool_input: dict[str, Any]) -> None:
        self.reply(200, tool_use_message(tool_input))

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
