"""GitHub's REST API, the part abbisect uses: an issue's (or pull request's) comments listed, added and edited.

The one door to GitHub, as git.py is the one door to git. Where the API is: `GITHUB_API_URL` (what GitHub
Actions sets, also on an Enterprise Server), else `GH_HOST` as the gh CLI reads it (github.com, a `*.ghe.com`
tenant, or an Enterprise Server host whose API is `https://HOST/api/v3`), else api.github.com. Which token:
GH_TOKEN, then GITHUB_TOKEN; for an Enterprise Server API first GH_ENTERPRISE_TOKEN and GITHUB_ENTERPRISE_TOKEN
(gh's order). Every failure is a `GitHubError` whose `failure` names its row of the exit-code table.

The token goes into the Authorization header of requests to the API's own origin and nowhere else: no message
of this module holds it (each is masked once more on its way out), a pagination link to another host is not
followed, and httpx drops the header on a redirect to another host.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self
from urllib.parse import urlsplit

import httpx

from abbisect.infra.errors import UserError

GITHUB_API = "https://api.github.com"
API_VERSION = "2022-11-28"
PER_PAGE = 100  # the most GitHub gives a page of comments
TIMEOUT_S = 30.0
MASK = "***"
_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
_SHORT = re.compile(rf"^({_OWNER})/({_REPO})#([0-9]+)$")
_URL = re.compile(rf"^https?://[^/\s]+/({_OWNER})/({_REPO})/(?:issues|pull)/([0-9]+)/?(?:[#?].*)?$")


class Failure(StrEnum):
    """How a request to GitHub failed; the value is the `post` command's ending (its exit code)."""

    NO_TOKEN = "tokenless"
    DENIED = "denied"  # 401, or a 403 that is not a rate limit
    NOT_FOUND = "not-found"  # 404 (or 410: issues turned off), also what GitHub answers a token that may not see
    RATE_LIMITED = "rate-limited"
    NETWORK = "network"  # no answer at all, or GitHub's own fault (5xx)
    OTHER = "infra"  # any other answer (a 422 validation error, a body that is not JSON)


class GitHubError(Exception):
    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure


@dataclass(frozen=True)
class Target:
    """An issue or pull request: OWNER/REPO#N (a pull request's conversation takes issue comments)."""

    owner: str
    repo: str
    number: int

    @classmethod
    def parse(cls, text: str) -> Self:
        """OWNER/REPO#N, or the issue's or pull request's address on GitHub."""
        m = _SHORT.match(text.strip()) or _URL.match(text.strip())
        if not m or int(m.group(3)) < 1:
            raise UserError(f"{text!r} is not an issue or pull request: give OWNER/REPO#N (e.g. vllm-project/vllm#123) "
                            "or its address (https://github.com/OWNER/REPO/issues/N)")
        return cls(m.group(1), m.group(2), int(m.group(3)))

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}#{self.number}"


@dataclass(frozen=True)
class Comment:
    id: int
    body: str
    url: str  # its address on GitHub (html_url)


@dataclass(frozen=True)
class Api:
    """Where the REST API is and which variable's token it takes (the token itself is read only when needed)."""

    base: str
    enterprise: bool  # an Enterprise Server: its own token variables first

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Api:
        url = environ.get("GITHUB_API_URL", "").strip().rstrip("/")
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UserError(f"GITHUB_API_URL={url!r} is not an http(s) address (e.g. https://api.github.com, or "
                                "https://HOST/api/v3 for GitHub Enterprise Server)")
            return cls(url, not _cloud(parts.hostname))
        host = re.sub(r"^https?://", "", environ.get("GH_HOST", "").strip()).strip("/").lower() or "github.com"
        if host == "github.com":
            return cls(GITHUB_API, False)
        if host.endswith(".ghe.com"):
            return cls(f"https://api.{host}", False)
        return cls(f"https://{host}/api/v3", True)

    @property
    def token_names(self) -> tuple[str, ...]:
        return (("GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN") if self.enterprise else ()) + ("GH_TOKEN",
                                                                                                  "GITHUB_TOKEN")

    def token(self, environ: Mapping[str, str]) -> str | None:
        return next((v.strip() for n in self.token_names if (v := environ.get(n, "")).strip()), None)

    def require_token(self, environ: Mapping[str, str]) -> str:
        token = self.token(environ)
        if token is None:
            raise GitHubError(Failure.NO_TOKEN, f"no GitHub token: set {' or '.join(self.token_names)} to a token "
                                                "that may comment on the issue (e.g. GH_TOKEN=$(gh auth token))")
        return token


def _cloud(host: str) -> bool:
    return host == "api.github.com" or host.endswith(".ghe.com")


def reset_time(headers: Mapping[str, str], now: float | None = None) -> str:
    """When a rate limit ends, from GitHub's headers: `retry-after` (seconds) or `x-ratelimit-reset` (epoch)."""
    now = time.time() if now is None else now
    at: float | None = None
    if (after := headers.get("retry-after", "").strip()).isdigit():
        at = now + int(after)
    elif headers.get("x-ratelimit-reset", "").strip().isdigit():
        at = float(headers["x-ratelimit-reset"])
    if at is None:
        return "wait at least a minute before trying again"
    wait = max(0, round(at - now))
    return f"it resets at {time.strftime('%H:%M:%S UTC', time.gmtime(at))} (in {wait // 60} min {wait % 60} s)"


