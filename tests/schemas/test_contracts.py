"""Topic contracts: every topic has exactly one, with an owner and a dead-letter topic."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from strategies import Sample

from hopchain.exceptions import ConfigurationError, UnknownTopicError
from hopchain.schemas import BodyEnvelope, ContractRegistry, TopicContract, WireMode


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
