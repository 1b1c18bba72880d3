"""What git says of a range (abbisect/bisect/gitlog.py): the candidate graph, commit metadata and GitHub links, read
from real repositories."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from abbisect.bisect.gitlog import (
    CommitInfo,
    CommitLinks,
    candidate_graph,
    commit_info,
    github_links,
    github_repo,
    is_ancestor,
    pr_number,
    resolve,
)
from abbisect.infra.errors import UserError
from abbisect.infra.serial import dump, load

_clock = iter(range(1_700_000_000, 1_800_000_000, 60))


def git(repo: Path, *args: str) -> str:
    # Distinct, increasing dates make git's walk order (and so the expected `walk`) deterministic.
    date = f"@{next(_clock)} +0000"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ada Lovelace",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada Lovelace",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def commit(repo: Path, path: str, subject: str) -> str:
    file = repo / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(file.read_text() + subject + "\n" if file.exists() else subject + "\n")
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> dict[str, str | Path]:
    """o - a - b ----------- m - t        (t only touches docs/)
    \\             /
     x1 - x2 (src/)
    """
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    c: dict[str, str | Path] = {"path": r}
    c["o"] = commit(r, "src/base.py", "base")
    c["a"] = commit(r, "src/a.py", "Add a (#101)")
    git(r, "checkout", "-q", "-b", "side")
    c["x1"] = commit(r, "src/x.py", "x1")
    c["x2"] = commit(r, "src/x.py", "x2")
    git(r, "checkout", "-q", "main")
    c["b"] = commit(r, "docs/b.md", "b")
    git(r, "merge", "-q", "--no-ff", "-m", "Merge pull request #7 from someone/side", "side")
    c["m"] = git(r, "rev-parse", "HEAD")
    c["t"] = commit(r, "docs/t.md", "t")
    return c


def test_candidate_graph_is_what_git_bisect_considers(repo) -> None:
    g = candidate_graph(repo["path"], "main", [repo["o"]])
    names = {v: k for k, v in repo.items() if k != "path"}
    assert {names[s] for s in g.order} == {"a", "b", "x1", "x2", "m", "t"}
    assert g.parents[repo["m"]] == (repo["b"], repo["x2"])
    assert g.parents[repo["a"]] == ()  # the old end is outside the graph
    assert [names[s] for s in g.walk] == ["a", "x1", "x2", "b", "m", "t"]  # git's date order, oldest first
    assert g.treesame == frozenset()


def test_candidate_graph_with_several_olds(repo) -> None:
    g = candidate_graph(repo["path"], repo["t"], [repo["o"], repo["x1"]])
    names = {v: k for k, v in repo.items() if k != "path"}
    assert {names[s] for s in g.order} == {"b", "x2", "m", "t"}


def test_candidate_graph_first_parent_is_the_mainline(repo) -> None:
    g = candidate_graph(repo["path"], "main", ["main~3"], first_parent=True)
    names = {v: k for k, v in repo.items() if k != "path"}
    assert [names[s] for s in g.order] == ["b", "m", "t"]
    assert g.parents[repo["m"]] == (repo["b"],)


def test_candidate_graph_with_pathspec_marks_commits_outside_the_paths(repo) -> None:
    g = candidate_graph(repo["path"], "main", [repo["o"]], pathspec=["src"])
    names = {v: k for k, v in repo.items() if k != "path"}
    # On src/ the merge m equals its side parent x2 (b only touched docs), so git's walk follows
    # only that parent and never sees b; m and the tip t stay in the walk but never count.
    assert g.parents[repo["m"]] == (repo["x2"],)
    assert {names[s] for s in g.treesame} == {"m", "t"}
    assert {names[s] for s in g.order} == {"a", "x1", "x2", "m", "t"}


def test_candidate_graph_refuses_bad_ranges(repo) -> None:
    with pytest.raises(UserError, match="not a commit"):
        candidate_graph(repo["path"], "main", ["no-such-ref"])
    with pytest.raises(UserError, match="not an ancestor"):
        candidate_graph(repo["path"], repo["b"], [repo["x1"]])
    with pytest.raises(UserError, match="nothing to bisect"):
        candidate_graph(repo["path"], "main", ["main"])
    with pytest.raises(UserError, match="at least one old"):
        candidate_graph(repo["path"], "main", [])


def test_resolve_and_ancestry(repo) -> None:
    assert resolve(repo["path"], "main") == repo["t"]
    assert resolve(repo["path"], "side~1") == repo["x1"]
    assert is_ancestor(repo["path"], repo["o"], repo["t"])
    assert not is_ancestor(repo["path"], repo["b"], repo["x2"])


def test_commit_info(repo) -> None:
    info = commit_info(repo["path"], repo["a"])
    assert isinstance(info, CommitInfo)
    assert info.sha == repo["a"] and repo["a"].startswith(info.short)
    assert (info.subject, info.author, info.author_email, info.pr) == (
        "Add a (#101)",
        "Ada Lovelace",
        "ada@example.com",
        101,
    )
    assert info.date.startswith("20") and "T" in info.date
    assert info.parents == (repo["o"],)
    merge = commit_info(repo["path"], "main~1")
    assert merge.pr == 7 and merge.parents == (repo["b"], repo["x2"])
    assert commit_info(repo["path"], repo["x1"]).pr is None


@pytest.mark.parametrize(
    ("subject", "pr"),
    [
        ("[Bugfix] Fix foo (#35228)", 35228),
        ("Merge pull request #123 from someone/branch", 123),
        ('Revert "Fix foo (#1)" (#2)', 2),
        ("Mention #5 in passing", None),
        ("Fix foo (#35228) and more", None),
        ("plain", None),
    ],
)
def test_pr_number(subject: str, pr: int | None) -> None:
    assert pr_number(subject) == pr


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("https://github.com/sgl-project/sglang.git", ("sgl-project", "sglang")),
        ("https://github.com/vllm-project/vllm", ("vllm-project", "vllm")),
        ("git@github.com:vllm-project/vllm.git", ("vllm-project", "vllm")),
        ("ssh://git@github.com/owner/repo.git", ("owner", "repo")),
        ("https://token@github.com/owner/repo.git/", ("owner", "repo")),
        ("https://gitlab.com/owner/repo.git", None),
        ("/srv/mirror/repo.git", None),
    ],
)
def test_github_remote_forms(tmp_path: Path, url: str, found: tuple[str, str] | None) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "remote", "add", "origin", url)
    assert github_repo(tmp_path) == found


def test_github_links_prefer_origin_then_any_github_remote(repo) -> None:
    path, sha, base = repo["path"], repo["m"], repo["o"]
    def pages(links: CommitLinks) -> tuple[str | None, str | None]:
        return links.commit, links.compare

    assert github_links(path, sha) == CommitLinks()
    git(path, "remote", "add", "fork", "git@github.com:me/fork.git")
    assert pages(github_links(path, sha)) == (f"https://github.com/me/fork/commit/{sha}", None)
    git(path, "remote", "add", "origin", "https://github.com/up/stream.git")
    assert pages(github_links(path, sha, base)) == (f"https://github.com/up/stream/commit/{sha}",
                                                    f"https://github.com/up/stream/compare/{base}...{sha}")


def test_github_links_are_written_without_the_ones_there_are_not(repo) -> None:
    """A commit's links as results.json and bisect.json carry them: a key for each link there is (none without a
    GitHub remote), read back the same; a bisect's answer adds its parent's page."""
    path, sha, base = repo["path"], repo["a"], repo["o"]
    assert github_links(path, sha, base) == CommitLinks() and dump(CommitLinks()) == {}
    git(path, "remote", "add", "origin", "https://github.com/up/stream.git")
    home = "https://github.com/up/stream"
    alone = github_links(path, sha)  # "Add a (#101)": its pull request, no compare without a base
    assert dump(alone) == {"commit": f"{home}/commit/{sha}", "pr": f"{home}/pull/101"}
    answer = replace(github_links(path, sha, base), parent=github_links(path, base).commit)
    written = dump(answer)
    assert list(written) == ["commit", "compare", "pr", "parent"]
    assert written["compare"] == f"{home}/compare/{base}...{sha}" and written["parent"] == f"{home}/commit/{base}"
    assert load(CommitLinks, written) == answer and load(CommitLinks, {}) == CommitLinks()


def test_touched_paths_and_the_prior_that_reads_them(repo) -> None:
    """What each commit changes (a merge: what it brought in), in one git call; the posterior's prior gives
    the commits that touch only `bisect.prior.unlikely` paths less mass."""
    from abbisect.bisect.gitlog import touched_paths
    from abbisect.bisect.launches import prior_weights
    from abbisect.recipe import Recipe

    shas = [repo[k] for k in ("a", "x1", "b", "m", "t")]
    touched = touched_paths(repo["path"], shas)
    assert touched[repo["a"]] == ("src/a.py",) and touched[repo["b"]] == ("docs/b.md",)
    assert touched[repo["m"]] == ("src/x.py",) and touched[repo["t"]] == ("docs/t.md",)
    recipe = Recipe.model_validate({"name": "p", "engine": {"kind": "command", "repo": "/nonexistent"},
                                    "launch": {"command": ["serve"]}, "prompts": ["p"],
                                    "bisect": {"prior": {"unlikely": ["docs/"], "weight": 0.25}}})
    assert prior_weights(recipe, touched) == {repo["b"]: 0.25, repo["t"]: 0.25}
