"""git itself is the oracle: real `git bisect run` on random DAGs must agree with our search.

Each example builds a real repository with `git fast-import` (one process, exact dates), picks a
culprit (a commit is new iff it is the culprit or descends from it), marks random commits as
untestable, then runs `git bisect start --no-checkout` + `git bisect run` with a script that answers
from a JSON file.  We compare the answer (the first new commit, or the "could be any of" set) and
also the exact sequence of commits tested, since our search mirrors git's choice step by step.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abbisect.bisect.gitlog import candidate_graph
from abbisect.bisect.search import NEW, OLD, SKIP, bisect

EXIT = {OLD: 0, NEW: 1, SKIP: 125}

# A POSIX sh script: a Python one would spend most of the test starting interpreters.  With
# --no-checkout git moves BISECT_HEAD instead of HEAD.  Arguments: verdicts.json, log, BISECT_HEAD.
VERDICT_SCRIPT = r"""
read head < "$3"
echo "$head" >> "$2"
case $(grep -o "\"$head\": *\"[a-z]*\"" "$1") in
  *'"old"') exit 0 ;;
  *'"new"') exit 1 ;;
  *'"skip"') exit 125 ;;
esac
exit 200  # not in the file: abort the bisect (an exit code of 128 or more does)
"""

SETTINGS = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Scenario:
    parents: tuple[tuple[int, ...], ...]  # commit index -> parent indices; indices are topological
    watched: tuple[bool, ...]  # whether the commit adds a file under watched/ (else under other/)
    olds: tuple[int, ...]
    culprit: int
    skips: frozenset[int]

    @property
    def tip(self) -> int:
        return len(self.parents) - 1


def ancestors(parents: tuple[tuple[int, ...], ...], start: int) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo.extend(parents[c])
    return seen


@st.composite
def dags(draw: st.DrawFn, max_commits: int = 40) -> tuple[tuple[int, ...], ...]:
    """Branches, merges (octopus now and then, criss-cross when a merged head stays open) and
    linear runs; the open heads are finally merged into the mainline so the tip reaches all."""
    target = draw(st.integers(2, max_commits))
    parents: list[tuple[int, ...]] = [()]
    heads = [0]
    while len(parents) + len(heads) - 1 < target:
        i = len(parents)
        op = draw(st.sampled_from(("commit", "commit", "commit", "branch", "merge", "merge")))
        if op == "merge" and len(heads) >= 2:
            k = draw(st.sampled_from((2, 2, 2, 3))) if len(heads) >= 3 else 2
            chosen = draw(st.lists(st.integers(0, len(heads) - 1), min_size=k, max_size=k, unique=True))
            parents.append(tuple(heads[j] for j in chosen))
            keep_open = draw(st.booleans())
            heads[chosen[0]] = i
            if not keep_open:
                for j in sorted(chosen[1:], reverse=True):
                    del heads[j]
        elif op == "branch":
            parents.append((draw(st.integers(0, i - 1)),))
            heads.append(i)
        else:
            j = draw(st.integers(0, len(heads) - 1))
            parents.append((heads[j],))
            heads[j] = i
    while len(heads) > 1:
        parents.append((heads[0], heads.pop()))
        heads[0] = len(parents) - 1
    return tuple(parents)


@st.composite
def scenarios(draw: st.DrawFn, max_commits: int = 40) -> Scenario:
    parents = draw(dags(max_commits))
    n = len(parents)
    tip = n - 1
    olds = draw(st.lists(st.one_of(st.just(0), st.integers(0, tip - 1)), min_size=1, max_size=2, unique=True))
    old_side = set().union(*(ancestors(parents, o) for o in olds))
    in_range = sorted(ancestors(parents, tip) - old_side)
    culprit = draw(st.sampled_from(in_range))
    skip_percent = draw(st.sampled_from((0, 15, 40, 70)))
    skips = frozenset(c for c in in_range if c != tip and draw(st.integers(0, 99)) < skip_percent)
    watched = tuple(draw(st.booleans()) for _ in range(n))
    return Scenario(parents, watched, tuple(olds), culprit, skips)


def build_repo(path: Path, scenario: Scenario) -> list[str]:
    """A repository whose commit i has scenario.parents[i] as parents; returns the shas by index."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    stream: list[str] = []
    files: list[frozenset[str]] = []
    for i, ps in enumerate(scenario.parents):
        own = f"{'watched' if scenario.watched[i] else 'other'}/c{i}"
        files.append(frozenset().union(*(files[p] for p in ps)) | {own})
        message = f"commit {i}\n"
        stream += [f"blob\nmark :{10_000 + i}\ndata {len(own) + 1}\n{own}\n"]
        stream += [
            f"commit refs/heads/c{i}\nmark :{i + 1}\n",
            f"author A U Thor <author@example.com> {1_600_000_000 + 60 * i} +0000\n",
            f"committer A U Thor <author@example.com> {1_600_000_000 + 60 * i} +0000\n",
            f"data {len(message)}\n{message}",
        ]
        if ps:
            stream.append(f"from :{ps[0] + 1}\n")
            stream += [f"merge :{p + 1}\n" for p in ps[1:]]
        stream.append("deleteall\n")
        stream += [f"M 100644 :{10_000 + int(f.rsplit('c', 1)[1])} {f}\n" for f in sorted(files[i])]
        stream.append("\n")
    marks = path / ".git" / "marks"
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet", f"--export-marks={marks}"],
        input="".join(stream),
        text=True,
        check=True,
    )
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    shas = [by_mark[f":{i + 1}"] for i in range(len(scenario.parents))]
    subprocess.run(
        ["git", "-C", str(path), "symbolic-ref", "HEAD", f"refs/heads/c{scenario.tip}"], check=True
    )
    return shas


