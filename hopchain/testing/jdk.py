"""Finding a Java runtime new enough for a JVM service the kit runs.

The Kafka broker runs on the ``java`` on PATH (17 is enough); Apicurio Registry needs 21 or
newer, which a distribution's default JDK may not be. :func:`find_java` looks, in order, at an
explicit path (an argument or a variable), ``$JAVA_HOME``, ``java`` on PATH and the JDKs
installed under ``/usr/lib/jvm``, and returns the first that is new enough together with
everything it looked at, so that a caller can say in one line what was found and what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["JVM_ROOT", "JavaRuntime", "JavaSearch", "find_java", "java_runtime"]

JVM_ROOT = Path("/usr/lib/jvm")
"""Where Debian's packages (and hand-installed JDKs beside them) put Java runtimes."""

_VERSION_TIMEOUT_SECONDS = 30.0
# `release` files say JAVA_VERSION="25.0.3"; `java -version` says version "17.0.15" (or "1.8.0_x").
_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="([^"]+)"', re.MULTILINE)
_RUNTIME_VERSION = re.compile(r'version "([^"]+)"')


@dataclass(frozen=True, slots=True)
class JavaRuntime:
    """One ``java`` binary and the version it reported."""

    path: Path
    """The ``java`` executable."""
    version: str
    """Its full version (``25.0.3``); empty when it could not be read."""
    source: str
    """Where it was found: the variable that named it, ``PATH`` or the JVM folder."""

    @property
    def major(self) -> int:
        """The feature release (``25``; ``8`` for ``1.8.0_x``); 0 when unknown."""
        parts = self.version.split(".")
        if parts[0] == "1" and len(parts) > 1:
            parts = parts[1:]
        digits = re.match(r"\d+", parts[0])
        return int(digits.group()) if digits else 0

    def describe(self, *, source: bool = True) -> str:
        """``Java 25.0.3 (/path/bin/java, from PATH)``; without ``source``, no "from"."""
        shown = f"Java {self.version}" if self.version else "a java of unknown version"
        where = f", from {self.source}" if source else ""
        return f"{shown} ({self.path}{where})"


@dataclass(frozen=True, slots=True)
class JavaSearch:
    """What :func:`find_java` found: the runtime to use, if any, and every one it looked at."""

    minimum: int
    """The oldest feature release accepted."""
    found: JavaRuntime | None
    """The first runtime at least ``minimum``, or None."""
    seen: list[JavaRuntime] = field(default_factory=list)
    """Every runtime looked at, in order (the chosen one last, if any)."""
    explicit: str | None = None
    """The variable or argument that named a runtime; then nothing else was looked at."""
    named: Path | None = None
    """The path it named."""

    def missing(self, needed_by: str, variable: str) -> str:
        """One line: what needs Java, what was found instead, and how to fix it."""
        need = f"{needed_by} needs Java {self.minimum} or newer"
        if self.explicit is not None:
            shown = (
                self.seen[0].describe(source=False)
                if self.seen
                else f"{self.named}, which is not an executable file"
            )
            return (
                f"{need}, but {self.explicit} names {shown}; point it at the java of a JDK "
                f"{self.minimum}+, or drop it to let hopchain look for one"
            )
        older = ", ".join(runtime.describe() for runtime in self.seen) or "no java at all"
        return (
            f"{need}; found {older}. Install a JDK {self.minimum}+ (Debian 13: apt-get install "
            f"openjdk-{self.minimum}-jre-headless, or any build unpacked under {JVM_ROOT}) "
            f"or set {variable} to its bin/java"
        )


def java_runtime(path: Path, source: str) -> JavaRuntime | None:
    """The runtime at ``path`` with its version, or None if there is no executable there.

    The JDK's ``release`` file is read when there is one (no JVM is started); otherwise the
    binary is asked with ``java -version``.
    """
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None
    real = path.resolve()
    try:
        release = (real.parent.parent / "release").read_text(encoding="utf-8")
    except OSError:
        release = ""
    match = _RELEASE_VERSION.search(release)
    if match is None:
        match = _RUNTIME_VERSION.search(_ask_version(real))
    return JavaRuntime(path=path, version=match.group(1) if match else "", source=source)


def _ask_version(java: Path) -> str:
    try:
        result = subprocess.run(  # noqa: S603 - a java binary and a fixed argument
            [str(java), "-version"],
            capture_output=True,
            text=True,
            timeout=_VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stderr + result.stdout


def _candidates(jvm_root: Path) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    if os.environ.get("JAVA_HOME"):
        found.append((Path(os.environ["JAVA_HOME"]) / "bin" / "java", "JAVA_HOME"))
    on_path = shutil.which("java")
    if on_path:
        found.append((Path(on_path), "PATH"))
    if jvm_root.is_dir():
        # Newest first by name is a guess only; the version is read from each one.
        homes = sorted(jvm_root.iterdir(), reverse=True)
        found.extend((home / "bin" / "java", str(jvm_root)) for home in homes)
    return found


def find_java(
    minimum: int,
    *,
    explicit: Path | str | None = None,
    variable: str | None = None,
    named_by: str = "the java argument",
    jvm_root: Path = JVM_ROOT,
) -> JavaSearch:
    """Look for a ``java`` of feature release ``minimum`` or newer.

    ``explicit`` (an argument; ``named_by`` says which, for messages), else ``$variable`` when
    set, is the only candidate: a runtime named on purpose is never swapped for another.
    Otherwise ``$JAVA_HOME``, ``java`` on PATH and the JDKs in ``jvm_root`` are tried in that
    order; a candidate reached twice (PATH often leads into ``jvm_root``) is looked at once.
    """
    named, source = explicit, named_by
    if named is None and variable and os.environ.get(variable):
        named, source = os.environ[variable], variable
    if named is not None:
        path = Path(named).expanduser()
        runtime = java_runtime(path, source)
        seen = [runtime] if runtime is not None else []
        usable = runtime if runtime is not None and runtime.major >= minimum else None
        return JavaSearch(minimum, usable, seen, explicit=source, named=path)
    seen = []
    looked_at: set[Path] = set()
    for path, where in _candidates(jvm_root):
        real = path.resolve()
        if real in looked_at:
            continue
        looked_at.add(real)
        runtime = java_runtime(path, where)
        if runtime is None:
            continue
        seen.append(runtime)
        if runtime.major >= minimum:
            return JavaSearch(minimum, runtime, seen)
    return JavaSearch(minimum, None, seen)
