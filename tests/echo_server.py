"""An OpenAI-compatible server (stdlib only) that answers with text the prompt asks for, for report tests.

"ECHO: text" answers text; "LONG: n" answers n characters of varied words; "BIG: n" answers n MB.
"HUGE: n" streams an answer of n MB without holding it (the server stays small); "TRICKLE: n" sends headers
that promise a large body, then one byte a second for n seconds.

Failures, for the eval tests: "FAIL: n" answers HTTP 500; "SLEEP: s" waits s seconds before answering s
(past a request timeout); "DROP: x" closes the connection without a response; "ABORT: x" answers 200 with an
empty text and finish_reason "abort" (a request the engine dropped). "SLOW: s" answers s after s seconds;
GET /stats says how many chat requests were in flight at most.
"""

import argparse
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["river", "stone", "lamp", "copper", "orbit", "violet", "maple", "signal", "harbor", "candle", "quartz", "meadow", "falcon", "ember", "lattice", "pepper", "tundra", "saddle", "beacon", "walnut"]


def answer(prompt: str) -> str:
    kind, _, arg = prompt.partition(": ")
    if kind == "LONG":
        rng = random.Random(arg)
        out, size = [], 0
        while size < int(arg):
            w = rng.choice(WORDS)
            out.append(w)
            size += len(w) + 1
        return " ".join(out)[: int(arg)]
    if kind == "BIG":
        rng = random.Random(0)
        block = " ".join(rng.choice(WORDS) for _ in range(200_000))
        return (block * (int(arg) * 1_000_000 // len(block) + 1))[: int(arg) * 1_000_000]
    return arg if kind == "ECHO" else prompt


FLIGHT = {"now": 0, "peak": 0}
FLIGHT_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def _done(self):
        """Out of flight once the answer is ready: counted before it is written, so a client's next request
        (on a new connection) never overlaps this thread's last steps."""
        if getattr(self, "_flying", False):
            self._flying = False
            with FLIGHT_LOCK:
                FLIGHT["now"] -= 1

    def _send(self, code, body):
        self._done()
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/stats":
            self._send(200, {"peak_in_flight": FLIGHT["peak"]})
        else:
            self._send(200, {"object": "list", "data": [{"id": "echo", "object": "model"}]})

    def _stream(self, parts, length):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        try:
            for part in parts:
                self.wfile.write(part)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as it should
            pass

    def _huge(self, megabytes):
        head = b'{"id": "echo", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": ' \
               b'"assistant", "content": "'
        tail = b'"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
        block = b"river stone lamp copper orbit " * 34_953  # about 1 MB
        self._stream([head, *[block] * megabytes, tail], len(head) + len(block) * megabytes + len(tail))

    def _trickle(self, seconds):
        def bytes_():
            for _ in range(seconds):
                yield b" "
                time.sleep(1.0)
        self._stream(bytes_(), 1_000_000)

    def do_POST(self):
        with FLIGHT_LOCK:
            FLIGHT["now"] += 1
            FLIGHT["peak"] = max(FLIGHT["peak"], FLIGHT["now"])
        self._flying = True
        try:
            self._post()
        finally:
            self._done()

    def _post(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        prompt = " ".join(m.get("content", "") for m in body.get("messages", []))
        kind, _, arg = prompt.partition(": ")
        if kind == "FAIL":
            self._send(500, {"error": "internal error while sampling"})
            return
        if kind == "DROP":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if kind in ("SLEEP", "SLOW"):
            time.sleep(float(arg))
            prompt = f"ECHO: {arg}"
        if kind == "ABORT":
            choice = {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "abort"}
            self._send(200, {"id": "echo", "object": "chat.completion", "choices": [choice], "usage": {}})
            return
        if kind in ("HUGE", "TRICKLE"):
            (self._huge if kind == "HUGE" else self._trickle)(int(arg))
            return
        text = answer(prompt)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        self._send(200, {"id": "echo", "object": "chat.completion", "choices": [choice],
                         "usage": {"prompt_tokens": 1, "completion_tokens": len(text.split())}})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    args, _ = p.parse_known_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print("echo server version 1.0 ready", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
