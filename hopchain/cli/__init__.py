"""The ``hopchain`` command line: one Typer app with a subcommand group per concern.

The entry point is :func:`hopchain.cli.app.main`. Exit codes: 0 success, 1 failure, 2 usage
error, 3 the thing asked about is not running (see :class:`hopchain.cli.common.ExitCode`).
"""
