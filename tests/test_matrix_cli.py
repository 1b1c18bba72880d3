"""`abbisect matrix` over the suite's own runs (toy engine A/B, bisect, checks through the real CLI), and
its page as a person sees it: rendered by headless Chromium, filtered through the page's own controls."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def runs(engine_repo, tmp_path_factory):
    """results/ with an A/B (broken vs fixed) and a bisect (healthy0..broken); checks in the cache: an
    untestable commit and, earlier than the rest, a lenient recipe that calls the broken commit good."""
    work = tmp_path_factory.mktemp("matrix")
    cache = work / "cache"
    launch = {
        "command": [
            "{python}",
            "-m",
            "toyengine.server",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--model",
            "toy-model",
        ],
        "flags": ["--seed", "0"],
        "ready": {"http": "/health"},
    }
    recipe = write_recipe(work / "toy.yaml", toy_recipe(engine_repo, launch=launch))
    lenient = write_recipe(
        work / "lenient.yaml",
        toy_recipe(
            engine_repo, name="toy-lenient", launch=launch, verdict={"bad_if": ["crashed_at_startup"]}
        ),
    )
    steps = [
        ("check", str(lenient), "broken"),
        ("check", str(recipe), "noinstall"),
        ("run", str(recipe), "--a", "broken", "--b", "fixed", "-o", "results/toy/ab"),
        ("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "-o", "results/toy/bisect"),
    ]
    for args in steps:
        r = abbisect(*args, cwd=work, cache=cache)
        assert r.returncode in (0, 1, 125), (args, r.stderr[-2000:])
    sha = {tag: _git(engine_repo, "rev-parse", tag) for tag in ("healthy0", "broken", "fixed", "noinstall")}
    sha["h1"] = _git(engine_repo, "rev-parse", "broken^")
    return work, cache, sha


@pytest.fixture(scope="module")
def built(runs):
    work, cache, sha = runs
    r = abbisect("matrix", "results", "--checks", "--json", cwd=work, cache=cache)
    assert r.returncode == 0, r.stderr
    return work, cache, sha, json.loads(r.stdout)["data"], r.stderr


@pytest.mark.e2e
def test_cells_from_run_bisect_and_check(built):
    work, _, sha, data, stderr = built
    cells = {c["commit"]: c for c in data["cells"]}
    # healthy0 and h1 (the bisect), broken (A/B, bisect, lenient check), fixed (A/B), noinstall (check)
    assert set(cells) == {sha[k] for k in ("healthy0", "h1", "broken", "fixed", "noinstall")}
    assert data["counts"]["cells"] == len(data["cells"]) == 5
    broken = cells[sha["broken"]]
    assert (broken["outcome"], broken["model"], broken["engine"], broken["engine_version"]) == (
        "bad",
        "toy-model",
        "command",
        "0.3.0",
    )
    # the A/B and the lenient check ran it; the bisect's end was the A/B's trial, replayed from the cache
    assert (broken["evidence"], broken["replayed"]) == (2, 1) and [c["outcome"] for c in broken["conflicts"]] == ["good"]
    assert broken["conflicts"][0]["recipe"] == "toy-lenient"  # shown, never hidden
    assert (broken["transition"], broken["transition_from"], broken["adjacent"]) == (
        "good → bad",
        sha["h1"],
        True,
    )
    fixed = cells[sha["fixed"]]
    assert (fixed["outcome"], fixed["transition"], fixed["transition_from"], fixed["adjacent"]) == (
        "good",
        "bad → good",
        sha["broken"],
        False,
    )  # fixed's parent was never tested
    assert cells[sha["noinstall"]]["outcome"] == "skip" and cells[sha["noinstall"]]["stack_key"] == ""
    assert cells[sha["healthy0"]]["stack_key"] == broken["stack_key"] != ""
    assert broken["gpu_class"] == "CPU (Linux-x86_64)" and "no GPU" in broken["gpu"]
    for c in data["cells"]:
        assert (work / "results" / "matrix" / c["report"]).is_file(), c["report"]
    assert "5 cells" in stderr and "2 transitions, 1 conflicts" in stderr


@pytest.mark.e2e
def test_markdown_csv_and_pictures(built):
    work, _, _, data, _ = built
    out = work / "results" / "matrix"
    md = (out / "matrix.md").read_text()
    assert md.count("\n| command") == 5 and "### toy-model" in md and len(md) < 65_536
    assert "⚠ also **good**" in md and "⇄ good → bad" in md
    rows = list(csv.DictReader((out / "matrix.csv").open()))
    assert sorted(r["commit"] for r in rows) == sorted(c["commit"] for c in data["cells"])
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == ["toy-ab-loops.png", "toy-bisect-range.png", "toy-bisect-timeline.png"]
    for name in pngs:
        assert (out / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(plots/{name})" in md
    # The page needs no network: every address in it is a relative path or an inline picture.
    page = (out / "matrix.html").read_text()
    addresses = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert addresses and all(
        not re.match(r"^(?:[a-z]+:|//)", a) or a.startswith("data:image/png;base64,") for a in addresses
    )
    assert sum(a.startswith("data:image/png") for a in addresses) == len(pngs)
    bisect = json.loads((work / "results/toy/bisect/bisect.json").read_text())
    remaining = [s["remaining"] for s in bisect["steps"]]
    assert (
        remaining[0] == remaining[1] == 2
        and remaining[-1] == 1
        and remaining == sorted(remaining, reverse=True)
    )
    assert all(t["fingerprint"]["key"] and "build" in t["timings"] for t in bisect["trials"])


@pytest.mark.e2e
def test_env_key_marks_cells_and_without_matplotlib_it_still_works(built, tmp_path):
    work, cache, sha, data, _ = built
    key = data["cells"][0]["stack_key"] or data["cells"][-1]["stack_key"]
    blocker = tmp_path / "block"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH", "")) if p)
    r = abbisect(
        "matrix",
        "results",
        "--checks",
        "--env-key",
        key,
        "-o",
        str(tmp_path / "m"),
        "--json",
        cwd=work,
        cache=cache,
        env={"PYTHONPATH": path},
    )
    assert r.returncode == 0, r.stderr
    assert "plots skipped: matplotlib is not installed" in r.stderr
    marked = [c["commit"] for c in json.loads(r.stdout)["data"]["cells"] if c["env_match"]]
    assert len(marked) == 4 and sha["noinstall"] not in marked
    assert not (tmp_path / "m" / "plots").exists() and (tmp_path / "m" / "matrix.html").is_file()
    here = abbisect(
        "matrix", "results", "--env", "--no-plots", "-o", str(tmp_path / "e"), cwd=work, cache=cache
    )
    mine = abbisect("env", "--key", cwd=work, cache=cache).stdout.strip()
    assert here.returncode == 0 and f"on GPU stack {mine}" in here.stderr


@pytest.mark.e2e
def test_trial_cache_adds_evidence_to_the_same_cells(built, tmp_path):
    work, cache, sha, data, _ = built
    r = abbisect(
        "matrix",
        "results",
        "--checks",
        "--trial-cache",
        "--no-plots",
        "-o",
        str(tmp_path / "m"),
        "--json",
        cwd=work,
        cache=cache,
    )
    assert r.returncode == 0, r.stderr
    wider = json.loads(r.stdout)["data"]
    cached = [s for s in wider["sources"] if "/trials/" in s]
    assert len(cached) == len(list((cache / "trials").glob("*.json"))) >= 5
    assert (
        wider["counts"]["cells"] == data["counts"]["cells"]
    )  # the same cells, with more evidence behind them
    before = {c["commit"]: c["evidence"] for c in data["cells"]}
    after = {c["commit"]: c["evidence"] for c in wider["cells"]}
    assert all(after[k] > before[k] for k in before) and after[sha["broken"]] >= 4


@pytest.mark.e2e
def test_bad_folders_are_one_line_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, needle in (
        (["nowhere"], "no such results folder: nowhere"),
        (["empty"], "no abbisect results"),
    ):
        r = abbisect("matrix", *args, cwd=tmp_path, cache=tmp_path / "cache")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


# -- the page in a browser ---------------------------------------------------------------------------


class Page(HTMLParser):
    """The rows, links and counters of a dumped DOM."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.ids: dict[str, str] = {}
        self._open: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "cell" in (a.get("class") or "").split():
            self.rows.append(a)
        if tag == "a" and a.get("class") == "report":
            self.links.append(a["href"])
        if a.get("id") in ("shown", "total"):
            self._open = a["id"]

    def handle_data(self, data):
        if self._open:
            self.ids[self._open] = data.strip()
            self._open = None

    def visible(self) -> list[dict[str, str | None]]:
        return [r for r in self.rows if "hidden" not in r]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def dom(url: str, profile: Path) -> Page:
    r = chromium("--dump-dom", url, profile=profile)
    assert r.returncode == 0 and "</html>" in r.stdout, r.stderr[-2000:]
    return Page(r.stdout)


