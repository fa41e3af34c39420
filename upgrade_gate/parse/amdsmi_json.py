"""Readers for amd-smi's `--json` output: decoding, the per-device envelope, and the topology links.

Envelopes (dated notes):
- amd-smi before 26 (ROCm <= 6.x/7.0): a top-level JSON list with one object per device, each
  carrying `"gpu": <index>` (amdsmi_logger.py `_print_json_output`: `json.dumps([...], indent=4)`);
  corpus amd-smi/metric-p-json-1gpu-doc-example-units-rocm6.1.json.
- amd-smi 26.x (ROCm 7.2): an object `{"gpu_data": [...]}` (and `cpu_data` / `core_data` where
  those exist); corpus amd-smi/static-json-mi300x-8gpu-amdsmi26.2.2-...json. `cpu_data`/`core_data`
  are ignored here: nothing upgrade-gate snapshots lives there.
- `amd-smi version --json` is a list holding one object without a `gpu` key.
Both envelopes are accepted for every command; the result records which one was seen (`form`).

`amd-smi topology --json` (no corpus capture) follows ROCm/amdsmi amdsmi_cli/amdsmi_commands.py
@7ac597a81b6179bbf80bbb61c341802347c70178, `topology()`: per source GPU `{"gpu", "bdf", "links": [...]}`
where each link has `gpu`, `bdf`, `weight`, `link_status` (ENABLED/DISABLED), `link_type`
(SELF/PCIE/XGMI/N/A/UNKNOWN), `num_hops`, `bandwidth` ("min-max" or N/A), `coherent`, `atomics`,
`dma`, `bi_dir`; a field is missing when its table was not requested.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.amdsmi_types import AmdSmiTopoLink, AmdSmiTopology
from upgrade_gate.parse.amdsmi_values import Fields
from upgrade_gate.parse.common import load_json

_BW_RE = re.compile(r"^(\d+)-(\d+)$")
_LINK_TYPES = frozenset({"XGMI", "PCIE", "UNKNOWN"})
_FLAG_FIELDS = ("coherent", "atomics", "dma", "bi_dir")


def device_entries(doc: object, *, tool: str) -> tuple[str, list[Mapping[str, object]]]:
    """(form, objects) of a per-device JSON document in either envelope."""
    if isinstance(doc, list):
        form, items = "json-list", doc
    elif isinstance(doc, Mapping) and isinstance(doc.get("gpu_data"), list):
        form, items = "json-gpu-data", doc["gpu_data"]
    else:
        raise ParseError(tool, 0, repr(doc)[:80], "expected a JSON list or {'gpu_data': [...]}")
    entries: list[Mapping[str, object]] = []
    for pos, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ParseError(tool, 0, repr(item)[:80], f"device entry {pos} is not an object")
        entries.append(item)
    return form, entries


def gpu_index(entry: Mapping[str, object], *, tool: str, pos: int) -> int:
    """The `gpu` index of one device object."""
    value = entry.get("gpu")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ParseError(tool, 0, f"[{pos}].gpu={value!r}", "device entry without a GPU index")


def check_unique(indices: list[int], *, tool: str) -> None:
    """Each GPU index appears once."""
    seen: set[int] = set()
    for index in indices:
        if index in seen:
            raise ParseError(tool, 0, f"gpu={index}", "GPU index printed twice")
        seen.add(index)


def _access(link: Fields) -> bool | None:
    status = link.text("link_status", "access")
    if status is None:
        return None
    if status.upper() in ("ENABLED", "DISABLED"):
        return status.upper() == "ENABLED"
    raise link.error("link_status", "expected ENABLED or DISABLED")


def _link_type(link: Fields) -> str | None:
    kind = link.text("link_type", "link_type")
    if kind is None:
        return None
    if kind.upper() in _LINK_TYPES:
        return kind.upper()
    raise link.error("link_type", "unknown link type")


def _bandwidth(link: Fields) -> tuple[int | None, int | None]:
    value = link.text("bandwidth", "numa_bw")
    if value is None:
        return None, None
    match = _BW_RE.match(value)
    if match is None:
        raise link.error("bandwidth", "expected 'min-max' bandwidth")
    return int(match.group(1)), int(match.group(2))


def topology_from_json(text: str, *, tool: str) -> AmdSmiTopology:
    """`amd-smi topology --json`: every ordered pair of distinct GPUs with its link fields."""
    form, entries = device_entries(load_json(text, tool=tool), tool=tool)
    if not entries:
        raise ParseError(tool, 0, text[:80], "no GPU in topology output")
    bdfs: list[Bdf] = []
    indices: list[int] = []
    links: list[AmdSmiTopoLink] = []
    fields_seen: set[str] = set()
    for pos, entry in enumerate(entries):
        index = gpu_index(entry, tool=tool, pos=pos)
        src = Fields(tool, entry, path=f"[{pos}]")
        src_bdf = src.bdf("bdf", "bdf")
        if src_bdf is None:
            raise src.error("bdf", "GPU without a BDF")
        indices.append(index)
        bdfs.append(src_bdf)
        raw_links = entry.get("links")
        if not isinstance(raw_links, list):
            raise src.error("links", "expected a list of links")
        for lpos, raw in enumerate(raw_links):
            if not isinstance(raw, Mapping):
                raise src.error("links", f"link {lpos} is not an object")
            link = Fields(tool, raw, path=f"[{pos}].links[{lpos}]")
            dst_bdf = link.bdf("bdf", "bdf")
            if dst_bdf is None:
                raise link.error("bdf", "link without a destination BDF")
            fields_seen.update(raw)
            if dst_bdf == src_bdf:
                continue
            dst_index = raw.get("gpu")
            bw_min, bw_max = _bandwidth(link)
            links.append(
                AmdSmiTopoLink(
                    src=src_bdf,
                    dst=dst_bdf,
                    src_index=index,
                    dst_index=dst_index if isinstance(dst_index, int) and not isinstance(dst_index, bool) else None,
                    access=_access(link),
                    weight=link.integer("weight", "weight"),
                    hops=link.integer("num_hops", "hops"),
                    link_type=_link_type(link),
                    numa_bw_min=bw_min,
                    numa_bw_max=bw_max,
                    coherent=link.text("coherent", "coherent"),
                    atomics=link.text("atomics", "atomics"),
                    dma=link.text("dma", "dma"),
                    bi_dir=link.text("bi_dir", "bi_dir"),
                )
            )
    check_unique(indices, tool=tool)
    if len(set(bdfs)) != len(bdfs):
        raise ParseError(tool, 0, str(bdfs)[:80], "BDF printed for two GPUs")
    # The matrix is square, as in the text tables: every GPU has its own entry and lists every other GPU
    # (a GPU linked to but without an entry is a cut or edited output, not a smaller node).
    sources = set(bdfs)
    pairs = {(pair.src, pair.dst) for pair in links}
    for pair in links:
        if pair.dst not in sources:
            raise ParseError(tool, 0, pair.dst, f"GPU {pair.dst} is linked to by {pair.src} but has no entry")
    missing = [(a, b) for a in bdfs for b in bdfs if a != b and (a, b) not in pairs]
    if missing:
        raise ParseError(tool, 0, f"{missing[0][0]} -> {missing[0][1]}", f"{len(missing)} GPU pair(s) without a link")
    names = {"link_status": "access", "weight": "weight", "num_hops": "hops", "link_type": "link_type"}
    names |= {"bandwidth": "numa_bw", **{name: name for name in _FLAG_FIELDS}}
    return AmdSmiTopology(
        form=form,
        bdfs=tuple(bdfs),
        links=tuple(links),
        tables=tuple(field for key, field in names.items() if key in fields_seen),
    )
