"""Secrets never written: the recipe's secret values masked in what abbisect writes for people and in the
logs, without ever rewriting a structured field by substring.

Every value the recipe can hold is a source: the environment maps (`env`, `install.env`,
`narrow.passing.env`, each of `narrow.switches`' `env`, `bisect.over.install.env`) and the credentials in a
URL anywhere in it (a pin `pkg @ git+https://user:TOKEN@host/...`, an index URL). A variable of those maps
is secret when a `_`/`-` separated segment of its name is or ends with TOKEN, KEY, SECRET, PASSWORD, PASSWD
or CREDENTIAL (or their plurals: `HF_TOKEN`, `OPENAI_API_KEY`, `HFTOKEN`, `DB_PASSWORD`; not
`TOKENIZERS_PARALLELISM`), when its value is taken from the user's environment by reference
(`${HF_TOKEN}`), or when the recipe lists it in `secret_env`; `public_env` makes a variable visible whatever
its name. Other values stay visible, so a report still says how to reproduce. References are expanded only
when a child process is started (`expand_env`), so the value never enters the recipe or its dump; a value
that is only references (`${HF_TOKEN}`) is shown as it is, so a rerun block still reads it from the
environment.

How a secret is masked depends on where it is; a mask replaces exactly the value, never what is around it:
- under its name in structured data (an env mapping: `Redactor.data`, `Redactor.env`): always, whatever
  its length;
- where it is named, in text and in any string of structured data (`NAME=value`, `NAME: value`,
  `"NAME": "value"`): always; the value known to the recipe is masked whole, another value up to the first
  space, quote or closing bracket, unless it is a reference or a placeholder (`NAME=$VAR`, `NAME=%s`: a
  command in a rerun recipe stays runnable);
- anywhere else (`Redactor.text`, any string of `Redactor.data`, `StreamMask` over a log's bytes): a value
  of at least ANYWHERE characters wherever it occurs (a letter written right after it by another process's
  interleaved line included), a value of MIN_SECRET to ANYWHERE - 1 characters only as a whole value (not
  inside a longer run of letters, digits and `_`), in the forms a log shows it: as it is, JSON/repr-escaped
  (a newline as the two characters `\\n`), and each of its lines that is itself long enough (a PEM key's
  base64 lines); a URL credential of any length where it stands in a URL (`:TOKEN@`, `//TOKEN@`). A shorter
  value ("false", "09c8", "demo") occurs by chance in shas, prompts, patterns and names; masking it
  everywhere would corrupt them, so a short value printed bare is not masked.

Pure, but for `fingerprint_key` (the per-cache HMAC key of the trial-cache fingerprint).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

MASK = "***"
# Free text is masked only for values at least this long: a shorter one is too likely to occur by chance
# ("1", "cpu", "false", a hex run inside a sha); where it is named (NAME=value) it is masked anyway.
MIN_SECRET = 8
# A value this long is masked wherever it occurs, even inside a longer run: it does not occur by chance, and
# two processes writing one log can put a letter right after it.
ANYWHERE = 12
_SECRET_SEGMENT = re.compile(r"(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)S?$", re.IGNORECASE)
_REFERENCE = re.compile(r"\$\{(\w+)\}")
_ONLY_REFERENCES = re.compile(r"(?:\$\{\w+\})+")
# A URL's credentials: the password of `scheme://user:password@`, or the token of `https://token@`.
_URL_PASSWORD = re.compile(r"[A-Za-z][\w+.-]*://[^/@\s:]+:([^/@\s]+)@")
_URL_TOKEN = re.compile(r"https?://([^/@\s:]+)@")
# A named value in text: NAME=v, NAME: v, "NAME": "v", 'NAME': 'v', NAME="v"; a value not known to the recipe
# ends at a space, a quote, a comma, a semicolon, a closing bracket, a backtick, `|`, `<` or `>`, and after
# MAX_NAMED bytes (a stream holds that much back at most).
_SEP = rb"[\"']?(?: ?= ?|: ?)[\"']?"
_VALUE_CHAR = rb"[^\s\"',;)\]}`|<>]"
_VALUE_END = re.compile(rb"[\s\"',;)\]}`|<>]")
# What follows a name without being a value, left as it is (unless it is the recipe's own value): a reference
# (NAME=${VAR}, NAME=$VAR, NAME=${VAR:-x}) or a format's placeholder (printf 'NAME=%s\n'), so a command in a
# rerun recipe still runs as printed.
_PLACEHOLDER = rb"(?:\$\{?\w|%[-+ #0-9.]*[a-zA-Z](?![A-Za-z0-9_]))"
MAX_NAMED = 4096
_WORD = rb"A-Za-z0-9_"
_IS_WORD = re.compile(rb"[" + _WORD + rb"]")


def expand(value: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` replaced by the variable's value in `environ` (empty when unset)."""
    return _REFERENCE.sub(lambda m: environ.get(m.group(1), ""), value)


