"""`--dry-run`: the exact plan of a run, computed without building, launching or cloning anything."""

from __future__ import annotations

import re
from pathlib import Path

from abbisect import checkout
from abbisect.environment.base import Step
from abbisect.environment.pins import AfterEngine
from abbisect.environment.store import EnvPlan, env_plan
from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError
from abbisect.launch.engines import adapter
from abbisect.recipe import DEMO_REPO, Recipe


def env_plan_for(recipe: Recipe, repo: Path, sha: str, cache: Cache | Path,
                 after: AfterEngine | None = None) -> EnvPlan:
    """The environment a trial of `sha` will build, planned from the commit's own tree.

    `repo` is any git directory that holds the commit (the engine's repository, the cache's clone, or the
    commit's worktree): files are read with `git show`, so the plan equals the build's.
    """
    worktree = checkout.worktree_path(repo, sha, cache, tuple(recipe.engine.sparse))  # where the trial builds it
    return env_plan(worktree, sha, recipe.install, recipe.engine.subdir, cache, git_dir=repo, after=after)


def plan_for(recipe: Recipe, repo: Path, sha: str, cache: Cache | Path,
             after: AfterEngine | None = None) -> tuple[str, list[Step]]:
    """(env key, build steps) of a trial of `sha`, as `run` and `bisect` will build it; `after` is what the
    trial installs after the engine (its pins, a dependency commit)."""
    plan = env_plan_for(recipe, repo, sha, cache, after)
    return plan.key, list(plan.steps)


def _local_repo(recipe: Recipe, cache: Cache | Path) -> tuple[Path | None, str]:
    """The engine's repository if it is here; a URL is never cloned for a plan, but an earlier clone in the
    cache is used as it is (not fetched)."""
    repo = recipe.engine.repo
    if repo != DEMO_REPO and checkout._URL.match(repo):
        clone = Cache.at(cache).clone(repo)
        return (clone, " (the cache's clone, not fetched now)") if clone.is_dir() else (None, "")
    return checkout.open_repo(repo, cache), ""


def _revision(recipe: Recipe, ref: str, cache: Cache | Path) -> tuple[Path | None, str, str]:
    """(repository, sha, subject) when the repository is here; remote ones are resolved at run time."""
    repo, note = _local_repo(recipe, cache)
    if repo is None:
        return None, "resolved at run time (remote repository)", ""
    rev = checkout.resolve(repo, ref)
    return repo, rev.sha, rev.subject + note


def render_env(recipe: Recipe, repo: Path | None, sha: str, ref: str, cache: Cache | Path,
               after: AfterEngine | None = None) -> list[str]:
    """The install section of a plan, indented under its side."""
    try:
        if repo is None:
            plan = env_plan(Path(f"<worktree of {ref}>"), sha, recipe.install, recipe.engine.subdir, cache,
                            after=after)
        else:
            plan = env_plan_for(recipe, repo, sha, cache, after)
    except InfraError as exc:  # e.g. the wheel index cannot be asked from here: the plan says so
        return [f"  install ({recipe.install.strategy}): cannot be planned from here: {exc}"]
    key = plan.key if re.fullmatch(r"[0-9a-f]{40}", sha) else "known once the sha is"
    lines = [f"  install ({recipe.install.strategy}, env key {key}):"]
    lines += [f"    {k}: {v}" for k, v in plan.facts.items()]
    if plan.blocker:
        lines.append(f"    untestable here: {plan.blocker}")
    lines += [f"    $ {s.display()}" for s in plan.steps]
    return lines


