"""`python -m upgrade_gate` runs the CLI."""

from upgrade_gate.cli import boot  # noqa: F401  first: a signal from here on exits 130/143 (see cli.boot)

# isort: split

from upgrade_gate.cli.main import main

main()
