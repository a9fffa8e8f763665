"""Shared fixtures: a session with every evalsql function, and a stub OpenAI-compatible
judge on loopback that injects rate limits and server errors (the Python counterpart of
tests/support/stub_judge/)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from datafusion import SessionContext

import evalsql

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ctx() -> SessionContext:
    ctx = SessionContext()
    evalsql.register(ctx)
    return ctx


class StubJudge:
    """Scores are a hash of the request's messages, within the rubric's range. A user
    message containing ``[[fault:429]]`` or ``[[fault:500]]`` fails its first attempt with
    that status; ``[[slow]]`` answers after ``slow_seconds``."""

    def __init__(self) -> None:
        self.requests = 0
        self.ok = 0
        self.seen: dict[str, int] = {}
        self.slow_seconds = 0.5
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                user = "\n".join(
                    m.get("content", "")
                    for m in body.get("messages", [])
                    if m.get("role") == "user" and isinstance(m.get("content"), str)
                )
                with stub.lock:
                    stub.requests += 1
                    attempt = stub.seen.get(user, 0)
                    stub.seen[user] = attempt + 1
                for code in (429, 500):
                    if f"[[fault:{code}]]" in user and attempt == 0:
                        self.send_response(code)
                        self.send_header("Retry-After", "0")
                        self.send_header("Content-Length", "2")
                        self.end_headers()
                        self.wfile.write(b"{}")
                        return
                if "[[slow]]" in user:
                    time.sleep(stub.slow_seconds)
                schema = (
                    body.get("response_format", {})
                    .get("json_schema", {})
                    .get("schema", {})
                    .get("properties", {})
                    .get("score", {})
                )
                lo = int(schema.get("minimum", 1))
                hi = int(schema.get("maximum", 5))
                whole = json.dumps(body.get("messages", []), sort_keys=True)
                h = int(hashlib.sha256(whole.encode()).hexdigest()[:8], 16)
                score = lo + h % (hi - lo + 1)
                content = json.dumps({"score": score, "reason": f"stub {h:08x}"})
                reply = {
                    "id": "chatcmpl-py-stub",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "stub"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112},
                }
                data = json.dumps(reply).encode()
                with stub.lock:
                    stub.ok += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def stub():
    s = StubJudge()
    yield s
    s.close()


@pytest.fixture
def judge_env(monkeypatch):
    # Keys come only from the environment; nothing of the developer's own may leak in.
    for var in list(os.environ):
        if var.startswith(("OPENAI_", "AZURE_OPENAI", "EVALSQL_JUDGE", "EVALSQL_TARGET")):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-python-test")
