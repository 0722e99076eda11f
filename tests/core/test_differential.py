"""The compiled core, the Python oracle and verify.mjs reach the same verdict on the same records.

Every test vector (``tests/vectors/v2``), the crash corpus's record reads
(``tests/vectors/crashes``), the mutation campaign of ``tests/schemas`` (designed
and random mutations of records hopchain wrote, resealed), and record-level variants of the
vectors (tombstones, headers repeated, not UTF-8, null, missing, NaN payloads, limits) are read
by the Python reader kept as the oracle (``tests/oracle/python_reader.py``) and by
``hopchain._core.read_batch``; verdict, reason code and JSON path must be equal, and
``EnvelopeCodec.decode`` (which reads with the core) must give the same. A record the core
leaves to schema 1's reader is counted, not compared. ``tests/vectors/verify.mjs --records``
(written from SPEC.md alone) reads the same records and must give the core's verdict; it
does not check a continued schema-1 chain's links, so a refusal the core makes for one is
counted, not compared.

The core leaves step 10 (the payload's contract) to its caller: this test
applies it as the codec does, before a refusal the core made after that step.

Opt in with ``HOPCHAIN_CORE_DIFF=1`` once ``hopchain._core`` is built
(``maturin develop --release -m core/Cargo.toml``); the figures are printed.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from hopchain.exceptions import DecodeError, EnvelopeError, ReasonCode
from hopchain.schemas import ContractRegistry, EnvelopeCodec, Keyring, Limits, WireMode
from hopchain.schemas.refusals import from_validation
from hopchain.schemas.sealed import CHAIN_START, wire_of
from hopchain.schemas.text_v2 import read_envelope_text

if os.environ.get("HOPCHAIN_CORE_DIFF") != "1":
    pytest.skip(
        "the differential test of hopchain._core runs with HOPCHAIN_CORE_DIFF=1",
        allow_module_level=True,
    )
try:
    core: Any = importlib.import_module("hopchain._core")  # built by maturin, when it is
except ImportError as exc:  # opted in: a missing extension is a failure, not a skip
    pytest.fail(f"HOPCHAIN_CORE_DIFF=1 but hopchain._core is not built: {exc}", pytrace=False)

TESTS = Path(__file__).parents[1]
VECTORS = TESTS / "vectors"
sys.path.insert(0, str(TESTS / "schemas"))  # the mutation campaign's modules
sys.path.insert(0, str(TESTS / "oracle"))  # the Python reader, kept as the oracle

import python_reader as oracle  # noqa: E402
import text_reader as oracle_text  # noqa: E402
from mutation_records import KEYS  # noqa: E402
from mutation_records import registry as mutation_registry  # noqa: E402
from mutations import campaign  # noqa: E402

Headers = tuple[tuple[str, bytes | None], ...]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _load(VECTORS / "make_vectors.py", "make_vectors_for_core")


@dataclass(frozen=True)
class Case:
    """A record, the reader's configuration, and where the case came from."""

    name: str
    origin: str
    topic: str
    value: bytes | None
    headers: Headers
    registry: ContractRegistry
    hmac: dict[str, bytes]
    public: dict[str, list[bytes]]
    limits: Limits = field(default_factory=Limits)


def _keyring(case: Case) -> Keyring | None:
    return Keyring(case.hmac, verifying=case.public) if case.hmac or case.public else None


def _python(case: Case) -> tuple[str | None, str | None]:
    """The oracle's verdict: ``SCHEMA_1`` for a record it leaves to schema 1's reader."""
    found = oracle.verdict(
        case.registry,
        case.topic,
        case.value,
        list(case.headers),
        keyring=_keyring(case),
        limits=case.limits,
    )
    return (None, None) if found is None else found


def _codec(case: Case) -> tuple[str | None, str | None]:
    """What the product's codec says (schema-1 records read by schema 1's reader)."""
    codec = EnvelopeCodec(case.registry, keyring=_keyring(case), limits=case.limits)
    try:
        codec.decode(case.topic, case.value, list(case.headers))
    except DecodeError as exc:
        return exc.code.value, exc.path
    return None, None


def _payload_step(case: Case, payload: bytes) -> tuple[str, str] | None:
    """Step 10, as the codec applies it: the payload against the topic's contract."""
    contract = case.registry.get(case.topic)
    try:
        contract.validate_payload(payload)
    except ValidationError as exc:
        error = from_validation(exc, prefix=("payload",))
        return error.code.value, error.path
    except EnvelopeError as exc:
        return exc.code.value, exc.path
    return None


