"""The brokers' time, for measuring ages on a host whose clock may be wrong.

A dead letter's park time is its record's timestamp, which the broker sets on a topic with
``message.timestamp.type=LogAppendTime``. Its age is ``now - parked``: ``now`` must come
from the same clock, or a service host an hour fast reports every letter an hour too old.
:class:`BrokerClock` is the host's clock plus an offset measured against the broker: it
writes a probe to the (``LogAppendTime``) resolutions topic and compares the append time the
broker answers with the midpoint of the host's send and acknowledgement. The probe is a
tombstone marked with :data:`~hopchain.consumers.resolutions.CLOCK_PROBE_HEADER` under one
fixed key, so compaction removes it and readers skip it.

On a topic with ``CreateTime`` the broker answers with the host's own timestamp: the
offset stays 0 and the topic is reported unsafe (``hopchain_dlq_timestamp_unsafe``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["LOG_APPEND_TIME", "AppendedRecord", "BrokerClock"]

LOG_APPEND_TIME = 1
"""The ``timestamp_type`` of a record (or a produce answer) stamped by the broker."""


class AppendedRecord(Protocol):
    """What the broker answers to a write: the record's timestamp and who set it."""

    @property
    def timestamp(self) -> int | None:
        """Milliseconds since the Unix epoch."""

    @property
    def timestamp_type(self) -> int:
        """:data:`LOG_APPEND_TIME` when the broker set it."""


class BrokerClock:
    """Unix time as the brokers keep it: the host's clock plus a measured offset.

    Args:
        host: the host's clock (Unix seconds).
        max_round_trip: a probe's round trip (seconds) up to which its answer always sets
            the offset; a slower one does only when no quicker one did. The offset's error
            can be half the round trip, and a probe written during a leader election can take
            tens of seconds.

    Attributes:
        offset: seconds to add to the host's clock (0 until measured).
        round_trip: the round trip of the probe the offset comes from (None: not measured).
        measured: whether the last measurement had a broker timestamp to go by.
    """

    def __init__(
        self, host: Callable[[], float] = time.time, *, max_round_trip: float = 0.5
    ) -> None:
        self.host = host
        self.max_round_trip = max_round_trip
        self.offset = 0.0
        self.round_trip: float | None = None
        self.measured = False

    def __call__(self) -> float:
        """Now, by the broker's clock as last measured."""
        return self.host() + self.offset

    async def measure(self, write: Callable[[], Awaitable[AppendedRecord]]) -> bool:
        """Write one probe with ``write`` and set the offset from the broker's append time.

        A probe slower than ``max_round_trip`` and than the one the offset comes from leaves
        the offset as it was: the broker appended it at some moment of that round trip, not
        known closer.

        Returns:
            True when the broker stamped the probe (``LogAppendTime``); False leaves the
            offset as it was.
        """
        before = self.host()
        appended = await write()
        after = self.host()
        if appended.timestamp_type != LOG_APPEND_TIME or appended.timestamp is None:
            self.measured = False
            return False
        round_trip = after - before
        if (
            self.round_trip is None
            or round_trip <= self.max_round_trip
            or round_trip <= self.round_trip
        ):
            self.offset = appended.timestamp / 1000 - (before + after) / 2
            self.round_trip = round_trip
        self.measured = True
        return True