def render_plan(recipe: Recipe, refs: tuple[str, str], cache: Cache | Path,
                pins: tuple[tuple[str, ...], ...] = ((), ()), labels: tuple[str, str] | None = None) -> str:
    """The plan of both sides; `labels` name the refs where they are not refs themselves (a bisect's date
    end, "2026-07-20 → 8905cbd42f", is planned by its sha)."""
    lines = [f"recipe: {recipe.name}" + (f" — {recipe.description}" if recipe.description else "")]
    if recipe.hardware:
        lines.append(f"needs: {recipe.hardware}")
    lines.append(f"engine: {recipe.engine.kind} from {recipe.engine.repo}"
                 + (f" (subdir {recipe.engine.subdir})" if recipe.engine.subdir else ""))
    for side, ref, side_pins, label in zip("AB", refs, pins, labels or refs):
        repo, sha, subject = _revision(recipe, ref, cache)
        lines.append(f"side {side}: {label} → {sha} {subject}".rstrip() + (f"; pins {' '.join(side_pins)}" if side_pins else ""))
        lines += render_env(recipe, repo, sha, ref, cache, AfterEngine(tuple(side_pins)) if side_pins else None)
    model = recipe.model if isinstance(recipe.model, str) or recipe.model is None else (
        f"{recipe.model.file} from package {recipe.model.package} (converted once, cached)")
    if recipe.probe is not None:
        probe = recipe.probe.model_dump(exclude_defaults=True)
        lines.append("check: kernel probe (no server): " + ", ".join(f"{k}={v}" for k, v in probe.items()))
    else:
        plan = adapter(recipe.engine.kind).plan(recipe, "$VENV/bin/python", str(model), "127.0.0.1", 0)
        env = " ".join(f"{k}={v}" for k, v in {**plan.env, **plan.shown, **recipe.env}.items())
        gpus = "" if recipe.gpus is None else f"CUDA_VISIBLE_DEVICES={','.join(map(str, recipe.gpus))} "
        lines.append(f"launch (both sides, port chosen at run time): {gpus}{env} {' '.join(plan.argv)}".replace("  ", " "))
        ready = " and ".join(x for x in (f"GET {plan.ready_http} = 200" if plan.ready_http else "",
                                         f"log matches /{plan.ready_log}/" if plan.ready_log else "") if x)
        lines.append(f"ready when: {ready} (timeout {recipe.timeouts.ready:.0f} s)")
        s = recipe.sampling
        lines.append(f"query: {recipe.api} API, temperature {s.temperature}, max_tokens {s.max_tokens}, seed {s.seed}")
        for n, p in enumerate(recipe.prompts):
            lines.append(f"  p{n}: {p.prompt!r}" + (f"  expect /{p.expect}/" if p.expect else ""))
        if recipe.query.concurrency > 1 or recipe.query.repeat > 1 or recipe.query.batch_invariance:
            q = recipe.query
            lines.append(f"  sent {q.concurrency} in flight, each prompt {q.repeat}×"
                         + (", and one at a time to compare (batch invariance)" if q.batch_invariance else ""))
        if recipe.eval is not None:
            from abbisect.query.evals import plan_lines

            lines += plan_lines(recipe.eval)
        if recipe.numerics is not None:
            m = recipe.numerics
            lines.append(f"numerics: {len(m.texts)} text(s) scored teacher-forced (completions, echo, top {m.top_k}), "
                         f"one at a time and {m.concurrency} at once"
                         + (f"; each prompt continued greedily with its top {m.top_k}" if m.continuations else "")
                         + f"; different from {m.min_effect:g} nats/token"
                         + ("" if m.deterministic else f", up to {m.max_launches} launches a commit"))
        if recipe.perf is not None:
            f = recipe.perf
            load = ", ".join(x for x in (f"{f.concurrency} in flight" if f.concurrency else "",
                                         f"{f.request_rate:g} requests/s" if f.request_rate else "") if x)
            lines.append(f"perf: {f.metric}, {f.requests} requests a pass ({load}, {f.max_tokens} tokens each), "
                         f"{f.passes} passes × {f.launches} launches a commit, up to {f.max_launches} launches; "
                         f"different from {f.min_effect:.0%} at p ≤ {f.alpha:g}")
    if recipe.repeats.flaky:
        r = recipe.repeats
        lines.append(f"repeats: {r.launches} launch(es) × {r.passes} pass(es) a commit, up to {r.cap} launches; "
                     f"judged by failure rate (Fisher, alpha {r.alpha:g}, a difference from {r.min_effect:g})")
    v = recipe.verdict
    lines.append(f"bad if: {', '.join(v.bad_if)}; untestable if: {', '.join(v.skip_if)}")
    return "\n".join(lines)
