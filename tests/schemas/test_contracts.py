"""Topic contracts: every topic has exactly one, with an owner and a dead-letter topic."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from strategies import Sample

from hopchain.exceptions import (
    ConfigurationError,
    DecodeError,
    EnvelopeRejected,
    ReasonCode,
    UnknownTopicError,
)
from hopchain.schemas import (
    BodyEnvelope,
    ContractRegistry,
    Decision,
    EnvelopeCodec,
    TopicContract,
    WireMode,
    append_hop,
    new_envelope,
)


class Invoice(BaseModel):
    invoice_id: str


def test_defaults_name_the_contract_after_the_topic_and_park_in_topic_dlq() -> None:
    contract = TopicContract(topic="orders", model=Sample, owner="team-orders")

    assert contract.name == "orders"
    assert contract.version == 1
    assert contract.mode is WireMode.HEADERS
    assert contract.dead_letter_topic == "orders.dlq"


def test_the_body_model_carries_the_payload_model() -> None:
    contract = TopicContract(topic="orders", model=Sample, owner="team-orders", mode=WireMode.BODY)

    assert issubclass(contract.body_model, BodyEnvelope)
    assert contract.body_model.model_fields["payload"].annotation is Sample


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topic": "orders", "owner": ""}, "needs an owner"),
        ({"topic": "orders with spaces", "owner": "o"}, "not a valid Kafka topic name"),
        ({"topic": "x" * 250, "owner": "o"}, "not a valid Kafka topic name"),
        ({"topic": "orders", "owner": "o", "dead_letter_topic": "bad/dlq"}, "dead_letter_topic"),
        ({"topic": "orders", "owner": "o", "dead_letter_topic": "orders"}, "own dead-letter"),
        ({"topic": "orders", "owner": "o", "version": 0}, "1 or more"),
    ],
)
def test_bad_declarations_are_refused_with_what_to_fix(
    kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TopicContract(model=Sample, **kwargs)  # type: ignore[arg-type]


def test_an_unknown_topic_names_the_known_ones_and_how_to_register() -> None:
    registry = ContractRegistry([TopicContract(topic="orders", model=Sample, owner="o")])

    with pytest.raises(UnknownTopicError) as caught:
        registry.get("invoices")

    assert caught.value.topic == "invoices"
    assert caught.value.known == ["orders"]
    assert "ContractRegistry.register" in str(caught.value)
    assert "orders" in str(caught.value)


def test_a_topic_has_exactly_one_contract() -> None:
    registry = ContractRegistry([TopicContract(topic="orders", model=Sample, owner="o")])

    # Registering the same declaration again is harmless ...
    registry.register(TopicContract(topic="orders", model=Sample, owner="o"))
    # ... a different one is a mistake.
    with pytest.raises(ConfigurationError, match="already has contract"):
        registry.register(TopicContract(topic="orders", model=Invoice, owner="o"))
    assert registry.get("orders").model is Sample
    assert len(registry) == 1


def test_a_dead_letter_topic_cannot_carry_a_contract_and_has_an_owner() -> None:
    registry = ContractRegistry([TopicContract(topic="orders", model=Sample, owner="team-a")])

    with pytest.raises(ConfigurationError, match="dead-letter topic"):
        registry.register(TopicContract(topic="orders.dlq", model=Sample, owner="team-b"))
    assert registry.is_dead_letter_topic("orders.dlq")
    assert registry.dead_letter_topics() == {"orders.dlq": "team-a"}


def test_startup_check_names_the_first_topic_without_a_contract() -> None:
    registry = ContractRegistry([TopicContract(topic="orders", model=Sample, owner="o")])

    registry.require(["orders", "orders.dlq"])
    with pytest.raises(UnknownTopicError, match="'payments'"):
        registry.require(["orders", "payments", "refunds"])


def test_a_registry_lists_its_contracts() -> None:
    orders = TopicContract(topic="orders", model=Sample, owner="o")
    invoices = TopicContract(topic="invoices", model=Invoice, owner="o", version=2)
    registry = ContractRegistry([orders, invoices])

    assert list(registry) == [orders, invoices]
    assert "orders" in registry
    assert "orders.dlq" not in registry


def test_a_topic_with_a_contract_cannot_become_a_dead_letter_topic_later() -> None:
    # The same rule as above, whatever the order of registration.
    registry = ContractRegistry([TopicContract(topic="orders.dlq", model=Sample, owner="team-b")])

    with pytest.raises(ConfigurationError, match="carries a contract of its own"):
        registry.register(TopicContract(topic="orders", model=Sample, owner="team-a"))
    assert not registry.is_dead_letter_topic("orders.dlq")


# -- payloads: strict JSON by default, lax as an explicit opt-out ------------------------------


class Amount(BaseModel):
    number: int
    cents: int = 0


class Touchy(BaseModel):
    """A model whose validator has a bug: it raises KeyError, not a validation error."""

    number: int

    @field_validator("number")
    @classmethod
    def look_up(cls, value: int) -> int:
        return {1: 1}[value]


@pytest.mark.parametrize(
    "raw",
    [b'{"number":"1000"}', b'{"number":true}', b'{"number":1000.0}', b'{"number":1e3}'],
    ids=["string", "boolean", "spelled-1.0", "exponent"],
)
def test_payloads_are_read_in_strict_json_mode_unless_the_contract_opts_out(raw: bytes) -> None:
    strict = TopicContract(topic="amounts", model=Amount, owner="o")
    lax = TopicContract(topic="amounts", model=Amount, owner="o", lax_payloads=True)

    with pytest.raises(ValidationError) as caught:
        strict.validate_payload(raw)
    assert caught.value.errors()[0]["loc"] == ("number",)
    assert lax.validate_payload(raw) == Amount(number=1 if raw == b'{"number":true}' else 1000)
    assert strict.validate_payload(b'{"number":1000}') == Amount(number=1000)


def test_a_validator_that_raises_is_a_contract_error_at_the_payload() -> None:
    contract = TopicContract(topic="touchy", model=Touchy, owner="o")

    assert contract.validate_payload(b'{"number":1}') == Touchy(number=1)
    with pytest.raises(DecodeError) as caught:
        contract.validate_payload(b'{"number":2}')
    error = caught.value
    assert (error.code, error.path, error.topic) == (
        ReasonCode.CONTRACT_ERROR,
        "$.payload",
        "touchy",
    )
    assert "KeyError" in error.detail
    assert "Touchy" in error.detail


def _record(contract: TopicContract, payload: BaseModel) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A record as a producer with ``contract`` writes it."""
    envelope = append_hop(
        new_envelope(contract=contract.name, contract_version=1, run_id="r", work_item_id="w"),
        component="writer",
        instance="writer-0",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        destination=contract.topic,
    )
    record = EnvelopeCodec(ContractRegistry([contract])).encode(contract.topic, envelope, payload)
    return record.value, list(record.headers)


