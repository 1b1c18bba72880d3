"""What a result folder posts to an upstream issue: its paste-ready markdown, whether it is conclusive, the hidden
marker that names the result, and the comment's body cut to GitHub's limit (pure, but for reading the folder).

"The same result" is the same question asked again, so that its comment is updated in place:
- an A/B (`run`): the same recipe name, model and engine kind on the same two commits with the same pins (and
  the same dependency commit, for a dependency A/B);
- a bisect: the same recipe name, model and engine kind over the same range (the resolved old and new ends) of
  the same thing walked (the engine's history, or the recipe's `bisect.over`).
A rerun into a new folder, a resumed bisect, or a recipe whose prompts or thresholds were edited is the same
result; other commits, another range, another model or another recipe name is another result, with a comment
of its own.
The marker is the body's first line, an HTML comment GitHub does not show, holding only a hash of that
question; a comment that merely quotes the marker elsewhere is not taken for it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from abbisect.infra.cache import cache_path
from abbisect.infra.errors import UserError
from abbisect.infra.redact import MASK, Redactor
from abbisect.report.ab import COMMENT_LIMIT
from abbisect.report.portable import Portable

MARKER_TAG = "abbisect-result"
NOTE_ROOM = 900  # characters kept free for the note that says what was cut and for closing what is open


class ResultKind(StrEnum):
    """The result folders that post: the markdown and the JSON each holds."""

    RUN = ("run", "report.md", "results.json")
    BISECT = ("bisect", "bisect.md", "bisect.json")

    markdown: str
    data: str

    def __new__(cls, value: str, markdown: str, data: str) -> Self:
        obj = str.__new__(cls, value)
        obj._value_, obj.markdown, obj.data = value, markdown, data
        return obj


class Conclusion(StrEnum):
    """What a result concludes; only a `conclusive` one posts without --anyway."""

    FOUND = ("found", True, "it names the commit")
    DIFFERENT = ("different", True, "the sides differ")
    SAME = ("same", True, "the sides are the same")
    NOT_SURE = ("not-sure", False, "it is not sure")
    AMBIGUOUS = ("ambiguous", False, "it names no single commit")
    NO_CHANGE = ("no-change", False, "both ends got the same verdict, so it names no commit")
    UNTESTABLE = ("untestable", False, "what it needed could not be tested")
    UNFINISHED = ("unfinished", False, "it did not finish")

    conclusive: bool
    text: str

    def __new__(cls, value: str, conclusive: bool, text: str) -> Self:
        obj = str.__new__(cls, value)
        obj._value_, obj.conclusive, obj.text = value, conclusive, text
        return obj


@dataclass(frozen=True)
class Judged:
    conclusion: Conclusion
    why: str  # one line, from the result's own data (each side's outcome, the headline's reason)


class _Read(BaseModel):
    """What post reads of a result's JSON, and nothing else (every other key ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


_Data = TypeVar("_Data", bound=_Read)


class _Envelope(_Read):
    schema_: Any = Field(None, alias="schema")  # "abbisect/run/v…" or "abbisect/bisect/v…"


class _Verdict(_Read):
    outcome: str
    status: str


class _Dependency(_Read):
    sha: str | None = None


class _Spec(_Read):
    sha: str
    pins: list[str] | None = None
    dependency: _Dependency | None = None


class _Side(_Read):
    spec: _Spec
    verdict: _Verdict


class _Said(_Read):
    outcome: str


class _Call(_Read):
    call: str | None = None


class _Comparison(_Read):
    comparison: _Call | None = None
    text: str | None = None


class _Assessment(_Read):
    """Over several launches a side: each side's outcome and the assessor's comparison."""

    a: _Said
    b: _Said
    comparison: _Comparison | None = None


class _Engine(_Read):
    kind: str | None = None


class _Bisect(_Read):
    over: Any = None


class _Recipe(_Read):
    name: str | None = None
    model: Any = None  # a path or a packaged model's table, hashed as it is
    engine: _Engine | None = None
    bisect: _Bisect | None = None


def _none_when_empty(v: object) -> object:
    return v or None


class RunData(_Read):
    """results.json of `abbisect run`, as post reads it."""

    recipe: _Recipe | None = None
    a: _Side
    b: _Side
    assessment: _Assessment | None = None  # written as {} with one launch a side

    _empty = field_validator("recipe", "assessment", mode="before")(_none_when_empty)

    def side(self, s: str) -> _Side:
        return self.a if s == "a" else self.b


class _Confirmation(_Read):
    level: str | None = None
    sentence: str = ""


class BisectData(_Read):
    """bisect.json of `abbisect bisect`, as post reads it."""

    recipe: _Recipe | None = None
    mode: str | None = None
    outcome: str | None = None
    message: str | None = None
    confirmation: _Confirmation | None = None
    first_new: str | None = None
    candidates: list[str] | None = None
    posterior: Any = None
    old: Any = None
    new: Any = None

    _empty = field_validator("recipe", "confirmation", mode="before")(_none_when_empty)