def _core(case: Case, verdict: Any) -> tuple[str | None, str | None]:
    if verdict.kind == "refused":
        return verdict.code, verdict.path
    assert case.value is not None
    start, end = verdict.payload
    refused = _payload_step(case, case.value[start:end])
    if refused is not None:
        return refused
    if verdict.kind == "refused_after_payload":
        return verdict.code, verdict.path
    return None, None


def _read_with_core(cases: list[Case]) -> list[Any]:
    verdicts = []
    for case in cases:
        contract = case.registry.get(case.topic)
        topic = core.Topic(
            contract.topic,
            "body" if contract.mode is WireMode.BODY else "headers",
            contract.name,
            contract.version,
            sorted(contract.writers),
        )
        keyring = (
            core.Keyring(hmac=case.hmac, verifying=case.public)
            if case.hmac or case.public
            else None
        )
        verdicts += core.read_batch(
            [(case.value, case.headers)],
            topic,
            keyring,
            max_hops=case.limits.max_hops,
            max_record_bytes=case.limits.max_record_bytes,
        )
    return verdicts


def _vector_cases() -> list[Case]:
    cases = []
    for path in sorted((VECTORS / "v2").glob("*.json")):
        vector = json.loads(path.read_text(encoding="utf-8"))
        cases.append(
            Case(
                name=vector["name"],
                origin="vector",
                topic=vector["topic"],
                value=vector["value"].encode(),
                headers=tuple((name, raw.encode()) for name, raw in vector["headers"]),
                registry=GENERATOR.registry(),
                hmac={name: bytes.fromhex(key) for name, key in vector["keys"].items()},
                public={
                    name: [bytes.fromhex(key) for key in keys]
                    for name, keys in vector["public_keys"].items()
                },
            )
        )
    return cases


def _mutation_cases() -> list[Case]:
    registry = mutation_registry()
    return [
        Case(
            name=mutation.name,
            origin=f"mutation ({mutation.origin})",
            topic=mutation.record.topic,
            value=mutation.record.value,
            headers=tuple(mutation.record.headers),
            registry=registry,
            hmac=dict(KEYS) if mutation.record.keyed else {},
            public={},
        )
        for mutation in campaign()
    ]


def _variants(case: Case) -> list[Case]:
    """Record-level variants of a vector: SPEC.md section 5, steps 1, 12, 13 and 14."""
    headers = case.headers
    first_name = headers[0][0] if headers else "traceparent"
    nan = b'{"amount_cents":NaN,"number":1}'
    edits: list[tuple[str, bytes | None, Headers, Limits]] = [
        ("tombstone", None, headers, case.limits),
        ("empty value", b"", headers, case.limits),
        ("value not UTF-8", (case.value or b"") + b"\xff", headers, case.limits),
        ("header repeated", case.value, (*headers, *headers), case.limits),
        ("header value not UTF-8", case.value, ((first_name, b"\xc3("), *headers), case.limits),
        ("header name not UTF-8", case.value, (("\udcff", b"x"), *headers), case.limits),
        ("header values null", case.value, tuple((n, None) for n, _ in headers), case.limits),
        ("no headers", case.value, (), case.limits),
        ("degraded header", case.value, (*headers, ("hopchain-degraded", b"x")), case.limits),
        ("tracestate", case.value, (*headers, ("tracestate", b"a=1")), case.limits),
        ("NaN payload", nan, headers, case.limits),
        ("small size limit", case.value, headers, Limits(max_record_bytes=300)),
        ("hop limit 2", case.value, headers, Limits(max_hops=2)),
        (
            "traceparent spaced",
            case.value,
            tuple((n, b" " + v + b"\n" if n == "traceparent" and v else v) for n, v in headers),
            case.limits,
        ),
    ]
    return [
        Case(
            name=f"{case.name} / {what}",
            origin="record variant",
            topic=case.topic,
            value=value,
            headers=variant,
            registry=case.registry,
            hmac=case.hmac,
            public=case.public,
            limits=limits,
        )
        for what, value, variant, limits in edits
    ]


