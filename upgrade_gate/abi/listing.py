"""The library listing a node's `rocm_libs` probe prints (`upgrade-gate abi-list DIR...`), and its parser.

The probe runs upgrade-gate's own ELF reader on the node, through the same `CommandRunner` as every
other probe, so a capture bundle records the listing as the probe's stdout and replays it offline
like any tool output. The format is ours, versioned and documented here (and checked by the parser,
which fails closed on anything else):

    {"format": "upgrade-gate-abi-list/1",
     "roots": ["/opt/rocm/lib"],
     "libraries": [{"path": "/opt/rocm-6.2.0/lib/libamdhip64.so.6.2.60200", "soname": "libamdhip64.so.6",
                    "symbols_sha256": "<hex>", "symbol_count": 1234, "file_sha256": "<hex>"}]}

Design decisions:
- `symbols_sha256` hashes the sorted exported-symbol lines `name@version binding type` (`@@` for
  the default version): two builds with the same ABI hash the same, so a rebuilt library with an
  unchanged interface is told apart (by `file_sha256`) from one whose interface moved.
- `path` is the real file (symlinks resolved) as the node sees it; the snapshot builder strips the
  capture's host root from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from upgrade_gate.abi.elf import ElfAbi
from upgrade_gate.abi.tree import read_library_tree
from upgrade_gate.errors import ParseError
from upgrade_gate.model import RocmLibrary

LISTING_FORMAT = "upgrade-gate-abi-list/1"
_TOOL = "upgrade-gate abi-list"


def symbols_digest(abi: ElfAbi) -> str:
    """SHA-256 of the exported symbol set (name, version, binding, type), order-independent."""
    lines = sorted(f"{e.label()} {e.binding} {e.type}" for e in abi.exports)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def list_libraries(roots: Sequence[Path], *, cache_dir: Path | None, workers: int | None = None) -> dict[str, Any]:
    """The listing document of every shared library under `roots` (InputError for a bad root)."""
    entries: list[dict[str, Any]] = []
    for root in roots:
        tree = read_library_tree(root, cache_dir=cache_dir, workers=workers, allow_empty=True)
        for key, item in tree.libraries.items():
            entries.append(
                {
                    "path": str(Path(item.path).resolve()),
                    "soname": key,
                    "symbols_sha256": symbols_digest(item.abi),
                    "symbol_count": len(item.abi.exports),
                    "file_sha256": item.abi.sha256,
                }
            )
    return {"format": LISTING_FORMAT, "roots": [str(r) for r in roots], "libraries": entries}


def parse_listing(text: str, *, strip_prefix: str = "/") -> tuple[RocmLibrary, ...]:
    """The libraries of a listing; ParseError for anything that is not exactly this format."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(_TOOL, getattr(exc, "lineno", 0), text[:120], "not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != LISTING_FORMAT:
        raise ParseError(_TOOL, 0, text[:120], f"not a {LISTING_FORMAT} document")
    raw = doc.get("libraries")
    if not isinstance(raw, list):
        raise ParseError(_TOOL, 0, text[:120], "no libraries list")
    out: list[RocmLibrary] = []
    prefix = strip_prefix.rstrip("/")
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not _well_formed(item):
            raise ParseError(_TOOL, 0, json.dumps(item)[:120], f"libraries[{i}] is malformed")
        path = item["path"]
        if prefix and path.startswith(prefix + "/"):
            path = path[len(prefix) :]
        out.append(
            RocmLibrary(
                soname=item["soname"],
                path=path,
                symbols_sha256=item["symbols_sha256"],
                symbol_count=item["symbol_count"],
                file_sha256=item["file_sha256"],
            )
        )
    sonames = [lib.soname for lib in out]
    if len(set(sonames)) != len(sonames):
        raise ParseError(_TOOL, 0, text[:120], "a soname is listed twice")
    return tuple(sorted(out, key=lambda lib: lib.soname))


def _well_formed(item: dict[str, Any]) -> bool:
    strings = ("path", "soname", "symbols_sha256", "file_sha256")
    count = item.get("symbol_count")
    return (
        all(isinstance(item.get(k), str) and item[k] for k in strings)
        and isinstance(count, int)
        and not isinstance(count, bool)
        and count >= 0
    )
