"""Git's output is decoded once, in abbisect/infra/git.py, as git stores it: a commit message in Latin-1
— with the commit's `encoding` header (as git -c i18n.commitEncoding=ISO-8859-1 writes it) or as raw bytes with none, as old
and imported histories carry — never crashes a git call, the subject lookup or the releases lookup
(`git log --all`), whatever the user's own i18n.logOutputEncoding says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from abbisect.bisect import gitlog
from abbisect.builtin.history import Commit, build_history
from abbisect.infra import git

HEADED = "Corrigé l'accès au cache (#12)"  # stored in Latin-1 with an `encoding ISO-8859-1` header
RAW = "Résumé des tâches"  # stored as Latin-1 bytes with no header: git cannot know it


def _run(repo: Path, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=data, check=True, capture_output=True).stdout.decode()


def _commit(repo: Path, message: bytes, header: str | None) -> str:
    """A commit on HEAD with `message` stored byte for byte (`git commit` would turn Latin-1 into UTF-8), with an
    `encoding` header when given."""
    head = _run(repo, "rev-parse", "HEAD").strip()
    tree = _run(repo, "rev-parse", "HEAD^{tree}").strip()
    who = b"A U Thor <author@example.com> 1700000000 +0000"
    raw = (f"tree {tree}\nparent {head}\n".encode() + b"author " + who + b"\ncommitter " + who + b"\n"
           + (f"encoding {header}\n".encode() if header else b"") + b"\n" + message + b"\n")
    sha = _run(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw).strip()
    _run(repo, "update-ref", "HEAD", sha)
    return sha


@pytest.fixture(scope="module")
def latin1(tmp_path_factory) -> tuple[Path, str, str]:
    repo = tmp_path_factory.mktemp("latin1") / "engine"
    build_history(repo, [Commit("v1", tag="v1"), Commit("docs")])
    headed = _commit(repo, HEADED.encode("latin-1"), "ISO-8859-1")
    raw = _commit(repo, RAW.encode("latin-1"), None)
    subprocess.run(["git", "-C", str(repo), "tag", "v2"], check=True)
    subprocess.run(["git", "-C", str(repo), "branch", "release/v2", "HEAD~1"], check=True)
    # the user's own config asks for Latin-1 output: abbisect still reads UTF-8
    subprocess.run(["git", "-C", str(repo), "config", "i18n.logOutputEncoding", "ISO-8859-1"], check=True)
    assert RAW.encode("latin-1") in subprocess.run(["git", "-C", str(repo), "cat-file", "commit", raw], check=True,
                                                  capture_output=True).stdout
    return repo, headed, raw


def test_the_encoding_header_is_honoured(latin1):
    repo, headed, _ = latin1
    assert gitlog.commit_info(repo, headed).subject == HEADED
    assert gitlog.commit_info(repo, headed).pr == 12
    assert git.git(repo, "log", "-1", "--format=%s", headed).strip() == HEADED


def test_bytes_with_no_header_are_shown_with_the_replacement_character(latin1):
    repo, _, raw = latin1
    subject = gitlog.commit_info(repo, raw).subject
    assert subject == RAW.encode("latin-1").decode("utf-8", "replace") and "\ufffd" in subject
    assert "\ufffd" in git.call(["log", "-1", "--format=%B", raw], repo).stdout


def test_every_commit_of_every_ref_decodes(latin1):
    """`git log --all` (what the releases lookup walks) and the releases of a Latin-1 commit."""
    repo, headed, raw = latin1
    everything = git.git(repo, "log", "--all", "--format=%H %s")
    assert HEADED in everything and raw in everything
    found = gitlog.releases(repo, headed)
    assert found.first_release == "v2" and found.pr == 12
    assert "release/v2" in found.branches


def test_text_given_to_git_goes_in_as_utf8(tmp_path):
    repo = tmp_path / "r"
    build_history(repo, [Commit("v1")])
    blob = git.call(["hash-object", "-w", "--stdin"], repo, input="café\n").stdout.strip()
    assert git.git(repo, "cat-file", "blob", blob) == "café\n"