browser = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@pytest.mark.e2e  # `built` runs abbisect (the guard of tests/conftest.py stops it in the fast tier)
@browser
def test_page_in_chromium(built, tmp_path):
    work, _, _, data, _ = built
    page_file = work / "results" / "matrix" / "matrix.html"
    url = page_file.as_uri()
    page = dom(url, tmp_path / "p1")
    assert len(page.rows) == len(page.visible()) == data["counts"]["cells"] == 5
    assert page.ids["shown"] == "5"
    assert sum("transition" in (r["class"] or "") for r in page.rows) == 2
    for href in page.links:  # every cell links to a report that exists
        assert (page_file.parent / unquote(href)).resolve().is_file(), href
    assert len(page.links) == 5

    bad = dom(url + "#outcome=bad", tmp_path / "p2")  # the page sets its own select from the fragment
    n_bad = sum(c["outcome"] == "bad" for c in data["cells"])
    assert n_bad == 1 and bad.ids["shown"] == str(n_bad)
    assert [r["data-outcome"] for r in bad.visible()] == ["bad"] * n_bad
    both = dom(url + "#outcome=good&gpu=unknown", tmp_path / "p3")
    assert both.visible() == [] and both.ids["shown"] == "0"
    moves = dom(url + "#transition=1", tmp_path / "p4")
    assert len(moves.visible()) == 2
    by_date = dom(url + "#sort=-outcome", tmp_path / "p5")
    outcomes = [r["data-outcome"] for r in by_date.rows]
    assert outcomes == sorted(outcomes, reverse=True) and outcomes != [r["data-outcome"] for r in page.rows]

    shot = tmp_path / "matrix.png"
    r = chromium(
        "--window-size=1200,760",
        f"--screenshot={shot}",
        url,
        profile=tmp_path / "p6",
    )
    assert (
        r.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    )
    if os.environ.get("ABBISECT_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, REPO_ROOT / "docs" / "matrix.png")
