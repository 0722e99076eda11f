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
from datetime import UTC, datetime
from functools import cache
from operator import attrgetter
from typing import Any

import msgspec
import msgspec.inspect as mi

from hopchain.schemas.wire import (
    COMPONENT_PATTERN,
    DIGEST_PATTERN,
    ENVELOPE_ID_PATTERN,
    NAME_PATTERN,
    SCHEMA_VERSION_PATTERN,
    SPAN_ID_PATTERN,
    TIMESTAMP_PATTERN,
    TOPIC_PATTERN,
    TRACE_ID_PATTERN,
)

__all__ = ["Check", "chain_twin", "fast_twin", "plain_check"]

Check = Callable[[Any], bool]
Batched = tuple[Callable[[Any], Any], bool, str | None]
"""A member checked for a whole list: how to read it, whether nullable, the value of all
zeros when it is refused."""


def _without_pattern(meta: msgspec.Meta) -> msgspec.Meta:
    """The bounds msgspec checks in C (lengths, ranges); patterns are left to the checker."""
    kept = {
        name: getattr(meta, name)
        for name in ("ge", "le", "gt", "lt", "min_length", "max_length")
        if getattr(meta, name) is not None
    }
    return msgspec.Meta(**kept)


def _twin_type(hint: Any, *, timestamps: bool) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        metas = [m for m in extras if isinstance(m, msgspec.Meta)]
        if timestamps and any(m.pattern == TIMESTAMP_PATTERN for m in metas):
            return _AWARE
        fixed = [_ALPHABETS[m.pattern][0] for m in metas if m.pattern in _BATCHED]
        metas = [_without_pattern(m) for m in metas]
        if timestamps and fixed:  # the chain's twin: bounds for the batched check
            metas.append(msgspec.Meta(min_length=fixed[0], max_length=fixed[0]))
        twin = _twin_type(base, timestamps=timestamps)
        return typing.Annotated[(twin, *metas)] if metas else twin
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return _chain_struct(hint) if timestamps else fast_twin(hint)[0]
    if origin is list:
        return list[_twin_type(typing.get_args(hint)[0], timestamps=timestamps)]  # type: ignore[misc]
    if origin in {types.UnionType, typing.Union}:
        twins = tuple(_twin_type(arg, timestamps=timestamps) for arg in typing.get_args(hint))
        return typing.Union[twins]  # noqa: UP007 - built from a tuple of types
    return hint


_AWARE = typing.Annotated[datetime, msgspec.Meta(tz=True)]
"""A timestamp read by msgspec (in C, calendar included); encoded again, it is spelled
``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` exactly when its offset is UTC and the text had that
spelling, so the canonical comparison and an offset check stand for the pattern."""


_RECURRING = frozenset({NAME_PATTERN, COMPONENT_PATTERN, TOPIC_PATTERN})
"""Patterns of names, which recur; ids, digests and timestamps do not."""

