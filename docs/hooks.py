"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- ``reference/spec.md`` is the repository's SPEC.md, read at build time: the file lives in git
  once, at the root, where other languages' implementers look for it.
- The Sphinx roles in docstrings (``:class:``, ``:meth:`` and the like, with ``~`` for the
  last part of the name only) are shown as the code they name.
- A page line ``<!-- generated: NAME -->`` is replaced by a table built from the code, so the
  reference cannot drift from it: ``configuration`` (every field of ``HopchainConfig`` with its
  variable, default and docstring), ``enum MODULE CLASS`` (each member of a closed
  vocabulary with its docstring) and ``cli`` (every ``hopchain`` command with its options, as
  its ``--help`` shows them).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
SPEC_PAGE = "reference/spec.md"
_MARKER = re.compile(r"^<!-- generated: (.+?) -->$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):<code>(~?)([^<]+)</code>")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add SPEC.md, read from the repository root, as the site's specification page."""
    spec = (ROOT / "SPEC.md").read_text(encoding="utf-8")
    files.append(File.generated(config, SPEC_PAGE, content=spec))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    """Replace each ``<!-- generated: ... -->`` line with the table it names."""

    def table(match: re.Match[str]) -> str:
        kind, *arguments = match[1].split()
        if kind == "configuration":
            return configuration_table()
        if kind == "enum" and len(arguments) == 2:  # noqa: PLR2004 - module and class
            return enum_table(*arguments)
        if kind == "cli":
            return cli_reference()
        message = f"{page.file.src_path}: unknown generated table {match[1]!r}"
        raise ValueError(message)

    return _MARKER.sub(table, markdown)


def on_page_content(html: str, **_: Any) -> str:
    """Show the docstrings' Sphinx roles (:class:`~a.B`) as the code they name (``B``)."""

    def code(match: re.Match[str]) -> str:
        name = match[2].rsplit(".", 1)[-1] if match[1] else match[2]
        return f"<code>{name}</code>"

    return _ROLE.sub(code, html)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def configuration_table() -> str:
    """Every ``HopchainConfig`` field: variable, default and what it means."""
    from hopchain.config import HopchainConfig, env_name  # noqa: PLC0415 - at build time

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in HopchainConfig.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "unset" if default is None or default in ({}, []) else f"`{default}`"
        description = _rst_to_markdown(field.description or "")
        rows.append(f"| `{env_name(name)}` | {shown} | {_cell(description)} |")
    return "\n".join(rows)


def enum_table(module: str, name: str) -> str:
    """Each member of enum ``name`` in ``module`` with the docstring under it in the source."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (klass,) = (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    rows = ["| code | meaning |", "|---|---|"]
    body = klass.body
    for position, node in enumerate(body):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
            continue
        following = body[position + 1] if position + 1 < len(body) else None
        doc = ""
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            doc = following.value.value
        rows.append(f"| `{node.value.value!s}` | {_cell(_rst_to_markdown(doc))} |")
    return "\n".join(rows)


def _rst_to_markdown(text: str) -> str:
    """Docstring markup as Markdown: ``literal`` and :role:`name` become code spans."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def cli_reference() -> str:
    """Every ``hopchain`` command, its help and its options, from the Typer app itself."""
    import typer.main  # noqa: PLC0415 - at build time

    from hopchain.cli.app import app  # noqa: PLC0415

    root = typer.main.get_command(app)
    sections: list[str] = []

    # Typer builds on its own copy of Click: groups are told by their ``commands``, parameters
    # by their ``param_type_name``.
    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name in sorted(command.commands):
                walk(command.commands[name], [*path, name])
            return
        sections.append(_command_section(command, path))

    walk(root, ["hopchain"])
    return "\n\n".join(sections)


def _command_section(command: Any, path: list[str]) -> str:
    arguments = " ".join(
        (param.metavar or param.name or "").upper()
        for param in command.params
        if param.param_type_name == "argument"
    )
    lines = [f"### `{' '.join(path)}`", ""]
    if arguments:
        lines += [f"`{' '.join(path)} [OPTIONS] {arguments}`", ""]
    lines += [_cell(command.help or command.short_help or ""), ""]
    options = [param for param in command.params if param.param_type_name == "option"]
    if options:
        lines += ["| option | variable | meaning |", "|---|---|---|"]
        for option in options:
            names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
            variable = f"`{option.envvar}`" if isinstance(option.envvar, str) else ""
            lines.append(f"| {names} | {variable} | {_cell(option.help or '')} |")
    return "\n".join(lines)
