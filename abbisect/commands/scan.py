"""`abbisect scan LOG...`: known signatures in any server log, with meanings, hints and a severity gate."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from abbisect.commands.options import json_option, verbosity_options
from abbisect.infra.errors import UserError
from abbisect.infra.logstream import MAX_LINE
from abbisect.infra.serial import dump
from abbisect.score.scanner import LineScanner
from abbisect.score.signatures import (
    SEVERITIES,
    Signature,
    SignatureMatch,
    load_catalogue,
    severity_at_least,
)

BLOCK = 1 << 20  # bytes read at a time (then to the end of the line)


def _scan(path: Path, catalogue: list[Signature]) -> LineScanner:
    """A log streamed through a `LineScanner` in blocks of whole lines, so memory stays flat however large
    the log is (the scanner keeps at most 20 matches a signature). A line longer than MAX_LINE is scanned by
    its beginning."""
    scanner = LineScanner(catalogue)
    with path.open("rb") as fh:
        while block := fh.read(BLOCK):
            if not block.endswith(b"\n"):
                block += fh.readline(MAX_LINE)  # the end of the block's last line
                while not block.endswith(b"\n") and (rest := fh.readline(BLOCK)):  # an overlong one: skipped
                    if rest.endswith(b"\n"):
                        block += b"\n"
            lines = block.removesuffix(b"\n")
            # Logs mix encodings and raw bytes from native crashes; never fail on decoding.
            scanner.feed_many(lines.decode("utf-8", errors="replace"), lines.count(b"\n") + 1)
    return scanner


def _plain(path: str, matches: list[SignatureMatch], root: tuple[int, str] | None) -> None:
    if not matches:
        click.echo(f"{path}: no known signatures")
    for m in matches:
        groups = f" [{', '.join(m.groups)}]" if m.groups else ""
        click.echo(f"{path}:{m.line_no}: {m.severity.upper()} {m.id}{groups}: {m.meaning}")
        if m.hint:
            click.echo(f"    hint: {m.hint}")
    if root:
        click.echo(f"{path}:{root[0]}: first exception (root cause): {root[1]}")


def _table(path: str, matches: list[SignatureMatch], root: tuple[int, str] | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=path, show_lines=False)
    for col in ("line", "severity", "signature", "captured", "meaning / hint"):
        table.add_column(col)
    for m in matches:
        table.add_row(
            str(m.line_no), m.severity, m.id, ", ".join(m.groups), f"{m.meaning}\n[dim]{m.hint}[/dim]"
        )
    console = Console()
    if matches:
        console.print(table)
    else:
        console.print(f"{path}: no known signatures")
    if root:
        console.print(f"first exception (root cause), line {root[0]}: {root[1]}", markup=False)


@click.command("scan", epilog="Exit codes: 0 clean, 1 matched (a signature at or above --fail-on), 2 usage, "
               "2 infra, 70 internal, 130 interrupted, 143 terminated.")
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--fail-on",
    type=click.Choice(SEVERITIES),
    default="error",
    show_default=True,
    help="Exit 1 when a signature at or above this severity is found.",
)
@json_option("Print one JSON object instead of a table.")
@verbosity_options
def scan(logs: tuple[str, ...], fail_on: str, as_json: bool) -> None:
    """Scan server logs for known failure signatures and explain them."""
    for path in logs:  # all checked first: a missing file fails before output
        if not Path(path).is_file():
            raise UserError(f"log file not found: {path}")
    catalogue = load_catalogue()
    report = []
    failed = False
    for path in logs:
        scanner = _scan(Path(path), catalogue)
        matches, root = scanner.matches, scanner.first_exception
        failed = failed or any(severity_at_least(m.severity, fail_on) for m in matches)
        report.append((path, matches, root))
    if as_json:
        out = {
            "fail_on": fail_on,
            "failed": failed,
            "logs": [
                {
                    "path": path,
                    "matches": [dump(m) for m in matches],
                    "first_exception": {"line_no": root[0], "summary": root[1]} if root else None,
                }
                for path, matches, root in report
            ],
        }
        from abbisect.infra.envelope import dumps

        click.echo(dumps("scan", out, indent=2))
    else:
        show = _table if sys.stdout.isatty() else _plain
        for path, matches, root in report:
            show(path, matches, root)
    if failed:
        raise SystemExit(1)

