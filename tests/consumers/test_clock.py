"""BrokerClock: the host's clock plus the offset the broker's append time gives."""

from __future__ import annotations

from dataclasses import dataclass

from hopchain.consumers.clock import LOG_APPEND_TIME, BrokerClock

CREATE_TIME = 0


@dataclass(frozen=True)
class Appended:
    timestamp: int | None
    timestamp_type: int


class SteppingClock:
    """A host clock an hour fast that moves one second per reading."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def test_the_offset_is_the_append_time_minus_the_middle_of_the_round_trip() -> None:
    host = SteppingClock(1_000_000.0 + 3600)
    clock = BrokerClock(host)

    async def write() -> Appended:
        return Appended(timestamp=1_000_001_500, timestamp_type=LOG_APPEND_TIME)

    assert await clock.measure(write)
    # Sent at host 1,003,601, acknowledged at 1,003,602: the broker said 1,000,001.5.
    assert clock.offset == -3600.0
    assert clock.measured
    assert clock() == 1_000_003.0  # the host's next reading, 1,003,603, corrected


async def test_a_create_time_answer_leaves_the_clock_as_it_was() -> None:
    clock = BrokerClock(SteppingClock(0.0))
    clock.offset = 12.0

    async def write() -> Appended:
        return Appended(timestamp=5_000, timestamp_type=CREATE_TIME)

    assert not await clock.measure(write)
    assert clock.offset == 12.0
    assert not clock.measured


async def test_a_slow_probe_leaves_the_offset_a_quicker_one_measured() -> None:
    clock = BrokerClock(SteppingClock(1_000_000.0 + 3600), max_round_trip=0.5)
    clock.offset, clock.round_trip = -3600.0, 0.01  # measured before, by a quick probe

    async def write() -> Appended:
        # Appended 10 s off the middle of a 1 s round trip: too uncertain to go by.
        return Appended(timestamp=1_000_011_500, timestamp_type=LOG_APPEND_TIME)

    assert await clock.measure(write)
    assert clock.offset == -3600.0
    assert clock.measured
