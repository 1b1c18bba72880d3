"""The A/B report as files: report.md (fits one GitHub comment, portable) and outputs.md (every output)."""

from __future__ import annotations

from pathlib import Path

from abbisect.assess.accuracy import eval_run
from abbisect.infra.cache import Cache
from abbisect.infra.redact import Redactor
from abbisect.query.evals import pair
from abbisect.recipe import PackagedModel, Recipe
from abbisect.report.ab import OUTPUTS_FILE, fit, outputs_document, render_ab
from abbisect.report.accuracy import flipped_items
from abbisect.report.perf import svg
from abbisect.report.portable import Portable, portable_recipe
from abbisect.report.text import code


def model_path(recipe: Recipe, cache: Cache | Path) -> str | None:
    """Where the model the engine loads lies on this machine (a prepared packaged model, or a local path)."""
    if isinstance(recipe.model, PackagedModel):
        from abbisect.environment.weights import model_dir

        return str(model_dir(recipe.model, cache) / "model")
    return recipe.model


def portable_for(recipe: Recipe, cache: Cache | Path, repo: Path | None, recipe_file: Path | None, out: Path,
                 node_caches: list[str] | None = None) -> Portable:
    """What a stranger may see of this recipe's reports: its secrets masked, this machine's paths replaced."""
    return Portable.build(cache, repo, recipe_file, out, model_path(recipe, cache), Redactor.from_recipe(recipe),
                          node_caches or ())


def ab_files(ab, recipe: Recipe, cache: Cache | Path, repo: Path | None, recipe_file: Path | None, out: Path) -> dict[str, str]:
    """{file name: text} of an A/B's markdown; secrets masked and local paths replaced before any rendering."""
    portable = portable_for(recipe, cache, repo, recipe_file, out)
    doc = portable_recipe(recipe, cache)
    report = fit(lambda budget: portable.render(lambda: render_ab(
        ab, budget, recipe=doc, recipe_file=recipe_file.name if recipe_file else None)))
    files = {"report.md": report}
    if ab.a.outputs or ab.b.outputs:
        files[OUTPUTS_FILE] = portable.render(lambda: outputs_document(f"abbisect A/B {code(ab.name)}",
                                                                       [("A", ab.a), ("B", ab.b)]))
    runs = (eval_run(ab.trials("a")), eval_run(ab.trials("b"))) if recipe.eval is not None else (None, None)
    if runs[0] is not None and runs[1] is not None:
        a_run, b_run = runs[0], runs[1]
        flipped = portable.render(lambda: flipped_items(a_run, b_run, pair(a_run, b_run)))
        files[OUTPUTS_FILE] = (files.get(OUTPUTS_FILE, portable.render(lambda: f"# abbisect A/B {code(ab.name)}")) + "\n\n"
                               + flipped).strip() + "\n"
    if recipe.perf is not None and (picture := svg(recipe.perf, ab.trials("a"), ab.trials("b"))):
        files["perf.svg"] = picture
    if recipe.numerics is not None:
        from abbisect.assess.numerics import Numerics as Assessor
        from abbisect.report.numerics import svg as numerics_svg

        if picture := numerics_svg(recipe.numerics, Assessor(recipe).alpha, ab.trials("a"), ab.trials("b")):
            files["numerics.svg"] = portable.text(picture)
    return files
