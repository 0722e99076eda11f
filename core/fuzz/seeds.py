"""Write the fuzz targets' seed corpora from the test vectors and the crash vectors.

``python3 core/fuzz/seeds.py [OUT]`` writes one file per seed into ``OUT/<target>/``
(``core/fuzz/seeds`` by default), in the inputs' form of ``src/lib.rs``: a settings byte, then
fields separated by four 0xf5 bytes. Sources: the records of ``tests/vectors/v2`` and of
``tests/vectors/crashes``, and the writer's fixtures (``core/tests/fixtures``). The seeds are
written again on every run; nothing here is edited by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent.parent
VECTORS = ROOT / "tests" / "vectors"
FIXTURES = FUZZ.parent / "tests" / "fixtures"
SEPARATOR = b"\xf5" * 4

# Settings bits (src/lib.rs and each target's documentation).
HMAC, ED25519 = 1, 2
BODY, TOMBSTONE = 1 << 2, 1 << 3
ORIGINATE = 1 << 2


def seed(settings: int, *fields: bytes) -> bytes:
    """One input: the settings byte, then the fields."""
    return bytes([settings]) + SEPARATOR.join(fields)


def keyring_of(vector: dict[str, Any]) -> int:
    """The keyring of a vector or fixture, as the settings' two low bits name it."""
    keys = vector.get("keys") or {}
    if vector.get("public_keys") or keys.get("ed25519"):
        return ED25519
    if keys and not keys.get("ed25519"):
        return HMAC
    return 0


def load(folder: Path) -> list[dict[str, Any]]:
    """The vector files of a folder, sorted by name."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]


def records() -> list[tuple[dict[str, Any], bytes | None, list[tuple[bytes, bytes | None]]]]:
    """Every record of the vectors: (vector, value, headers), bytes as sent."""
    found = []
    for vector in load(VECTORS / "v2"):
        headers = [(name.encode(), value.encode()) for name, value in vector["headers"]]
        found.append((vector, vector["value"].encode(), headers))
    for vector in load(VECTORS / "crashes"):
        value = None if vector["value"] is None else base64.b64decode(vector["value"])
        headers = [
            (name.encode(), None if raw is None else base64.b64decode(raw))
            for name, raw in vector["headers"]
        ]
        found.append((vector, value, headers))
    return found


def header_fields(headers: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    """Headers as fields, name then value; a null value only as the last header's."""
    fields: list[bytes] = []
    for index, (name, value) in enumerate(headers):
        fields.append(name)
        if value is not None or index + 1 < len(headers):
            fields.append(value or b"")
    return fields


def record_seeds() -> list[bytes]:
    """Every record for the topic, mode and keys of its vector."""
    seeds = []
    for vector, value, headers in records():
        names = {name for name, _ in headers}
        body = vector.get("mode") == "body" or (
            "mode" not in vector and b"hopchain-envelope" not in names
        )
        contract, version = vector.get("contract", ["claims", 1])
        settings = keyring_of(vector) | (BODY if body else 0) | (TOMBSTONE if value is None else 0)
        topic = vector["topic"].encode()
        fields = [topic, contract.encode(), str(version).encode(), b"", value or b""]
        seeds.append(seed(settings, *fields, *header_fields(headers)))
    return seeds


def envelope_seeds() -> list[bytes]:
    """Every envelope text: the `hopchain-envelope` headers, and the body-mode values."""
    seeds = []
    for vector, value, headers in records():
        texts = [text for name, text in headers if name == b"hopchain-envelope" and text]
        if value and value.startswith(b"{"):
            texts.append(value)
        seeds.extend(seed(keyring_of(vector), text) for text in texts)
    return seeds


def traceparent_seeds() -> list[bytes]:
    """Every `traceparent` value the vectors send (the target reads the bytes as they are)."""
    return sorted(
        {
            value
            for _, _, headers in records()
            for name, value in headers
            if name == b"traceparent" and value
        }
    )


def deadletter_seeds() -> list[bytes]:
    """The `hopchain-dlq-*` headers of every dead letter."""
    seeds = []
    for _, _, headers in records():
        letter = [(name, value) for name, value in headers if name.startswith(b"hopchain-dlq-")]
        if letter:
            seeds.append(seed(0, *header_fields(letter)))
    return seeds


def writer_seeds() -> list[bytes]:
    """The writer's fixtures: hops appended to received texts, and chains started."""
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    seeds = []
    for case in json.loads((FIXTURES / "append.json").read_text(encoding="utf-8")):
        hop = json.dumps(case["hop"], **compact).encode()
        fields = [case["received"].encode(), hop, case["payload"].encode()]
        seeds.append(seed(keyring_of(case), *fields))
    # And every envelope text of the vectors, with the first fixture's hop and payload.
    first = json.loads((FIXTURES / "append.json").read_text(encoding="utf-8"))[0]
    hop = json.dumps(first["hop"], **compact).encode()
    for envelope in envelope_seeds():
        settings, text = envelope[0], envelope[1:]
        seeds.append(seed(settings, text, hop, first["payload"].encode()))
    for case in json.loads((FIXTURES / "originate.json").read_text(encoding="utf-8")):
        identity = json.dumps(case["identity"], **compact).encode()
        hop = json.dumps(case["hop"], **compact).encode()
        fields = [identity, hop, case["payload"].encode()]
        seeds.append(seed(keyring_of(case) | ORIGINATE, *fields))
    return seeds


TARGETS = {
    "envelope": envelope_seeds,
    "record": record_seeds,
    "traceparent": traceparent_seeds,
    "deadletter": deadletter_seeds,
    "writer": writer_seeds,
}


def main() -> int:
    """Write every target's seeds; exit status 1 when a target has none."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FUZZ / "seeds"
    for target, make in TARGETS.items():
        folder = out / target
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        seeds = make()
        if not seeds:
            print(f"seeds.py: no seed for {target}", file=sys.stderr)
            return 1
        for data in seeds:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)  # noqa: S324
        print(f"{target}: {len(set(seeds))} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
