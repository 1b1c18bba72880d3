"""Result types to JSON-able data and back: one pydantic `TypeAdapter` per dataclass, built once.

The result types stay plain frozen dataclasses (built often, never validated while running); pydantic
only reads their annotations to write them (tuples as lists, enums as their values, nested results
as dicts) and to read them back (lists into tuples, numbers into the annotated type, a key the type
does not have, such as a cache entry's "stored", ignored). Whatever the current code wrote, it reads.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar, cast

from pydantic import GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

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


class NoneLeftOut:
    """A result dataclass written without its None fields, as the dict it replaces had no key there: every
    None field, or only those `left_out` names (another None field is written null, as it always was)."""

    left_out: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        only = cls.left_out

        def write(value: Any, inner: core_schema.SerializerFunctionWrapHandler) -> dict[str, Any]:
            return {k: v for k, v in inner(value).items() if v is not None or (only and k not in only)}

        written = core_schema.wrap_serializer_function_ser_schema(write)
        return cast(core_schema.CoreSchema, {**handler(source), "serialization": written})
