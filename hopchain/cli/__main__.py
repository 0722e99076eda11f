"""``python -m hopchain.cli``: the same as the ``hopchain`` command."""

from hopchain.cli.app import main

main()
