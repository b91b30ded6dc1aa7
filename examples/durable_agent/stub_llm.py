"""A deterministic OpenAI-compatible chat endpoint on 127.0.0.1: the example agent's LLM.

The answer depends only on how many tool results the conversation holds: none, a call of
``Lookup``; one, a call of ``WriteNote``; more, the final answer — and a request for
structured output (``response_format``) gets ``{"summary": "noted"}``. One tool per turn keeps
the order of the agent's ``run_tool`` activities fixed, so a crash point can name one. Each answer
reports token usage. ``calls`` counts the requests, so a test sees what a crash cost in
LLM calls. ``delay`` makes each answer take that many seconds, as a real model's would
(the benchmark runs it at 0 and 0.2). No network beyond loopback.
``python stub_llm.py [PORT]`` serves until interrupted and prints its base URL.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from typing import Any

__all__ = ["StubLLM"]


class StubLLM:
    """``with StubLLM() as llm:`` serves until the block ends; ``llm.url`` is its base."""

    TOOL_TURNS = (("call_lookup", "Lookup", {"topic": "notes"}),
                  ("call_write", "WriteNote", {"text": "hello"}))

    def __init__(self, *, port: int = 0, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self._lock = threading.Lock()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if stub.delay:
                    time.sleep(stub.delay)
                data = json.dumps(stub.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/v1"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            n = self.calls
        results = sum(m.get("role") == "tool" for m in body.get("messages", []))
        if "response_format" in body:  # structured output (dapr-agents' summary)
            message = {"role": "assistant", "content": json.dumps({"summary": "noted"})}
            finish = "stop"
        elif results < len(self.TOOL_TURNS):
            call_id, name, args = self.TOOL_TURNS[results]
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "noted"}, "stop"
        return {"id": f"chat-{n}", "object": "chat.completion", "created": 0,
                "model": "stub-1",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

    def __enter__(self) -> StubLLM:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    with StubLLM(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0) as served:
        print(served.url, flush=True)
        threading.Event().wait()
