"""CLI commands of this group (placeholder until the owning issue lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
