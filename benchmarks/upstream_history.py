"""abbisect's search on a real upstream history, against `git bisect run` with the same stub verdict.

Given a local clone carrying a real history (SGLang's or vLLM's; for development only -- never in CI),
it times candidate enumeration (full history and --first-parent), the first midpoint and lookahead, and
a whole bisection whose verdict is a stub ("is commit X an ancestor of the tested commit"), then runs
`git bisect run` with the same stub on a scratch bare clone and compares the tested commits step by
step, the step counts and the answer.  With --other REF (a branch that forked off), the ends are on
different branches and the merge base is the old end, as the real run decides after testing it.

    python benchmarks/upstream_history.py PATH_TO_CLONE [--bad main] [--good main~3000] [--culprit REF]
                                          [--other REF] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from abbisect.bisect import gitlog
from abbisect.bisect.search import NEW, OLD, start
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.serial import dump


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=scrubbed_env()).stdout.strip()


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return value, round(time.perf_counter() - t, 3)


def abbisect_search(repo: Path, new: str, olds: list[str], culprit: str, first_parent: bool) -> dict:
    # The stub's answer for every commit, by real ancestry (as the git script asks), outside the timing.
    below = set(git(repo, "rev-list", "--ancestry-path", f"{culprit}..{new}").split()) | {culprit}
    graph, t_graph = timed(lambda: gitlog.candidate_graph(repo, new, olds, first_parent, unrelated_olds=True))
    state = start(graph, new, olds)
    (first, ahead), t_first = timed(lambda: (state.next_commit(), state.lookahead()))
    tested = []
    t0 = time.perf_counter()
    while (sha := state.next_commit()) is not None:
        tested.append(sha)
        state = state.record(sha, NEW if sha in below else OLD)
    t_search = round(time.perf_counter() - t0, 3)
    res = state.result()
    return {"candidates": len(graph), "graph_s": t_graph, "first_midpoint_s": t_first, "first": first,
            "lookahead": list(ahead), "search_s": t_search, "steps": len(tested), "tested": tested,
            "found": res.first_new}


STUB = """#!/bin/sh
# new ("bad") when the culprit is an ancestor of the commit git is testing
git merge-base --is-ancestor {culprit} BISECT_HEAD && exit 1
exit 0
"""


def git_bisect(source: Path, new: str, olds: list[str], culprit: str, first_parent: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "clone.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True, env=scrubbed_env())
        script = Path(tmp) / "stub.sh"
        script.write_text(STUB.format(culprit=culprit))
        script.chmod(0o755)
        t0 = time.perf_counter()
        git(bare, "bisect", "start", "--no-checkout", *(["--first-parent"] if first_parent else []), new, *olds)
        out = subprocess.run(["git", "-C", str(bare), "bisect", "run", str(script)], check=False,
                             capture_output=True, text=True, env=scrubbed_env()).stdout
        wall = round(time.perf_counter() - t0, 3)
        found = git(bare, "rev-parse", "refs/bisect/bad")
        log = git(bare, "bisect", "log")
    ends = {new, *olds}
    words = [line.split() for line in log.splitlines() if line.startswith("git bisect ")]
    tested = [w[3] for w in words if len(w) == 4 and w[2] in ("good", "bad") and w[3] not in ends]
    return {"wall_s": wall, "steps": len(tested), "tested": tested, "found": found,
            "said": next((ln for ln in out.splitlines() if "first bad commit" in ln), "")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clone", type=Path)
    ap.add_argument("--bad", default="main")
    ap.add_argument("--good", default=None, help="default: the bad end's 3000th first-parent ancestor")
    ap.add_argument("--culprit", default=None, help="default: the range's first-parent commit a third of the way")
    ap.add_argument("--other", default=None, help="an end on another branch: bisect from its merge base")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    repo = args.clone.resolve()
    new = gitlog.resolve(repo, args.bad)
    if args.other:
        other = gitlog.resolve(repo, args.other)
        (bases), t_mb = timed(lambda: gitlog.merge_bases(repo, other, new))
        olds = [*bases, other]
    else:
        olds, t_mb = [gitlog.resolve(repo, args.good or f"{args.bad}~3000")], 0.0
    mainline = git(repo, "rev-list", "--first-parent", "--reverse", new, *(f"^{o}" for o in olds)).split()
    culprit = gitlog.resolve(repo, args.culprit) if args.culprit else mainline[len(mainline) // 3]
    in_range = git(repo, "rev-list", new, *(f"^{o}" for o in olds)).split()
    if culprit not in in_range:  # the stub would then call every commit old for one and new for the other
        sys.exit(f"--culprit {args.culprit} is not in the range (an ancestor of an old end, or not below new)")
    report = {"repo_commits": int(git(repo, "rev-list", "--count", "--all")), "new": new, "olds": olds,
              "culprit": culprit, "merge_base_s": t_mb, "runs": {}}
    for fp in (False, True):
        ours = abbisect_search(repo, new, olds, culprit, fp)
        theirs = git_bisect(repo, new, olds, culprit, fp)
        report["runs"]["first-parent" if fp else "full"] = {
            "abbisect": {k: v for k, v in ours.items() if k != "tested"},
            "git": {k: v for k, v in theirs.items() if k != "tested"},
            "same_steps": ours["tested"] == theirs["tested"], "same_answer": ours["found"] == theirs["found"]}
    rel, report["releases_s"] = timed(lambda: gitlog.releases(repo, culprit))
    report["releases"] = dump(rel)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    print(f"history: {report['repo_commits']} commits; new {new[:10]}, old {', '.join(o[:10] for o in olds)}"
          + (f" (merge base found in {t_mb:.3f} s)" if args.other else "") + f"; stub culprit {culprit[:10]}")
    for name, r in report["runs"].items():
        a, g = r["abbisect"], r["git"]
        print(f"[{name}] candidates {a['candidates']} (enumerated in {a['graph_s']:.3f} s); first midpoint + "
              f"lookahead {a['first_midpoint_s']:.3f} s; whole stub search {a['search_s']:.3f} s, {a['steps']} steps")
        print(f"[{name}] git bisect run: {g['wall_s']:.3f} s, {g['steps']} steps; same commits tested in the same "
              f"order: {r['same_steps']}; same answer: {r['same_answer']} ({a['found'][:10]})")
    print(f"releases and backports of the found commit: {report['releases_s']:.3f} s "
          f"({len(rel.carriers)} carriers, first release {rel.first_release}, on {len(rel.branches)} branches)")
    if not all(r["same_steps"] and r["same_answer"] for r in report["runs"].values()):
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
