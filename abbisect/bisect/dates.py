"""The two ends of a bisect as the user names them: refs, or dates (as cargo-bisect-rustc and mozregression).

A date `YYYY-MM-DD` means the last commit on the first-parent line of the other end whose committer
date is on or before that day (UTC): the state of the mainline at the end of that day.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path

from abbisect import checkout
from abbisect.infra.errors import UserError
from abbisect.infra.git import git
from abbisect.infra.progress import Say

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def is_date(text: str) -> bool:
    return bool(_DATE.match(text))


def on_date(repo: Path, day: str, line_of: checkout.Revision) -> checkout.Revision:
    """The last first-parent commit of `line_of` committed on or before the end of `day` (UTC)."""
    limit = _day_end(day)
    # Newest first along the line: the first one old enough is the state of the mainline that day.
    rows = git(repo, "rev-list", "--first-parent", "--format=%H %ct", "--no-commit-header",
               line_of.sha).split("\n")
    for row in rows:
        if row.strip():
            sha, stamp = row.split()
            if int(stamp) < limit:
                rev = checkout.resolve(repo, sha)
                return replace(rev, ref=f"{day} → {rev.short}")
    raise UserError(f"no commit on the first-parent line of {line_of.ref} ({line_of.short}) was made on or "
                    f"before {day}")


def _committed(repo: Path, sha: str) -> int:
    return int(git(repo, "show", "-s", "--format=%ct", sha).strip())


def _day_end(day: str) -> int:
    try:
        day_start = dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC)
        return int((day_start + dt.timedelta(days=1)).timestamp())
    except ValueError:
        raise UserError(f"{day!r} is not a date (give YYYY-MM-DD)") from None


def resolve_end(repo: Path, text: str, other: checkout.Revision | None, head: str = "HEAD",
                say: Say | None = None) -> checkout.Revision:
    """A ref, or a date resolved on the other end's first-parent line when that end was committed after
    the date, else on HEAD's (the default branch of a clone): `--good 2026-07-01 --bad main` and
    `--good v1.0 --bad 2026-07-01` both mean the mainline as it stood at the end of that day."""
    if not is_date(text):
        return checkout.resolve(repo, text, say)
    line = other if other is not None and _committed(repo, other.sha) >= _day_end(text) else None
    return on_date(repo, text, line or checkout.resolve(repo, head, say))


def resolve_ends(repo: Path, good: str, bad: str, say: Say | None = None) -> tuple[checkout.Revision, checkout.Revision]:
    """(good, bad) revisions; refs first, so that a date can be placed on the other end's line (a warning about
    an ambiguous ref is told to `say`)."""
    good_ref = None if is_date(good) else checkout.resolve(repo, good, say)
    bad_rev = resolve_end(repo, bad, good_ref, say=say)
    return good_ref or resolve_end(repo, good, bad_rev, say=say), bad_rev
