"""``hopchain``'s flat API: the names that left it still work for a release, with a warning
that names their new home, and nothing in this repository uses them from there any more."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hopchain

ROOT = Path(__file__).resolve().parents[1]
MOVED: dict[str, str] = vars(hopchain)["_MOVED"]
SCANNED = ("hopchain", "tests", "examples", "docs", "bench", "README.md")
"""Where no moved name may be used through ``hopchain`` (CHANGELOG.md lists them, so it may)."""


@pytest.mark.parametrize(
    "name",
    [
        "OutgoingRecord",  # an engine record
        "RecordWriter",  # a protocol
        "KafkaWriter",  # a writer class
        "ConsumedRecord",  # an envelope struct
        "DecodeError",  # an exception
        "classify_exception",  # a function
        "configure_logging",  # logging set-up
    ],
)
def test_a_moved_name_still_works_with_a_warning_naming_its_new_home(name: str) -> None:
    home = MOVED[name]
    with pytest.warns(DeprecationWarning, match=rf"hopchain\.{name} .* from {re.escape(home)} "):
        value = getattr(hopchain, name)

    assert value is vars(importlib.import_module(home))[name]


def test_every_moved_name_resolves_at_its_home_and_is_no_longer_listed() -> None:
    for name, home in MOVED.items():
        assert name in vars(importlib.import_module(home)), f"{home} has no {name}"
    assert not set(MOVED) & set(hopchain.__all__)
    assert not set(MOVED) & set(dir(hopchain))


def test_from_hopchain_import_of_a_moved_name_warns_where_it_is_written() -> None:
    # stacklevel points at the importing line, so a user's own module is named.
    code = (
        "import warnings; warnings.simplefilter('always');"
        "from hopchain import Settled"  # the statement on line 1 of <string>
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "<string>:1: DeprecationWarning: hopchain.Settled is deprecated" in result.stderr
    assert "import it from hopchain.middleware.engine" in result.stderr


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        _ = hopchain.NoSuchThing


def _files() -> list[Path]:
    found: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        found.extend([path] if path.is_file() else sorted(path.rglob("*")))
    return [path for path in found if path.suffix in {".py", ".md", ".pyi"}]


def _deprecated_uses(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    found = []
    if path.suffix in {".py", ".pyi"}:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "hopchain" and not node.level:
                found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in MOVED]
    names = "|".join(MOVED)
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{number}: hopchain.{m}" for m in re.findall(rf"\bhopchain\.({names})\b", line)]
        if path.suffix == ".md" and "from hopchain import" in line:
            found += [f"{number}: {n}" for n in re.findall(rf"\b({names})\b", line)]
    return found


def test_nothing_in_the_repository_takes_a_moved_name_from_hopchain() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in _files()
        if path not in {ROOT / "hopchain" / "__init__.py", Path(__file__).resolve()}
        for use in _deprecated_uses(path)
    ]
    assert offenders == []
