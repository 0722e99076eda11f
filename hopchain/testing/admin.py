"""Small admin helpers for tests that talk to a real broker: unique names, topics, readiness.

They are plain coroutines over aiokafka's admin client, so they work against the local broker
that :class:`hopchain.testing.LocalKafka` starts as well as any other reachable cluster::

    topic = unique_topic_name("orders")
    await create_topics(bootstrap, topic, partitions=3)
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code

from hopchain.exceptions import LocalKafkaError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "TopicFactory",
    "broker_metadata",
    "create_topics",
    "delete_topics",
    "unique_topic_name",
    "wait_for_broker",
]

MAX_TOPIC_NAME_LENGTH = 249
"""Kafka refuses longer topic names."""

_TOPIC_ALREADY_EXISTS = 36
_NOT_TOPIC_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_SUFFIX_LENGTH = 12
_POLL_SECONDS = 0.1


def unique_topic_name(prefix: str = "test") -> str:
    """Return a topic name that no other test (or earlier run) has used.

    Characters Kafka does not allow in topic names are replaced by ``-``, so a pytest node name
    such as ``test_roundtrip[1000]`` is a fine prefix.
    """
    cleaned = _NOT_TOPIC_CHARACTERS.sub("-", prefix).strip("-.") or "topic"
    suffix = uuid.uuid4().hex[:_SUFFIX_LENGTH]
    return f"{cleaned[: MAX_TOPIC_NAME_LENGTH - _SUFFIX_LENGTH - 1]}-{suffix}"


@asynccontextmanager
async def _admin(bootstrap: str, timeout: float) -> AsyncIterator[Any]:  # noqa: ASYNC109
    client = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="hopchain-testing",
        request_timeout_ms=max(1, int(timeout * 1000)),
    )
    try:
        await client.start()
        yield client
    finally:
        await client.close()


# The timeouts below are also sent as the client and broker request timeouts, so they stay
# parameters rather than an asyncio.timeout() around the call (ASYNC109).


async def broker_metadata(bootstrap: str, *, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
    """Return the cluster description (brokers, controller, cluster id) from a metadata call.

    Raises:
        KafkaError: the broker did not answer in time.
    """
    async with asyncio.timeout(timeout), _admin(bootstrap, timeout) as admin:
        described: dict[str, Any] = await admin.describe_cluster()
        return described


async def wait_for_broker(bootstrap: str, *, timeout: float = 60.0) -> dict[str, Any]:  # noqa: ASYNC109
    """Wait until a metadata call to ``bootstrap`` answers with at least one broker.

    Raises:
        LocalKafkaError: no answer within ``timeout`` seconds; names the last error seen.
    """
    deadline = time.monotonic() + timeout
    last_error = "no attempt finished"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LocalKafkaError(
                f"no Kafka broker answered a metadata request at {bootstrap} within "
                f"{timeout:.0f} s (last error: {last_error}); check that it is running"
            )
        try:
            described = await broker_metadata(bootstrap, timeout=min(remaining, 10.0))
        except (KafkaError, OSError, TimeoutError) as exc:
            last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            if described.get("brokers"):
                return described
            last_error = "metadata listed no brokers yet"
        await asyncio.sleep(_POLL_SECONDS)


async def create_topics(
    bootstrap: str,
    *names: str,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    timeout: float = 30.0,  # noqa: ASYNC109
) -> None:
    """Create topics and wait until every partition has a leader, so producing works at once.

    Raises:
        LocalKafkaError: the broker refused a topic (the message says which and why), or the
            leaders were not elected within ``timeout`` seconds.
    """
    if not names:
        return
    new_topics = [
        NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            topic_configs=dict(configs or {}),
        )
        for name in names
    ]
    async with asyncio.timeout(timeout), _admin(bootstrap, timeout) as admin:
        response = await admin.create_topics(new_topics, timeout_ms=int(timeout * 1000))
        for topic_error in response.to_object()["topic_errors"]:
            code = int(topic_error["error_code"])
            if code == 0 or (code == _TOPIC_ALREADY_EXISTS and exist_ok):
                continue
            detail = topic_error.get("error_message") or for_code(code).__name__
            raise LocalKafkaError(
                f"the broker at {bootstrap} refused to create topic {topic_error['topic']!r}: "
                f"{detail} (error code {code})"
            )
        await _wait_for_leaders(admin, list(names))


async def _wait_for_leaders(admin: Any, names: list[str]) -> None:
    while True:
        described: list[dict[str, Any]] = await admin.describe_topics(names)
        ready = {
            topic["topic"]
            for topic in described
            if topic["error_code"] == 0
            and topic["partitions"]
            and all(p["leader"] >= 0 for p in topic["partitions"])
        }
        if ready >= set(names):
            return
        await asyncio.sleep(_POLL_SECONDS)


async def delete_topics(bootstrap: str, *names: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    """Delete topics; names that do not exist are ignored."""
    if not names:
        return
    async with asyncio.timeout(timeout), _admin(bootstrap, timeout) as admin:
        await admin.delete_topics(list(names), timeout_ms=int(timeout * 1000))


class TopicFactory:
    """Makes uniquely named topics on one cluster and remembers them for clean-up.

    A natural pytest fixture body::

        topics = TopicFactory(bootstrap, prefix=request.node.name)
        name = await topics(partitions=3)
        ...
        await topics.delete_all()
    """

    def __init__(self, bootstrap: str, *, prefix: str = "test") -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.created: list[str] = []

    async def __call__(
        self,
        partitions: int = 1,
        *,
        prefix: str | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        """Create one new topic and return its name once every partition has a leader."""
        name = unique_topic_name(prefix or self.prefix)
        await create_topics(self.bootstrap, name, partitions=partitions, configs=configs)
        self.created.append(name)
        return name

    async def delete_all(self) -> None:
        """Delete every topic this factory made."""
        names, self.created = self.created, []
        await delete_topics(self.bootstrap, *names)
