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

__all__ = ["chain_twin", "fast_twin"]

Check = Callable[[Any], bool]


def _without_pattern(meta: msgspec.Meta) -> msgspec.Meta:
    """The bounds msgspec checks in C (lengths, ranges); patterns are left to the checker."""
    kept = {
        name: getattr(meta, name)
        for name in ("ge", "le", "gt", "lt", "min_length", "max_length")
        if getattr(meta, name) is not None
    }
    return msgspec.Meta(**kept)


def _twin_type(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        metas = [_without_pattern(m) for m in extras if isinstance(m, msgspec.Meta)]
        return typing.Annotated[(_twin_type(base), *metas)] if metas else _twin_type(base)
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
        """Conditions under which a string or integer breaks its constraints.

        Bounds are the twin's (msgspec checks them while decoding): only patterns are left.
        """
        if isinstance(info, mi.IntType) or not info.pattern:
            return []
        if info.pattern in _RECURRING:
            # Names (components, topics, contracts) recur from record to record: a string
            # that passed once is remembered, and found again by a set lookup.
            passed = _Passed(info.pattern, info.min_length, info.max_length)
            return [
                f"{var} not in {self.constant(passed)} and not {self.constant(passed.check)}({var})"
            ]
        return [f"{self.constant(re.compile(info.pattern).search)}({var}) is None"]

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
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = [(name, _twin_type(hints[name])) for name in kind.__struct_fields__]
    twin = msgspec.defstruct(
        f"Fast{kind.__name__}",
        fields,
        forbid_unknown_fields=True,
        frozen=True,
        module=kind.__module__,
    )
    return twin, _Compiler().build(typing.cast("mi.StructType", mi.type_info(kind)))


@cache
def chain_twin(kind: type[msgspec.Struct]) -> tuple[msgspec.json.Decoder[list[Any]], Check]:
    """A decoder of a list of ``kind``'s twins (a whole chain at once), and the check."""
    twin, check = fast_twin(kind)
    return msgspec.json.Decoder(list[twin]), check  # type: ignore[valid-type]
