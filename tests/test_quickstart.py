"""The README's quick start works as written, for a new user with nothing but the wheel.

The wheel is the one ``make wheel`` builds (manylinux2014, abi3), built from this checkout once
per session and installed into a fresh virtual environment with no Rust toolchain on PATH; then,
in an empty folder, ``shop.py`` is saved from the README and each line of its shell block runs
verbatim in bash, in order, with the shell state (exported variables) of the lines before.
What each line prints is checked against the README's ``console`` block, where a line is
shown with ``$``. The broker gets a free port (``HOPCHAIN_KAFKA_PORT=0``, the variable behind
``--port``) and a data directory of its own, so nothing here meets a broker on 9092.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICK_START = "## Quick start\n"
BACKGROUND_WAIT_SECONDS = 60.0
"""How long a background line may take to print what the README shows it printing."""

_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")  # a dead letter's id (a ULID)
_AGE = re.compile(r"(?<![\w.])(?:\d+[dhms])+(?![\w.])")  # 3s, 1m05s, 2h10m
_SECONDS = re.compile(r"\bin \d+\.\d+ s\b")
_LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\b")  # a log line's time


MANYLINUX_TAG = "cp311-abi3-manylinux2014_x86_64"
OLDEST_GLIBC = (2, 17)
"""manylinux2014's glibc: the extension may ask for no symbol version newer than this."""
_GLIBC_VERSION = re.compile(rb"GLIBC_(\d+)\.(\d+)")
RUST_TOOLS = ("cargo", "rustc", "rustup")


def without_rust(path: str) -> str:
    """``path`` less each folder that holds cargo, rustc or rustup: a machine without Rust."""
    folders = path.split(os.pathsep)
    return os.pathsep.join(
        folder
        for folder in folders
        if not any(shutil.which(tool, path=folder) for tool in RUST_TOOLS)
    )


def crate_version() -> str:
    """The version the build gives the wheel: the crate's, core/Cargo.toml."""
    manifest = tomllib.loads((ROOT / "core" / "Cargo.toml").read_text(encoding="utf-8"))
    version: str = manifest["package"]["version"]
    return version


@dataclass
class QuickStart:
    """The quick start as the README writes it."""

    files: dict[str, str]
    """File name -> text, for each Python block whose first line is ``# NAME.py``."""
    lines: list[str]
    """The shell block's lines, as a user pastes them."""
    prints: dict[str, list[str]]
    """Shell line -> the lines the ``console`` block shows it printing."""


def quick_start(markdown: str) -> QuickStart:
    """Read the quick start section's blocks from the README's text."""
    section = markdown.split(QUICK_START, 1)[1].split("\n## ", 1)[0]
    blocks = _code_blocks(section)
    files = {}
    for language, body in blocks:
        first = body.split("\n", 1)[0]
        if language == "python" and first.startswith("# ") and first.endswith(".py"):
            files[first[2:]] = body
    (shell,) = [body for language, body in blocks if language == "sh"]
    lines = [line for line in shell.splitlines() if line.strip()]
    (console,) = [body for language, body in blocks if language == "console"]
    prints: dict[str, list[str]] = {}
    shown: list[str] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            shown = prints.setdefault(line[2:], [])
        else:
            shown.append(line)
    return QuickStart(files=files, lines=lines, prints=prints)


def _command(line: str) -> str:
    """A shell line without its trailing comment (the console block shows no comments)."""
    return " ".join(shlex.split(line, comments=True)) if "#" in line else line


def normalised(line: str) -> str:
    """What may differ from run to run replaced, and runs of spaces (table padding) collapsed."""
    line = _SECONDS.sub("in <t> s", _AGE.sub("<age>", _ID.sub("<id>", line)))
    line = _LOG_TIME.sub("<time>", line)
    return " ".join(line.split())


