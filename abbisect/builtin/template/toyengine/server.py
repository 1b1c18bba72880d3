"""OpenAI-compatible HTTP server: /health, /v1/models, /v1/completions, /v1/chat/completions.

HTTP/1.1 with kept-alive connections, as vLLM's and SGLang's servers speak it: a request with "stream": true
gets server-sent events in a chunked body, one per generated token; the connection then waits for the client's
next request (or its close). "ignore_eos" (or "min_tokens") keeps the model generating to max_tokens.
Log-probabilities as the engines serve them (not streamed): completions' "logprobs": k (with "echo": the
prompt's own tokens first, the first without one; "max_tokens": 0 then scores the prompt alone) and vLLM's
"prompt_logprobs"; chat's "logprobs": true with "top_logprobs": k. TOYENGINE_LOGPROB_NOISE (0 by default) adds
N(0, that) to every log-probability returned, drawn afresh each time: an engine whose numerics are not
deterministic. An
exception in a request's handler is printed with its traceback (socketserver's own), as a real server logs one.
Pacing, read from the environment at start (each
0 by default, as fast as the machine goes): TOYENGINE_PREFILL_SECONDS before a request's first token,
TOYENGINE_TOKEN_SECONDS per token, both times a request's log-normal factor exp(N(0, TOYENGINE_NOISE_SIGMA)),
drawn from TOYENGINE_NOISE_SEED when set, else from os.urandom. The steps keep to a schedule from the
request's start, so a busy host delays a token without stretching the ones after it.
"""

import argparse
import json
import logging
import math
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import toyengine
from toyengine.loader import load_model
from toyengine.model import Checkpoint, collect, output_logprobs, prompt_logprobs

log = logging.getLogger("toyengine")
STATE = {"model": None, "name": "toy-model", "served": 0, "in_flight": 0}
LOCK = threading.Lock()
TIMING = {"prefill": 0.0, "token": 0.0, "sigma": 0.0}
NOISE = random.Random(0)
DRAW = random.SystemRandom()  # TOYENGINE_LOGPROB_NOISE's draws
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
    compile_kernels()
    delay = float(os.environ.get("TOYENGINE_LOAD_SECONDS", "0.1"))
    time.sleep(delay)


def compile_kernels():
    """An engine's JIT at start, in miniature: the model's kernels compiled once into Triton's cache folder
    (TRITON_CACHE_DIR, else ~/.triton/cache, as Triton's own default), keyed by the model code's bytes; a later
    start of the same code loads them instead. A compile takes TOYENGINE_COMPILE_SECONDS (0 by default)."""
    import hashlib

    import toyengine.model

    root = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    with open(toyengine.model.__file__, "rb") as fh:
        key = hashlib.sha256(fh.read()).hexdigest()[:16]
    path = os.path.join(root, key, "toy_kernels.json")
    if os.path.exists(path):
        log.info("kernel cache: loaded %s", key)
        return
    time.sleep(float(os.environ.get("TOYENGINE_COMPILE_SECONDS") or 0))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"key": key, "kernels": ["prefill", "decode"]}, fh)
    os.replace(tmp, path)
    log.info("kernel cache: compiled %s", key)


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


def set_timing(env):
    for key, var in (("prefill", "TOYENGINE_PREFILL_SECONDS"), ("token", "TOYENGINE_TOKEN_SECONDS"),
                     ("sigma", "TOYENGINE_NOISE_SIGMA")):
        TIMING[key] = float(env.get(var) or 0)
    seed = env.get("TOYENGINE_NOISE_SEED")
    NOISE.seed(int(seed) if seed else int.from_bytes(os.urandom(8), "big"))


SCHEDULE = threading.local()  # when the request being served is due to make its next step