_HEX = b"0123456789abcdef"
_ALPHABETS = {
    SPAN_ID_PATTERN: (16, _HEX, True),
    TRACE_ID_PATTERN: (32, _HEX, True),
    DIGEST_PATTERN: (64, _HEX, False),
    ENVELOPE_ID_PATTERN: (26, b"0123456789ABCDEFGHJKMNPQRSTVWXYZ", False),
}
"""Patterns of ids and digests, as what they say: a fixed length, one alphabet, and for span
and trace ids not all zeros. For plain text (read only) they are checked so, without a
regular expression: a value whose characters are all in the alphabet leaves nothing when they
are deleted from its bytes (non-ASCII becomes ``?``, which no alphabet has)."""
_BATCHED = frozenset({SPAN_ID_PATTERN, DIGEST_PATTERN})
"""Of those, a hop's own members checked for a whole plain chain at once: each value's length
by the decoder (the chain's twin has it as bounds), their characters joined."""
_PLAIN_RECURRING = frozenset({SCHEMA_VERSION_PATTERN})
"""Patterns of values that recur from record to record, remembered when reading plain text."""


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

    def __init__(
        self,
        *,
        timestamps: bool = False,
        plain: bool = False,
    ) -> None:
        self.timestamps = timestamps
        self.plain = plain
        self.names: dict[str, Any] = {}
        self.batched: list[Batched] | None = None  # set by build_all, for plain text

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
        if self.plain and info.pattern == NAME_PATTERN:
            return []  # plain text: no control character anywhere (see chain_twin)
        if self.timestamps and info.pattern == TIMESTAMP_PATTERN:
            return [f"{var}.tzinfo is not {self.constant(UTC)}"]
        if self.plain and info.pattern in _ALPHABETS:
            length, alphabet, nonzero = _ALPHABETS[info.pattern]
            tests = [f"len({var}) != {length}"]
            if nonzero:
                tests.append(f"{var} == {self.constant('0' * length)}")
            ascii_bytes = f"{var}.encode('ascii', 'replace')"
            return [*tests, f"{ascii_bytes}.translate(None, {self.constant(alphabet)})"]
        if info.pattern in _RECURRING or (self.plain and info.pattern in _PLAIN_RECURRING):
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
            if depth == 0 and self.batch(field):
                continue
            statements = self.value(field.type, member, depth + 1)
            if statements:
                body += [f"{member} = {var}.{field.name}", *statements]
        return body

    def batch(self, field: mi.Field) -> bool:
        """Whether a member is checked for the whole chain at once (plain text only)."""
        info: mi.Type = field.type
        nullable = isinstance(info, mi.UnionType)
        if isinstance(info, mi.UnionType):
            members = [m for m in info.types if not isinstance(m, mi.NoneType)]
            info = members[0] if len(members) == 1 else info
        if not (self.batched is not None and isinstance(info, mi.StrType)):
            return False
        if info.pattern not in _BATCHED:
            return False
        length, _, nonzero = _ALPHABETS[info.pattern]
        zeros = "0" * length if nonzero else None
        self.batched.append((attrgetter(field.name), nullable, zeros))
        return True

    def build(self, info: mi.StructType) -> Check:
        name = f"_check_{info.cls.__name__}"
        body = self.fields(info, "value", 0)
        lines = [f"def {name}(value):", *(f"    {line}" for line in body), "    return True"]
        namespace = dict(self.names)
        exec("\n".join(lines), namespace)  # noqa: S102 - code written above, no input
        check: Check = namespace[name]
        return check

    def build_all(self, info: mi.StructType) -> Check:
        """A check of a list of structs: one loop, and the batched members line by line."""
        name = f"_check_all_{info.cls.__name__}"
        self.batched = [] if self.plain else None
        body = self.fields(info, "value", 0)
        lines = [f"def {name}(values):", "    for value in values:"]
        lines += [f"        {line}" for line in body] or ["        pass"]
        for getter, nullable, zeros in self.batched or ():
            got = f"map({self.constant(getter)}, values)"
            if zeros is not None:
                lines.append(f"    _b = list({got})")
                lines.append(f"    if {self.constant(zeros)} in _b: return False")
                got = "_b"
            if nullable:
                got = f"filter(None, {got})"  # None; an empty string is below the bounds
            # Non-ASCII becomes "?", which is no hex digit (nor is a lone surrogate).
            joined = f"''.join({got}).encode('ascii', 'replace')"
            lines.append(f"    if {joined}.translate(None, {self.constant(_HEX)}): return False")
        lines.append("    return True")
        namespace = dict(self.names)
        exec("\n".join(lines), namespace)  # noqa: S102 - code written above, no input
        check: Check = namespace[name]
        return check


@cache
def fast_twin(kind: type[msgspec.Struct]) -> tuple[type[msgspec.Struct], Check]:
    """The unconstrained twin of a wire struct, and the check of its constraints."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = [(name, _twin_type(hints[name], timestamps=False)) for name in kind.__struct_fields__]
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
def plain_check(kind: type[msgspec.Struct]) -> Check:
    """The check of :func:`fast_twin`'s twin for plain text: no name pattern (see below)."""
    return _Compiler(plain=True).build(typing.cast("mi.StructType", mi.type_info(kind)))


@cache
def _chain_struct(kind: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """The twin of ``kind`` whose timestamps are datetimes (see ``_AWARE``)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = [(name, _twin_type(hints[name], timestamps=True)) for name in kind.__struct_fields__]
    # Not tracked by the garbage collector (faster to build): what is decoded holds no cycle.
    return msgspec.defstruct(
        f"Chain{kind.__name__}",
        fields,
        forbid_unknown_fields=True,
        frozen=True,
        gc=False,
        module=kind.__module__,
    )


@cache
def chain_twin(
    kind: type[msgspec.Struct],
) -> tuple[msgspec.json.Decoder[list[Any]], Check, Check]:
    """For a whole chain read at once: a list decoder, the check of a list, the plain one.

    These twins read timestamps as :class:`~datetime.datetime` (see ``_AWARE``): only for
    checking a chain whose text is then compared with their encoding; their values are not
    handed out. Canonical text without a backslash and without U+007F holds no control
    character in any string (RFC 8785 escapes U+0000-U+001F) and no quote, so names meet
    their pattern there: the check for plain text leaves it out, and checks ids and digests
    for the whole list at once (see ``_BATCHED``).
    """
    twin = _chain_struct(kind)
    info = typing.cast("mi.StructType", mi.type_info(kind))
    check = _Compiler(timestamps=True).build_all(info)
    plain = _Compiler(timestamps=True, plain=True).build_all(info)
    return msgspec.json.Decoder(list[twin]), check, plain  # type: ignore[valid-type]
