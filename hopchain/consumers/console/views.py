"""What the console's pages show, computed from the index and the records (no HTML here)."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from hopchain.consumers.filters import DeadLetterFilter, format_age, parse_duration
from hopchain.consumers.index import LetterIndex, Pair

__all__ = [
    "BULK_LIMIT",
    "PAGE_SIZE",
    "PAYLOAD_PREVIEW_BYTES",
    "GroupRow",
    "ListQuery",
    "Payload",
    "overview_rows",
    "payload_view",
    "selection_digest",
]

PAGE_SIZE = 50
"""Dead letters per page of the list."""
BULK_LIMIT = 1000
"""Dead letters one bulk confirmation acts on at most (the oldest first): about a minute of
redrives, so the request ends before a proxy or the browser gives up on it."""
PAYLOAD_PREVIEW_BYTES = 64 * 1024
"""Bytes of a payload shown on its page; the whole value is a download away."""
_HEX_PREVIEW_BYTES = 4096
_STATUSES = ("unresolved", "resolved", "all")
_MAX_PAGE_DIGITS = 9
SORT_KEYS = ("owner", "source_topic", "error_type", "depth", "age")


@dataclass(frozen=True)
class GroupRow:
    """One ``(owner, source topic, error type)`` group, as ``/metrics`` reports it."""

    owner: str
    source_topic: str
    error_type: str
    depth: int
    age_seconds: float | None

    @property
    def age_text(self) -> str:
        """The age for people, or ``-`` when nothing is unresolved."""
        return "-" if self.age_seconds is None else format_age(self.age_seconds)

    @property
    def list_query(self) -> str:
        """The list page's query string for this group."""
        return urlencode(
            {"owner": self.owner, "source_topic": self.source_topic, "error_type": self.error_type}
        )


def overview_rows(index: LetterIndex, now: float, sort: str, *, descending: bool) -> list[GroupRow]:
    """Every group with depth and oldest age at ``now`` (the same reading as a scrape)."""
    rows = [
        GroupRow(
            *group.labels,
            depth=group.depth,
            age_seconds=None
            if group.oldest_parked_at is None
            else max(0.0, now - group.oldest_parked_at),
        )
        for group in index.groups()
    ]
    key = sort if sort in SORT_KEYS else "age"

    def order(row: GroupRow) -> tuple[Any, ...]:
        if key == "age":
            return (row.age_seconds if row.age_seconds is not None else -1.0, row.depth)
        if key == "depth":
            return (row.depth, row.age_seconds or 0.0)
        return (getattr(row, key), row.owner, row.source_topic, row.error_type)

    return sorted(rows, key=order, reverse=descending)


