"""`python -m upgrade_gate` runs the CLI."""

from upgrade_gate.cli.main import main

main()
