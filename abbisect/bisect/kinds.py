"""What a bisect's candidates are (abbisect/bisect/variables.py implements each kind)."""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class VariableKind(StrEnum):
    """What the candidates are; each member carries what the rest of abbisect needs to know about them."""

    ENGINE_COMMITS = ("engine commits", "commit", True, "")
    PACKAGE_VERSIONS = ("package versions", "version", False, "a dependency is the variable (bisect.over)")
    DEPENDENCY_COMMITS = ("dependency commits", "commit", False, "a dependency is the variable (bisect.over)")

    noun: str  # how a report names one candidate
    git_drivable: bool  # `git bisect run abbisect check` can run the same search
    ends_first_because: str  # why `bisect.ends: lazy` cannot keep its guarantee here ("" when it can)

    def __new__(cls, value: str, noun: str, git_drivable: bool, ends_first_because: str) -> Self:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.noun, obj.git_drivable, obj.ends_first_because = noun, git_drivable, ends_first_because
        return obj