def pause(seconds):
    """Wait out one step of the request's schedule: a wake-up that came late (a busy host) is taken off the
    next wait instead of being added to every later step, as a GPU's steps do not stretch with the host."""
    SCHEDULE.due = getattr(SCHEDULE, "due", time.monotonic()) + seconds
    wait = SCHEDULE.due - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def paced(model, prompt, max_tokens, temperature, seed, min_tokens):
    """The model's steps (piece, finish) at the configured pace, counted in flight while they are made."""
    with LOCK:
        factor = math.exp(NOISE.gauss(0.0, TIMING["sigma"])) if TIMING["sigma"] > 0 else 1.0
        STATE["in_flight"] += 1
    token_s = TIMING["token"] * factor
    SCHEDULE.due = time.monotonic()
    try:
        pause(TIMING["prefill"] * factor)
        steps = model.steps(prompt, max_tokens, temperature, seed, min_tokens)
        # abbisect-demo: batch
        for piece, finish in steps:
            pause(token_s * (2 if finish == "stop" else 1))  # a stop costs its EOS token's step too
            yield piece, finish
    finally:
        with LOCK:
            STATE["in_flight"] -= 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Each event leaves at once (TCP_NODELAY, as uvicorn sets it): on a kept-alive connection Nagle's algorithm
    # would hold a token's event until the client's delayed ACK of the one before, and the stream would come
    # in bursts (TTFT + 40 ms, ITL near 0).
    disable_nagle_algorithm = True

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
        max_tokens = int(body.get("max_tokens", 16))
        min_tokens = max_tokens if body.get("ignore_eos") else int(body.get("min_tokens") or 0)
        steps = paced(model, prompt, max_tokens, float(body.get("temperature", 1.0)), int(body.get("seed") or 0),
                      min_tokens)
        if body.get("stream"):
            return self._stream(steps, prompt, body.get("stream_options") or {})
        text, n, finish = collect(steps) if max_tokens > 0 else ("", 0, "length")
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                 "total_tokens": len(prompt.split()) + n}
        if self.path == "/v1/completions":
            choice = {"index": 0, "text": text, "finish_reason": finish}
            if body.get("logprobs") is not None:
                choice = completion_logprobs(model, prompt, choice, int(body["logprobs"]), bool(body.get("echo")))
            if body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = [None if lp is None else {
                    str(model.vocab.index(t) if t in model.vocab else -1): {"logprob": lp, "rank": 1, "decoded_token": t}
                } for t, lp, _ in noisy(prompt_logprobs(model, prompt, 0))]
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            if body.get("logprobs"):
                k = int(body.get("top_logprobs") or 0)
                choice["logprobs"] = {"content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()),
                     "top_logprobs": [{"token": u, "logprob": v, "bytes": list(u.encode())} for u, v in tops]}
                    for t, lp, tops in noisy(output_logprobs(model, prompt, text, k, finish == "stop"))]}
        self._send(200, {"id": "cmpl-toy", "object": "completion", "model": STATE["name"],
                         "choices": [choice], "usage": usage})

    def _stream(self, steps, prompt, options):
        """Server-sent events: a chunk per token (finish_reason on the last), usage if asked, [DONE], then the
        chunked body's end — after TOYENGINE_STREAM_END_SECONDS (0 by default), as an engine's response ends
        only once its generator is cleaned up, a moment after the last event."""
        chat = self.path == "/v1/chat/completions"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        head = {"id": "cmpl-toy", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": STATE["name"]}
        n, finish = 0, "length"
        try:
            for i, (piece, finish) in enumerate(steps):
                # abbisect-demo: stream
                n += 1 if piece else 0
                if chat:
                    delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                    choice = {"index": 0, "delta": delta, "finish_reason": finish}
                else:
                    choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish}
                self._event({**head, "choices": [choice]})
            if options.get("include_usage"):
                n += finish == "stop"
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                         "total_tokens": len(prompt.split()) + n}
                self._event({**head, "choices": [], "usage": usage})
            self._chunk(b"data: [DONE]\n\n")
            time.sleep(float(os.environ.get("TOYENGINE_STREAM_END_SECONDS") or 0))
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away during a stream")
            self.close_connection = True
        finally:
            steps.close()

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, obj):
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def noisy(rows):
    """(token, log-probability, top-k) rows with TOYENGINE_LOGPROB_NOISE's draw added to each log-probability."""
    sigma = float(os.environ.get("TOYENGINE_LOGPROB_NOISE") or 0)
    if not sigma:
        return rows
    with LOCK:
        return [(t, None if lp is None else lp + DRAW.gauss(0.0, sigma), tops) for t, lp, tops in rows]



def completion_logprobs(model, prompt, choice, k, echo):
    """A completion's OpenAI `logprobs` (tokens, token_logprobs, top_logprobs, text_offset): the generated tokens,
    after the prompt's own when `echo` (the first of which has none), and the text with the prompt before it."""
    rows = noisy((prompt_logprobs(model, prompt, k) if echo else [])
                 + output_logprobs(model, prompt, choice["text"], k, choice["finish_reason"] == "stop"))
    offsets, at = [], 0
    for t, _, _ in rows:
        offsets.append(at)
        at += len(t) + 1
    return {**choice, "text": (prompt + choice["text"]) if echo else choice["text"],
            "logprobs": {"tokens": [t for t, _, _ in rows], "token_logprobs": [lp for _, lp, _ in rows],
                         "top_logprobs": [None if tops is None else dict(tops) for _, _, tops in rows],
                         "text_offset": offsets}}


def main(argv=None):
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log.info("toyengine API server version %s", toyengine.__version__)
    changed = {k: v for k, v in vars(args).items() if k in DEFAULTS and DEFAULTS[k] != v and k not in ("port",)}
    log.info("non-default args: %s", changed)
    STATE["name"] = args.model
    set_timing(os.environ)
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