@dataclass(frozen=True)
class ListQuery:
    """The list page's filters, as typed into its form (kept as text to show back)."""

    owner: str = ""
    source_topic: str = ""
    error_type: str = ""
    min_age: str = ""
    status: str = "unresolved"
    page: int = 1
    after: str = ""
    """The id of the last dead letter of the page before (the next link's keyset): the page
    starts just after it, as fast at any depth; unknown ids fall back to the page number."""
    before: str = ""
    """The id of the first dead letter of the page after (the previous link's keyset): the
    page ends just before it; unknown ids fall back to the page number."""

    @classmethod
    def parse(cls, query: QueryParams) -> ListQuery:
        """Read the query string; unknown statuses and pages fall back to defaults."""
        status = query.get("status", "unresolved")
        page = query.get("page", "1")
        # str.isdigit alone takes "²", which int() refuses, as it refuses 4,301 digits or more.
        whole = page.isascii() and page.isdigit() and len(page) <= _MAX_PAGE_DIGITS
        number = int(page) if whole else 0
        return cls(
            owner=query.get("owner", "").strip(),
            source_topic=query.get("source_topic", "").strip(),
            error_type=query.get("error_type", "").strip(),
            min_age=query.get("min_age", "").strip(),
            status=status if status in _STATUSES else "unresolved",
            page=number if number > 0 else 1,
            after=query.get("after", "").strip(),
            before=query.get("before", "").strip(),
        )

    def chosen(self) -> DeadLetterFilter:
        """The filter.

        Raises:
            ValueError: the minimum age is not a duration.
        """
        return DeadLetterFilter(
            owner=self.owner or None,
            source_topic=self.source_topic or None,
            error_type=self.error_type or None,
            min_age_seconds=parse_duration(self.min_age) if self.min_age else None,
        )

    @property
    def resolved(self) -> bool | None:
        """Which dead letters the status chooses: unresolved (False), resolved (True), all."""
        return {"unresolved": False, "resolved": True}.get(self.status)

    def scan(self, index: LetterIndex, now: float, skip: int = 0) -> Iterator[Pair]:
        """The matches oldest first, after the first ``skip``, read as they are needed.

        Raises:
            ValueError: the minimum age is not a duration.
        """
        matches = index.scan(self.chosen(), now=now, resolved=self.resolved)
        return itertools.islice(matches, skip, None)

    def page_of(self, index: LetterIndex, now: float, page: int) -> list[Pair]:
        """The dead letters of page ``page``, found by a keyset when one is known.

        Just after ``after``, or just before ``before`` (as fast at any depth); else by the
        page number.

        Raises:
            ValueError: the minimum age is not a duration.
        """
        chosen, resolved = self.chosen(), self.resolved
        if self.after and (found := index.get(self.after)) is not None:
            keyset = (found[0].parked_at, found[0].dead_letter_id)
            return list(
                itertools.islice(
                    index.scan(chosen, now=now, resolved=resolved, after=keyset), PAGE_SIZE
                )
            )
        if self.before and (found := index.get(self.before)) is not None:
            keyset = (found[0].parked_at, found[0].dead_letter_id)
            newest_first = index.scan(chosen, now=now, resolved=resolved, before=keyset)
            shown = list(itertools.islice(newest_first, PAGE_SIZE))
            if len(shown) == PAGE_SIZE or page == 1:
                return shown[::-1]
            # Fewer than a page before it, yet not the first page: the matches moved (some
            # were resolved); the page by its number is what the pager says.
        return list(itertools.islice(self.scan(index, now, (page - 1) * PAGE_SIZE), PAGE_SIZE))

    def count(self, index: LetterIndex, now: float) -> int:
        """How many match.

        Raises:
            ValueError: the minimum age is not a duration.
        """
        return index.count(self.chosen(), now=now, resolved=self.resolved)

    def query(self, **changes: object) -> str:
        """The query string of these filters, with ``changes`` applied."""
        values: dict[str, object] = {
            "owner": self.owner,
            "source_topic": self.source_topic,
            "error_type": self.error_type,
            "min_age": self.min_age,
            "status": self.status,
            "page": self.page,
            "after": self.after,
            "before": self.before,
        }
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v not in {"", None}})


def selection_digest(ids: list[str]) -> str:
    """A short fingerprint of exactly which dead letters a preview showed."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Payload:
    """A record value, shown as pretty JSON, text or hex, cut at a size limit.

    Attributes:
        kind: ``json``, ``text``, ``binary`` or ``null``.
        text: what to show.
        size: the whole value's size in bytes.
        truncated: whether ``text`` shows only the start of the value.
    """

    kind: str
    text: str
    size: int
    truncated: bool


def payload_view(value: bytes | None, limit: int = PAYLOAD_PREVIEW_BYTES) -> Payload:
    """How to show a payload without showing megabytes."""
    if value is None:
        return Payload("null", "", 0, truncated=False)
    size = len(value)
    text = _utf8_head(value[:limit], cut=size > limit)
    if text is None:
        return Payload(
            "binary", _hex(value[:_HEX_PREVIEW_BYTES]), size, truncated=size > _HEX_PREVIEW_BYTES
        )
    if size <= limit:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return Payload("text", text, size, truncated=False)
        pretty = json.dumps(parsed, indent=2, ensure_ascii=False, sort_keys=False)
        return Payload("json", pretty, size, truncated=False)
    return Payload("text", text, size, truncated=True)


def _utf8_head(head: bytes, *, cut: bool) -> str | None:
    """The text of ``head``, or None when it is not UTF-8 (a cut may split one character)."""
    for trim in range(4 if cut else 1):
        try:
            return head[: len(head) - trim].decode()
        except UnicodeDecodeError:
            continue
    return None


def _hex(raw: bytes) -> str:
    lines = []
    for start in range(0, len(raw), 16):
        chunk = raw[start : start + 16]
        lines.append(f"{start:08x}  {chunk.hex(' ')}")
    return "\n".join(lines)
