"""What following a bisect's answer into a dependency found (abbisect/bisect/follow.py): the chain's links, or
why it was not followed. Written as bisect.json's "follow"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from abbisect.infra.serial import NoneLeftOut


@dataclass(frozen=True)
class Link:
    """One step of the chain: what it walked, what it named, on what evidence, and where its report is."""

    step: str  # parent-new-pins, answer-old-pins, versions, commits
    folder: str  # relative to the run's folder
    walked: str
    good: str
    bad: str
    mode: str
    outcome: str | None
    found: str | None  # the version or the commit named
    parent: str | None  # the version or commit before it (its parent in the walk)
    subject: str  # the named commit's subject ("" for a version)
    evidence: str  # the named candidate's verdict and its parent's, in words
    tested: int  # candidates tested (ends included)
    replayed: int  # of which taken from the step's state (a resumed run)
    said: str  # what the step shows, in words


@dataclass(frozen=True)
class Followed:
    """The answer followed into a dependency: engine commit → version → the dependency's commit."""

    package: str
    old: str
    new: str
    engine: str  # the engine commit found
    pins: str  # what it changes in the pins, in words
    blame: str  # pins, code, both, together, unknown
    said: str  # which part is to blame, plainly
    links: tuple[Link, ...] = ()
    version: str | None = None  # the package's version that changed the verdict
    version_parent: str | None = None
    repo: str | None = None  # the dependency's repository (as the recipe or the metadata names it)
    commit: str | None = None  # its commit that changed the verdict
    commit_subject: str = ""
    stopped: str = ""  # why the chain ends where it does ("" when it named a commit of the dependency)


@dataclass(frozen=True)
class NotFollowed(NoneLeftOut):
    """The answer not followed into its dependency (no exact pin on both sides, or a step that could not run):
    why, and where the chain stopped when a step failed."""

    said: str
    blame: str = "unknown"
    links: tuple[Link, ...] = ()
    stopped: str | None = None  # the failure that stopped it (no key when there was nothing to walk)


    left_out: ClassVar[tuple[str, ...]] = ("stopped",)