def expand_env(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A recipe's env with references expanded: what a child process (server or build step) receives."""
    source = os.environ if environ is None else environ
    return {k: expand(v, source) for k, v in env.items()}


def is_reference(value: str) -> bool:
    return bool(_REFERENCE.search(value))


def only_references(value: str) -> bool:
    """`${HF_TOKEN}` (and `${A}${B}`): it names where the value comes from and holds none of it, so it is
    shown as it is (a rerun reads it from the environment again)."""
    return bool(_ONLY_REFERENCES.fullmatch(value.strip()))


def looks_secret(name: str) -> bool:
    """A `_`/`-` separated segment of the name is or ends with a secret word (HF_TOKEN, HFTOKEN, API-KEYS)."""
    return any(_SECRET_SEGMENT.search(segment) for segment in re.split(r"[_-]", name))


def _masked(value: str) -> str:
    return value if only_references(value) else MASK


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env as shown (build logs, plans) when no recipe is at hand: secret-looking names and values with a
    reference in them (a reference alone stays: it holds no value)."""
    return {k: _masked(v) if looks_secret(k) or is_reference(v) else v for k, v in env.items()}


def _env_maps(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every environment map of a recipe's JSON dump: env, install.env, narrow.passing.env, each narrow
    switch's env, bisect.over.install.env."""
    narrow = data.get("narrow") or {}
    over = (data.get("bisect") or {}).get("over") or {}
    maps = [(data.get("install") or {}).get("env"), data.get("env"), (narrow.get("passing") or {}).get("env"),
            *(s.get("env") for s in narrow.get("switches") or () if isinstance(s, Mapping)),
            (over.get("install") or {}).get("env")]
    return [m for m in maps if isinstance(m, Mapping)]


def secret_names(data: Mapping[str, Any]) -> set[str]:
    """The variables of a recipe's JSON dump (every map of `_env_maps`) whose values are secret."""
    public = set(data.get("public_env") or ())
    forced = set(data.get("secret_env") or ())
    return {name for envmap in _env_maps(data) for name, value in envmap.items()
            if name not in public and (name in forced or looks_secret(name) or is_reference(str(value)))}


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, Mapping):
        for v in data.values():
            yield from _strings(v)
    elif isinstance(data, list | tuple):
        for v in data:
            yield from _strings(v)
    elif isinstance(data, str):
        yield data


def url_credentials(data: Any) -> set[str]:
    """The credentials of every URL in the recipe's strings (pins, index URLs, the engine's repo)."""
    found: set[str] = set()
    for text in _strings(data):
        if "@" in text:
            found.update(m.group(1) for rx in (_URL_PASSWORD, _URL_TOKEN) for m in rx.finditer(text))
    return found


def value_forms(value: str) -> set[str]:
    """The ways a log may show a secret value, each long enough to be masked as free text: as it is, JSON-
    and repr-escaped (a multi-line value printed inside a dict), and each line of it on its own."""
    value = value.strip()
    found = set()
    if len(value) >= MIN_SECRET:
        found |= {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1]}
    found |= {line.strip() for line in value.splitlines() if len(line.strip()) >= MIN_SECRET}
    return found


def _bounded(form: bytes) -> bytes:
    """A form of fewer than ANYWHERE bytes matched only as a whole value: not preceded or followed by a
    letter, digit or `_` where its own first or last character is one."""
    if len(form) >= ANYWHERE:
        return re.escape(form)
    before = rb"(?<![" + _WORD + rb"])" if _IS_WORD.match(form[:1]) else b""
    after = rb"(?![" + _WORD + rb"])" if _IS_WORD.match(form[-1:]) else b""
    return before + re.escape(form) + after


def _longest_first(items: set[bytes]) -> tuple[bytes, ...]:
    return tuple(sorted(items, key=lambda b: (-len(b), b)))