def _crash_cases() -> list[Case]:
    """The crash corpus's record reads (``target`` codec); its dead letters are not records a
    topic's reader reads, and the dead-letter test below compares those."""
    public = {
        name: [bytes.fromhex(key) for key in keys] for name, keys in GENERATOR.public_keys().items()
    }
    cases = []
    for path in sorted((VECTORS / "crashes").glob("*.json")):
        crash = json.loads(path.read_text(encoding="utf-8"))
        if crash["target"] != "codec":
            continue
        cases.append(
            Case(
                name=crash["name"],
                origin="crash",
                topic=crash["topic"],
                value=_unb64(crash["value"]),
                headers=tuple((name, _unb64(raw)) for name, raw in crash["headers"]),
                registry=GENERATOR.registry(),
                hmac=dict(GENERATOR.KEYS) if crash["keyed"] else {},
                public=public if crash["keyed"] else {},
            )
        )
    return cases


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _cases() -> list[Case]:
    vectors = _vector_cases()
    variants = [
        variant for case in vectors if case.name.startswith("valid") for variant in _variants(case)
    ]
    return [*vectors, *_crash_cases(), *_mutation_cases(), *variants]


def test_the_core_reaches_the_oracles_verdict_on_every_record() -> None:
    cases = _cases()
    verdicts = _read_with_core(cases)
    agree: Counter[str] = Counter()
    deferred: Counter[str] = Counter()
    differ = []
    for case, read in zip(cases, verdicts, strict=True):
        if read.kind == "schema1":  # schema 1's reader decides, for the core and the oracle
            deferred[case.origin] += 1
            continue
        python = _python(case)
        got = _core(case, read)
        if got == python and got == _codec(case):
            agree[case.origin] += 1
        else:
            differ.append(
                f"{case.origin}: {case.name}: oracle {python}, core {got}, codec {_codec(case)}"
            )
    lines = [f"{origin}: {count} agree" for origin, count in sorted(agree.items())]
    lines += [f"{origin}: {count} left to schema 1's reader" for origin, count in deferred.items()]
    lines.append(f"{len(differ)} disagree")
    print("\n" + "\n".join(lines + differ[:40]))  # noqa: T201
    assert differ == []
    # Only what continues a schema-1 chain (SPEC.md section 6) is left to the Python reader.
    assert sum(agree.values()) + sum(deferred.values()) == len(cases)
    assert sum(deferred.values()) <= 0.1 * len(cases)


def _envelope_text(case: Case) -> bytes | None:
    """The envelope text of a case's record (its envelope header, or the value), if it is in
    schema 2's layout: what ``load_envelope`` hands the text reader."""
    texts = [value for name, value in case.headers if name == "hopchain-envelope"]
    text = texts[0] if texts else case.value
    return text if text is not None and CHAIN_START in text else None


def _text_verdict(reader: Any, text: bytes, keyring: Keyring | None, *, check: bool) -> Any:
    """A text reader's refusal (code, path), or what it read: the envelope, every hop's
    bytes, digest and signature, the degradation markers and what follows the signatures."""
    try:
        envelope, rest = reader(text, keyring=keyring, check=check)
    except EnvelopeError as exc:
        return exc.code.value, exc.path
    wire = wire_of(envelope)
    assert wire is not None
    parts = (wire.hops, wire.digests, wire.signatures, wire.markers, wire.legacy, rest)
    return envelope.model_dump(mode="json"), parts


def test_the_cores_text_reader_reads_every_envelope_text_as_the_oracles_does() -> None:
    """The product's text reader (the core, under ``load_envelope``) against the Python one,
    with digests and signatures checked and taken as written (``check=False``)."""
    compared: Counter[str] = Counter()
    differ = []
    for case in _cases():
        text = _envelope_text(case)
        if text is None:
            continue
        keyring = _keyring(case)
        for check in (True, False):
            core = _text_verdict(read_envelope_text, text, keyring, check=check)
            python = _text_verdict(oracle_text.read_envelope_text, text, keyring, check=check)
            kind = "accepted" if len(core) == 2 and isinstance(core[0], dict) else core[0]
            compared[f"check={check}: {kind}"] += 1
            if core != python:
                differ.append(f"{case.origin}: {case.name} (check={check}): {core} != {python}")
    print("\n" + "\n".join(f"{k}: {n}" for k, n in sorted(compared.items())))  # noqa: T201
    assert differ[:5] == []
    # Taken as written, the texts step 8 refuses (an edited hop, a forged signature) are read.
    assert compared["check=False: accepted"] > compared["check=True: accepted"]
    assert compared["check=True: bad_digest"] > 0
    assert compared["check=True: bad_signature"] > 0


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed; CI installs it", pytrace=False)
        pytest.skip("node is not installed")
    return node


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def _record_line(case: Case) -> str:
    """A case as a line of ``verify.mjs --records``: the topic as the core is told it."""
    contract = case.registry.get(case.topic)
    return json.dumps(
        {
            "topic": contract.topic,
            "mode": "body" if contract.mode is WireMode.BODY else "headers",
            "contract": [contract.name, contract.version],
            "writers": sorted(contract.writers),
            "value": _b64(case.value),
            # Names the client could not decode are handed over as surrogate escapes.
            "headers": [
                [_b64(name.encode("utf-8", "surrogateescape")), _b64(raw)]
                for name, raw in case.headers
            ],
            "keys": {name: key.hex() for name, key in case.hmac.items()},
            "public_keys": {name: [k.hex() for k in keys] for name, keys in case.public.items()},
            "max_hops": case.limits.max_hops,
            "max_record_bytes": case.limits.max_record_bytes,
        }
    )


