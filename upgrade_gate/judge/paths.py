"""The grammar of snapshot paths: `gpus[serial=ABC].firmware.SMC`, `nics[name=ionic_0].ports[port=1].state`.

`judge.diff` writes paths with `render_path`; rules and reports that need the item a path is about read
it with `path_item` / `item_names`, here beside the writer, so the two cannot drift apart. GPU items are
keyed by their `identity.GpuKey` label (which already carries its kind); other collections by one field.
"""

from __future__ import annotations

from typing import Any

KEYED = {
    "gpus": "",  # the label already carries its kind: serial=..., bdf=...
    "gpu_links": "",
    "pcie": "bdf=",
    "nics": "name=",
    "ports": "port=",
    "sriov": "bdf=",
    "measurements": "key=",
    "phases": "phase=",
    "probes": "name=",
}


def render_path(segments: list[Any]) -> str:
    """`['gpus', 'serial=A', 'firmware', 'SMC']` -> `gpus[serial=A].firmware.SMC`."""
    out = ""
    for pos, seg in enumerate(segments):
        if isinstance(seg, int):
            out += f"[{seg}]"
            continue
        prefix = _key_prefix(segments, pos)
        if prefix is not None:
            out += f"[{prefix}{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out


def _key_prefix(segments: list[Any], pos: int) -> str | None:
    """The label prefix when segment `pos` is the key of an item of a keyed collection, else None."""
    if pos == 1 and segments[0] in KEYED:
        return KEYED[str(segments[0])]
    if pos == 3 and segments[0] == "nics" and segments[2] == "ports":
        return KEYED["ports"]
    return None


def path_item(path: str) -> str | None:
    """The item label in a path's first brackets (`gpus[serial=X].numa_node` -> `serial=X`), else None."""
    if "[" not in path:
        return None
    return path.split("[", 1)[1].split("]", 1)[0]


def item_names(path: str) -> set[str]:
    """The names a finding may give the path's item: its label, and the bare key of a keyed collection.

    `nics[name=ionic_0].fw` -> {`name=ionic_0`, `ionic_0`} (NIC rules name the device); a GPU item is
    named by its label only (`GpuKey` text, which GPU rules use as the finding's device).
    """
    label = path_item(path)
    if label is None:
        return set()
    section = path.split("[", 1)[0]
    prefix = KEYED.get(section, "")
    return {label, label.removeprefix(prefix)} if prefix else {label}