class Shell:
    """Runs lines verbatim in bash, each with the exported variables the lines before left."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env
        self.state = cwd.parent / "shell-state.sh"
        self.state.write_text("")
        self.background: list[int] = []
        self.transcript: list[str] = []
        self.count = 0

    def run(self, line: str) -> tuple[int, Path, Path]:
        """Run one line; return its exit status and the files its output went to."""
        self.count += 1
        out = self.cwd.parent / f"line-{self.count}.out"
        err = self.cwd.parent / f"line-{self.count}.err"
        in_background = _background(line)
        script = f"source {shlex.quote(str(self.state))}\n{line}\nline_status=$?\n"
        if in_background:
            script += f"echo $! > {shlex.quote(str(out))}.pid\n"
        script += f"export -p > {shlex.quote(str(self.state))}\nexit $line_status\n"
        started = time.monotonic()
        with out.open("w") as stdout, err.open("w") as stderr:
            result = subprocess.run(  # noqa: S603 - bash running the README's own line
                ["/bin/bash", "-c", script],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT if in_background else stderr,
                timeout=600,
                check=False,
            )
        if in_background:
            self.background.append(int(Path(f"{out}.pid").read_text()))
        self.transcript.append(
            f"$ {line}   (exit {result.returncode}, {time.monotonic() - started:.1f} s)"
        )
        return result.returncode, out, err

    def stop_background(self) -> None:
        for pid in self.background:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue

    def report(self) -> str:
        shown = []
        for number, line in enumerate(self.transcript, 1):
            shown.append(line)
            for suffix in ("out", "err"):
                path = self.cwd.parent / f"line-{number}.{suffix}"
                if path.exists() and path.read_text().strip():
                    shown.extend(f"  {suffix}| {text}" for text in path.read_text().splitlines())
        return "\n".join(shown)


def _contains_in_order(printed: list[str], expected: list[str]) -> bool:
    remaining = iter(normalised(line) for line in printed)
    return all(any(line == want for line in remaining) for want in map(normalised, expected))


def _machine_without_rust() -> dict[str, str]:
    """The caller's environment less anything hopchain-, pip- or venv-specific, and with no
    Rust toolchain on PATH (and none for maturin to find): what a user's machine has."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOPCHAIN_", "PYTHON", "PIP_", "VIRTUAL_ENV", "CARGO", "RUST"))
    }
    env["PATH"] = without_rust(env.get("PATH", ""))
    return env


