"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1: the framework examples' LLM.

Every framework example (``examples/frameworks/<framework>/``) books a trip with the same
script, so their ledgers compare row for row. The answer depends only on how many
tool-call turns the conversation already holds (assistant messages with ``tool_calls``):
the first asks for ``search_flights``, the second for ``book_flight`` and ``book_hotel``
at once (two tool calls in one answer: frameworks run them in parallel), the third for
``book_hotel`` again (the first asks for 0 nights, which every example's ``book_hotel``
refuses by raising: a failure that depends only on the workflow's own inputs, so every run
and every re-delivery of a crash meets it alike), then the final answer; a
structured-output request (``response_format``) gets ``{"summary": "booked"}``. Usage
grows with the prompt, as a provider's would, and ``log`` keeps each request's (turn,
total tokens), so a test compares the ledger's token counts with the provider's own bill.
No network beyond loopback.

``python -m examples.frameworks.stub_llm [PORT]`` serves until interrupted and prints its
base URL (``--steps N``: a script of N single ``report`` calls instead, the seed's 100-step
agent).
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from typing import Any

__all__ = ["TRAVEL", "ScriptedLLM", "steps_script"]

Turn = tuple[tuple[str, str, dict[str, Any]], ...]
"""One answer's tool calls: (call id, tool name, arguments) each."""

TRAVEL: tuple[Turn, ...] = (
    (("call_search", "search_flights", {"city": "Lisbon"}),),
    (("call_flight", "book_flight", {"flight": "LH-1"}),
     ("call_hotel", "book_hotel", {"city": "Lisbon", "nights": 0})),
    (("call_hotel_2", "book_hotel", {"city": "Lisbon", "nights": 2}),),
)


def steps_script(n: int) -> tuple[Turn, ...]:
    """``n`` turns of one ``report`` call each: the seed's 100-step agent."""
    return tuple(((f"call_step_{i}", "report", {"step": i}),) for i in range(1, n + 1))


class ScriptedLLM:
    """``with ScriptedLLM() as llm:`` serves until the block ends; ``llm.url`` is its
    base URL (``/v1``); ``llm.calls`` and ``llm.log`` count what it answered."""

    def __init__(self, script: tuple[Turn, ...] = TRAVEL, *, port: int = 0,
                 model: str = "stub-travel") -> None:
        self.script = script
        self.model = model
        self.calls = 0
        self.log: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                data = json.dumps(stub.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/v1"

    @property
    def tokens(self) -> int:
        """Every token billed so far."""
        with self._lock:
            return sum(t for _, t in self.log)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        message: dict[str, Any]
        if "response_format" in body:
            kind, message = "summary", {"role": "assistant",
                                        "content": json.dumps({"summary": "booked"})}
        elif turn < len(self.script):
            kind = f"turn {turn}"
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args in self.script[turn]]}
        else:
            kind, message = "answer", {"role": "assistant", "content": "booked"}
        prompt = 10 * len(messages) + 3
        completion = 5
        with self._lock:
            self.calls += 1
            self.log.append((kind, prompt + completion))
            n = self.calls
        return {"id": f"chat-{n}", "object": "chat.completion", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls")
                             else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}

    def __enter__(self) -> ScriptedLLM:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    args = sys.argv[1:]
    script = TRAVEL
    if args[:1] == ["--steps"]:
        script, args = steps_script(int(args[1])), args[2:]
    with ScriptedLLM(script, port=int(args[0]) if args else 0) as served:
        print(served.url, flush=True)
        threading.Event().wait()
