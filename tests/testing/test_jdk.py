"""Finding a Java new enough for the schema registry: fake JDK folders, no JVM started."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopchain.testing.jdk import find_java

VARIABLE = "HOPCHAIN_REGISTRY_JAVA"


def fake_jdk(root: Path, name: str, version: str, *, release: bool = True) -> Path:
    """A JDK folder whose bin/java reports ``version``, with or without a ``release`` file."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2026-01-01' >&2\n")
    java.chmod(0o755)
    if release:
        (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return java


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine whose only java on PATH is a Java 17 from its JVM folder (as Debian 12's)."""
    jvm = tmp_path / "jvm"
    java17 = fake_jdk(jvm, "java-17-openjdk-amd64", "17.0.15")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java17)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv(VARIABLE, raising=False)
    return jvm


def test_a_newer_jdk_beside_the_default_one_is_found(machine: Path) -> None:
    java25 = fake_jdk(machine, "temurin-25-jdk-amd64", "25.0.3")

    search = find_java(21, variable=VARIABLE, jvm_root=machine)

    assert search.found is not None
    assert search.found.path == java25
    assert search.found.major == 25
    assert [runtime.version for runtime in search.seen] == ["17.0.15", "25.0.3"]


def test_java_home_wins_when_new_enough_and_is_passed_over_when_too_old(
    machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java25 = fake_jdk(machine, "temurin-25-jdk-amd64", "25.0.3")
    java21 = fake_jdk(tmp_path / "opt", "jdk-21", "21.0.5")

    monkeypatch.setenv("JAVA_HOME", str(java21.parent.parent))
    assert find_java(21, jvm_root=machine).found.path == java21  # type: ignore[union-attr]

    monkeypatch.setenv("JAVA_HOME", str(machine / "java-17-openjdk-amd64"))
    assert find_java(21, jvm_root=machine).found.path == java25  # type: ignore[union-attr]


def test_a_java_without_a_release_file_is_asked_for_its_version(
    machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = fake_jdk(tmp_path / "opt", "jre-22", "22.0.1", release=False)
    monkeypatch.setenv(VARIABLE, str(java))

    search = find_java(21, variable=VARIABLE, jvm_root=machine)

    assert search.found is not None
    assert search.found.version == "22.0.1"


def test_without_java_21_the_message_is_one_line_naming_what_was_found_and_the_fix(
    machine: Path,
) -> None:
    search = find_java(21, variable=VARIABLE, jvm_root=machine)

    assert search.found is None
    message = search.missing("Apicurio Registry", VARIABLE)
    assert "\n" not in message
    assert message.startswith("Apicurio Registry needs Java 21 or newer; found Java 17.0.15")
    assert VARIABLE in message


def test_a_java_named_on_purpose_is_never_swapped_for_another(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_jdk(machine, "temurin-25-jdk-amd64", "25.0.3")
    monkeypatch.setenv(VARIABLE, str(machine / "java-17-openjdk-amd64" / "bin" / "java"))

    search = find_java(21, variable=VARIABLE, jvm_root=machine)

    assert search.found is None
    message = search.missing("Apicurio Registry", VARIABLE)
    assert f"but {VARIABLE} names Java 17.0.15" in message
    assert "\n" not in message


def test_a_named_path_that_is_no_program_says_so(machine: Path) -> None:
    missing = machine / "nowhere" / "java"

    search = find_java(21, explicit=missing, named_by="--java", jvm_root=machine)

    assert search.found is None
    assert f"--java names {missing}, which is not an executable file" in search.missing(
        "Apicurio Registry", VARIABLE
    )
    assert not missing.exists()
