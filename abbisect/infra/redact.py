"""Secrets never written: the recipe's secret environment values masked in every text and JSON abbisect writes.

A variable of `env` or `install.env` is secret when its name looks like one (`*TOKEN*`, `*KEY*`, `*SECRET*`,
`*PASSWORD*`), when its value is taken from the user's environment by reference (`${HF_TOKEN}`), or when the
recipe lists it in `secret_env`; `public_env` makes a variable visible whatever its name. Other values stay
visible, so a report still says how to reproduce. References are expanded only when a child process is
started (`expand_env`), so the value never enters the recipe, its dump or its fingerprint.

Pure: a `Redactor` is built from the recipe (and the environment the references are read from) and applied
to text and to JSON-able data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MASK = "***"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_REFERENCE = re.compile(r"\$\{(\w+)\}")
# Shorter values are too likely to occur by chance in a log ("1", "cpu"); their NAME=value form is masked.
MIN_SCRUB = 4


def expand(value: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` replaced by the variable's value in `environ` (empty when unset)."""
    return _REFERENCE.sub(lambda m: environ.get(m.group(1), ""), value)


def expand_env(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A recipe's env with references expanded: what a child process (server or build step) receives."""
    source = os.environ if environ is None else environ
    return {k: expand(v, source) for k, v in env.items()}


def is_reference(value: str) -> bool:
    return bool(_REFERENCE.search(value))


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env as shown (build logs, plans) when no recipe is at hand: secret-looking names and references."""
    return {k: MASK if looks_secret(k) or is_reference(v) else v for k, v in env.items()}


@dataclass(frozen=True)
class Redactor:
    names: frozenset[str] = frozenset()  # variables whose values are masked
    values: tuple[str, ...] = ()  # the secret values themselves (literal or expanded), longest first

    @classmethod
    def from_recipe(cls, recipe: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """From a `Recipe` or its JSON dump; `environ` is where references are read (default os.environ)."""
        data = recipe if isinstance(recipe, dict) else recipe.model_dump(mode="json")
        source = os.environ if environ is None else environ
        public = set(data.get("public_env") or ())
        forced = set(data.get("secret_env") or ())
        names: set[str] = set()
        values: set[str] = set()
        for envmap in ((data.get("install") or {}).get("env") or {}, data.get("env") or {}):
            for name, value in envmap.items():
                if name in public:
                    continue
                if name in forced or looks_secret(name) or is_reference(value):
                    names.add(name)
                    values.update(v for v in (value, expand(value, source)) if v and not is_reference(v))
        values = {v for v in values if len(v) >= MIN_SCRUB}
        return cls(frozenset(names), tuple(sorted(values, key=len, reverse=True)))

    def __bool__(self) -> bool:
        return bool(self.names or self.values)

    def text(self, text: str) -> str:
        if not self or not text:
            return text
        for value in self.values:
            text = text.replace(value, MASK)
        if self.names:
            # NAME=value and NAME: value (launch lines, YAML, logs of the environment)
            alt = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
            text = re.sub(rf"\b({alt})(=|: ?|\": ?\"|': ?')((?!\*\*\*)[^\s\"',}}]+)", rf"\1\2{MASK}", text)
        return text

    def data(self, obj: Any) -> Any:
        """JSON-able data with every secret masked: values under a secret key, and inside every string."""
        if not self:
            return obj
        if isinstance(obj, dict):
            return {k: (MASK if isinstance(k, str) and k in self.names and isinstance(v, str) else self.data(v))
                    for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.data(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def guard(self, progress: Callable[[str], None]) -> Callable[[str], None]:
        """A progress callable whose messages are redacted (keeping the message's type, e.g. a Status)."""
        if not self:
            return progress

        def say(message: str) -> None:
            clean = self.text(str(message))
            progress(type(message)(clean) if isinstance(message, str) and type(message) is not str else clean)

        return say
