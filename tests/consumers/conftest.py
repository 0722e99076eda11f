"""Fixtures of the dead-letter consumer tests, and a summary of the figures they measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from hopchain.consumers import DlqSettings
from hopchain.testing import unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Callable

_FIGURES = pytest.StashKey[list[str]]()


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> Callable[..., DlqSettings]:
    """Settings on the session broker: a free port and a resolutions topic of the test's own."""
    resolutions = unique_topic_name("resolutions")

    def make(**overrides: object) -> DlqSettings:
        values: dict[str, object] = {
            "kafka_bootstrap": kafka_bootstrap,
            "dlq_port": 0,
            "dlq_resolutions_topic": resolutions,
            "dlq_refresh_seconds": 1.0,
            "dlq_token": None,
        }
        values.update(overrides)
        return DlqSettings.model_validate(values)

    return make


@pytest.fixture
def figure(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Note a measured figure; it is printed in the terminal summary."""
    lines = pytestconfig.stash.setdefault(_FIGURES, [])
    return lines.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("dead-letter consumer figures", sep="-")
        for line in lines:
            terminalreporter.write_line(line)
