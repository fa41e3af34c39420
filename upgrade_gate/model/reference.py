"""The class reference: the prevailing state of a node class (`classes/<class>.json` in the store).

`schemas/class-reference.schema.json` is generated from these classes (`python -m upgrade_gate.schemas
--write`).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, field

from upgrade_gate.model.types import ALWAYS, Count, Name, NodeName, Record


class MetricSummary(Record, frozen=True, kw_only=True):
    """One metric across the nodes of a class: median and spread of the per-node medians."""

    key: Name
    unit: str
    median: float
    spread: Annotated[float, Meta(ge=0, description="median absolute deviation of the per-node medians")]
    n_nodes: Annotated[int, Meta(ge=1)]
    settings: Annotated[dict[str, str], ALWAYS] = field(default_factory=dict)
    higher_is_better: Annotated[
        bool | None,
        Meta(
            description="the direction of the metric in the class's baselines; a candidate that reverses it is "
            "not comparable and blocks (null: a reference written before the field, the candidate's is used)"
        ),
    ] = None


class ClassReference(Record, frozen=True, kw_only=True):
    """The prevailing state of a node class (baseline aggregate): GPU BDF order, firmware, software, VF
    counts per PF, and median / median absolute deviation of each metric's per-node medians. For nodes
    without a baseline and the odd node out."""

    node_class: Name
    nodes: tuple[NodeName, ...]
    gpu_order: Annotated[tuple[str | None, ...], ALWAYS, Meta(description="prevailing BDF per index")] = ()
    firmware: Annotated[
        dict[str, str], ALWAYS, Meta(description='"gpu/<block>" or "nic/fw_ver" -> prevailing version')
    ] = field(default_factory=dict)
    software: Annotated[dict[str, str], ALWAYS] = field(default_factory=dict)
    sriov: Annotated[dict[str, Count], ALWAYS, Meta(description="PF BDF -> prevailing numvfs")] = field(
        default_factory=dict
    )
    metrics: Annotated[tuple[MetricSummary, ...], ALWAYS] = ()