def _read_with_verifier(cases: list[Case]) -> list[dict[str, Any]]:
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [_node(), str(VECTORS / "verify.mjs"), "--records"],
        input="".join(_record_line(case) + "\n" for case in cases),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    verdicts: list[dict[str, Any]] = [
        json.loads(line) for line in result.stdout.split("\n") if line
    ]
    return verdicts


def _verifier(case: Case, verdict: dict[str, Any]) -> tuple[str | None, str | None]:
    """verify.mjs's verdict, step 10 applied as for the core."""
    if verdict["kind"] in {"refused", "error"}:
        return verdict.get("code", "error"), verdict["path"]
    assert case.value is not None
    start, end = verdict["payload"]
    refused = _payload_step(case, case.value[start:end])
    if refused is not None:
        return refused
    if verdict["kind"] == "refused_after_payload":
        return verdict["code"], verdict["path"]
    return None, None


def _schema_1_link(path: str | None) -> bool:
    """Whether a refusal's path names a legacy chain's envelope, head or links."""
    return path is not None and (
        path in {"$.legacy", "$.head"}
        or re.fullmatch(r"\$\.chain\[[0-9]+\]\.(?:seq|prev_digest|digest|signature)", path)
        is not None
    )


def test_the_javascript_verifier_reaches_the_cores_verdict_on_every_record() -> None:
    """verify.mjs, written from SPEC.md alone, reads every record as the core does."""
    cases = _cases()
    verdicts = _read_with_core(cases)
    verified = _read_with_verifier(cases)
    agree: Counter[str] = Counter()
    left: Counter[str] = Counter()
    differ = []
    for case, read, checked in zip(cases, verdicts, verified, strict=True):
        if read.kind == "schema1" and checked["kind"] == "schema1":
            left[f"{case.origin}: schema 1"] += 1
            continue
        schema_1: tuple[str | None, str | None] = ("schema 1", None)
        core_said = schema_1 if read.kind == "schema1" else _core(case, read)
        if checked.get("legacy") and _schema_1_link(core_said[1]):
            # verify.mjs does not check a continued schema-1 chain's links (step 4).
            left[f"{case.origin}: refused for a schema-1 link"] += 1
            continue
        got = schema_1 if checked["kind"] == "schema1" else _verifier(case, checked)
        if got == core_said:
            agree[case.origin] += 1
        else:
            differ.append(f"{case.origin}: {case.name}: core {core_said}, verify.mjs {got}")
    lines = [f"{origin}: {count} agree" for origin, count in sorted(agree.items())]
    lines += [f"{what}: {count} not compared" for what, count in sorted(left.items())]
    lines.append(f"{len(differ)} disagree")
    print("\n" + "\n".join(lines + differ[:60]))  # noqa: T201
    assert differ == []
    assert sum(agree.values()) + sum(left.values()) == len(cases)
    assert sum(left.values()) <= 0.1 * len(cases)


def test_the_core_names_the_same_reason_codes() -> None:
    assert tuple(code.value for code in ReasonCode) == core.REASON_CODES


FIXTURES = TESTS.parent / "core" / "tests" / "fixtures"


def _fixture_keyring(keys: dict[str, dict[str, str]]) -> Any:
    if not keys:
        return None
    return core.Keyring(
        hmac={name: bytes.fromhex(key) for name, key in keys.get("hmac", {}).items()},
        signing={name: bytes.fromhex(seed) for name, seed in keys.get("ed25519", {}).items()},
    )