def verdict_for(scenario: Scenario, commit: int) -> str:
    if commit in scenario.skips:
        return SKIP
    return NEW if scenario.culprit in ancestors(scenario.parents, commit) else OLD


@dataclass(frozen=True)
class GitAnswer:
    first_new: str | None
    candidates: frozenset[str]
    tested: tuple[str, ...]


def git_bisect(
    repo: Path,
    shas: list[str],
    scenario: Scenario,
    extra: tuple[str, ...] = (),
    terms: tuple[str, str] = ("good", "bad"),
    pathspec: tuple[str, ...] = (),
) -> GitAnswer:
    verdicts = {sha: verdict_for(scenario, i) for i, sha in enumerate(shas)}
    work = repo / ".git" / "oracle"
    work.mkdir()
    (work / "verdicts.json").write_text(json.dumps(verdicts))
    (work / "verdict.sh").write_text(VERDICT_SCRIPT)
    log = work / "tested.log"
    log.touch()

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)

    olds = [shas[o] for o in scenario.olds]
    start = git("bisect", "start", "--no-checkout", *extra, shas[scenario.tip], *olds, "--", *pathspec)
    out = start.stdout + start.stderr
    finished = f"is the first {terms[1]} commit" in out or "No testable commit found" in out
    if not finished:
        assert start.returncode == 0, out
        script = [str(work / "verdict.sh"), str(work / "verdicts.json"), str(log)]
        run = git("bisect", "run", "sh", *script, str(repo / ".git" / "BISECT_HEAD"))
        out += run.stdout + run.stderr
    tested = tuple(log.read_text().split())
    if "There are only 'skip'ped commits left to test." in out:
        listed = out.split(f"The first {terms[1]} commit could be any of:\n", 1)[1]
        listed = listed.split("We cannot bisect more!", 1)[0]
        return GitAnswer(None, frozenset(re.findall(r"^[0-9a-f]{40}$", listed, re.MULTILINE)), tested)
    if "No testable commit found" in out:
        return GitAnswer(None, frozenset(), tested)
    bad = git("rev-parse", f"refs/bisect/{terms[1]}").stdout.strip()
    assert f"{bad} is the first {terms[1]} commit" in out, out
    return GitAnswer(bad, frozenset({bad}), tested)


