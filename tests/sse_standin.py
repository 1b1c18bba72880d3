"""A stand-in OpenAI-compatible streaming server (stdlib only) with known timings, for the load generator's tests.

Each answer streams `tokens` content chunks (default: the body's max_tokens) as server-sent events in
chunked transfer encoding, as vLLM and SGLang do: for chat a role-only chunk at once, then `first_sleep`
before the first content chunk, `token_sleep` between content chunks, a finish chunk, a usage chunk (when
the body asks for it and `usage` is on), `data: [DONE]`.

Prompts steer failures: one containing FAIL is answered HTTP 500; BREAK closes the connection after two
content chunks; ERROR sends an error event (OLDERROR in the older flat shape); GARBAGE an event that is not JSON; NODONE ends the body in
good order but without `data: [DONE]`; TRICKLE sends one byte every `trickle_s` for `trickle_for`
seconds (never a whole event, so only a whole-request deadline ends it).

Every body, its arrival time and the time its answer was written in full (time.perf_counter, the client's
clock: the server runs in the test's process), the most requests open at once and the trickles the client
gave up on are recorded: events the tests order against the client's own records.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    first_sleep: float = 0.0
    token_sleep: float = 0.0
    tokens: int | None = None
    tokens_per_chunk: int = 1  # what the usage chunk counts for each content chunk
    usage: bool = True
    piece: str = "tok "
    trickle_s: float = 0.05
    trickle_for: float = 20.0
    # Answer nothing until this many requests are open (at most 10 s): whether a client sends later requests
    # before earlier ones end is then an event, whatever the machine's load.
    gate: int = 0


@dataclass
class Seen:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    ends: dict[int, float] = field(default_factory=dict)  # body index → just before its answer's last bytes were written
    trickles_cut: int = 0  # TRICKLE answers the client closed before the trickle was over
    open_now: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(default_factory=threading.Condition)


def _prompt(body: dict[str, Any]) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"])
    return str(body.get("prompt", ""))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event leaves at once, not after a delayed ACK
    behaviour: Behaviour
    seen: Seen

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _event(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {text}\n\n".encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with self.seen.lock:
            self.seen.bodies.append(body)
            self.seen.paths.append(self.path)
            self.seen.arrivals.append(time.perf_counter())
            number = len(self.seen.bodies) - 1
            self.seen.open_now += 1
            self.seen.peak = max(self.seen.peak, self.seen.open_now)
        with self.seen.arrived:
            self.seen.arrived.notify_all()
            self.seen.arrived.wait_for(lambda: self.seen.open_now >= self.behaviour.gate, timeout=10)
        self.number = number
        try:
            self._answer(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            if "TRICKLE" in _prompt(body):
                with self.seen.lock:
                    self.seen.trickles_cut += 1
        finally:
            with self.seen.lock:
                self.seen.open_now -= 1

    def _ending(self) -> None:
        """Noted before the answer's last bytes are written: the client cannot have read them earlier."""
        with self.seen.lock:
            self.seen.ends[self.number] = time.perf_counter()

    def _answer(self, body: dict[str, Any]) -> None:
        b, prompt, chat = self.behaviour, _prompt(body), self.path.endswith("/chat/completions")
        if "FAIL" in prompt:
            data = json.dumps({"error": {"message": "stand-in failure", "code": 500}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._ending()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def choice(text: str | None, finish: str | None = None) -> dict[str, Any]:
            if chat:
                return {"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}
            return {"index": 0, "text": text or "", "finish_reason": finish}

        kind = "chat.completion.chunk" if chat else "text_completion"
        if chat:
            self._event({"object": kind, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "finish_reason": None}]})
        if "TRICKLE" in prompt:
            end = time.monotonic() + b.trickle_for
            while time.monotonic() < end:
                self._chunk(b":")
                time.sleep(b.trickle_s)
            self.close_connection = True
            return
        n = b.tokens if b.tokens is not None else int(body.get("max_tokens", 16))
        time.sleep(b.first_sleep)
        for i in range(n):
            if i:
                time.sleep(b.token_sleep)
            self._event({"object": kind, "choices": [choice(b.piece)]})
            if "BREAK" in prompt and i == 1:
                self.close_connection = True  # no terminating chunk: the body is cut short
                return
            if "GARBAGE" in prompt and i == 1:
                self._event("this is not json")
            if "OLDERROR" in prompt and i == 1:
                self._event({"object": "error", "message": "stand-in error mid-stream", "code": 500})
                break
            if "ERROR" in prompt and i == 1:
                self._event({"error": {"message": "stand-in error mid-stream", "code": 500}})
                break
        self._event({"object": kind, "choices": [choice(None, "length")]})
        if b.usage and (body.get("stream_options") or {}).get("include_usage"):
            self._event({"object": kind, "choices": [],
                         "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": n * b.tokens_per_chunk,
                                   "total_tokens": len(prompt.split()) + n * b.tokens_per_chunk}})
        self._ending()
        if "NODONE" not in prompt:
            self._event("[DONE]")
        self._chunk(b"")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's backlog of 5 drops the SYNs of a burst of connections, which are sent again a second
    # later: real servers listen with a backlog in the thousands.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # the client closing a kept-alive connection at the end of a pass is no error of the server's
        pass


class StandIn:
    """The server on a free loopback port, served from a daemon thread until `close()`."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.seen = Seen()
        handler = type("Handler", (_Handler,), {"behaviour": behaviour, "seen": self.seen})
        self._server = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
