r"""Records whose header names are not UTF-8, read instead of stalling the partition.

Kafka header names are bytes on the wire; aiokafka decodes them as strict UTF-8 while it
unpacks a fetch, so one record with a name such as ``b"\xff"`` (``kcat -H`` writes one)
makes every ``getmany``/``getone`` of its partition raise ``UnicodeDecodeError``, forever:
no record of that partition is handed over again, not even those before it.

:func:`read_undecodable_header_names` makes aiokafka's fetcher read such a record batch again
with a small reader of the record-batch format (v2) that decodes names with
``surrogateescape``: the record is handed over, its odd name a ``str`` that gives the
original bytes back with ``name.encode("utf-8", "surrogateescape")``. hopchain's reader
then refuses it as ``not_utf8`` and parks it, the name written as
:func:`hopchain.schemas.deadletter.writable_header_name` says. Batches aiokafka reads without
error are untouched (its C reader stays on the hot path); legacy (v0, v1) batches are left to
aiokafka.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiokafka.consumer.fetcher as fetcher_module
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

__all__ = ["LOGGER_NAME", "read_undecodable_header_names"]

LOGGER_NAME = "hopchain.consumer.header_names"
"""Where the note about a batch read again goes."""
_log = logging.getLogger(LOGGER_NAME)

_BATCH = struct.Struct(">qiibIhiqqqhii")
"""A v2 record batch's header: base offset, length, leader epoch, magic, CRC, attributes,
last offset delta, first and max timestamp, producer id and epoch, base sequence, count."""
_LENGTH_END = 12  # base offset (8) and batch length (4) precede the rest of a batch
_MAGIC_AT = 16
_COMPRESSION = 0x07
_LOG_APPEND_TIME = 0x08
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: gzip_decode,
    2: snappy_decode,
    3: lz4_decode,
    4: zstd_decode,
}


@dataclass(frozen=True, slots=True)
class _Record:
    """One record as aiokafka's fetcher reads it from a batch."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    checksum: None = None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``, and the position after it."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _sized(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """A length-prefixed byte string (length -1: null), and the position after it."""
    length, pos = _varint(data, pos)
    if length < 0:
        return None, pos
    return data[pos : pos + length], pos + length


def _records(batch: bytes) -> Iterator[_Record]:
    """Every record of one v2 batch, header names decoded with ``surrogateescape``."""
    (base_offset, _, _, _, _, attributes, _, first_time, max_time, _, _, _, count) = (
        _BATCH.unpack_from(batch)
    )
    data = batch[_BATCH.size :]
    codec = attributes & _COMPRESSION
    if codec:
        data = _DECOMPRESS[codec](data)
    log_append = bool(attributes & _LOG_APPEND_TIME)
    pos = 0
    for _ in range(count):
        _, pos = _varint(data, pos)  # the record's length
        pos += 1  # its attributes (unused)
        time_delta, pos = _varint(data, pos)
        offset_delta, pos = _varint(data, pos)
        key, pos = _sized(data, pos)
        value, pos = _sized(data, pos)
        header_count, pos = _varint(data, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            name, pos = _sized(data, pos)
            header_value, pos = _sized(data, pos)
            headers.append(((name or b"").decode("utf-8", "surrogateescape"), header_value))
        yield _Record(
            offset=base_offset + offset_delta,
            timestamp=max_time if log_append else first_time + time_delta,
            timestamp_type=1 if log_append else 0,
            key=key,
            value=value,
            headers=headers,
        )


class _Batch:
    """aiokafka's batch; from a header name it cannot decode, read again by :func:`_records`."""

    def __init__(self, inner: Any, raw: bytes) -> None:
        self._inner = inner
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __next__(self) -> Any:
        return next(self._inner)  # a control batch's marker, read alone

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from iter(self._inner)  # aiokafka's batch prepares its records in iter()
        except UnicodeDecodeError:
            _log.warning(
                "a record batch from offset %d has a header name that is not UTF-8; "
                "read again with the name's bytes kept",
                _BATCH.unpack_from(self._raw)[0],
            )
            # From its first record: the fetcher skips those below the offset it reached.
            yield from _records(self._raw)


class _Records:
    """aiokafka's ``MemoryRecords``, whose v2 batches are read again when a name is odd."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._inner = _ORIGINAL(data)
        self._pos = 0

    def size_in_bytes(self) -> int:
        return int(self._inner.size_in_bytes())

    def has_next(self) -> bool:
        return bool(self._inner.has_next())

    def next_batch(self, *args: Any) -> Any:
        batch = self._inner.next_batch(*args)
        if batch is None:
            return None
        start = self._pos
        (length,) = struct.unpack_from(">i", self._data, start + 8)
        self._pos = end = start + _LENGTH_END + length
        if self._data[start + _MAGIC_AT] != 2:  # noqa: PLR2004 - the v2 format's magic
            return batch
        return _Batch(batch, bytes(self._data[start:end]))


_ORIGINAL: Any = fetcher_module.MemoryRecords


def read_undecodable_header_names() -> None:
    """Make aiokafka's fetcher hand over records whose header names are not UTF-8.

    Idempotent; affects every aiokafka consumer in the process, and only batches aiokafka
    would otherwise fail to read.
    """
    fetcher_module.MemoryRecords = _Records
