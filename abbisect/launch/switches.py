"""The catalogue of engine feature switches, and which of them a commit and a recipe can try.

A switch is one change to a launch that turns a feature off or picks another implementation of it
(`--enforce-eager`, `--attention-backend triton`, `VLLM_USE_DEEP_GEMM=0`, dropping `--enable-torch-compile`).
`abbisect narrow` tries them one at a time on a failing commit; this module only answers two questions,
both without running anything:

- `accepted(catalogue, help_text)`: which switches the commit's own `--help` proves it understands. The
  help is parsed for the option names argparse declares (`--flag`, `--flag, --no-flag`, `--flag X, -f X`),
  so `--enable-prefix-caching` is not taken for a prefix of `--enable-prefix-caching-hash-algo`, and a name
  only mentioned in another option's prose does not count.
- `applicable(switch, launch_flags, env)`: the launch to try, or None when the recipe already runs that
  way. Options the switch `replaces` are taken out first (with their values), so a recipe's
  `--attention-backend fa3` is swapped, never duplicated.

Which help: since 2025-09-25 (vLLM #24903) plain `vllm serve --help` prints only the section names, and
the options need `vllm serve --help=all` (older vLLM rejects `--help=all`, so try it first and fall back to
`--help`). SGLang: `python -m sglang.launch_server --help`.

The data lives in abbisect/builtin/switches.yaml; its header documents the fields.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from abbisect.infra.errors import UserError

if TYPE_CHECKING:
    from abbisect.recipe import Recipe

# "command": a recipe's own switches for an engine abbisect has no adapter for (recipe narrow.switches)
Engine = Literal["vllm", "sglang", "command"]

# An option token: "-x", "--name", "--name=value"; not a negative number ("-1" is a value).
_OPTION = re.compile(r"^--?[A-Za-z]")
# An argparse invocation line: two to six spaces, then an option name (description lines are indented more,
# and usage continuation lines start with "[").
_INVOCATION = re.compile(r"^ {1,6}(-{1,2}[A-Za-z0-9].*)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mark(_Frozen):
    """One end of the range in which a switch exists with its spelling."""

    date: dt.date
    pr: int | None = None
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,40}$")
    version: str | None = None
    note: str | None = None


class Switch(_Frozen):
    id: str = Field(pattern=r"^(vllm|sglang|command)\.[A-Za-z0-9][A-Za-z0-9-]*$")
    engine: Engine
    feature: str = Field(min_length=3)
    flag: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    replaces: tuple[str, ...] = ()
    help_names: tuple[str, ...] = ()
    help_mentions: tuple[str, ...] = ()
    since: Mark | None = None
    until: Mark | None = None
    source: str = ""
    # How much of the engine the switch turns off: 1 one kernel or backend swapped, 2 one feature off, 3 a
    # whole mode (compilation, CUDA graphs, the engine generation). The narrowest passing switch is the
    # workaround that costs the least.
    breadth: Literal[1, 2, 3] = 2
    accepted_by: tuple[str, ...] = ()
    cpu: str | None = None
    note: str | None = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"not an environment variable name: {name!r}")
        return env

    @field_validator("replaces", "help_names")
    @classmethod
    def _names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not (_OPTION.match(name) or _ENV_NAME.match(name)):
                raise ValueError(f"neither an option nor an environment variable: {name!r}")
        return names

    @model_validator(mode="after")
    def _shape(self) -> Switch:
        if not self.id.startswith(self.engine + "."):
            raise ValueError(f"{self.id}: the id must start with its engine ({self.engine}.)")
        if self.flag and not _OPTION.match(self.flag[0]):
            raise ValueError(f"{self.id}: a flag starts with an option, not {self.flag[0]!r}")
        if self.flag and self.env:
            raise ValueError(f"{self.id}: give `flag` or `env`, not both")
        if not self.flag and not self.env and not self.replaces:
            raise ValueError(f"{self.id}: give `flag`, `env`, or only `replaces` to drop options")
        if self.since and self.until and self.until.date < self.since.date:
            raise ValueError(f"{self.id}: `until` is before `since`")
        return self

    @property
    def removes_only(self) -> bool:
        """The switch drops the recipe's options and adds nothing."""
        return not self.flag and not self.env

    def option_names(self) -> tuple[str, ...]:
        """The option names in `flag`, without values ("--x=1" gives "--x")."""
        return tuple(option_name(t) for t in self.flag if _OPTION.match(t))


