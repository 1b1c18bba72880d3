"""Result types to JSON-able data and back: one pydantic `TypeAdapter` per dataclass, built once.

The result types stay plain frozen dataclasses (built often, never validated while running); pydantic
only reads their annotations to write them (tuples as lists, enums as their values, nested results
as dicts) and to read them back (lists into tuples, numbers into the annotated type, a key the type
does not have, such as a cache entry's "stored", ignored). Whatever the current code wrote, it reads.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter

T = TypeVar("T")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(cls: Any) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def dump(obj: Any, exclude: set[str] | None = None) -> dict[str, Any]:
    """`obj` (a dataclass instance) as JSON-able data."""
    return _adapter(type(obj)).dump_python(obj, mode="json", exclude=exclude)


def load(cls: type[T], data: Any) -> T:
    """An instance of `cls` from what `dump` (or an earlier abbisect's writer) produced."""
    return _adapter(cls).validate_python(data)