class DriftedAmount(BaseModel):
    number: str


@pytest.mark.parametrize("mode", [WireMode.HEADERS, WireMode.BODY])
def test_the_reader_refuses_what_only_lax_mode_converts_and_reports_a_buggy_model(
    mode: WireMode,
) -> None:
    drifted = TopicContract(topic="amounts", model=DriftedAmount, owner="o", mode=mode)
    value, headers = _record(drifted, DriftedAmount(number="1000"))
    strict = ContractRegistry([TopicContract(topic="amounts", model=Amount, owner="o", mode=mode)])
    lax = ContractRegistry(
        [TopicContract(topic="amounts", model=Amount, owner="o", mode=mode, lax_payloads=True)]
    )

    with pytest.raises(DecodeError) as caught:
        EnvelopeCodec(strict).decode("amounts", value, headers)
    assert (caught.value.code, caught.value.path) == (
        ReasonCode.PAYLOAD_INVALID,
        "$.payload.number",
    )
    assert EnvelopeCodec(lax).decode("amounts", value, headers).payload == Amount(number=1000)

    touchy = ContractRegistry([TopicContract(topic="amounts", model=Touchy, owner="o", mode=mode)])
    value, headers = _record(
        TopicContract(topic="amounts", model=Amount, owner="o", mode=mode), Amount(number=2)
    )
    with pytest.raises(DecodeError) as caught:
        EnvelopeCodec(touchy).decode("amounts", value, headers)
    assert (caught.value.code, caught.value.path, caught.value.topic) == (
        ReasonCode.CONTRACT_ERROR,
        "$.payload",
        "amounts",
    )


def test_a_writer_refuses_to_send_what_its_strict_readers_would_refuse() -> None:
    contract = TopicContract(topic="amounts", model=Amount, owner="o")
    envelope = append_hop(
        new_envelope(contract="amounts", contract_version=1, run_id="r", work_item_id="w"),
        component="writer",
        instance="writer-0",
        decision=Decision.ORIGINATED,
        span_id="a000000000000001",
        destination="amounts",
    )
    codec = EnvelopeCodec(ContractRegistry([contract]))

    with pytest.raises(EnvelopeRejected) as caught:
        codec.encode("amounts", envelope, Amount.model_construct(number="1000", cents=0))  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.path) == (
        ReasonCode.PAYLOAD_INVALID,
        "$.payload.number",
    )
    assert codec.encode("amounts", envelope, Amount(number=1000)).value == (
        b'{"number":1000,"cents":0}'
    )


class StrictAmount(BaseModel):
    model_config = ConfigDict(strict=True)

    number: int


def test_opting_out_leaves_a_model_that_is_strict_on_its_own_strict() -> None:
    contract = TopicContract(topic="amounts", model=StrictAmount, owner="o", lax_payloads=True)

    with pytest.raises(ValidationError):
        contract.validate_payload(b'{"number":"1000"}')
