"""Fast twins of the wire structs: the same members decoded without constraints, then checked.

msgspec checks a ``pattern`` constraint much more slowly than a compiled regular expression
called from Python, so the writer converts a hop's values into a twin struct that only has
the types, and checks the constraints of :mod:`hopchain.schemas.wire` with a checker derived
from them (one definition, two uses). A value the checker refuses is converted again with
the constrained struct, which says why.
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

__all__ = ["Check", "fast_twin", "trusting_check"]

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
        twin = _twin_type(base)
        return typing.Annotated[(twin, *metas)] if metas else twin
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
    with a failure and retries is most of the time spent reading it. Nested structs are
    checked inline, in the same function, for the same reason.
    """

    def __init__(self, *, trusted: frozenset[str] = frozenset()) -> None:
        self.trusted = trusted  # members of the struct itself left unchecked
        self.names: dict[str, Any] = {}

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
            return self.fields(info, var, depth)
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

    def fields(self, info: mi.StructType, var: str, depth: int) -> list[str]:
        """Statements that check each member of the struct ``var`` (its own names per depth)."""
        member = f"_v{depth}"
        body: list[str] = []
        for field in info.fields:
            if depth == 0 and field.name in self.trusted:
                continue
            statements = self.value(field.type, member, depth + 1)
            if statements:
                body += [f"{member} = {var}.{field.name}", *statements]
        return body

    def build(self, info: mi.StructType) -> Check:
        name = f"_check_{info.cls.__name__}"
        body = self.fields(info, "value", 0)
        lines = [f"def {name}(value):", *(f"    {line}" for line in body), "    return True"]
        namespace = dict(self.names)
        exec("\n".join(lines), namespace)  # noqa: S102 - code written above, no input
        check: Check = namespace[name]
        return check


@cache
def fast_twin(kind: type[msgspec.Struct]) -> tuple[type[msgspec.Struct], Check]:
    """The unconstrained twin of a wire struct, and the check of its constraints."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = [(name, _twin_type(hints[name])) for name in kind.__struct_fields__]
    # Not tracked by the garbage collector: what is decoded or converted holds no cycle, and
    # a batch keeps each record's last hop alive until it commits.
    twin = msgspec.defstruct(
        f"Fast{kind.__name__}",
        fields,
        forbid_unknown_fields=True,
        frozen=True,
        gc=False,
        module=kind.__module__,
    )
    return twin, _Compiler().build(typing.cast("mi.StructType", mi.type_info(kind)))


@cache
def trusting_check(kind: type[msgspec.Struct], trusted: frozenset[str]) -> Check:
    """The check of :func:`fast_twin`'s twin but for the members named ``trusted``.

    For a struct its writer built: members it wrote itself, in a form that meets their
    constraints by construction, are not checked again.
    """
    return _Compiler(trusted=trusted).build(typing.cast("mi.StructType", mi.type_info(kind)))