@dataclass(frozen=True)
class Redactor:
    names: frozenset[str] = frozenset()  # variables whose values are masked where they are named
    values: tuple[str, ...] = ()  # every secret value (masked in free text when MIN_SECRET or longer)
    credentials: tuple[str, ...] = ()  # URL credentials, masked where they stand in a URL whatever their length

    @classmethod
    def from_recipe(cls, recipe: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """From a `Recipe` or its JSON dump; `environ` is where references are read (default os.environ)."""
        data = recipe if isinstance(recipe, dict) else recipe.model_dump(mode="json")
        source = os.environ if environ is None else environ
        names = secret_names(data)
        values: set[str] = set()
        for envmap in _env_maps(data):
            for name, value in envmap.items():
                if name in names:
                    text = str(value)
                    values.update(v.strip() for v in (text, expand(text, source)) if v.strip() and not is_reference(v))
        credentials = url_credentials(data)
        values |= {c for c in credentials if len(c) >= MIN_SECRET}
        return cls(frozenset(names), tuple(sorted(values, key=lambda v: (-len(v), v))),
                   tuple(sorted(credentials, key=lambda v: (-len(v), v))))

    def __bool__(self) -> bool:
        return bool(self.names or self.values or self.credentials)

    @cached_property
    def forms(self) -> tuple[bytes, ...]:
        """Every free-text form of every long enough value, as bytes, longest first (the regex tries them in
        order)."""
        return _longest_first({f.encode(errors="surrogateescape") for v in self.values for f in value_forms(v)})

    @cached_property
    def named_forms(self) -> tuple[bytes, ...]:
        """Every value as it may follow its name (any length): as it is, JSON- and repr-escaped."""
        return _longest_first({f.encode(errors="surrogateescape") for v in self.values
                               for f in (v, json.dumps(v)[1:-1], repr(v)[1:-1]) if f})

    @cached_property
    def credential_forms(self) -> tuple[bytes, ...]:
        """Each credential with the `@` that follows it in a URL: where such a match starts, and rare enough
        in a log to be looked for however short the credential is."""
        return tuple(c.encode(errors="surrogateescape") + b"@" for c in self.credentials)

    @cached_property
    def anchors(self) -> tuple[bytes, ...]:
        """What every match starts with: a value's form, a credential or a name (found at memchr speed)."""
        return (*self.forms, *self.credential_forms, *(n.encode() for n in self.names))

    @cached_property
    def _patterns(self) -> tuple[re.Pattern[bytes] | None, re.Pattern[bytes] | None]:
        """(any match: a named value, a free-text form or a credential in its URL; a name and its separator)."""
        free = b"|".join([*(_bounded(f) for f in self.forms),
                          *(rb"(?<=[:/])" + re.escape(c.encode(errors="surrogateescape")) + rb"(?=@)"
                            for c in self.credentials)])
        namesep = None
        parts = [b"(?:" + free + b")"] if free else []
        if self.names:
            alt = b"|".join(re.escape(n.encode()) for n in sorted(self.names, key=len, reverse=True))
            # not a name where it is referred to: $NAME, ${NAME:-default}
            namesep = rb"(?P<name>(?<![$" + _WORD + rb"])(?<!\$\{)(?:" + alt + rb"))(?P<sep>" + _SEP + rb")"
            known = [re.escape(f) + rb"(?!" + _VALUE_CHAR + rb")" for f in self.named_forms]
            other = b"|".join([*([free] if free else []), _VALUE_CHAR + b"{1,%d}" % MAX_NAMED])
            value = b"|".join([*known, rb"(?!" + _PLACEHOLDER + rb")(?:" + other + b")"])
            parts.insert(0, namesep + rb"(?!\*\*\*)(?:" + value + b")")
        return (re.compile(b"|".join(parts)) if parts else None, re.compile(namesep) if namesep else None)

    def stream(self) -> StreamMask | None:
        """A masker for one byte stream (a log), or None when there is nothing to mask."""
        return StreamMask(self) if self else None

    def text(self, text: str) -> str:
        """Text for people (reports, console lines, CSV cells) and any string of structured data: named values,
        long values and URL credentials masked."""
        if not self or not text:
            return text
        raw = text.encode(errors="surrogateescape")
        if not any(a in raw for a in self.anchors):  # found at memchr speed; the regex is slow
            return text
        return StreamMask(self).feed(raw, final=True).decode(errors="surrogateescape")

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """An env mapping with the values of secret variables masked (what a result keeps of a launch)."""
        return {k: _masked(v) if k in self.names else v for k, v in env.items()}

    def data(self, obj: Any) -> Any:
        """JSON-able data with every secret masked, and no structured field rewritten by substring: a string
        under a secret variable's name is masked whole (unless it is only references); any other string only
        where it names a secret (`NAME=value`), holds a long value or a URL credential (a sha, a ref, a name, a
        pattern or a prompt that merely contains a short value stays as it is)."""
        if not self:
            return obj
        if isinstance(obj, dict):
            return {k: (_masked(v) if isinstance(k, str) and k in self.names and isinstance(v, str) else self.data(v))
                    for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.data(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def guard(self, progress: Callable[[str], None]) -> Callable[[str], None]:
        """A progress callable whose messages are redacted (keeping the message's type, e.g. a Status)."""
        if not self:
            return progress

        def say(message: str) -> None:
            clean = self.text(str(message))
            progress(type(message)(clean) if isinstance(message, str) and type(message) is not str else clean)

        return say


class StreamMask:
    """A byte stream's secrets masked as it flows, across chunk and line boundaries: `feed(chunk)` gives the
    bytes safe to write now, `flush()` the rest at the end.

    Only what may still become a match is held back: a tail that starts a value's form (at most the longest
    form), or a named value still open (at most MAX_NAMED bytes after the name); everything else is given
    out at once, so a log line (the ready line a launch waits for) is never delayed. A process killed
    meanwhile loses the held bytes, never writes them raw.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.rx, self.namesep = redactor._patterns
        # the forms a stream may end inside of: a value's free-text forms and the credentials
        self.forms = (*redactor.forms, *redactor.credential_forms)
        self.named_forms = (*redactor.named_forms, *redactor.forms)  # what may follow a name
        self.names = tuple(n.encode() for n in redactor.names)
        self.anchors = redactor.anchors
        self.longest = max((len(f) for f in self.named_forms), default=0)
        self.window = max((len(n) for n in self.names), default=0) + 4 + max(self.longest, MAX_NAMED)
        self.pending = b""
        self.before = b""  # the last byte given out: a whole-value match looks at it

    def feed(self, chunk: bytes, final: bool = False) -> bytes:
        if self.rx is None:
            return self.pending + chunk if final else chunk
        data = self.before + self.pending + chunk
        start = len(self.before)
        hold = len(data) if final else self._hold(data, start)
        out, pos = [], start
        while (m := self._search(data, pos)) is not None and m.start() < hold:
            if not final and m.end() >= len(data):  # more bytes may lengthen it, or show it is no whole value
                hold = m.start()
                break
            out += [data[pos:m.start()], _replacement(m)]
            pos = m.end()
        end = max(pos, hold)
        out.append(data[pos:end])
        self.pending = data[end:]
        if end > 0:
            self.before = data[end - 1:end]
        return b"".join(out)

    def flush(self) -> bytes:
        return self.feed(b"", final=True)

    def _search(self, data: bytes, pos: int) -> re.Match[bytes] | None:
        """The next match from `pos`, tried only where a whole form or a name occurs (found at memchr
        speed): most chunks of a log hold neither, and a regex over every byte would cost 3 MB/s."""
        assert self.rx is not None
        at = {a: data.find(a, pos) for a in self.anchors}  # a match starts where its name or form does
        while live := [p for p in at.values() if p >= 0]:
            p = min(live)
            if m := self.rx.match(data, p):
                return m
            at = {a: data.find(a, p + 1) if q == p else q for a, q in at.items()}
        return None

    def _hold(self, data: bytes, start: int) -> int:
        """Where the bytes that may still become (part of) a match begin: len(data) when none may."""
        n = len(data)
        hold = n
        for form in self.forms:
            lo = max(start, n - len(form) + 1)
            if lo >= hold:
                continue
            hold = min(hold, _prefix_at(data, form, lo, hold))
        if self.namesep is not None:
            lo = max(start, n - self.window)
            for m in self.namesep.finditer(data, lo):
                if m.start() >= hold:
                    break
                rest = data[m.end():]
                if (len(rest) <= MAX_NAMED and not _VALUE_END.search(rest)) or any(
                        f.startswith(rest) for f in self.named_forms):
                    hold = m.start()
                    break
            for name in self.names:  # a name (and the start of its separator) cut at the end
                for p in range(max(start, n - len(name) - 1), min(n, hold)):
                    tail = data[p:]
                    if name.startswith(tail) or (tail.startswith(name) and tail[len(name):] in (b"", b'"', b"'", b" ")):
                        hold = p
                        break
        return hold


def _prefix_at(data: bytes, form: bytes, lo: int, hi: int) -> int:
    """The first position p in [lo, hi) where data[p:] is the start of `form` (the stream ends inside it),
    else hi."""
    n = len(data)
    head = form[:8]
    p = data.find(head, lo, max(hi + len(head) - 1, lo))
    while p != -1 and p < hi and p + len(head) <= n:
        if form.startswith(data[p:]):
            return p
        p = data.find(head, p + 1, max(hi + len(head) - 1, lo))
    for p in range(max(lo, n - len(head) + 1), hi):  # the stream ends inside the form's first bytes
        if form.startswith(data[p:]):
            return p
    return hi


def _replacement(m: re.Match[bytes]) -> bytes:
    name = m.groupdict().get("name")
    return (name + m.group("sep") + MASK.encode()) if name else MASK.encode()


def fingerprint_key(path: Path) -> bytes:
    """A random key for fingerprints that must tell secrets apart without revealing them (the trial cache's:
    `Cache.fingerprint_key`), kept in `path`, mode 0600, made on first use (a race of two first uses keeps one
    key: the file is linked into place, never overwritten)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600, a name of its own
    tmp = Path(name)
    try:
        os.write(fd, os.urandom(32))
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_bytes()