def _read(cls: type[_Data], data: Mapping[str, Any] | _Read) -> _Data:
    return data if isinstance(data, cls) else cls.model_validate(data)


def ab_conclusion(data: Mapping[str, Any] | RunData) -> Judged:
    """An A/B's conclusion from its results.json: a side that could not be tested (outcome skip) makes it
    untestable; over several launches a side, the assessor's call (different, same, not sure); one launch a
    side, the two outcomes (a rule on one trial: what it says is the answer, the same or not)."""
    run = _read(RunData, data)
    assessment = run.assessment
    outcomes = {s: (assessment.a if s == "a" else assessment.b).outcome if assessment else run.side(s).verdict.outcome
                for s in "ab"}
    said = f"A is {outcomes['a']}, B is {outcomes['b']}"
    skipped = [s for s, o in outcomes.items() if o == "skip"]
    if skipped:
        status = "; ".join(f"{s.upper()}: {run.side(s).verdict.status}" for s in skipped)
        return Judged(Conclusion.UNTESTABLE, f"{said} ({status})")
    if assessment:
        comparison = assessment.comparison or _Comparison()
        call = comparison.comparison.call if comparison.comparison else None
        text = (comparison.text or "").strip()
        conclusion = {"different": Conclusion.DIFFERENT, "same": Conclusion.SAME}.get(str(call), Conclusion.NOT_SURE)
        return Judged(conclusion, f"{said}; {text}" if text else said)
    return Judged(Conclusion.DIFFERENT if outcomes["a"] != outcomes["b"] else Conclusion.SAME, said)


def bisect_conclusion(data: Mapping[str, Any] | BisectData) -> Judged:
    """A bisect's conclusion from its bisect.json: conclusive only when it names a commit and, where it was run
    again to confirm, the confirmation held."""
    run = _read(BisectData, data)
    mode, outcome = run.mode or "", run.outcome
    message = (run.message or "").strip()
    if mode == "no-change":
        return Judged(Conclusion.NO_CHANGE, message or "both ends got the same verdict")
    if mode in ("untestable-end", "untestable-merge-base"):
        return Judged(Conclusion.UNTESTABLE, message or "an end could not be tested")
    confirmation = run.confirmation or _Confirmation()
    if outcome == "found" and run.first_new:
        level = confirmation.level
        if level not in (None, "confirmed"):
            return Judged(Conclusion.NOT_SURE, f"{run.first_new[:10]} {level}: "
                                               f"{confirmation.sentence}".strip().rstrip(":"))
        return Judged(Conclusion.FOUND, f"the commit that changes the verdict is {run.first_new[:10]}")
    if outcome == "ambiguous":
        candidates = ", ".join(c[:10] for c in (run.candidates or [])[:4])
        if run.posterior:
            return Judged(Conclusion.NOT_SURE, f"no commit holds enough of the posterior (likeliest: {candidates})")
        return Judged(Conclusion.AMBIGUOUS, f"only untestable commits are left: one of {candidates}")
    if outcome is None:
        return Judged(Conclusion.UNFINISHED, message or "the bisect did not finish")
    return Judged(Conclusion.UNTESTABLE, message or "no candidate could be tested in the range")


def result_key(kind: ResultKind, data: Mapping[str, Any] | RunData | BisectData) -> str:
    """The stable id of the question a result answers (this module's docstring says what is the same)."""
    run: RunData | BisectData = _read(RunData, data) if kind is ResultKind.RUN else _read(BisectData, data)
    recipe = run.recipe or _Recipe()
    if isinstance(run, RunData):
        question: dict[str, Any] = {s: {"sha": (spec := run.side(s).spec).sha, "pins": list(spec.pins or []),
                                        "dependency": spec.dependency.sha if spec.dependency else None}
                                    for s in "ab"}
    else:
        question = {"old": run.old, "new": run.new, "over": recipe.bisect.over if recipe.bisect else None}
    asked = {"kind": kind.value, "recipe": recipe.name, "model": recipe.model,
             "engine": recipe.engine.kind if recipe.engine else None}
    canonical = json.dumps({**asked, **question}, sort_keys=True, default=str)
    return f"{kind.value}-{hashlib.sha256(canonical.encode()).hexdigest()[:20]}"


def marker(key: str) -> str:
    return f"<!-- {MARKER_TAG} {key} -->"


def marked(body: str, key: str) -> bool:
    """Whether a comment's body is this result's: its first line is the marker."""
    first = body.lstrip().split("\n", 1)[0]
    return first.strip() == marker(key)


@dataclass(frozen=True)
class Result:
    """A finished result folder, read: what it posts and whether it may."""

    kind: ResultKind
    folder: Path
    markdown: str
    data: dict
    judged: Judged
    key: str  # result_key: which comment is this result's


