"""What the console shows, without a broker: payloads, overview order, filters, settings."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from starlette.datastructures import QueryParams

from hopchain.consumers import DeadLetterIndex, DlqSettings
from hopchain.consumers.console.views import (
    ListQuery,
    overview_rows,
    payload_view,
    selection_digest,
)
from hopchain.consumers.index import LetterIndex
from hopchain.consumers.records import ParkedLetter
from hopchain.consumers.store import MEMORY, LetterStore
from hopchain.exceptions import ConfigurationError


def test_a_json_payload_is_pretty_printed_and_kept_as_text() -> None:
    shown = payload_view(b'{"a":[1,2],"b":"<script>x</script>"}')

    assert (shown.kind, shown.size, shown.truncated) == ("json", 36, False)
    assert json.loads(shown.text) == {"a": [1, 2], "b": "<script>x</script>"}
    assert shown.text.startswith('{\n  "a": [')


def test_a_large_payload_is_cut_at_the_limit_without_splitting_a_character() -> None:
    value = ("é" * 40).encode()  # 80 bytes, two per character

    shown = payload_view(value, limit=11)

    assert (shown.kind, shown.size, shown.truncated) == ("text", 80, True)
    assert shown.text == "é" * 5


def test_binary_and_null_payloads() -> None:
    binary = payload_view(b"\xff\xfe\x00\x01" * 5)
    assert binary.kind == "binary"
    assert (
        binary.text.splitlines()[0] == "00000000  ff fe 00 01 ff fe 00 01 ff fe 00 01 ff fe 00 01"
    )
    assert payload_view(None).kind == "null"
    assert payload_view(b"not json").kind == "text"


def letter(number: int, owner: str, error_type: str, parked_at: float) -> ParkedLetter:
    return ParkedLetter(
        dead_letter_id=f"id-{number}",
        owner=owner,
        source_topic="orders",
        error_type=error_type,
        reason=None,
        parked_at=parked_at,
        topic="orders.dlq",
        partition=0,
        offset=number,
    )


def test_overview_rows_are_the_index_groups_sorted_as_asked() -> None:
    index = DeadLetterIndex()
    for number, (owner, kind, parked_at) in enumerate(
        [("a", "internal", 100.0), ("a", "internal", 300.0), ("b", "transient", 50.0)]
    ):
        index.add(letter(number, owner, kind, parked_at))

    by_age = overview_rows(index, 1000.0, "age", descending=True)
    by_owner = overview_rows(index, 1000.0, "owner", descending=False)

    assert [(row.owner, row.depth, row.age_seconds) for row in by_age] == [
        ("b", 1, 950.0),
        ("a", 2, 900.0),
    ]
    assert [row.owner for row in by_owner] == ["a", "b"]
    assert by_age[0].list_query == "owner=b&source_topic=orders&error_type=transient"


def test_list_query_reads_filters_and_falls_back_on_nonsense() -> None:
    query = ListQuery.parse(QueryParams("owner=a&min_age=2m&status=bogus&page=-3"))

    assert (query.owner, query.min_age, query.status, query.page) == ("a", "2m", "unresolved", 1)
    assert query.chosen().min_age_seconds == 120.0
    assert query.query(page=2) == "owner=a&min_age=2m&status=unresolved&page=2"
    with pytest.raises(ValueError, match="is not a duration"):
        ListQuery(min_age="soon").chosen()
    for nonsense in ("0", "²", "9" * 5000):
        assert ListQuery.parse(QueryParams({"page": nonsense})).page == 1


def test_the_digest_names_exactly_one_selection() -> None:
    assert selection_digest(["a", "b"]) == selection_digest(["a", "b"])
    assert selection_digest(["a", "b"]) != selection_digest(["a"])
    assert selection_digest(["a", "b"]) != selection_digest(["b", "a"])


def test_the_trace_url_setting_needs_http_and_a_trace_id_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOPCHAIN_DLQ_TRACE_URL", "https://jaeger.example/trace/{trace_id}")
    assert DlqSettings().dlq_trace_url == "https://jaeger.example/trace/{trace_id}"
    for wrong in ("javascript:alert(1)//{trace_id}", "https://jaeger.example/search"):
        with pytest.raises(ConfigurationError, match="HOPCHAIN_DLQ_TRACE_URL"):
            DlqSettings(dlq_trace_url=wrong)


@pytest.mark.parametrize("where", ["memory", "file"])
def test_a_page_after_or_before_a_letter_is_the_page_its_number_names(
    where: str,
) -> None:
    index: LetterIndex = DeadLetterIndex()
    if where == "file":
        index = LetterStore(MEMORY)
    for number in range(230):
        index.add(
            ParkedLetter(
                dead_letter_id=f"id-{number:03d}",
                owner="a" if number % 2 else "b",
                source_topic="orders",
                error_type="internal",
                reason=None,
                parked_at=1000.0 + number % 7,  # ties: the id breaks them
                topic="orders.dlq",
                partition=0,
                offset=number,
            )
        )
    query = ListQuery.parse(QueryParams("owner=a"))
    first, second, third = (query.page_of(index, 2000.0, page) for page in (1, 2, 3))
    after = replace(query, after=first[-1][0].dead_letter_id)

    assert [len(first), len(second), len(third)] == [50, 50, 15]
    assert after.page_of(index, 2000.0, 2) == second
    assert replace(query, after="unknown").page_of(index, 2000.0, 2) == second
    assert after.query(page=2) == f"owner=a&status=unresolved&page=2&after={after.after}"
    # The previous link: the page ending just before the first letter of the page after.
    assert replace(query, before=third[0][0].dead_letter_id).page_of(index, 2000.0, 2) == second
    assert replace(query, before=second[0][0].dead_letter_id).page_of(index, 2000.0, 1) == first
    assert replace(query, before="unknown").page_of(index, 2000.0, 2) == second
    if isinstance(index, LetterStore):
        index.close()