class Catalogue(_Frozen):
    switches: tuple[Switch, ...]

    @field_validator("switches")
    @classmethod
    def _unique(cls, switches: tuple[Switch, ...]) -> tuple[Switch, ...]:
        seen: set[str] = set()
        for s in switches:
            if s.id in seen:
                raise ValueError(f"duplicate switch id {s.id}")
            seen.add(s.id)
        return switches

    def for_engine(self, engine: Engine) -> Catalogue:
        return Catalogue(switches=tuple(s for s in self.switches if s.engine == engine))

    def get(self, switch_id: str) -> Switch:
        for s in self.switches:
            if s.id == switch_id:
                return s
        raise KeyError(switch_id)


class Variant(_Frozen):
    """A launch to try: the recipe's flags and environment with one switch applied."""

    switch: str
    flags: tuple[str, ...]
    env: dict[str, str]
    removed: tuple[str, ...] = ()  # the recipe's tokens that the switch took out


def parse(text: str) -> Catalogue:
    return Catalogue.model_validate(yaml.safe_load(text))


def load() -> Catalogue:
    """The built-in catalogue (abbisect/builtin/switches.yaml)."""
    return parse(resources.files("abbisect.builtin").joinpath("switches.yaml").read_text(encoding="utf-8"))


def option_name(token: str) -> str:
    """An option token's name: no "=value", underscores as dashes (vLLM accepts both spellings)."""
    name = token.split("=", 1)[0]
    dashes = len(name) - len(name.lstrip("-"))
    return name[:dashes] + name[dashes:].replace("_", "-")


def help_options(help_text: str) -> frozenset[str]:
    """The option names an argparse `--help` declares (not the ones its prose mentions)."""
    names: set[str] = set()
    for line in help_text.splitlines():
        m = _INVOCATION.match(line)
        if not m:
            continue
        # The invocation ends where the help column starts (two or more spaces) on short lines.
        invocation = re.split(r"\s{2,}", m.group(1).rstrip(), maxsplit=1)[0]
        for part in invocation.split(", "):
            token = part.strip().split(" ", 1)[0]
            if _OPTION.match(token):
                names.add(option_name(token))
    return frozenset(names)


def is_accepted(switch: Switch, help_text: str, declared: frozenset[str] | None = None) -> bool:
    """Whether `help_text` shows the switch's spelling. Environment-only switches are never shown there."""
    declared = help_options(help_text) if declared is None else declared
    if switch.help_names:
        ok = any(option_name(n) in declared for n in switch.help_names if _OPTION.match(n))
    elif switch.flag:
        ok = all(n in declared for n in switch.option_names())
    elif switch.removes_only:
        # Dropping an option is possible wherever the option exists.
        ok = any(_matches(option_name(n), p) for p in switch.replaces if _OPTION.match(p) for n in declared)
    else:
        return False
    return ok and all(m in help_text for m in switch.help_mentions)


def accepted(catalogue: Catalogue | Iterable[Switch], help_text: str, *, keep_env: bool = False) -> list[Switch]:
    """The switches whose spelling the commit's `--help` declares, in catalogue order.

    Environment-only switches cannot be checked against `--help`; `keep_env=True` keeps them (their
    since/until is then the only guide). Filter the catalogue by engine first (`Catalogue.for_engine`).
    """
    switches = catalogue.switches if isinstance(catalogue, Catalogue) else tuple(catalogue)
    declared = help_options(help_text)
    out = []
    for s in switches:
        if s.flag or s.removes_only:
            if is_accepted(s, help_text, declared):
                out.append(s)
        elif keep_env:
            out.append(s)
    return out