def read_result(folder: Path) -> Result:
    """The A/B (report.md, results.json) or bisect (bisect.md, bisect.json) in `folder`."""
    if not folder.is_dir():
        raise UserError(f"{folder}: no such result folder (give the folder that `abbisect run` or `abbisect "
                        "bisect` wrote: results/<recipe>/<stamp>)")
    kind = ResultKind.BISECT if (folder / ResultKind.BISECT.data).is_file() or (folder / "state.json").is_file() \
        else ResultKind.RUN
    md, js = folder / kind.markdown, folder / kind.data
    if not md.is_file() or not js.is_file():
        if kind is ResultKind.BISECT:
            raise UserError(f"{folder}: no {kind.markdown} — the bisect has not finished (resume it: abbisect bisect "
                            f"--resume {folder})")
        raise UserError(f"{folder}: not a result folder of `abbisect run` or `abbisect bisect` (it holds neither "
                        "report.md and results.json nor bisect.md and bisect.json)")
    try:
        data = json.loads(js.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{js}: not JSON (the result folder is damaged; run it again)") from None
    schema = _Envelope.model_validate(data).schema_ if isinstance(data, dict) else None
    if not str(schema).startswith(f"abbisect/{kind.value}/"):
        raise UserError(f"{js}: not abbisect's {kind.value} result (its schema is {schema!r})")
    try:
        read: RunData | BisectData = RunData.model_validate(data) if kind is ResultKind.RUN \
            else BisectData.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise UserError(f"{js}: a field is missing or malformed ({where}: {first['msg']}); the result folder is "
                        "damaged, run it again") from None
    judged = ab_conclusion(read) if isinstance(read, RunData) else bisect_conclusion(read)
    key = result_key(kind, read)
    return Result(kind, folder, md.read_text(encoding="utf-8", errors="replace"), data, judged, key)


def publishable(text: str, recipe: Mapping[str, Any], environ: Mapping[str, str], secrets: Iterable[str] = ()) -> str:
    """The text as the result folder's own writers mask it, once more before it leaves the machine: the recipe's
    secrets (its references read from `environ`, as the run read them) and this machine's paths; then each of
    `secrets` (the GitHub token) wherever it occurs."""
    portable = Portable.build(cache_path(), redactor=Redactor.from_recipe(dict(recipe), environ))
    text = portable.text(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


_FENCE = re.compile(r"^(`{3,}|~{3,})")
_SUMMARY = re.compile(r"<details><summary>(.*?)</summary>")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|<?[a-z][a-z0-9+.-]*://\S+>?", re.IGNORECASE)


def comment_body(key: str, markdown: str, file_name: str, limit: int = COMMENT_LIMIT) -> str:
    """The marker, then the markdown; past `limit` characters, cut at a line with what is open (a code block, a
    <details>) closed and a note without links of how much was left out and which sections."""
    head = marker(key) + "\n"
    if len(head) + len(markdown) <= limit:
        return head + markdown
    room = limit - len(head) - NOTE_ROOM
    kept: list[str] = []
    used, fence, opened = 0, "", 0
    lines = markdown.split("\n")
    n = 0
    for n, line in enumerate(lines):  # noqa: B007 -- n is where the cut starts
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
        fence, opened = _track(line, fence, opened)
    left = lines[n:]
    sections = _headings(left, fence)
    close = ([fence] if fence else []) + ["</details>"] * opened
    what = f"{len(markdown) - used:,} characters"
    if sections:
        shown = sections[:8]
        what += " — " + "; ".join(shown) + (f" and {len(sections) - len(shown)} more sections" if len(sections) > 8
                                             else "")
    note = (f"_Cut here to fit GitHub's {limit:,}-character limit of a comment: {what} left out. The whole report "
            f"is {file_name} in the result folder._")
    return head + "\n".join(kept + close + ["", note]) + "\n"


def _track(line: str, fence: str, opened: int) -> tuple[str, int]:
    """The code fence open after `line` ("" when none) and how many <details> are open."""
    m = _FENCE.match(line)
    if fence:
        return ("" if m and line.strip() == fence[0] * len(line.strip()) and len(line.strip()) >= len(fence)
                else fence), opened
    if m:
        return m.group(1), opened
    return "", opened + line.count("<details") - line.count("</details>")


def _headings(lines: list[str], fence: str) -> list[str]:
    """The sections among `lines` (outside code blocks): headings and folded <details>, their names without links
    or tags."""
    out = []
    opened = 0
    for line in lines:
        was = fence
        fence, opened = _track(line, fence, opened)
        if not was and not fence and (m := re.match(r"^#{1,6}\s+(.*\S)", line) or _SUMMARY.search(line)):
            name = re.sub(r"<[^>]*>", "", _LINK.sub(lambda k: k.group(1) or "", m.group(1)))
            out.append(name.replace("`", "").strip())
    return [h for h in out if h]
