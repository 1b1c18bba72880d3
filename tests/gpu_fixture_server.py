"""A GPU-using stand-in for an engine server: a tiny torch model on cuda behind /health and /v1/completions.

Used to check same-GPU hygiene between two launches without a real engine. Usage:
    python gpu_fixture_server.py PORT [MIB_TO_HOLD]
It holds MIB_TO_HOLD MiB of GPU memory (default 2048) so a leftover process is visible in NVML.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


def main() -> None:
    port = int(sys.argv[1])
    hold_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Embedding(256, 64), torch.nn.Linear(64, 256)).to(dev).eval()
    ballast = torch.empty(hold_mib * 1024 * 1024, dtype=torch.uint8, device=dev)
    ballast.fill_(1)

    def complete(prompt: str, n: int) -> str:
        ids = list(prompt.encode()[-8:] or b" ")
        with torch.no_grad():
            for _ in range(n):
                logits = model(torch.tensor(ids[-8:], device=dev))[-1]
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
                self._send(200, {"status": "ok", "device": torch.cuda.get_device_name(0)})
            else:
                self._send(200, {"data": [{"id": "fixture"}]})

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            text = complete(str(req.get("prompt", "")), int(req.get("max_tokens", 8)))
            self._send(200, {"choices": [{"text": text, "finish_reason": "length"}]})

        def log_message(self, *args: object) -> None:
            pass

    print(f"fixture ready on {port}, holding {ballast.numel() >> 20} MiB", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
