"""The ``hopchain`` command line: one Typer app with a subcommand group per concern.

The entry point is :func:`main`. It imports nothing heavy itself: ``hopchain --version`` is
answered before Typer is loaded, and a missing optional dependency (the ``cli`` or ``dlq``
extra) is reported as one line naming the extra to install, not as a traceback. Exit codes:
0 success, 1 failure, 2 usage error, 3 the thing asked about is not running (see
:class:`hopchain.cli.common.ExitCode`).
"""

from __future__ import annotations

import sys

__all__ = ["EXTRA_OF_MODULE", "main"]

EXTRA_OF_MODULE = {
    "typer": "cli",
    "click": "cli",
    "rich": "cli",
    "starlette": "dlq",
    "uvicorn": "dlq",
    "jinja2": "dlq",
    "opentelemetry.sdk": "testing",  # hopchain.testing, behind `hopchain dev kafka`
}
"""Which extra brings each optional top-level module the command line may import."""


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    name = exc.name or ""
    for module, extra in EXTRA_OF_MODULE.items():
        if name == module or name.startswith(module + "."):
            return extra
    return None


def main() -> None:
    """Run the ``hopchain`` command line."""
    if sys.argv[1:] == ["--version"]:
        # The one answer that needs no command tree: print it before loading Typer.
        from hopchain.__about__ import __version__  # noqa: PLC0415

        sys.stdout.write(f"hopchain {__version__}\n")
        return
    try:
        from hopchain.cli.app import main as run  # noqa: PLC0415 - Typer is optional

        run()
    except ModuleNotFoundError as exc:
        extra = _missing_extra(exc)
        if extra is None:
            raise
        sys.stderr.write(
            f"error: this command needs {exc.name!r}, which the {extra!r} extra installs: "
            f"pip install 'hopchain[{extra}]'\n"
        )
        sys.exit(1)
