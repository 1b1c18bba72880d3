"""A GPU-using stand-in for an engine server: a tiny torch model on cuda behind the OpenAI-compatible endpoints.

Used to check GPU hygiene without a real engine (tests/test_gpu_hygiene.py) and to bisect a history of it on one
GPU with slots that share it (docs/gpu/bisect_one_gpu_shared.sh). Usage:

    python gpu_fixture_server.py PORT [MIB_TO_HOLD]            holds MIB_TO_HOLD MiB (default 2048)
    python gpu_fixture_server.py PORT --share S [--cap-mib N]  holds min(S × the GPU's total, N MiB); S = 1 (a
                                                               whole GPU, as abbisect says it) holds N MiB

With --share it behaves as vLLM's --gpu-memory-utilization does at start: it refuses to start (exit 1) when
less than S × total is free, so a server launched into another slot's memory is seen, not hidden. The memory
held is a ballast tensor, so a leftover process is visible in NVML. Endpoints: /health, /v1/models,
/v1/completions, /v1/chat/completions (greedy, seeded: the same text every launch). A planted bad mode: when
the file named by --bad-file (default BAD) exists in the working directory — the server's checkout, so a
commit of a fixture history selects it — every completion loops ("need analysis there …"), as the seed's
dropped lm_head scale did. --device cpu runs it without a GPU (no ballast, no share check).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

VERSION = "0.2"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_fixture_server")
    p.add_argument("port", type=int)
    p.add_argument("hold_mib", type=int, nargs="?", default=None, help="MiB of GPU memory to hold (default 2048)")
    p.add_argument("--share", type=float, default=None, help="the share of the GPU's memory this server may use")
    p.add_argument("--cap-mib", type=int, default=2048, help="hold at most this many MiB of the share")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--bad-file", default="BAD", help="bad mode when this file exists in the working directory")
    p.add_argument("--model", default="fixture")
    return p.parse_args(argv)


def ballast_mib(args: argparse.Namespace) -> int:
    """MiB to hold; with --share, refuse (exit 1) when the share is not free, as vLLM does."""
    if args.device == "cpu":
        return 0
    if args.share is None or args.share >= 1:  # 1 is what abbisect passes for a whole GPU: nothing to share
        return args.cap_mib if args.hold_mib is None else args.hold_mib
    free, total = torch.cuda.mem_get_info()
    want = args.share * total
    if free < want:
        print(f"ValueError: Free memory on device ({free / 2**30:.2f}/{total / 2**30:.2f} GiB) on startup is less "
              f"than desired GPU memory utilization ({args.share}, {want / 2**30:.2f} GiB)", flush=True)
        raise SystemExit(1)
    return min(int(want) >> 20, args.cap_mib)


def main() -> None:
    t0 = time.monotonic()
    args = parse(sys.argv[1:])
    bad = Path(args.bad_file).exists()
    print(f"fixture API server version {VERSION}", flush=True)
    shown = {k: v for k, v in vars(args).items() if k in ("share", "cap_mib", "device") and v is not None}
    print(f"non-default args: {shown | {'bad': bad}}", flush=True)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = torch.nn.Sequential(torch.nn.Embedding(256, 64), torch.nn.Linear(64, 256)).to(dev).eval()
    hold = ballast_mib(args)
    ballast = torch.empty(hold * 1024 * 1024, dtype=torch.uint8, device=dev) if hold else None
    if ballast is not None:
        ballast.fill_(1)

    def complete(prompt: str, n: int) -> str:
        if bad:  # the planted regression: every completion becomes the seed's loop
            return ("need analysis there " * n)[: 4 * n]
        ids = list(prompt.encode()[-8:] or b" ")
        with torch.no_grad():
            for i in range(n):  # the step in the window: greedy on a random model never falls into a short cycle
                logits = model(torch.tensor([*ids[-7:], i % 256], device=dev)).sum(0)
                ids.append(int(torch.argmax(logits)) % 95 + 32)  # printable ASCII
        return bytes(ids[-n:]).decode()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
                self._send(200, {"status": "ok", "device": name})
            else:
                self._send(200, {"object": "list", "data": [{"id": args.model, "object": "model"}]})

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            n = int(req.get("max_tokens", 8))
            if self.path == "/v1/chat/completions":
                text = complete(" ".join(str(m.get("content", "")) for m in req.get("messages", [])), n)
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            else:
                text = complete(str(req.get("prompt", "")), n)
                choice = {"index": 0, "text": text, "finish_reason": "length"}
            self._send(200, {"id": "cmpl-fixture", "object": "completion", "model": args.model, "choices": [choice],
                             "usage": {"prompt_tokens": 0, "completion_tokens": n, "total_tokens": n}})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    share = f" (share {args.share} of the GPU)" if args.share is not None else ""
    print(f"fixture ready on {args.port}, holding {hold} MiB{share}, bad mode {'on' if bad else 'off'}, "
          f"started in {time.monotonic() - t0:.1f} s", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
