"""An OpenAI-compatible server (stdlib only) that answers with text the prompt asks for, for report tests.

"ECHO: text" answers text; "LONG: n" answers n characters of varied words; "BIG: n" answers n MB.
"HUGE: n" streams an answer of n MB without holding it (the server stays small); "TRICKLE: n" sends headers
that promise a large body, then one byte a second for n seconds.
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


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {})
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
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        prompt = " ".join(m.get("content", "") for m in body.get("messages", []))
        kind, _, arg = prompt.partition(": ")
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