def failure_of(status: int, headers: Mapping[str, str], message: str, what: str) -> GitHubError:
    """GitHub's answer `status` to a request about `what` as one line (GitHub's own message after it)."""
    said = f" ({status}: {message[:200]})" if message else f" ({status})"
    limited = headers.get("x-ratelimit-remaining", "").strip() == "0" or "retry-after" in headers \
        or "rate limit" in message.lower()
    if status == 429 or (status == 403 and limited):
        return GitHubError(Failure.RATE_LIMITED, f"GitHub's rate limit is reached{said}: {reset_time(headers)}")
    if status == 401:
        return GitHubError(Failure.DENIED, f"GitHub refused the token{said}: it is wrong or expired; set a valid one")
    if status == 403:
        return GitHubError(Failure.DENIED, f"the token may not comment on {what}{said}: give it the issues (or pull "
                                           "requests) write permission, or use another")
    if status in (404, 410):
        return GitHubError(Failure.NOT_FOUND, f"no {what} on GitHub, or the token cannot see it{said}")
    if status >= 500:
        return GitHubError(Failure.NETWORK, f"GitHub failed to answer about {what}{said}; try again later")
    return GitHubError(Failure.OTHER, f"GitHub refused the request about {what}{said}")


class GitHub:
    """A client of one API with one token; `close` it (or use it in a `with`)."""

    def __init__(self, api: Api, token: str, timeout: float = TIMEOUT_S) -> None:
        self.api = api
        self._token = token
        self._origin = _origin(api.base)
        self._http = httpx.Client(
            base_url=api.base + "/", timeout=timeout, follow_redirects=True,
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                     "Authorization": f"Bearer {token}", "User-Agent": "abbisect"})

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def comments(self, target: Target) -> Iterator[Comment]:
        """Every comment of the issue, oldest first, page by page (the Link header's next page)."""
        url: str | None = f"repos/{target.owner}/{target.repo}/issues/{target.number}/comments?per_page={PER_PAGE}"
        while url is not None:
            response = self._request("GET", url, str(target))
            page = self._json(response, str(target))
            if not isinstance(page, list):
                raise GitHubError(Failure.OTHER, f"GitHub's list of the comments of {target} is not a list")
            yield from (_comment(c) for c in page)
            nxt = response.links.get("next", {}).get("url")
            url = nxt if nxt and _origin(nxt) == self._origin else None

    def issue(self, target: Target) -> dict[str, Any]:
        """The issue or pull request (that it exists and the token sees it)."""
        data = self._json(self._request("GET", f"repos/{target.owner}/{target.repo}/issues/{target.number}",
                                        str(target)), str(target))
        return data if isinstance(data, dict) else {}

    def create(self, target: Target, body: str) -> Comment:
        path = f"repos/{target.owner}/{target.repo}/issues/{target.number}/comments"
        return _comment(self._json(self._request("POST", path, str(target), {"body": body}), str(target)))

    def update(self, target: Target, comment_id: int, body: str) -> Comment:
        path = f"repos/{target.owner}/{target.repo}/issues/comments/{comment_id}"
        what = f"comment {comment_id} of {target}"
        return _comment(self._json(self._request("PATCH", path, what, {"body": body}), what))

    def _request(self, method: str, url: str, what: str, body: dict | None = None) -> httpx.Response:
        try:
            response = self._http.request(method, url, json=body)
        except httpx.TimeoutException:
            raise self._safe(GitHubError(Failure.NETWORK, f"no answer from {self.api.base} within "
                                                          f"{self._http.timeout.read:g} s")) from None
        except (httpx.TransportError, OSError) as exc:
            raise self._safe(GitHubError(Failure.NETWORK, f"cannot reach {self.api.base} "
                                                          f"({type(exc).__name__}: {exc})")) from None
        if not response.is_success:
            raise self._safe(failure_of(response.status_code, response.headers, _message(response), what))
        return response

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise GitHubError(Failure.OTHER, f"GitHub's answer about {what} is not JSON "
                                             f"({response.headers.get('content-type', 'no content type')})") from None

    def _safe(self, err: GitHubError) -> GitHubError:
        """The error with the token masked, wherever an answer or an exception may have echoed it."""
        text = str(err)
        return GitHubError(err.failure, text.replace(self._token, MASK)) if self._token in text else err


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.reason_phrase
    return str(data.get("message", "")) if isinstance(data, dict) else ""


def _comment(data: Any) -> Comment:
    if not isinstance(data, dict) or not isinstance(data.get("id"), int):
        raise GitHubError(Failure.OTHER, "GitHub's answer holds no comment")
    return Comment(data["id"], str(data.get("body") or ""), str(data.get("html_url") or ""))
