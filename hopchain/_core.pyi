# The compiled core (core/, hopchain-core): SPEC.md's schema-2 reader and writer.

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

REASON_CODES: tuple[str, ...]

Header: TypeAlias = tuple[str, bytes | None]

class Keyring:
    def __init__(
        self,
        hmac: Mapping[str, bytes] | None = None,
        verifying: Mapping[str, Sequence[bytes]] | None = None,
        signing: Mapping[str, bytes] | None = None,
    ) -> None: ...

class Topic:
    def __init__(
        self,
        topic: str,
        mode: Literal["headers", "body"],
        contract: str,
        contract_version: int,
        writers: Sequence[str] = ...,
        *,
        payload_format: str = ...,
    ) -> None: ...

class Verdict:
    @property
    def kind(self) -> Literal["accepted", "refused", "refused_after_payload", "schema1"]: ...
    @property
    def code(self) -> str | None: ...
    @property
    def path(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def payload(self) -> tuple[int, int] | None: ...
    @property
    def source(self) -> Literal["value", "header"] | None: ...
    @property
    def hops(self) -> int | None: ...
    @property
    def payload_digest(self) -> str | None: ...
    @property
    def traceparent(self) -> str | None: ...
    @property
    def tracestate(self) -> str | None: ...
    @property
    def identity(self) -> dict[str, Any] | None: ...
    @property
    def last_hop(self) -> dict[str, Any] | None: ...

def read_batch(
    records: Iterable[tuple[bytes | None, Iterable[Header]]],
    topic: Topic,
    keyring: Keyring | None = None,
    max_hops: int = 64,
    max_record_bytes: int = 1_000_000,
) -> list[Verdict]: ...
def append_hop(
    received: bytes,
    hop: Mapping[str, Any],
    payload: bytes,
    keyring: Keyring | None = None,
) -> tuple[bytes, str, str | None]: ...
def append_verdict(
    verdict: Verdict,
    hop: Mapping[str, Any],
    payload: bytes,
    keyring: Keyring | None = None,
) -> tuple[bytes, str, str | None]: ...
def append_batch(
    items: Iterable[tuple[Verdict, Mapping[str, Any], bytes]],
    keyring: Keyring | None = None,
) -> list[tuple[bytes, str, str | None] | ValueError]: ...
def originate_chain(
    identity: Mapping[str, Any],
    hop: Mapping[str, Any],
    payload: bytes,
    keyring: Keyring | None = None,
) -> tuple[bytes, str, str | None]: ...
def originate_identity(
    identity: bytes,
    hop: Mapping[str, Any],
    payload: bytes,
    keyring: Keyring | None = None,
) -> tuple[bytes, str, str | None]: ...
def check_hop(hop: Mapping[str, Any], index: int) -> None: ...
def seal_hop(
    previous: str,
    hop: Mapping[str, Any],
    index: int,
    payload_digest: str | None = None,
    keyring: Keyring | None = None,
) -> tuple[bytes, str, str | None]: ...
def identity_text(identity: Mapping[str, Any], legacy: bytes | None = None) -> bytes: ...
def read_dead_letter_summaries(
    letters: Iterable[Iterable[Header]],
) -> list[tuple[Any, ...] | None]: ...
def read_text(
    text: bytes,
    keyring: Keyring | None = None,
    check: bool = True,
) -> dict[str, Any]: ...
def hop_members(sealed: bytes) -> dict[str, Any]: ...
def read_dead_letter_entries(
    letters: Iterable[tuple[Iterable[Header], bytes | None]],
) -> list[tuple[Any, ...] | None]: ...
