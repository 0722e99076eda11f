"""``load_object("pkg.mod:attr")``: what a command needs, or an error that says what to fix."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopchain.exceptions import ConfigurationError
from hopchain.loading import LoadError, load_object, load_registry
from hopchain.schemas import ContractRegistry


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``<name>`` with a submodule ``topics`` holding a registry, in a project
    directory that is not the working directory."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"pkg_{uuid.uuid4().hex[:12]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / name / "topics.py").write_text(
        "from types import SimpleNamespace\n"
        "from hopchain.schemas import ContractRegistry\n"
        "registry = ContractRegistry()\n"
        "app = SimpleNamespace(settings=SimpleNamespace(registry=registry))\n",
        encoding="utf-8",
    )
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_an_attribute_of_a_submodule_is_loaded(package: str, tmp_path: Path) -> None:
    loaded = load_object(f"{package}.topics:registry", search_path=tmp_path)

    assert isinstance(loaded, ContractRegistry)
    assert sys.path[0] == str(tmp_path.resolve())


def test_a_dotted_attribute_is_followed(package: str, tmp_path: Path) -> None:
    registry = load_object(f"{package}.topics:registry", search_path=tmp_path)

    assert load_object(f"{package}.topics:app.settings.registry", search_path=tmp_path) is registry


def test_the_working_directory_is_searched_by_default(
    package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert isinstance(load_registry(f"{package}.topics:registry"), ContractRegistry)


@pytest.mark.parametrize(
    "spec", ["", "module", "module:", ":attr", "a b:c", "mod:attr-name", "mod:a..b", "1mod:x"]
)
def test_a_malformed_spec_is_refused_before_importing_anything(spec: str) -> None:
    with pytest.raises(LoadError, match="expected MODULE:ATTRIBUTE") as caught:
        load_object(spec)

    assert caught.value.spec == spec
    assert isinstance(caught.value, ConfigurationError)


def test_a_missing_submodule_is_named(package: str, tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=rf"no module named '{package}\.nope'"):
        load_object(f"{package}.nope:registry", search_path=tmp_path)


def test_a_missing_attribute_on_the_way_is_named_with_close_matches(
    package: str, tmp_path: Path
) -> None:
    with pytest.raises(LoadError) as caught:
        load_object(f"{package}.topics:app.setings.registry", search_path=tmp_path)

    assert str(caught.value) == (
        f"'{package}.topics.app' has no attribute 'setings'; did you mean settings?"
    )


def test_an_object_without_a_registry_is_refused(package: str, tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="is a SimpleNamespace, not a ContractRegistry"):
        load_registry(f"{package}.topics:app", search_path=tmp_path)