def ours(repo: Path, shas: list[str], scenario: Scenario, first_parent: bool = False, pathspec=None):
    graph = candidate_graph(
        repo, shas[scenario.tip], [shas[o] for o in scenario.olds], first_parent, pathspec
    )
    index = {sha: i for i, sha in enumerate(shas)}
    return bisect(
        graph, shas[scenario.tip], [shas[o] for o in scenario.olds], lambda s: verdict_for(scenario, index[s])
    )


def check_against_git(
    scenario: Scenario,
    first_parent: bool = False,
    terms: tuple[str, str] | None = None,
    pathspec: tuple[str, ...] = (),
) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shas = build_repo(repo, scenario)
        extra: tuple[str, ...] = ("--first-parent",) if first_parent else ()
        if terms:
            extra += ("--term-old", terms[0], "--term-new", terms[1])
        answer = git_bisect(repo, shas, scenario, extra, terms or ("good", "bad"), pathspec)
        result = ours(repo, shas, scenario, first_parent, list(pathspec) or None)
    assert tuple(sha for sha, _ in result.verdicts) == answer.tested
    if answer.first_new is not None:
        assert result.outcome == "found"
        assert result.first_new == answer.first_new
    elif answer.candidates:
        assert result.outcome == "ambiguous"
        assert set(result.candidates) == answer.candidates
    else:
        assert result.outcome in ("untestable", "ambiguous")
    return result.outcome


def shape(scenario: Scenario) -> Counter[str]:
    seen = Counter()
    seen["merge"] += any(len(ps) > 1 for ps in scenario.parents)
    seen["octopus"] += any(len(ps) > 2 for ps in scenario.parents)
    seen["skips"] += bool(scenario.skips)
    seen["two olds"] += len(scenario.olds) > 1
    return seen


def test_same_answer_as_git_bisect_on_random_dags() -> None:
    seen: Counter[str] = Counter()

    @settings(SETTINGS, max_examples=60)
    @given(scenarios())
    def check(scenario: Scenario) -> None:
        seen.update(shape(scenario))
        seen[check_against_git(scenario)] += 1

    check()
    # The point is merges and skips: make sure the derandomized examples really contain them.
    assert seen["merge"] >= 30 and seen["octopus"] >= 3, seen
    assert seen["skips"] >= 25 and seen["ambiguous"] >= 5 and seen["found"] >= 20, seen


def test_same_answer_as_git_bisect_first_parent() -> None:
    seen: Counter[str] = Counter()

    @settings(SETTINGS, max_examples=20)
    @given(scenarios())
    def check(scenario: Scenario) -> None:
        seen[check_against_git(scenario, first_parent=True)] += 1

    check()
    assert seen["found"] >= 5 and seen["ambiguous"] >= 1, seen


def test_same_answer_as_git_bisect_with_terms_to_find_a_fix() -> None:
    # With --term-old broken --term-new fixed the "culprit" is the fix: same search, other words.
    @settings(SETTINGS, max_examples=12)
    @given(scenarios(max_commits=25))
    def check(scenario: Scenario) -> None:
        check_against_git(scenario, terms=("broken", "fixed"))

    check()


def test_same_answer_as_git_bisect_with_a_pathspec() -> None:
    # Every merge here changes the watched paths itself.  A merge that took one side's version is
    # simplified by git, and git redoes that simplification at each step as the old commits move;
    # our graph keeps the first walk's (see history.candidate_graph), so such merges are left out.
    seen: Counter[str] = Counter()

    @settings(SETTINGS, max_examples=20)
    @given(scenarios(max_commits=30))
    def check(scenario: Scenario) -> None:
        watched = tuple(w or len(ps) > 1 for w, ps in zip(scenario.watched, scenario.parents, strict=True))
        scenario = replace(scenario, watched=watched)
        seen[check_against_git(scenario, pathspec=("watched",))] += 1

    check()
    assert seen["found"] >= 5, seen
