"""`--dry-run`: the exact plan of a run, computed without building, launching or cloning anything."""

from __future__ import annotations

import re
from pathlib import Path

from abbisect import checkout
from abbisect.engines import adapter
from abbisect.environment import plan_env
from abbisect.recipe import DEMO_REPO, Recipe


def _revision(recipe: Recipe, ref: str, cache: Path) -> tuple[str, str]:
    """(sha, subject) when the repository is here; remote ones are resolved at run time, not cloned now."""
    repo = recipe.engine.repo
    if repo != DEMO_REPO and checkout._URL.match(repo):
        return "resolved at run time (remote repository)", ""
    rev = checkout.resolve(checkout.open_repo(repo, cache), ref)
    return rev.sha, rev.subject


def render_plan(recipe: Recipe, refs: tuple[str, str], cache: Path) -> str:
    lines = [f"recipe: {recipe.name}" + (f" — {recipe.description}" if recipe.description else "")]
    if recipe.hardware:
        lines.append(f"needs: {recipe.hardware}")
    lines.append(f"engine: {recipe.engine.kind} from {recipe.engine.repo}"
                 + (f" (subdir {recipe.engine.subdir})" if recipe.engine.subdir else ""))
    for side, ref in zip("AB", refs):
        sha, subject = _revision(recipe, ref, cache)
        lines.append(f"side {side}: {ref} → {sha} {subject}".rstrip())
        source = Path(f"<worktree of {ref}>")
        key, steps = plan_env(source, sha, recipe.install, recipe.engine.subdir, cache)
        key = key if re.fullmatch(r"[0-9a-f]{40}", sha) else "known once the sha is"
        lines.append(f"  install ({recipe.install.strategy}, env key {key}):")
        lines += [f"    $ {s.display()}" for s in steps]
    model = recipe.model if isinstance(recipe.model, str) or recipe.model is None else (
        f"{recipe.model.file} from package {recipe.model.package} (converted once, cached)")
    if recipe.probe is not None:
        lines.append("check: kernel probe (no server): " + ", ".join(f"{k}={v}" for k, v in recipe.probe.items()))
    else:
        plan = adapter(recipe.engine.kind).plan(recipe, "$VENV/bin/python", str(model), "127.0.0.1", 0)
        env = " ".join(f"{k}={v}" for k, v in {**plan.env, **recipe.env}.items())
        gpus = "" if recipe.gpus is None else f"CUDA_VISIBLE_DEVICES={','.join(map(str, recipe.gpus))} "
        lines.append(f"launch (both sides, port chosen at run time): {gpus}{env} {' '.join(plan.argv)}".replace("  ", " "))
        ready = " and ".join(x for x in (f"GET {plan.ready_http} = 200" if plan.ready_http else "",
                                         f"log matches /{plan.ready_log}/" if plan.ready_log else "") if x)
        lines.append(f"ready when: {ready} (timeout {recipe.timeouts.ready:.0f} s)")
        s = recipe.sampling
        lines.append(f"query: {recipe.api} API, temperature {s.temperature}, max_tokens {s.max_tokens}, seed {s.seed}")
        for n, p in enumerate(recipe.prompts):
            lines.append(f"  p{n}: {p.prompt!r}" + (f"  expect /{p.expect}/" if p.expect else ""))
    v = recipe.verdict
    lines.append(f"bad if: {', '.join(v.bad_if)}; untestable if: {', '.join(v.skip_if)}")
    return "\n".join(lines)
