"""``python -m hopchain.cli``: the same as the ``hopchain`` command."""

from hopchain.cli import main

main()
