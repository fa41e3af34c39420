"""The device-order table as the judge decided it, carried in `device.order_changed`'s `data`.

Design note: reporters used to rebuild this table from the two snapshots with a simpler rule (a row
"changed" when BDF or serial differed at an index) that could disagree with the judge, which pairs
GPUs by identity and leaves a replaced board or a missing GPU to their own rules. Now the rule writes
each index's baseline and candidate GPU and whether *it* counted the index as moved; reporters render
those rows and decide nothing. The rows are plain JSON (the report document carries them); `rows_of`
reads them back typed and refuses a shape it does not know (an older report) with None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from upgrade_gate.model import Finding, Gpu


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderSide:
    """One side of an index: the GPU's BDF and its immutable id (serial, else unique id)."""

    bdf: str | None
    ident: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderRow:
    """One enumeration index: the GPU there in the baseline and now, and the judge's decision."""

    index: int
    baseline: OrderSide | None
    candidate: OrderSide | None
    moved: bool


def _side(gpu: Gpu | None) -> dict[str, object] | None:
    if gpu is None:
        return None
    return {"bdf": None if gpu.bdf is None else str(gpu.bdf), "id": gpu.serial or gpu.unique_id}


def order_data(baseline: Mapping[int, Gpu], candidate: Mapping[int, Gpu], moved: set[int]) -> dict[str, object]:
    """The finding's `data`: every index of either side, with the indices the rule counted as moved."""
    rows = [
        {"index": i, "baseline": _side(baseline.get(i)), "candidate": _side(candidate.get(i)), "moved": i in moved}
        for i in sorted(set(baseline) | set(candidate))
    ]
    return {"order": rows}


def _read_side(raw: object) -> OrderSide | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("side")
    bdf, ident = raw.get("bdf"), raw.get("id")
    if not (bdf is None or isinstance(bdf, str)) or not (ident is None or isinstance(ident, str)):
        raise ValueError("side")
    return OrderSide(bdf=bdf, ident=ident)


def rows_of(finding: Finding) -> tuple[OrderRow, ...] | None:
    """The order rows a `device.order_changed` finding carries; None when it carries none we can read."""
    data = finding.data
    if not isinstance(data, Mapping) or not isinstance(data.get("order"), Sequence):
        return None
    rows: list[OrderRow] = []
    try:
        for raw in data["order"]:
            if not isinstance(raw, Mapping) or not isinstance(raw.get("index"), int):
                return None
            moved = raw.get("moved")
            if not isinstance(moved, bool):
                return None
            rows.append(
                OrderRow(
                    index=raw["index"],
                    baseline=_read_side(raw.get("baseline")),
                    candidate=_read_side(raw.get("candidate")),
                    moved=moved,
                )
            )
    except ValueError:
        return None
    return tuple(rows)
