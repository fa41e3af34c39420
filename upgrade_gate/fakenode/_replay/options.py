"""Command-line reading shared by the fake tools (stdlib only): getopt's rules for option values."""

from __future__ import annotations


class UsageError(Exception):
    """Arguments the real tool would reject; the message is what it prints."""


def option_value(argv: list[str], i: int, inline: str, *, missing: str) -> tuple[str, int]:
    """The value of the option at `argv[i]`: `inline` (`--size=8`, `-s8`) or the next word (`-s 8`).

    Returns (value, index of the last word used); `UsageError(missing)` when no word is left.
    """
    if inline:
        return inline, i
    if i + 1 >= len(argv):
        raise UsageError(missing)
    return argv[i + 1], i + 1
