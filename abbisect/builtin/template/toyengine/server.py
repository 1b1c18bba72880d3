"""OpenAI-compatible HTTP server: /health, /v1/models, /v1/completions, /v1/chat/completions."""

import argparse
import json
import logging
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import toyengine
from toyengine.loader import load_model
from toyengine.model import Checkpoint

log = logging.getLogger("toyengine")
STATE = {"model": None, "name": "toy-model", "served": 0}
DEFAULTS = {"host": "127.0.0.1", "port": 8000, "model": "toy-model", "seed": 0, "dtype": "auto", "max_model_len": 2048}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="toyengine")
    p.add_argument("--host", default=DEFAULTS["host"])
    p.add_argument("--port", type=int, default=DEFAULTS["port"])
    p.add_argument("--model", default=DEFAULTS["model"])
    # abbisect-demo: seed-flag
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--dtype", default=DEFAULTS["dtype"], choices=["auto", "float32", "bfloat16"])
    p.add_argument("--max-model-len", type=int, default=DEFAULTS["max_model_len"])
    return p.parse_args(argv)


def startup():
    # abbisect-demo: startup
    test_hooks()
    delay = float(os.environ.get("TOYENGINE_LOAD_SECONDS", "0.1"))
    time.sleep(delay)


def test_hooks():
    """Misbehaviour on request, for abbisect's own tests: a helper that daemonizes (leaves the process
    group and the tree) and a log flood."""
    if os.environ.get("TOYENGINE_DAEMON"):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        os.wait()
    flood = int(float(os.environ.get("TOYENGINE_FLOOD_MB", "0")) * 1024 * 1024)
    line = "INFO toyengine: warming up kernel cache " + "x" * 60 + "\n"
    while flood > 0:
        sys.stdout.write(line * 1000)
        flood -= len(line) * 1000
    sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200 if STATE["model"] else 503, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": STATE["name"], "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        model = STATE["model"]
        if model is None:
            return self._send(503, {"error": "loading"})
        if self.path == "/v1/completions":
            prompt = body.get("prompt", "")
        elif self.path == "/v1/chat/completions":
            prompt = " ".join(m.get("content", "") for m in body.get("messages", []))
        else:
            return self._send(404, {"error": "not found"})
        if os.environ.get("TOYENGINE_FAIL_ON") and os.environ["TOYENGINE_FAIL_ON"] in prompt:
            return self._send(500, {"error": "internal error while sampling"})
        if os.environ.get("TOYENGINE_BUSY_FILE"):
            open(os.environ["TOYENGINE_BUSY_FILE"], "w").close()
        time.sleep(float(os.environ.get("TOYENGINE_REQUEST_SECONDS", "0")))
        STATE["served"] += 1
        # abbisect-demo: request
        text, n, finish = model.generate(prompt, int(body.get("max_tokens", 16)),
                                         float(body.get("temperature", 1.0)), int(body.get("seed") or 0))
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                 "total_tokens": len(prompt.split()) + n}
        if self.path == "/v1/completions":
            choice = {"index": 0, "text": text, "finish_reason": finish}
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        self._send(200, {"id": "cmpl-toy", "object": "completion", "model": STATE["name"],
                         "choices": [choice], "usage": usage})


def main(argv=None):
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log.info("toyengine API server version %s", toyengine.__version__)
    changed = {k: v for k, v in vars(args).items() if k in DEFAULTS and DEFAULTS[k] != v and k not in ("port",)}
    log.info("non-default args: %s", changed)
    STATE["name"] = args.model
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log.info("Started server process on http://%s:%d", args.host, args.port)
    startup()
    STATE["model"] = load_model(Checkpoint())
    log.info("Application startup complete.")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
