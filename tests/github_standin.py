"""A stand-in for GitHub's REST API on the loopback address, speaking the part abbisect uses: an issue, its
comments listed (a page at a time, with a Link header to the next), added and edited; a wrong token (401), a
token without rights on a repository (403), no such issue (404), a rate limit (403 with its headers), and
GitHub's 65,536-character limit of a comment (422). Every request is recorded, its Authorization header too,
so a test can tell what was sent."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qs, urlsplit

LIMIT = 65_536
_ISSUE = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)$")
_COMMENTS = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$")
_COMMENT = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/comments/(\d+)$")


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None
    body: dict | None


@dataclass
class GitHubStandIn:
    token: str
    page_size: int = 2  # fewer than abbisect asks for, so that a few comments already take several pages
    issues: dict[tuple[str, str, int], list[dict]] = field(default_factory=dict)
    read_only: set[str] = field(default_factory=set)  # OWNER/REPO the token may read but not comment on
    rate_limited_until: float | None = None
    rate_limit_after: int | None = None  # requests answered before the rate limit starts (None: never)
    seen: list[Seen] = field(default_factory=list)
    _next_id: int = 1000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _answer(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with standin._lock:
                    standin.seen.append(Seen(method, self.path, self.headers.get("Authorization"), body))
                    status, data, headers = standin.answer(method, self.path, self.headers.get("Authorization"), body)
                self._answer(status, data, headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def comments(self, owner: str, repo: str, number: int) -> list[dict]:
        return self.issues[(owner, repo, number)]

    def add_comment(self, owner: str, repo: str, number: int, body: str) -> dict:
        self._next_id += 1
        comment = {"id": self._next_id, "body": body, "user": {"login": "someone"},
                   "html_url": f"https://github.invalid/{owner}/{repo}/issues/{number}#issuecomment-{self._next_id}"}
        self.issues[(owner, repo, number)].append(comment)
        return comment

    def answer(self, method: str, raw_path: str, authorization: str | None,
               body: dict | None) -> tuple[int, object, dict[str, str]]:
        if authorization != f"Bearer {self.token}":
            return 401, {"message": "Bad credentials"}, {}
        if self.rate_limit_after is not None and len(self.seen) > self.rate_limit_after:
            self.rate_limit()
        if self.rate_limited_until is not None:
            return 403, {"message": "API rate limit exceeded for user ID 1."}, {
                "x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": str(int(self.rate_limited_until))}
        url = urlsplit(raw_path)
        if (m := _ISSUE.match(url.path)) and method == "GET":
            key = (m.group(1), m.group(2), int(m.group(3)))
            return (200, {"number": key[2]}, {}) if key in self.issues else (404, {"message": "Not Found"}, {})
        if m := _COMMENTS.match(url.path):
            key = (m.group(1), m.group(2), int(m.group(3)))
            if key not in self.issues:
                return 404, {"message": "Not Found"}, {}
            if method == "GET":
                return self._page(url.path, parse_qs(url.query), self.issues[key])
            if method == "POST":
                if f"{key[0]}/{key[1]}" in self.read_only:
                    return 403, {"message": "Resource not accessible by personal access token"}, {}
                if body is None or not isinstance(body.get("body"), str):
                    return 422, {"message": "Invalid request"}, {}
                if len(body["body"]) > LIMIT:
                    return 422, {"message": "Body is too long (maximum is 65536 characters)"}, {}
                return 201, self.add_comment(*key, body["body"]), {}
        if (m := _COMMENT.match(url.path)) and method == "PATCH":
            if f"{m.group(1)}/{m.group(2)}" in self.read_only:
                return 403, {"message": "Resource not accessible by personal access token"}, {}
            if body is None or len(body.get("body", "")) > LIMIT:
                return 422, {"message": "Body is too long (maximum is 65536 characters)"}, {}
            for (owner, repo, _), comments in self.issues.items():
                for c in comments:
                    if (owner, repo) == (m.group(1), m.group(2)) and c["id"] == int(m.group(3)):
                        c["body"] = body["body"]
                        return 200, c, {}
            return 404, {"message": "Not Found"}, {}
        return 404, {"message": "Not Found"}, {}

    def _page(self, path: str, query: dict[str, list[str]], comments: list[dict]) -> tuple[int, object, dict[str, str]]:
        per_page = min(int(query.get("per_page", ["30"])[0]), self.page_size)
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(comments) // per_page))
        links = []
        if page < last:
            links.append(f'<{self.url}{path}?per_page={per_page}&page={page + 1}>; rel="next"')
            links.append(f'<{self.url}{path}?per_page={per_page}&page={last}>; rel="last"')
        return 200, comments[(page - 1) * per_page: page * per_page], {"Link": ", ".join(links)} if links else {}

    def rate_limit(self, seconds: float = 600) -> None:
        self.rate_limited_until = time.time() + seconds
