"""`abbisect compare A [B]`: two per-item result files, paired by item, judged by exact McNemar; nothing runs.

A file is lm-evaluation-harness's `--log_samples` output (a samples_<task>_<date>.jsonl, a folder of them,
or a dumped {"samples": …}) or abbisect's own (a results.json whose sides carry `extras.eval`, or one
EvalRun as dumped). `PATH:SIDE` names a side of an abbisect file; one abbisect file with two sides and no B
compares them. Items are paired by id and, where lm-eval wrote one, by doc_hash: an id that holds another
document on each side is no pair (named, and refused when most are). The exit code is the call, so a CI script
can gate on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abbisect.commands.endings import exit_code, exit_help
from abbisect.commands.options import json_option, verbosity, verbosity_options
from abbisect.infra.errors import UserError
from abbisect.recipe.eval import MIN_DROP

if TYPE_CHECKING:
    from abbisect.query.evals import EvalRun


def _split(spec: str) -> tuple[Path, str | None]:
    """PATH or PATH:SIDE (a path that exists as written wins, colons and all)."""
    if Path(spec).exists():
        return Path(spec), None
    path, sep, side = spec.rpartition(":")
    if sep and path and Path(path).exists():
        return Path(path), side
    raise UserError(f"no such file or folder: {spec}")


def _abbisect_runs(path: Path) -> dict[str, EvalRun] | None:
    """The eval runs of an abbisect JSON file by side, or None when it is not one of abbisect's."""
    from abbisect.query.evals import runs_in_results

    if path.is_dir() or path.suffix != ".json":
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path.name}: not JSON") from None
    if isinstance(data, dict) and isinstance(data.get("samples"), dict):
        return None  # lm-eval's own
    runs = runs_in_results(data)
    if not runs:
        from abbisect.query.lmeval import lm_eval_results

        raise UserError(lm_eval_results(path) or (
            f"{path.name}: no per-item eval results in it (an abbisect results.json carries them as each side's "
            "extras.eval; lm-eval's are samples_<task>_<date>.jsonl)"))
    return runs


# A side as read: its label (the file, in its run folder), its run, and lm-eval's doc_hash of each doc_id.
Labelled = tuple[str, "EvalRun", dict[str, str]]


def _read(spec: str, task: str | None, metric: str | None, filter_: str | None) -> list[Labelled]:
    """Each side the spec names: one, or every side of an abbisect file without :SIDE."""
    from abbisect.query.lmeval import read_samples

    path, side = _split(spec)
    runs = _abbisect_runs(path)
    if runs is None:
        if side is not None:
            raise UserError(f"{spec}: :SIDE names a side of an abbisect results file, not of lm-eval samples")
        run, sel = read_samples(path, task, metric, filter_)
        if sel.note:
            click.echo(f"abbisect: {sel.note}", err=True)
        return [(f"{sel.path} ({sel.task}, {sel.filter}, {sel.metric})", run, dict(sel.hashes))]
    if side is not None:
        if side not in runs:
            raise UserError(f"{path.name}: no side {side!r} with eval results (there: {', '.join(runs)})")
        return [(f"{path}:{side}", runs[side], {})]
    return [(f"{path}:{s}" if s else str(path), r, {}) for s, r in runs.items()]


def _one(spec: str, sides: list[Labelled]) -> Labelled:
    if len(sides) != 1:
        names = ", ".join(label.rpartition(":")[2] for label, _, _ in sides)
        raise UserError(f"{spec} holds {len(sides)} sides with eval results ({names}): name one as {spec}:SIDE")
    return sides[0]


def _without(run: EvalRun, ids: set[str]) -> EvalRun:
    from dataclasses import replace

    return replace(run, items=tuple(i for i in run.items if i.id not in ids))


@click.command("compare", epilog=exit_help("compare") + " 0: the data rule out a change of --min-change; 1: a "
               "change of at least --min-change, significant; 3: neither yet (more items may settle it).")
@click.argument("a")
@click.argument("b", required=False)
@click.option("--task", help="the lm-eval task to read, where a file or folder holds several")
@click.option("--metric", help="the per-item 0/1 metric of lm-eval samples (exact_match, acc, …), where there "
              "are several")
@click.option("--filter", "filter_", help="the lm-eval filter (strict-match, flexible-extract, …), where there "
              "are several")
