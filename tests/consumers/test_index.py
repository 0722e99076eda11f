from __future__ import annotations

from datetime import UTC, datetime

from hopchain.consumers.index import DeadLetterIndex
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.records import ParkedLetter
from hopchain.consumers.resolutions import Resolution, ResolutionKind


def letter(dead_letter_id: str, parked_at: float, owner: str = "team-a") -> ParkedLetter:
    return ParkedLetter(
        dead_letter_id=dead_letter_id,
        owner=owner,
        source_topic="orders",
        error_type="internal",
        reason=None,
        parked_at=parked_at,
        topic="orders.dlq",
        partition=0,
        offset=int(parked_at),
    )


def resolution(dead_letter_id: str, kind: ResolutionKind = ResolutionKind.DISCARDED) -> Resolution:
    return Resolution(
        dead_letter_id=dead_letter_id,
        resolution=kind,
        who="alice",
        at=datetime.now(UTC),
        reason="test",
        dead_letter_topic="orders.dlq",
        partition=0,
        offset=0,
    )


def stats(index: DeadLetterIndex) -> dict[tuple[str, str, str], tuple[int, float | None]]:
    return {group.labels: (group.depth, group.oldest_parked_at) for group in index.groups()}


def test_depth_and_oldest_per_label_group() -> None:
    index = DeadLetterIndex()
    for n, owner in enumerate(["team-a", "team-b", "team-a", "team-a"]):
        index.add(letter(f"id-{n}", 100.0 + n, owner))

    assert stats(index) == {
        ("team-a", "orders", "internal"): (3, 100.0),
        ("team-b", "orders", "internal"): (1, 101.0),
    }


def test_resolving_the_oldest_moves_the_age_to_the_next_oldest() -> None:
    index = DeadLetterIndex()
    for n in range(5):
        index.add(letter(f"id-{n}", 100.0 + n))

    assert index.resolve(resolution("id-0")) is not None
    assert stats(index)[("team-a", "orders", "internal")] == (4, 101.0)
    index.resolve(resolution("id-2"))
    assert stats(index)[("team-a", "orders", "internal")] == (3, 101.0)
    index.resolve(resolution("id-1"))
    assert stats(index)[("team-a", "orders", "internal")] == (2, 103.0)


def test_a_resolution_read_before_its_dead_letter_counts_once() -> None:
    index = DeadLetterIndex()
    assert index.resolve(resolution("id-0")) is None

    added = index.add(letter("id-0", 100.0))

    assert added.new
    assert added.resolution is not None
    assert stats(index)[("team-a", "orders", "internal")] == (0, None)
    assert index.resolve(resolution("id-0", ResolutionKind.REDRIVEN)) is None
    assert stats(index)[("team-a", "orders", "internal")] == (0, None)


def test_a_second_record_with_the_same_id_is_ignored() -> None:
    index = DeadLetterIndex()
    assert index.add(letter("id-0", 100.0)).new
    assert not index.add(letter("id-0", 50.0)).new
    assert stats(index)[("team-a", "orders", "internal")] == (1, 100.0)


def test_a_withdrawn_resolution_reopens_the_dead_letter() -> None:
    index = DeadLetterIndex()
    index.add(letter("id-0", 100.0))
    index.add(letter("id-1", 200.0))
    index.resolve(resolution("id-0"))
    assert stats(index)[("team-a", "orders", "internal")] == (1, 200.0)

    assert index.withdraw("id-0") is not None

    assert stats(index)[("team-a", "orders", "internal")] == (2, 100.0)
    assert index.withdraw("id-0") is None


def test_select_filters_and_sorts_oldest_first() -> None:
    index = DeadLetterIndex()
    index.add(letter("late", 300.0))
    index.add(letter("early", 100.0, owner="team-b"))
    index.add(letter("middle", 200.0))
    index.resolve(resolution("middle"))

    assert [pair[0].dead_letter_id for pair in index.select()] == ["early", "late"]
    assert [pair[0].dead_letter_id for pair in index.select(include_resolved=True)] == [
        "early",
        "middle",
        "late",
    ]
    chosen = index.select(lambda one: one.owner == "team-a", include_resolved=True)
    assert [(one.dead_letter_id, res is not None) for one, res in chosen] == [
        ("middle", True),
        ("late", False),
    ]


def test_collector_computes_age_at_scrape_time() -> None:
    index = DeadLetterIndex()
    now = [1000.0]
    metrics = DlqMetrics(index, clock=lambda: now[0])
    index.add(letter("id-0", 400.0))
    index.add(letter("id-1", 700.0))

    def age() -> float | None:
        return metrics.registry.get_sample_value(
            "hopchain_dlq_oldest_age_seconds",
            {"owner": "team-a", "source_topic": "orders", "error_type": "internal"},
        )

    assert age() == 600.0
    now[0] = 1010.0
    assert age() == 610.0
    index.resolve(resolution("id-0"))
    assert age() == 310.0
    index.resolve(resolution("id-1"))
    assert age() is None
    assert (
        metrics.registry.get_sample_value(
            "hopchain_dlq_depth",
            {"owner": "team-a", "source_topic": "orders", "error_type": "internal"},
        )
        == 0.0
    )
