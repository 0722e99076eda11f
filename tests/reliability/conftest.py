"""Fixtures of the fault suite, and a terminal section with the figures each test measured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_support import SOAK

_FIGURES = pytest.StashKey[list[str]]()


@pytest.fixture
def kafka_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.rootpath / "deploy" / "kafka"


@pytest.fixture
def report(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Keep a figures table for the ``reliability`` section at the end of the run."""

    def add(text: str) -> None:
        pytestconfig.stash.setdefault(_FIGURES, []).append(text)
        print(text)  # noqa: T201 - also shown with -s, and in the failure report

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(_FIGURES, [])
    if not figures:
        return
    scale = "soak scale (HOPCHAIN_SOAK=1)" if SOAK else "make-test scale"
    terminalreporter.section(f"reliability figures, {scale}", sep="-")
    for text in figures:
        terminalreporter.write_line(text)
        terminalreporter.write_line("")
