"""The codec microbenchmark of ``bench/micro.py``, run for the report.

``bench/micro.py`` defines the workload (payload, chains, one hop's work, the breakdown) and
the timing (median of repeats); this module only calls it and keeps the figures.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from bench import hop_parts, micro
from hopchain.schemas import EnvelopeCodec

MODES = {"headers": micro.HEADERS_TOPIC, "body": micro.BODY_TOPIC}


@dataclass
class MicroRow:
    """One chain length: µs per hop (median, minimum) by wire mode, and the record's size."""

    hops: int
    median_us: dict[str, float]
    min_us: dict[str, float]
    record_bytes: int


@dataclass
class MicroResult:
    """The whole microbenchmark."""

    repeats: int
    payload_bytes: int
    rows: list[MicroRow] = field(default_factory=list)
    breakdown_hops: int = 0
    breakdown: dict[str, dict[str, float]] = field(default_factory=dict)
    """Median µs of each part of one hop, by wire mode."""
    cpu_share: float = 0.0
    """CPU time over wall time while it ran: near 1.0 means it had a core to itself."""
    direct: list[hop_parts.Part] = field(default_factory=list)
    """The calls inside one hop at 10 hops, headers mode, each timed alone (CPU µs)."""

    def at(self, hops: int, mode: str) -> float | None:
        for row in self.rows:
            if row.hops == hops:
                return row.median_us.get(mode)
        return None


def run_micro(repeats: int) -> MicroResult:
    """Time one hop's work at every chain length in both modes, then its parts."""
    codec = EnvelopeCodec(micro.registry())
    payload = micro.payload_of_one_kib()
    result = MicroResult(repeats=repeats, payload_bytes=micro.PAYLOAD_BYTES)
    wall, cpu = time.perf_counter(), os.times()
    for hops in micro.CHAIN_LENGTHS:
        medians, minimums = {}, {}
        for mode, topic in MODES.items():
            medians[mode], minimums[mode] = micro.measure(
                micro.hop_cycle(codec, topic, hops), repeats
            )
        size = codec.encode(micro.HEADERS_TOPIC, micro.chain_of(hops), payload).size
        result.rows.append(MicroRow(hops, medians, minimums, size))
    result.breakdown_hops = micro.BREAKDOWN_HOPS
    for mode, topic in MODES.items():
        for name, operation in micro.parts(codec, topic, micro.BREAKDOWN_HOPS).items():
            median, _ = micro.measure(operation, repeats)
            result.breakdown.setdefault(name, {})[mode] = median
    spent = os.times()
    used = spent.user + spent.system - cpu.user - cpu.system
    result.cpu_share = used / (time.perf_counter() - wall)
    result.direct = hop_parts.measure()
    return result