@click.option("--min-change", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=MIN_DROP,
              show_default=True, help="the smallest accuracy change that matters, as a fraction (0.03 = 3 points)")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="significance level of exact McNemar")
@click.option("--flip-rate", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="items an A-vs-A flips (a fraction): a comparison that saw fewer flips is judged as if it "
              "had seen that many")
@click.option("--seed", type=int, default=0, show_default=True, help="of the paired bootstrap")
@json_option("print the comparison as JSON (abbisect's envelope) instead of the table")
@verbosity_options
def compare(a: str, b: str | None, task: str | None, metric: str | None, filter_: str | None, min_change: float,
            alpha: float, flip_rate: float, seed: int, as_json: bool) -> None:
    """Compare two per-item result files with the paired test (exact McNemar, Wilson intervals, a paired
    bootstrap): lm-eval --log_samples output or abbisect results. Launches nothing."""
    from abbisect.infra import progress
    from abbisect.query.evals import pair
    from abbisect.query.lmeval import mismatched

    for spec in (a, b):  # both checked before either is read
        if spec is not None:
            _split(spec)
    if b is None and _abbisect_runs(_split(a)[0]) is None:
        raise UserError(f"one file compares its two sides, and {a} is lm-eval samples of one run: give B")
    first = _read(a, task, metric, filter_)
    if b is None:
        if len(first) != 2:
            raise UserError(f"one file compares its two sides; {a} holds {len(first)} with eval results (give B, "
                            "or name sides as PATH:SIDE)")
        (label_a, run_a, hashes_a), (label_b, run_b, hashes_b) = first
    else:
        label_a, run_a, hashes_a = _one(a, first)
        label_b, run_b, hashes_b = _one(b, _read(b, task, metric, filter_))
    # Items are paired by doc_id and, where lm-eval wrote one, by the document's hash: the same id over another
    # document (another order, another version of the dataset) is no pair.
    other = mismatched(hashes_a, hashes_b)
    if other:
        common = len(set(hashes_a) & set(hashes_b))
        said = (f"{len(other):,} of the {common:,} doc_ids both runs hold name another document on each side "
                f"(lm-eval's doc_hash differs: doc {', '.join(other[:5])}{', …' if len(other) > 5 else ''})")
        if len(other) * 2 > common:
            raise UserError(f"{said}: these are not the same items in the same order (another --limit, a "
                            "shuffled or another version of the dataset); nothing to pair")
        click.echo(f"abbisect: warning: {said}: not paired, not compared", err=True)
        run_a, run_b = _without(run_a, set(other)), _without(run_b, set(other))
    paired = pair(run_a, run_b)
    if paired.n == 0:
        common = len(set(run_a.by_id()) & set(run_b.by_id()))
        raise UserError(f"no item answered on both sides ({common:,} ids in common; A's are like "
                        f"{', '.join(i.id for i in run_a.items[:3])}, B's like "
                        f"{', '.join(i.id for i in run_b.items[:3])})")
    # Both files are read and paired: the statistics load now (a usage error never pays for them).
    from abbisect.infra.envelope import dumps
    from abbisect.infra.serial import dump
    from abbisect.report.accuracy import headline, text_table
    from abbisect.stats import compare_paired

    cmp = compare_paired(paired.a, paired.b, min_change=min_change, alpha=alpha, baseline_flip_rate=flip_rate,
                         seed=seed)
    line = headline(cmp)
    if as_json:
        data = {"line": line, "call": cmp.call.value, "a": {"source": label_a}, "b": {"source": label_b},
                "comparison": dump(cmp), "paired": paired.n, "lost": list(paired.lost), "gained": list(paired.gained),
                "only_a": list(paired.only_a), "only_b": list(paired.only_b), "errors_a": list(paired.errors_a),
                "errors_b": list(paired.errors_b), "mismatched": other}
        click.echo(dumps("compare", data, indent=2))
    else:
        click.echo(line)
        if verbosity(click.get_current_context(silent=True)) > progress.QUIET:  # -q: the answer only
            click.echo(text_table(cmp, paired, (label_a, label_b)))
            if other:
                click.echo(f"note: {len(other):,} doc_ids name another document on each side (doc_hash): not "
                           "compared")
    raise SystemExit(exit_code("compare", {"same": "same", "different": "different"}.get(cmp.call.value,
                                                                                       "not-sure")))