def _matches(name: str, pattern: str) -> bool:
    """Whether a (normalised) option name falls under a `replaces` pattern; a trailing "*" is a prefix."""
    if pattern.endswith("*"):
        return name.startswith(option_name(pattern[:-1]))
    return name == option_name(pattern)


def _env_matches(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def _glued(token: str, short: str) -> bool:
    """"-O3" is the short option "-O" with its value glued on (argparse's form for one-letter options)."""
    return len(short) == 2 and short[1] != "-" and token.startswith(short) and len(token) > 2 \
        and not token.startswith("--")


def option_items(flags: Sequence[str]) -> list[list[str]]:
    """The flags as items: an option with the values that follow it, or a lone positional token."""
    items: list[list[str]] = []
    for token in flags:
        if _OPTION.match(token) or not items:
            items.append([token])
        else:
            items[-1].append(token)
    return items


def _hit(item: Sequence[str], patterns: Iterable[str]) -> bool:
    head = item[0]
    if not _OPTION.match(head):
        return False
    name = option_name(head)
    return any(_matches(name, p) or _glued(head, p) for p in patterns if _OPTION.match(p))


def _contains(flags: Sequence[str], wanted: Sequence[str]) -> bool:
    """Whether the flags already hold `wanted` as one item (same option, same values)."""
    if not wanted:
        return True
    want = [option_name(wanted[0]) if _OPTION.match(wanted[0]) else wanted[0], *wanted[1:]]
    for item in option_items(flags):
        have = [option_name(item[0]) if _OPTION.match(item[0]) else item[0], *item[1:]]
        if have == want:
            return True
        # "--x=v" against "--x v"
        if "=" in item[0] and len(item) == 1 and [option_name(item[0]), item[0].split("=", 1)[1]] == want:
            return True
    return False


def applicable(switch: Switch, launch_flags: Sequence[str], env: Mapping[str, str] | None = None) -> Variant | None:
    """The launch to try with `switch`, or None when it would change nothing.

    None when the recipe already holds the switch's flag (and environment), or, for a switch that only
    drops options, when the recipe has none of them. Otherwise the options named by `replaces`, and other
    values of the switch's own options, are removed with their values, and the switch is appended.
    """
    env = dict(env or {})
    option_patterns = [p for p in switch.replaces if _OPTION.match(p)]
    env_patterns = [p for p in switch.replaces if not _OPTION.match(p)]
    items = option_items(launch_flags)

    if switch.removes_only:
        if not any(_hit(item, option_patterns) for item in items) and not any(
                _env_matches(k, p) for k in env for p in env_patterns):
            return None
    else:
        has_flag = _contains(launch_flags, switch.flag)
        has_env = all(env.get(k) == v for k, v in switch.env.items())
        if has_flag and has_env:
            return None

    drop = [*option_patterns, *switch.option_names()]
    kept: list[str] = []
    removed: list[str] = []
    for item in items:
        (removed if _hit(item, drop) else kept).extend(item)
    new_env = {k: v for k, v in env.items() if not any(_env_matches(k, p) for p in env_patterns)}
    removed += [f"{k}={env[k]}" for k in env if k not in new_env]
    new_env.update(switch.env)
    return Variant(switch=switch.id, flags=(*kept, *switch.flag), env=new_env, removed=tuple(removed))


def catalogue_for(recipe: Recipe) -> list[Switch]:
    """The switches to try: the built-in catalogue's for the engine (unless narrow.catalogue is off), then the
    recipe's own."""
    builtin = list(load().for_engine(recipe.engine.kind).switches) if recipe.narrow.catalogue and \
        recipe.engine.kind in ("vllm", "sglang") else []
    own = []
    for n, data in enumerate(recipe.narrow.switches):
        try:
            own.append(Switch.model_validate({"engine": recipe.engine.kind, **data}))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise UserError(f"narrow.switches[{n}]{'.' + where if where else ''}: {first['msg']}") from None
    return [*builtin, *own]