def test_the_cores_writer_writes_the_python_writers_bytes() -> None:
    cases = json.loads((FIXTURES / "append.json").read_text(encoding="utf-8"))
    for case in cases:
        payload = case["payload"].encode()
        text, traceparent, degraded = core.append_hop(
            case["received"].encode(), case["hop"], payload, _fixture_keyring(case["keys"])
        )
        headers = dict(case["headers"])
        if case["mode"] == "body":
            assert text[:-1] + b',"payload":' + payload + b"}" == case["value"].encode()
        else:
            assert text == headers["hopchain-envelope"].encode()
        assert traceparent == headers["traceparent"]
        assert degraded == headers.get("hopchain-degraded")
    for case in json.loads((FIXTURES / "originate.json").read_text(encoding="utf-8")):
        text, traceparent, _ = core.originate_chain(
            case["identity"], case["hop"], case["payload"].encode(), _fixture_keyring(case["keys"])
        )
        headers = dict(case["headers"])
        assert (text.decode(), traceparent) == (
            headers["hopchain-envelope"],
            headers["traceparent"],
        )


def test_the_cores_writer_refuses_with_a_reason_code() -> None:
    case = json.loads((FIXTURES / "append.json").read_text(encoding="utf-8"))[0]
    hop = {**case["hop"], "decision": "improvised"}
    with pytest.raises(ValueError, match="unknown_decision") as refused:
        core.append_hop(case["received"].encode(), hop, b"{}")
    assert refused.value.args[:2] == ("unknown_decision", "$.chain[3].decision")


def _letters() -> list[tuple[str, Headers]]:
    """Dead letters' headers as hopchain writes them, and each edited in one way."""
    from hopchain.schemas import ErrorType, Failure  # noqa: PLC0415
    from hopchain.schemas.deadletter import (  # noqa: PLC0415
        DeadLetterInfo,
        dead_letter_headers,
    )

    letters: list[tuple[str, Headers]] = []
    for reason, parked_at, envelope in [
        (ReasonCode.BAD_DIGEST, datetime(2026, 3, 1, 10, tzinfo=UTC), None),
        (None, datetime(2026, 3, 1, 10, 0, 1, 250_000, tzinfo=UTC), None),
        (ReasonCode.PAYLOAD_INVALID, datetime(1999, 12, 31, 23, 59, 59, 1, tzinfo=UTC), "x"),
    ]:
        info = DeadLetterInfo(
            dead_letter_id="01JNE7Q4Z9M1V6X0C3R8T2Y5WC",
            reason=reason,
            path=None if reason is None else "$.chain[0]",
            error_type=ErrorType.MALFORMED if reason else ErrorType.INTERNAL,
            owner="claims-team",
            component="review",
            group="review",
            source_topic="claims",
            source_partition=3,
            source_offset=12,
            source_timestamp_ms=1_772_356_200_000,
            parked_at=parked_at,
            failure=Failure(
                component="review", error_type=ErrorType.INTERNAL, locally_resolvable=False
            ),
        )
        headers: Headers = (("traceparent", b"00-x"), *dead_letter_headers(info))
        if envelope is not None:
            headers = (*headers, ("hopchain-dlq-envelope", b"{}"))
        letters.append(("as written", headers))
        for index, (name, _) in enumerate(headers):
            rest = headers[:index] + headers[index + 1 :]
            letters.append((f"without {name}", rest))
            edits: list[bytes | None] = [b"", b"\xff", b" 12", b"+12", b"nope", b"12", None]
            edits.append(b"2026-03-01T10:00:00")
            letters += [(f"{name} = {edit!r}", (*rest, (name, edit))) for edit in edits]
    return letters


def _python_summary(headers: Headers) -> tuple[Any, ...] | None:
    from hopchain.schemas.deadletter import read_dead_letter_summary  # noqa: PLC0415

    try:
        return read_dead_letter_summary(headers)
    except (KeyError, ValueError):
        return None


def test_the_core_reads_dead_letter_headers_as_the_index_does() -> None:
    from hopchain.schemas import Failure  # noqa: PLC0415

    letters = _letters()
    summaries = core.read_dead_letter_summaries([headers for _, headers in letters])
    read = left = 0
    for (name, headers), summary in zip(letters, summaries, strict=True):
        python = _python_summary(headers)
        if summary is None:
            left += 1  # the Python reader decides: it reads it or refuses it
            continue
        read += 1
        *fields, failure = summary
        try:
            Failure.model_validate_json(failure)
        except ValueError:
            assert python is None, name  # the failure's JSON is the caller's to validate
            continue
        assert tuple(fields) == python, name
    print(f"\ndead letters: {read} read by the core, {left} left to the Python reader")  # noqa: T201
    assert read >= 50