def _new_user_environment(tmp_path: Path, venv: Path, wheel: Path) -> dict[str, str]:
    """A user's shell with the fresh venv active, on a machine without Rust: pip may only look
    at the wheel's folder; the broker on a free port."""
    env = _machine_without_rust()
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        VIRTUAL_ENV=str(venv),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheel.parent),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONUNBUFFERED="1",  # the service's prints reach its log file as they happen
        HOPCHAIN_KAFKA_PORT="0",
        HOPCHAIN_KAFKA_CONTROLLER_PORT="0",
        HOPCHAIN_KAFKA_DATA_DIR=str(tmp_path / "kafka"),
        HOPCHAIN_DLQ_INDEX_PATH=":memory:",
    )
    return env


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with the wheel (and its ``testing`` extra) installed by pip on a machine
    without Rust, so nothing may need building; yields the venv. One serves the session:
    the README's own ``pip install`` line finds it done and changes nothing."""
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # noqa: S603
    install = subprocess.run(  # noqa: S603 - the venv's pip, fixed arguments
        [
            str(venv / "bin" / "pip"),
            "install",
            "-q",
            "--no-compile",  # the harness's own install; the README's line then finds it done
            "--disable-pip-version-check",
            "--only-binary=hopchain",
            "-c",
            str(ROOT / "constraints.txt"),
            f"{wheel}[testing]",
        ],
        cwd=home,
        env=_machine_without_rust(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    return venv


def test_the_package_version_is_the_crates() -> None:
    # The build takes the version from core/Cargo.toml; hopchain.__version__ is a literal.
    # Here, the installed metadata is this checkout's editable install's.
    from hopchain import __version__  # noqa: PLC0415

    assert __version__ == importlib.metadata.version("hopchain") == crate_version()


@pytest.mark.slow
def test_the_wheel_is_manylinux2014_and_abi3(wheel: Path) -> None:
    assert wheel.name == f"hopchain-{crate_version()}-{MANYLINUX_TAG}.manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel) as archive:
        tags = archive.read(f"hopchain-{crate_version()}.dist-info/WHEEL").decode()
        extension = archive.read("hopchain/_core.abi3.so")
        names = archive.namelist()
    assert f"Tag: {MANYLINUX_TAG}" in tags.splitlines()
    wanted = {(int(major), int(minor)) for major, minor in _GLIBC_VERSION.findall(extension)}
    assert wanted, "the extension names no glibc symbol version: not a dynamic glibc build"
    assert max(wanted) <= OLDEST_GLIBC, sorted(wanted)
    assert b"GLIBC_PRIVATE" not in extension
    # The Python package and its data, none of the checkout's tests or crate sources.
    assert "hopchain/py.typed" in names
    assert "hopchain/consumers/openapi.json" in names
    assert not [name for name in names if name.startswith(("tests/", "core/"))]


@pytest.mark.slow
def test_the_wheel_imports_its_compiled_core_on_a_machine_without_rust(
    tmp_path: Path, wheel: Path, installed: Path
) -> None:
    env = _new_user_environment(tmp_path, installed, wheel)
    assert not [tool for tool in RUST_TOOLS if shutil.which(tool, path=env["PATH"])]
    folder = tmp_path / "empty"
    folder.mkdir()
    code = (
        "import importlib.metadata, json, hopchain, hopchain._core;"
        "print(json.dumps([hopchain.__version__, importlib.metadata.version('hopchain'),"
        " hopchain._core.__file__]))"
    )
    run = subprocess.run(  # noqa: S603 - the venv's interpreter, a fixed program
        [str(installed / "bin" / "python"), "-c", code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    version, metadata_version, core = json.loads(run.stdout)
    assert version == metadata_version == crate_version()
    assert Path(core).is_relative_to(installed), core  # the wheel's, not this checkout's


def test_the_quick_start_has_a_service_a_shell_block_and_what_it_prints() -> None:
    start = quick_start(README.read_text(encoding="utf-8"))
    assert list(start.files) == ["shop.py"]
    # Lines that say something: the formatter's blank lines between definitions do not count.
    code_lines = sum(
        1 for text in start.files.values() for line in text.splitlines() if line.strip()
    ) + len(start.lines)
    assert code_lines <= 25, f"the quick start is {code_lines} lines of code and commands"
    commands = [_command(line) for line in start.lines]
    assert commands[0].startswith("pip install")
    assert any("hopchain dev kafka start" in line for line in commands)
    assert commands[-1].startswith("hopchain dlq list")
    assert set(start.prints) <= set(commands), "the console block shows a line not in the block"


def test_the_docs_quick_start_shows_the_readmes_blocks() -> None:
    readme = README.read_text(encoding="utf-8").split(QUICK_START, 1)[1].split("\n## ", 1)[0]
    docs = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    for block in _code_blocks(readme):
        assert block in _code_blocks(docs), block


@pytest.mark.kafka
@pytest.mark.slow
def test_the_quick_start_runs_as_written_from_the_wheel(
    tmp_path: Path, wheel: Path, installed: Path
) -> None:
    start = quick_start(README.read_text(encoding="utf-8"))
    folder = tmp_path / "empty"
    folder.mkdir()
    for name, text in start.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    shell = Shell(folder, _new_user_environment(tmp_path, installed, wheel))
    hopchain = installed / "bin" / "hopchain"
    try:
        waiting: list[tuple[Path, list[str]]] = []  # background lines and what they print
        for line in start.lines:
            expected = start.prints.get(_command(line), [])
            if expected and not _background(line):
                # What this line shows follows from what the background lines print first
                # (the service parks the record, then the dead letter is listed).
                _wait_for(waiting, shell)
            status, out, _ = shell.run(line)
            assert status == 0, shell.report()
            if _background(line):
                waiting.append((out, expected))
            elif expected:
                printed = [normalised(text) for text in out.read_text().splitlines()]
                assert printed == [normalised(text) for text in expected], shell.report()
            if "hopchain dev kafka start" in line:
                _check_exported_bootstrap(shell, hopchain)
        _wait_for(waiting, shell)
    finally:
        shell.stop_background()
        subprocess.run(  # noqa: S603 - the venv's hopchain
            [str(hopchain), "dev", "kafka", "stop"], env=shell.env, capture_output=True, check=False
        )


def _background(line: str) -> bool:
    return line.split("#", 1)[0].rstrip().endswith("&")


def _code_blocks(markdown: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", markdown, re.DOTALL)


def _wait_for(waiting: list[tuple[Path, list[str]]], shell: Shell) -> None:
    """Wait until each background line printed what the README shows it printing."""
    deadline = time.monotonic() + BACKGROUND_WAIT_SECONDS
    for out, expected in waiting:
        while not _contains_in_order(out.read_text().splitlines(), expected):
            assert time.monotonic() < deadline, shell.report()
            time.sleep(0.2)


def _check_exported_bootstrap(shell: Shell, hopchain: Path) -> None:
    """The broker's address is exported for the lines after (given once, by the broker)."""
    status = subprocess.run(  # noqa: S603 - the venv's hopchain
        [str(hopchain), "dev", "kafka", "status", "--json"],
        env=shell.env,
        capture_output=True,
        text=True,
        check=True,
    )
    bootstrap = json.loads(status.stdout)["bootstrap"]
    assert not bootstrap.endswith(":9092")
    if f"HOPCHAIN_KAFKA_BOOTSTRAP={bootstrap}" not in _exported(shell).splitlines():
        pytest.fail(
            "the line that starts the broker did not export its address "
            f"(HOPCHAIN_KAFKA_BOOTSTRAP={bootstrap}): the quick start relies on "
            "`hopchain dev kafka start` printing `export HOPCHAIN_KAFKA_BOOTSTRAP=...` as its "
            "last line of standard output\n" + shell.report()
        )


def _exported(shell: Shell) -> str:
    """The exported variables as ``NAME=value`` lines."""
    text = shell.state.read_text()
    return "\n".join(
        f"{match[1]}={match[2]}" for match in re.finditer(r'declare -x (\w+)="(.*)"', text)
    )
