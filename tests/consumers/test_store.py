"""The dead-letter index on disk: same answers as in memory, resumed, or discarded when bad."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_index import letter, resolution

from hopchain.consumers.foreign import ForeignFailure
from hopchain.consumers.index import AddedMany, DeadLetterIndex, LetterIndex
from hopchain.consumers.letter import fields_of
from hopchain.consumers.records import ParkedLetter
from hopchain.consumers.resolutions import ResolutionKind
from hopchain.consumers.store import MEMORY, LetterStore
from hopchain.schemas.deadletter import Reference

LABELS = ("team-a", "orders", "internal")
EARLY = resolution("id-3")
LATE = resolution("id-0", ResolutionKind.REDRIVEN)


OPENED: list[LetterStore] = []


@pytest.fixture(autouse=True)
def close_stores() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def opened(path: Path | str, fingerprint: str = "fp") -> LetterStore:
    store = LetterStore(path, fingerprint)
    store.open()
    OPENED.append(store)
    return store


def fill(index: LetterIndex) -> None:
    """Five letters of two owners, one resolved before it was read, one after."""
    index.resolve(EARLY)
    for n, owner in enumerate(["team-a", "team-b", "team-a", "team-a", "team-a"]):
        index.add(letter(f"id-{n}", 100.0 + n, owner))
    index.resolve(LATE)
    index.add(letter("id-0", 999.0))
    index.tally("parked", LABELS, 4)


def answers(index: LetterIndex) -> object:
    return (
        len(index),
        index.counts(),
        index.groups(),
        index.select(include_resolved=True),
        index.get("id-3"),
        index.resolution("id-0"),
        index.tallies(),
    )


@pytest.mark.parametrize("path", ["file", MEMORY])
def test_the_store_answers_as_the_index_in_memory(tmp_path: Path, path: str) -> None:
    memory = DeadLetterIndex()
    store = opened(tmp_path / "index.sqlite" if path == "file" else MEMORY)
    fill(memory)
    fill(store)

    assert answers(store) == answers(memory)
    assert store.counts() == {"dead_letters": 5, "unresolved": 3, "resolutions": 2}
    assert [group.oldest_parked_at for group in store.groups()] == [102.0, 101.0]
    assert [pair[0].dead_letter_id for pair in store.select()] == ["id-1", "id-2", "id-4"]
    store.close()


@pytest.mark.parametrize("path", ["file", MEMORY])
def test_letters_added_many_at_once_count_as_one_by_one(tmp_path: Path, path: str) -> None:
    memory = DeadLetterIndex()
    store = opened(tmp_path / "index.sqlite" if path == "file" else MEMORY)
    batches = [
        [letter("id-0", 100.0), letter("id-1", 101.0, "team-b")],
        # id-0 again (indexed already), id-3 resolved before it is read, id-5 twice
        [
            letter("id-0", 999.0),
            letter("id-3", 103.0),
            letter("id-5", 105.0),
            letter("id-5", 998.0),
            letter("id-6", 106.0, "team-b"),
        ],
    ]
    said: list[AddedMany] = []
    for index in (memory, store):
        index.add_many([fields_of(one) for one in batches[0]])
        index.resolve(EARLY)
        said.append(index.add_many([fields_of(one) for one in batches[1]]))
        index.resolve(LATE)

    assert (
        said[0]
        == said[1]
        == AddedMany(
            parked={LABELS: 2, ("team-b", "orders", "internal"): 1},
            ignored=frozenset({0, 3}),
            resolved={1: EARLY},
        )
    )
    assert answers(store) == answers(memory)
    assert store.counts() == {"dead_letters": 5, "unresolved": 3, "resolutions": 2}
    assert store.add_many([]) == AddedMany()


def test_every_field_of_a_letter_comes_back(tmp_path: Path) -> None:
    full = ParkedLetter(
        dead_letter_id="x",
        owner="o",
        source_topic="s",
        error_type="malformed",
        reason="r",
        parked_at=1.5,
        topic="s.dlq",
        partition=2,
        offset=7,
        envelope_id="e",
        trace_id="t",
        intent_key="k",
        component="c",
        redrive_count=2,
        problem="p",
        framework="spring",
        description="d",
        source_timestamp=0.5,
        reference=Reference("s", 1, 2, 3, "ab", None, headers_kept=True),
        foreign=ForeignFailure("spring", "s", 1, 2, "E", "m", "g", "malformed", stage="x"),
        parked_at_basis="publisher",
    )
    store = opened(tmp_path / "index.sqlite")
    store.add(full)
    store.commit({})
    store.close()

    assert opened(tmp_path / "index.sqlite").get("x") == (full, None)


def test_a_reopened_file_resumes_with_its_offsets_and_tallies(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = opened(path)
    fill(store)
    store.commit({("orders.dlq", 0): 6, ("resolutions", 0): 2})
    before = answers(store)
    store.close()

    again = opened(path)

    assert again.resumed
    assert answers(again) == before
    assert again.applied_offsets() == {("orders.dlq", 0): 6, ("resolutions", 0): 2}


def test_writes_after_the_last_commit_are_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = opened(path)
    store.add(letter("id-0", 100.0))
    store.commit({("orders.dlq", 0): 1})
    store.add(letter("id-1", 101.0))
    copy = tmp_path / "copy.sqlite"
    # What a crash leaves: the committed state only (a second connection sees no more).
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    store.close()

    again = opened(copy)

    assert (len(again), again.applied_offsets()) == (1, {("orders.dlq", 0): 1})


def damage_truncate(path: Path) -> None:
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2)


def damage_header(path: Path) -> None:
    with path.open("r+b") as file:
        file.write(b"\x00not a database at all" * 4)


def damage_empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [damage_truncate, damage_header, damage_empty])
def test_a_damaged_file_is_discarded_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    path = tmp_path / "index.sqlite"
    store = opened(path)
    for n in range(2000):
        store.add(letter(f"id-{n}", 100.0 + n))
    store.commit({("orders.dlq", 0): 2000})
    store.close()
    assert callable(damage)
    damage(path)

    with caplog.at_level(logging.WARNING, logger="hopchain.dlq"):
        again = opened(path)

    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "rebuilding it from Kafka" in caplog.records[0].getMessage()
    assert (len(again), again.applied_offsets(), again.resumed) == (0, {}, False)
    again.add(letter("id-0", 100.0))
    again.commit({("orders.dlq", 0): 1})
    again.close()
    assert len(opened(path)) == 1


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("UPDATE meta SET value = '0' WHERE key = 'schema_version'", "schema version 0"),
        ("UPDATE meta SET value = 'other' WHERE key = 'fingerprint'", "other topics"),
    ],
)
def test_a_file_of_another_version_or_settings_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str, said: str
) -> None:
    path = tmp_path / "index.sqlite"
    store = opened(path)
    store.add(letter("id-0", 100.0))
    store.commit({("orders.dlq", 0): 1})
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(change)

    with caplog.at_level(logging.WARNING, logger="hopchain.dlq"):
        again = opened(path)

    assert said in caplog.text
    assert (len(again), again.applied_offsets()) == (0, {})


def test_a_second_process_on_the_same_file_gets_one_of_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "index.sqlite"
    first = opened(path)
    first.add(letter("id-0", 100.0))
    first.commit({("orders.dlq", 0): 1})

    with caplog.at_level(logging.WARNING, logger="hopchain.dlq"):
        second = opened(path)

    assert "in use by another process" in caplog.text
    assert (len(second), second.applied_offsets()) == (0, {})
    second.close()
    first.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite", "index.sqlite.lock"]


def test_an_unwritable_folder_keeps_the_index_in_memory_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    with caplog.at_level(logging.WARNING, logger="hopchain.dlq"):
        store = opened(blocker / "index.sqlite")

    assert "keeping it in memory" in caplog.text
    store.add(letter("id-0", 100.0))
    store.commit({("orders.dlq", 0): 1})
    assert (len(store), store.applied_offsets()) == (1, {("orders.dlq", 0): 1})
    store.discard("the topic was recreated")  # rebuilt in memory too
    assert (len(store), store.applied_offsets()) == (0, {})
