"""Fast twins of the wire structs: the same members decoded without constraints, then checked.

msgspec checks a ``pattern`` constraint much more slowly than a compiled regular expression
called from Python, so the hot path decodes into a twin struct that only has the types, and
checks the constraints of :mod:`hopchain.schemas.wire` with a checker derived from them (one
definition, two uses). A value the checker refuses is read again with the constrained struct,
which says why.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi

__all__ = ["fast_twin"]

Check = Callable[[Any], bool]


def _twin_type(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return fast_twin(hint)[0]
    if origin is list:
        return list[_twin_type(typing.get_args(hint)[0])]  # type: ignore[misc]
    if origin in {types.UnionType, typing.Union}:
        twins = tuple(_twin_type(arg) for arg in typing.get_args(hint))
        return typing.Union[twins]  # noqa: UP007 - built from a tuple of types
    return hint


def _string_check(info: mi.StrType) -> Check | None:
    pattern = re.compile(info.pattern).search if info.pattern else None
    low, high = info.min_length, info.max_length
    if pattern is None and low is None and high is None:
        return None

    def check(value: Any) -> bool:
        if low is not None and len(value) < low:
            return False
        if high is not None and len(value) > high:
            return False
        return pattern is None or pattern(value) is not None

    return check


def _int_check(info: mi.IntType) -> Check | None:
    low, high = info.ge, info.le
    if low is None and high is None:
        return None
    return lambda value: (low is None or value >= low) and (high is None or value <= high)


def _check(info: mi.Type) -> Check | None:
    if isinstance(info, mi.StrType):
        return _string_check(info)
    if isinstance(info, mi.IntType):
        return _int_check(info)
    if isinstance(info, mi.StructType):
        return _struct_check(info)
    if isinstance(info, mi.ListType):
        item = _check(info.item_type)
        if item is None:
            return None
        return lambda value: all(item(element) for element in value)
    if isinstance(info, mi.UnionType):
        inner = [_check(member) for member in info.types if not isinstance(member, mi.NoneType)]
        only = inner[0] if len(inner) == 1 else None
        if only is None:
            return None
        return lambda value: value is None or only(value)
    return None


def _struct_check(info: mi.StructType) -> Check | None:
    checks = [(field.name, check) for field in info.fields if (check := _check(field.type))]
    if not checks:
        return None

    def check(value: Any) -> bool:
        return all(check(getattr(value, name)) for name, check in checks)

    return check


@cache
def fast_twin(kind: type[msgspec.Struct]) -> tuple[type[msgspec.Struct], Check]:
    """The unconstrained twin of a wire struct, and the check of its constraints."""
    hints = typing.get_type_hints(kind)
    fields = [(name, _twin_type(hints[name])) for name in kind.__struct_fields__]
    twin = msgspec.defstruct(
        f"Fast{kind.__name__}",
        fields,
        forbid_unknown_fields=True,
        frozen=True,
        module=kind.__module__,
    )
    check = _struct_check(typing.cast("mi.StructType", mi.type_info(kind)))
    return twin, check if check is not None else (lambda _value: True)
