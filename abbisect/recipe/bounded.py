"""The files a recipe names, read bounded before anything is built from them: text files only, a size cap, YAML
nesting and alias expansion capped while composing, so a hostile file is one line and exit 2, never a hung
process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from abbisect.infra.errors import UserError
from abbisect.recipe.schema import MAX_PROMPTS

MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000  # after expanding aliases


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting while composing (the composer recurses: 20,000 levels would
    blow Python's stack)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"nested deeper than {MAX_YAML_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes the document has once aliases are expanded (what validation would walk), without expanding."""
    if id(node) in memo:
        return memo[id(node)]
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def load_yaml(text: str, source: str) -> Any:
    """YAML (or JSON) with nesting and alias expansion capped before anything is built from it."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        memo: dict[int, int] = {}
        size = _expanded_size(node, memo)
        if size > MAX_YAML_NODES and size > len(memo):  # more values than nodes written: aliases multiply them
            raise UserError(f"{source}: too large once YAML aliases are expanded ({size:,} values, limit "
                            f"{MAX_YAML_NODES:,}): a recipe does not need anchors that multiply")
        if size > MAX_YAML_NODES:
            raise UserError(f"{source}: too many values ({size:,}, limit {MAX_YAML_NODES:,}; a recipe takes at most "
                            f"{MAX_PROMPTS:,} prompts)")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()


def read_text_file(path: Path, what: str, limit: int) -> str:
    """A text file's content, or a UserError that never quotes it (binary, not UTF-8, too large)."""
    size = path.stat().st_size
    if size > limit:
        raise UserError(f"{what} {path}: {size:,} bytes, more than the limit of {limit:,}")
    data = path.read_bytes()
    if b"\0" in data:
        raise UserError(f"{what} {path}: not a text file (binary content)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path}: not UTF-8 text (byte {exc.start:,})") from None
