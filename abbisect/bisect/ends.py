"""Why a bisection must test both ends before its search: the one place that decides whether
`bisect.ends: lazy` can keep its guarantee (the driver and `bisect --dry-run` both ask it)."""

from __future__ import annotations

from abbisect.assess import assessor_for
from abbisect.assess.base import against_ends
from abbisect.bisect.kinds import VariableKind
from abbisect.recipe import Recipe
from abbisect.trial import judges
from abbisect.trial.judges import Judge


def judged_against_ends(recipe: Recipe, judge: Judge | None = None) -> str:
    """Why a commit's verdict needs the ends' trials ("" when it does not)."""
    kind = assessor_for(recipe, bisect=True)
    if against_ends(kind):
        return f"the verdict compares each commit with the good end ({kind.kind})"
    if kind.statistical:
        return (f"the verdict depends on chance ({kind.kind}): the posterior search learns both ends' "
                "distributions from their launches first")
    if judge is judges.interactive:
        return "the interactive judge shows each trial beside the ends' outputs"
    return ""


def ends_first_because(recipe: Recipe, judge: Judge | None = None, merge_bases: tuple[str, ...] = (),
                       kind: VariableKind | None = None, slots: int = 1) -> str:
    """Why the ends must be tested before the search ("" when `bisect.ends: lazy` can keep its guarantee)."""
    if why := judged_against_ends(recipe, judge):
        return why
    if merge_bases:
        return "the ends are on different branches (their merge base is judged against both ends)"
    if kind is not None and kind.ends_first_because:
        return kind.ends_first_because
    if slots > 1:
        return f"{slots} slots test the two ends at once anyway"
    return ""
