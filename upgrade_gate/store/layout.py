"""Where things live inside a baseline store, and which names are allowed there (pure, no git).

Layout of the committed tree:
    README.md              one line saying what the repository is
    store.json             the marker: {"schema_version": "1", "kind": "upgrade-gate-baseline-store"}
    nodes/<node>.json      one canonical snapshot per node
    denylist.json          GPU serials that failed once (see `store.denylist`)
    classes/<class>.json   class references written by `baseline aggregate --save`
    windows/<id>.json      change-window state (kept by the fleet stage through `write_document`)

The marker is a tracked file rather than local git config so that a clone of a store (CI checking
out the baselines repository) is recognised as one. `nodes/`, `store.json` and `denylist.json` are
reserved: they are written only through their typed methods, never as generic documents.
"""

from __future__ import annotations

import re
from pathlib import Path

from upgrade_gate.errors import InputError, UsageError
from upgrade_gate.model import NodeName

STORE_ENV = "UPGRADE_GATE_STORE"
DEFAULT_STORE = Path("baselines")
"""The store when neither `--store` nor UPGRADE_GATE_STORE is given: `baselines/` in the current
directory (the design card's top-level folder: a site runs upgrade-gate from its ops repository, whose
`baselines/` is the store's clone). Relative on purpose: resolved where the command runs."""
STORE_HELP = "Baseline store folder, a git repository (default: ./baselines in the current directory)."

README_PATH = "README.md"
MARKER_PATH = "store.json"
NODES_DIR = "nodes"
KEEP_PATH = "nodes/.gitkeep"
DENYLIST_PATH = "denylist.json"
STORE_KIND = "upgrade-gate-baseline-store"
README_TEXT = "# upgrade-gate baseline store: one snapshot per node under nodes/, written by upgrade-gate.\n"
RESERVED = (MARKER_PATH, DENYLIST_PATH, README_PATH)

# Same rule as the snapshot schema's node.name (a Kubernetes node name): safe as a file name.
_NODE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A conservative subset of git-check-ref-format: no "..", no ".lock" suffix, no leading "-" or ".", no
# trailing "." (git refuses `refs/tags/x.`: issue 26 found it failing late, as a misleading conflict).
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def marker_document() -> dict[str, str]:
    """The content of store.json."""
    return {"kind": STORE_KIND, "schema_version": "1"}


def check_node_name(node: str) -> NodeName:
    """Return `node` as a NodeName, or raise InputError if it cannot name a baseline."""
    if not _NODE_RE.match(node) or ".." in node:
        raise InputError(f"{node!r} is not a valid node name (lower-case letters, digits, '-', '.')")
    return NodeName(node)


def node_path(node: str) -> str:
    """Store path of one node's snapshot."""
    return f"{NODES_DIR}/{check_node_name(node)}.json"


def check_tag(tag: str) -> str:
    """Return `tag` if it is an acceptable tag name, else raise UsageError."""
    if not _TAG_RE.match(tag) or ".." in tag or tag.endswith((".lock", ".")):
        raise UsageError(f"{tag!r} is not a valid tag name (letters, digits, '.', '_', '+', '-')")
    return tag


def check_document_name(name: str) -> str:
    """Validate a generic document path (`windows/w1.json`); reserved paths and `..` are refused."""
    parts = name.split("/")
    if not name.endswith(".json") or len(parts) > 4 or not all(_PART_RE.match(p) and ".." not in p for p in parts):
        raise InputError(f"{name!r} is not a valid store document name (folder/name.json, no '..')")
    if name in RESERVED or parts[0] == NODES_DIR:
        raise InputError(f"{name!r} is reserved in the baseline store; use its own command")
    return name


def check_folder_name(folder: str) -> str:
    """Validate a document folder name (`windows`)."""
    parts = folder.strip("/").split("/")
    if not all(_PART_RE.match(p) and ".." not in p for p in parts):
        raise InputError(f"{folder!r} is not a valid store folder name")
    return "/".join(parts)
