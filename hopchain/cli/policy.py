"""``hopchain policy show MODULE:ATTR``: a pipeline's whole failure story, one row per stage.

Each row says what a stage reads and writes, who owns its dead letters, whether re-running it
is harmless, its two retry budgets, and the exit it takes when they run out (with every error
type whose exit differs)::

    hopchain policy show claims.app:pipeline
    hopchain policy show claims.app:pipeline --contracts claims.app:registry --json

``ATTR`` is a :class:`~hopchain.middleware.stage.Pipeline`, a
:class:`~hopchain.middleware.stage.Stage`, or a list of stages (dotted paths such as
``app:service.pipeline`` work too). Exit codes: 0 shown, 2 the object could not be imported or
is not a pipeline. The table itself is made by :mod:`hopchain.cli.policy_view`, imported when
the command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from hopchain.cli.common import ContractsOption, group

__all__ = ["app"]

app = group("Stage failure policies: what each stage does when its work fails.")


@app.command("show")
def show(
    target: Annotated[
        str,
        typer.Argument(
            metavar="MODULE:ATTR",
            help="A Pipeline, a Stage or a list of stages, e.g. claims.app:pipeline.",
            show_default=False,
        ),
    ],
    *,
    contracts_spec: ContractsOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
) -> None:
    """Show each stage's failure policy: budgets, exits and where its dead letters go."""
    from hopchain.cli.policy_view import show_policy  # noqa: PLC0415 - loads the middleware

    show_policy(target, contracts_spec, as_json=as_json)
