"""`--candidates DIR|LISTFILE`: the paths `gate` and `baseline save --snapshots` read, bounded.

Split out of `cli.gate_stream` (issue 26, "every reader has a cap"). A list file is read by
`docio.read_bytes` (at most MAX_LIST_BYTES; no FIFO waited on) and taken a line at a time; a folder
is scanned entry by entry; either is refused (exit 3, naming it and the cap) as soon as it names more
than MAX_CANDIDATES, before the paths are all built. An entry that cannot even be looked at (a
symbolic link loop, no permission) is bad input naming it (exit 3), not an environment failure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from upgrade_gate.errors import InputError, NotFoundError, UsageError

BUNDLE_SUFFIXES = (".tar.gz", ".tgz")
_LINE = re.compile(r"[^\r\n]+")

MAX_CANDIDATES = 65_536
"""Most candidates one `gate` (or `baseline save --snapshots`) takes, from all its sources together:
8x the 8,192-node fleet of the benches. Checked while a list file or folder is read, so a list of a
million paths is refused at its 65,537th instead of after ~450 MiB of paths (issue 26)."""
MAX_LIST_BYTES = 16 * 1024 * 1024
"""Largest `--candidates` list file: MAX_CANDIDATES paths of 256 bytes each."""


def candidate_paths(singles: Sequence[Path], sources: Sequence[Path]) -> list[Path]:
    """`--candidate` paths, then each `--candidates` directory (sorted) or list file, in order; at most
    MAX_CANDIDATES of them (InputError, exit 3)."""
    out = list(singles)
    for source in sources:
        if source.is_dir():
            out.extend(_from_directory(source, MAX_CANDIDATES - len(out)))
        elif source.is_file():
            out.extend(_from_list_file(source, MAX_CANDIDATES - len(out)))
        else:  # also a link loop or a dangling link (`Path.is_dir` says False for them)
            raise NotFoundError(f"--candidates {source}: no such directory or list file")
    if len(out) > MAX_CANDIDATES:
        raise _too_many(Path("--candidate"))
    if not out:
        raise UsageError("no candidates: give --candidate PATH or --candidates DIR|LISTFILE")
    return out


def _too_many(source: Path) -> InputError:
    return InputError(
        f"--candidates {source}: over the {MAX_CANDIDATES:,} candidates one gate takes; refused "
        "(gate the fleet in parts)"
    )


def _from_directory(folder: Path, room: int = MAX_CANDIDATES) -> list[Path]:
    """Snapshots (`*.json`), bundle archives and bundle directories (with a manifest.json) in one folder;
    hidden entries (`.name`) are passed over. Anything else is refused, not skipped: a node whose
    capture was named `node.JSON.bak`, or a bundle directory that lost its manifest, would otherwise go
    unjudged (or unsaved, `baseline save --snapshots`) with nothing said. An entry that cannot be
    looked at (a symbolic link loop, no permission) is exit 3 naming it, as is a folder of more than
    `room` entries (refused while it is read)."""
    found: list[Path] = []
    other: list[Path] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                if len(found) + len(other) >= room:
                    raise _too_many(folder)
                _sort_entry(folder, entry, found, other)
    except OSError as exc:
        raise InputError(f"--candidates {folder}: unreadable: {exc.strerror or exc}") from None
    if other:
        named = ", ".join(p.name + ("/" if p.is_dir() else "") for p in sorted(other)[:5])
        more = f" and {len(other) - 5} more" if len(other) > 5 else ""
        raise InputError(
            f"--candidates {folder}: {len(other)} entr{'y is' if len(other) == 1 else 'ies are'} neither a snapshot "
            f"(.json) nor a capture bundle (.tar.gz, .tgz, a directory with manifest.json): {named}{more}; "
            "move them out, or list the candidates in a file"
        )
    if not found:
        raise InputError(f"--candidates {folder}: no snapshot (.json) or capture bundle in this directory")
    return sorted(found)


def _sort_entry(folder: Path, entry: os.DirEntry[str], found: list[Path], other: list[Path]) -> None:
    """Put one folder entry in `found` (a candidate) or `other`; InputError for one that cannot be
    looked at (`DirEntry.is_dir` raises ELOOP for a link loop, which was exit 4 as an OSError)."""
    lower = entry.name.lower()
    try:
        is_dir = entry.is_dir()
        is_file = not is_dir and entry.is_file()
    except OSError as exc:
        raise InputError(f"--candidates {folder}: {entry.name}: unreadable: {exc.strerror or exc}") from None
    if is_dir:
        (found if (Path(entry.path) / "manifest.json").is_file() else other).append(Path(entry.path))
    elif is_file and (lower.endswith(".json") or lower.endswith(BUNDLE_SUFFIXES)):
        found.append(Path(entry.path))
    else:
        other.append(Path(entry.path))


def _from_list_file(path: Path, room: int = MAX_CANDIDATES) -> list[Path]:
    """One path per line (relative ones to the list file's folder); blank lines and `#` comments skipped.
    At most MAX_LIST_BYTES and `room` paths (refused at the first path over); a snapshot given here by
    mistake is named as one. Lines are taken one at a time (`\\n`, `\\r\\n` or `\\r` ends one), so a list of a
    million paths or of 16 million blank lines is never split into a list at once."""
    from upgrade_gate.docio import read_bytes

    try:
        text = read_bytes(path, limit=MAX_LIST_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"--candidates {path}: unreadable list file: {exc}") from exc
    except InputError as exc:
        raise InputError(f"--candidates {exc}") from None
    if text.lstrip().startswith("{"):
        raise InputError(f"--candidates {path}: a JSON document, not a list file; give a snapshot with --candidate")
    out: list[Path] = []
    for match in _LINE.finditer(text):  # blank lines are never made into strings (a list of 16M of them)
        entry = match.group().strip()
        if entry and not entry.startswith("#"):
            if len(out) >= room:
                raise _too_many(path)
            p = Path(entry)
            out.append(p if p.is_absolute() else path.parent / p)
    if not out:
        raise InputError(f"--candidates {path}: the list file names no candidate")
    return out
