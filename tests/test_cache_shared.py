"""Two abbisect processes sharing one cache (two runs on one machine; the real-engine tier's two workers): what one
of them is still making, the other waits for and then uses, never half of it. A venv, a model's conversion and its
converter venv, a worktree and a built-in history are each made under the entry's lock (the lock's waits:
tests/test_hostile_inputs.py, a worktree's: tests/test_exit_codes.py); here the base wheel a built-in history is
made from, which pip fetches."""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NAME, VERSION = "abbisect-shared-probe", "1.0"
FILE = f"{NAME.replace('-', '_')}-{VERSION}-py3-none-any.whl"


def _wheel(dest: Path) -> bytes:
    """A pure-Python wheel of about 2 MB (stored, not compressed), written by hand; its bytes."""
    dist = f"{NAME.replace('-', '_')}-{VERSION}.dist-info"
    files = {"abbisect_shared_probe/data.bin": os.urandom(2 << 20),
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for p, d in files.items()] + [f"{dist}/RECORD,,"]
    with zipfile.ZipFile(dest, "w") as zf:
        for p, d in files.items():
            zf.writestr(p, d)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return dest.read_bytes()


@pytest.fixture
def slow_links(tmp_path: Path) -> Iterator[tuple[str, bytes, list[str]]]:
    """A find-links page on a loopback HTTP server that sends the wheel slowly (about 2 s): its URL, the wheel's
    bytes and the list of the wheel's downloads."""
    body = _wheel(tmp_path / FILE)
    downloads: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") == "":
                page = f'<html><body><a href="{FILE}">{FILE}</a></body></html>'.encode()
                self._send(page, "text/html")
            elif self.path.lstrip("/") == FILE:
                downloads.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                step = len(body) // 20 + 1
                for at in range(0, len(body), step):
                    self.wfile.write(body[at:at + step])
                    self.wfile.flush()
                    time.sleep(0.1)
            else:
                self.send_error(404)

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", body, downloads
    finally:
        server.shutdown()
        server.server_close()


def test_two_processes_fetching_one_wheel_download_it_once_and_both_read_it_whole(tmp_path, slow_links):
    """Both start at once; the second waits for the first's download (about 2 s) instead of starting its own or
    taking the first's half-written file, and both return the one whole wheel; nothing else is left in the
    wheels' folder (pip's download folder removed)."""
    url, body, downloads = slow_links
    cache = tmp_path / "cache"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": url, "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    code = ("import sys; from pathlib import Path; from abbisect.builtin.realengine import fetch_wheel\n"
            f"print(fetch_wheel(Path(sys.argv[1]), '{NAME}=={VERSION}'))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(cache)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    got = {Path(out.strip()) for out, _ in outs}
    assert got == {cache / "wheels" / FILE}, got
    assert downloads == [f"/{FILE}"], downloads  # one download: the second process waited for it
    assert (cache / "wheels" / FILE).read_bytes() == body
    left = sorted(p.name for p in (cache / "wheels").iterdir() if not p.name.endswith(".lock"))
    assert left == [FILE], left
