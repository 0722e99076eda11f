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

from hopchain.schemas.wire import COMPONENT_PATTERN, NAME_PATTERN, TOPIC_PATTERN

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


_RECURRING = frozenset({NAME_PATTERN, COMPONENT_PATTERN, TOPIC_PATTERN})
"""Patterns of names, which recur; ids, digests and timestamps do not."""


class _Passed(set[str]):
    """Strings that met a pattern and length bounds, remembered (at most ``LIMIT`` of them)."""

    LIMIT = 4096

    def __init__(self, pattern: str, low: int | None, high: int | None) -> None:
        super().__init__()
        self._search = re.compile(pattern).search
        self._low, self._high = low, high

    def check(self, value: str) -> bool:
        if (self._low is not None and len(value) < self._low) or (
            self._high is not None and len(value) > self._high
        ):
            return False
        if self._search(value) is None:
            return False
        if len(self) >= self.LIMIT:
            self.clear()
        self.add(value)
        return True


class _Compiler:
    """Writes one Python function per struct that checks its constraints, inline.

    Generated code, not closures: a chain of closures costs a call per field, which on a hop
    with a failure and retries is most of the time spent reading it.
    """

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.lines: list[str] = []
        self.done: dict[type, str] = {}

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.names)}"
        self.names[name] = value
        return name

    def value(self, info: mi.Type, var: str, depth: int) -> list[str]:
        """Statements that return False from the function when ``var`` breaks ``info``."""
        if isinstance(info, mi.StrType | mi.IntType):
            tests = self.scalar(info, var)
            return [f"if {' or '.join(tests)}: return False"] if tests else []
        if isinstance(info, mi.StructType):
            return [f"if not {self.struct(info)}({var}): return False"]
        if isinstance(info, mi.ListType):
            item = f"_i{depth}"
            body = self.value(info.item_type, item, depth + 1)
            return [f"for {item} in {var}:", *(f"    {line}" for line in body)] if body else []
        if isinstance(info, mi.UnionType):
            members = [m for m in info.types if not isinstance(m, mi.NoneType)]
            body = self.value(members[0], var, depth) if len(members) == 1 else []
            return [f"if {var} is not None:", *(f"    {line}" for line in body)] if body else []
        return []

    def scalar(self, info: mi.StrType | mi.IntType, var: str) -> list[str]:
        """Conditions under which a string or integer breaks its constraints."""
        if isinstance(info, mi.IntType):
            return [
                *([f"{var} < {info.ge}"] if info.ge is not None else []),
                *([f"{var} > {info.le}"] if info.le is not None else []),
            ]
        if info.pattern in _RECURRING:
            # Names (components, topics, contracts) recur from record to record: a string
            # that passed once is remembered, and found again by a set lookup.
            passed = _Passed(info.pattern, info.min_length, info.max_length)
            return [
                f"{var} not in {self.constant(passed)} and not {self.constant(passed.check)}({var})"
            ]
        tests = []
        if info.min_length is not None:
            tests.append(f"len({var}) < {info.min_length}")
        if info.max_length is not None:
            tests.append(f"len({var}) > {info.max_length}")
        if info.pattern:
            tests.append(f"{self.constant(re.compile(info.pattern).search)}({var}) is None")
        return tests

    def struct(self, info: mi.StructType) -> str:
        if info.cls in self.done:
            return self.done[info.cls]
        name = f"_check_{info.cls.__name__}"
        self.done[info.cls] = name
        body: list[str] = []
        for field in info.fields:
            statements = self.value(field.type, "_v", 0)
            if statements:
                body += [f"_v = value.{field.name}", *statements]
        self.lines += [f"def {name}(value):", *(f"    {line}" for line in body), "    return True"]
        return name

    def build(self, info: mi.StructType) -> Check:
        name = self.struct(info)
        namespace = dict(self.names)
        exec("\n".join(self.lines), namespace)  # noqa: S102 - code written above, no input
        check: Check = namespace[name]
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
    return twin, _Compiler().build(typing.cast("mi.StructType", mi.type_info(kind)))
