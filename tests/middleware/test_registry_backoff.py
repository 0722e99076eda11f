"""How long a partition pauses while its schema registry does not answer (no broker needed)."""

from __future__ import annotations

import itertools

import pytest
from pydantic import BaseModel

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.outage import RegistryBackoff, refuse_longer_than_poll_interval


class Clock:
    """Monotonic seconds a test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pause_doubles_with_each_failure_in_a_row_up_to_the_longest() -> None:
    backoff = RegistryBackoff(first=0.5, longest=30.0, jitter=0.0)
    pauses = [backoff.failed("orders", 0) for _ in range(9)]
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff.failures("orders", 0) == 9


def test_jitter_shortens_a_pause_by_at_most_its_fraction_and_never_lengthens_it() -> None:
    draws = iter([0.0, 0.999999, 0.5])
    backoff = RegistryBackoff(first=1.0, longest=4.0, jitter=0.2, draw=lambda: next(draws))
    assert backoff.failed("orders", 0) == 1.0
    assert backoff.failed("orders", 0) == pytest.approx(2.0 * 0.8, abs=1e-5)
    assert backoff.failed("orders", 0) == pytest.approx(4.0 * 0.9)


def test_a_jittered_pause_still_grows_until_the_cap() -> None:
    # The worst draws in a row (longest, then shortest) still make each pause longer.
    draws = iter([0.0, 0.999999] * 4)
    backoff = RegistryBackoff(first=0.5, longest=30.0, jitter=0.2, draw=lambda: next(draws))
    pauses = [backoff.failed("orders", 0) for _ in range(6)]
    assert all(later > earlier for earlier, later in itertools.pairwise(pauses))


def test_a_record_read_starts_the_next_outage_from_the_first_pause() -> None:
    backoff = RegistryBackoff(first=0.5, longest=30.0, jitter=0.0)
    for _ in range(5):
        backoff.failed("orders", 0)
    backoff.succeeded("orders", 0)
    assert backoff.failures("orders", 0) == 0
    assert backoff.failed("orders", 0) == 0.5


def test_each_partition_backs_off_on_its_own_failures() -> None:
    backoff = RegistryBackoff(first=0.5, longest=30.0, jitter=0.0)
    for _ in range(4):
        backoff.failed("orders", 0)
    assert backoff.failed("orders", 1) == 0.5
    backoff.succeeded("orders", 1)
    assert backoff.failed("orders", 0) == 8.0


def test_the_time_left_of_a_pause_runs_down_with_the_clock() -> None:
    clock = Clock()
    backoff = RegistryBackoff(first=2.0, longest=30.0, jitter=0.0, clock=clock)
    assert backoff.longest_remaining() == 0.0
    backoff.failed("orders", 0)
    backoff.failed("orders", 1)
    backoff.failed("orders", 1)
    clock.now += 1.5
    assert backoff.remaining("orders", 0) == pytest.approx(0.5)
    assert backoff.longest_remaining() == pytest.approx(2.5)
    clock.now += 10
    assert backoff.longest_remaining() == 0.0
    backoff.succeeded("orders", 1)
    assert backoff.remaining("orders", 1) == 0.0


@pytest.mark.parametrize(
    ("first", "longest", "jitter"),
    [(0.0, 30.0, 0.2), (-1.0, 30.0, 0.2), (5.0, 1.0, 0.2), (0.5, 30.0, 1.0), (0.5, 30.0, -0.1)],
)
def test_a_backoff_that_cannot_work_is_refused_in_one_line(
    first: float, longest: float, jitter: float
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RegistryBackoff(first=first, longest=longest, jitter=jitter)
    assert "\n" not in str(caught.value)
    assert f"first={first}" in str(caught.value)


def test_a_plain_consumer_refuses_a_longest_pause_it_could_not_wait_out_in_its_group() -> None:
    backoff = RegistryBackoff(first=0.5, longest=30.0)
    refuse_longer_than_poll_interval(backoff, 300_000, "max.poll.interval.ms")
    refuse_longer_than_poll_interval(backoff, "30001", "max.poll.interval.ms")
    with pytest.raises(ConfigurationError) as caught:
        refuse_longer_than_poll_interval(backoff, "30000", "max.poll.interval.ms")
    assert "\n" not in str(caught.value)
    assert "max.poll.interval.ms (30000 ms)" in str(caught.value)


def test_the_confluent_consumer_refuses_a_backoff_longer_than_its_poll_interval() -> None:
    from confluent_kafka import Producer  # noqa: PLC0415

    from hopchain import ConfluentEnvelopeConsumer, Hopchain  # noqa: PLC0415
    from hopchain.schemas import ContractRegistry, TopicContract  # noqa: PLC0415

    class Doc(BaseModel):
        id: int

    runtime = Hopchain(
        ContractRegistry([TopicContract(topic="orders", model=Doc, owner="shop")]),
        component="reader",
    )
    settings = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "max.poll.interval.ms": 20000}
    producer = Producer({"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(ConfigurationError, match=r"max.poll.interval.ms \(20000 ms\)"):
        ConfluentEnvelopeConsumer(settings, producer, runtime)
