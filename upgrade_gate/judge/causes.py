"""Root causes: the findings of each node grouped under the one fault that explains them.

A person at 3 a.m. needs "all_reduce bus bandwidth -20% at every size", not 46 lines of one drop.
`group_causes(report, baselines=..., candidates=...)` returns the report with `NodeReport.causes` and
`GateReport.fleet_causes` filled in; nothing else changes. The verdict and every finding are exactly
the judge's: grouping changes what is shown, never what blocks, and every finding belongs to exactly
one cause (a cause's severity is the worst of its own findings).

Claims run in a fixed order, each taking the findings its fault explains from those still free:
1. a missing GPU owns the follow-on findings it causes: the order change that is just the gap closing,
   the class's GPU count and order, its XGMI pairs and PCIe link, its SR-IOV PF, and the bandwidth
   "not comparable" findings whose only difference is fewer ranks;
2. a GPU order change owns the odd-one-out finding that restates it against the class;
0. an evidence failure owns every finding whose evidence it is (`judge.cause_evidence` states the rule:
   a probe or phase that failed on either side, a stand-in's values, a phase stopped by an earlier
   one): "amd-smi unusable (reason); rocm-smi used", "ibv_devinfo unusable (missing binary)";
   then a fact a tool answered without giving (an evidence issue, a value printed N/A, a device it did not
   list) owns the findings that read its absence as a change (`judge.cause_unreported`);
   then a compute/memory partition mode change (`judge.cause_partition`) owns the partitions that
   appeared or vanished, their XGMI links and the order: "compute partition SPX -> CPX ... on 8 GPUs";
4. a bandwidth metric family (`mesh/all_reduce`, `rail/ionic_0`, ...) is one cause per kind: a drop
   (baseline regression, CVF floor and the odd-one-out findings that restate it) and "not comparable";
5. firmware and VBIOS findings of a node (baseline or class) are one cause, software ones per field;
6. everything else: one cause per rule (per probe tool for evidence, per aspect for the odd one out).
Fleet findings: the failed checklist items of one checklist are one cause.

Design decisions:
- Claims read a finding's rule, path, device and expected/actual values, never its message: the path is
  the finding's address in the grammar the diff and the plan globs share (`gpus[serial=X].firmware.PM`,
  `measurements[key=mesh/all_reduce/busbw/1024]`), so a reworded message cannot regroup anything.
- Folding never hides: a folded finding keeps its severity (the fallback's absent readings still block
  until the rules say otherwise), the cause counts it, `--verbose` and every report file list it.
- Snapshots are read where a finding cannot say enough: the missing GPUs (identity matching, as the rules
  do), the `ROCR_VISIBLE_DEVICES` pin in baseline order, which probe stood in for which.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from upgrade_gate.judge.cause_evidence import ROOT_PREFIXES, claim_evidence_failures
from upgrade_gate.judge.cause_groups import (
    RANK,
    Pool,
    claim_bandwidth,
    claim_by_rule,
    claim_firmware,
)
from upgrade_gate.judge.cause_partition import claim_partition_change
from upgrade_gate.judge.cause_text import moved_summary, owner_of, permutation_table, plural
from upgrade_gate.judge.cause_unreported import claim_unreported
from upgrade_gate.judge.identity import match_gpus, normalise_id, rocr_uuid
from upgrade_gate.model import (
    Cause,
    CauseCategory,
    ChecklistRow,
    Finding,
    GateReport,
    Gpu,
    NodeName,
    NodeReport,
    Snapshot,
    replace,
)
from upgrade_gate.vendors import vendor_of


def group_causes(
    report: GateReport,
    *,
    baselines: Mapping[NodeName, Snapshot] | None = None,
    candidates: Mapping[NodeName, Snapshot] | None = None,
) -> GateReport:
    """The report with every node's findings, and the fleet's, grouped into causes."""
    baselines = baselines or {}
    candidates = candidates or {}
    nodes = tuple(
        replace(n, causes=node_causes(n, baselines.get(n.node), candidates.get(n.node))) for n in report.nodes
    )
    return replace(report, nodes=nodes, fleet_causes=fleet_causes(report.fleet_findings, report.checklist))


def ensure_causes(
    report: GateReport,
    *,
    baselines: Mapping[NodeName, Snapshot] | None = None,
    candidates: Mapping[NodeName, Snapshot] | None = None,
) -> GateReport:
    """`report` itself when its causes cover its findings, else the report grouped afresh."""
    covered = all(_covers(n.causes, n.findings) for n in report.nodes) and _covers(
        report.fleet_causes, report.fleet_findings
    )
    return report if covered else group_causes(report, baselines=baselines, candidates=candidates)


def _covers(causes: Sequence[Cause], findings: Sequence[Finding]) -> bool:
    owned = sorted(i for c in causes for i in c.findings)
    return owned == list(range(len(findings)))


def node_causes(node: NodeReport, baseline: Snapshot | None, candidate: Snapshot | None) -> tuple[Cause, ...]:
    """The causes of one node's findings (see the module docstring for the order of claims)."""
    pool = Pool(
        node=node.node,
        findings=node.findings,
        free=set(range(len(node.findings))),
        baseline=baseline,
        candidate=candidate,
    )
    claim_evidence_failures(pool, baseline, candidate)
    claim_unreported(pool, candidate)
    claim_partition_change(pool, baseline, candidate)
    _missing_gpus(pool, baseline, candidate)
    _order(pool, baseline, candidate)
    claim_bandwidth(pool, candidate)
    claim_firmware(pool)
    claim_by_rule(pool, candidate)
    return tuple(sorted(pool.causes, key=_rank))


def _rank(cause: Cause) -> tuple[int, bool, bool, bool, int, str]:
    """Worst first; then the roots, the broken evidence itself before the facts it left unreported (an
    amd-smi list naming one BDF twice before the firmware it left unmapped); then the node's own findings
    before a cause that only restates the node against its class (`fleet.odd_one_out`: "class prevails
    with 0" led a node whose SR-IOV evidence disagreed, 2026-12-07); then the cause that explains more;
    then by key."""
    return (
        RANK[cause.severity],
        not _is_root(cause),
        cause.key.startswith("evidence.unreported:"),
        cause.rules == _CLASS_ONLY,
        -len(cause.findings),
        cause.key,
    )


_CLASS_ONLY = ("fleet.odd_one_out",)


def _is_root(cause: Cause) -> bool:
    """An evidence failure or a partition change: what the other causes of its node follow from."""
    return cause.key.startswith(ROOT_PREFIXES)


# --------------------------------------------------------------------------- 1. missing GPUs


def _missing_gpus(pool: Pool, baseline: Snapshot | None, candidate: Snapshot | None) -> None:
    if baseline is None or candidate is None or not any(f.rule == "device.missing" for f in pool.findings):
        return
    present = {g.bdf for g in candidate.gpus}
    gone = [p.baseline for p in match_gpus(baseline.gpus, candidate.gpus) if p.candidate is None and p.baseline]
    gone = sorted((g for g in gone if g.bdf not in present), key=lambda g: g.index)
    if not gone:
        return
    bdfs = {str(g.bdf) for g in gone if g.bdf is not None}

    def closes_gap(expected: object, actual: object) -> bool:
        return isinstance(expected, list) and [b for b in expected if b not in bdfs] == actual

    def follows(f: Finding) -> bool:
        if f.rule == "device.missing":
            return True
        if f.rule == "device.order_changed" or (f.rule == "fleet.odd_one_out" and f.path == "gpus.order"):
            return closes_gap(f.expected, f.actual)
        if f.rule == "fleet.odd_one_out" and f.path == "gpus":
            return isinstance(f.expected, int) and isinstance(f.actual, int) and f.actual < f.expected
        if f.rule in ("xgmi.link_changed", "pcie.downgrade", "sriov.vf_count"):
            return f.device is not None and any(b in bdfs for b in f.device.split("~"))
        if f.rule == "bandwidth.not_comparable":
            return _fewer_ranks_only(f.expected, f.actual)
        return False

    taken = pool.take(follows)
    if not taken:
        return  # explained already (a partition change: the partitions are not missing devices)
    left = len(candidate.gpus)
    names = "; ".join(_gpu_text(g) for g in gone)
    head = f"GPU {names} missing" if len(gone) == 1 else f"{len(gone)} GPUs missing: {names}"
    serials = [s for g in gone if (s := normalise_id(g.serial) or normalise_id(g.unique_id))]
    step = None
    if serials:
        step = "; ".join(
            f"upgrade-gate baseline deny {s} --node {pool.node} --reason 'missing after the change'" for s in serials
        )
    follow = [pool.findings[i].rule for i in taken if pool.findings[i].rule != "device.missing"]
    details = (f"also explains {plural(len(follow), 'follow-on finding')}: {_rule_counts(follow)}",) if follow else ()
    pool.add(
        "device.missing",
        taken,
        f"{head}: {left} of {len(baseline.gpus)} GPUs left",
        category=CauseCategory.HARDWARE,
        next_step=step,
        details=details,
    )


def _fewer_ranks_only(expected: object, actual: object) -> bool:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return False
    differ = {k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k)}
    if differ != {"ranks"}:
        return False
    try:
        return int(actual["ranks"]) < int(expected["ranks"])
    except (KeyError, TypeError, ValueError):
        return False


def _gpu_text(gpu: Gpu) -> str:
    ident = normalise_id(gpu.serial) or normalise_id(gpu.unique_id)
    return f"{gpu.bdf} (index {gpu.index}" + (f", serial {ident})" if ident else ")")


_FOLLOW_WORDS = {
    "device.order_changed": "order",
    "fleet.odd_one_out": "class",
    "xgmi.link_changed": "XGMI",
    "pcie.downgrade": "PCIe",
    "sriov.vf_count": "SR-IOV",
    "bandwidth.not_comparable": "bandwidth at fewer ranks",
}


def _rule_counts(rules: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for rule in rules:
        word = _FOLLOW_WORDS.get(rule, rule)
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{rule} x{n}" if n > 1 else rule for rule, n in sorted(counts.items()))


# --------------------------------------------------------------------------- 2. order


def _order(pool: Pool, baseline: Snapshot | None, candidate: Snapshot | None) -> None:
    def is_order(f: Finding) -> bool:
        return f.rule == "device.order_changed" or (f.rule == "fleet.odd_one_out" and f.path == "gpus.order")

    free = [i for i in sorted(pool.free) if is_order(pool.findings[i])]
    if not free:
        return
    main = next((pool.findings[i] for i in free if pool.findings[i].rule == "device.order_changed"), None)
    shown = main or pool.findings[free[0]]
    taken = pool.take(is_order)
    before = shown.expected if isinstance(shown.expected, list) else []
    after = shown.actual if isinstance(shown.actual, list) else []
    what = moved_summary(before, after) if before and after else shown.message
    cls = candidate.node.node_class if candidate is not None else None
    head = "GPU enumeration order changed" if main is not None else f"GPU order departs from class {cls or '?'}"
    pool.add(
        "device.order",
        taken,
        f"{head}: {what}",
        category=CauseCategory.DRIVER,
        owner=owner_of("device.order_changed"),
        next_step=(_order_pin(baseline, candidate) or main.hint) if main is not None else None,
        details=permutation_table(before, after) if before and after else (),
    )


def _order_pin(baseline: Snapshot | None, candidate: Snapshot | None) -> str | None:
    """`export ROCR_VISIBLE_DEVICES=GPU-...` (NVIDIA: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=GPU-...) in
    baseline order, None when any UUID is unknown."""
    if baseline is None or candidate is None:
        return None
    uuids: list[str] = []
    pairs = {id(p.baseline): p for p in match_gpus(baseline.gpus, candidate.gpus) if p.baseline is not None}
    for gpu in sorted(baseline.gpus, key=lambda g: g.index):
        pair = pairs.get(id(gpu))
        if pair is None or pair.candidate is None:
            continue
        uuid = rocr_uuid(pair.candidate) or rocr_uuid(gpu)
        if uuid is None:
            return None
        uuids.append(uuid)
    return vendor_of(p.name for p in candidate.probes).order_pin(uuids) if uuids else None  # the vendor's words


# --------------------------------------------------------------------------- fleet


def fleet_causes(findings: Sequence[Finding], rows: Sequence[ChecklistRow]) -> tuple[Cause, ...]:
    """Failed items of one checklist are one cause; other fleet findings one cause per rule."""
    pool = Pool(node=NodeName("fleet"), findings=findings, free=set(range(len(findings))))
    by_item = {r.item_id: r for r in rows}
    lists: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        row = by_item.get(f.device or "") if f.rule.startswith("checklist.") else None
        if row is not None:
            lists.setdefault(row.checklist, []).append(i)
    for name, indexes in sorted(lists.items()):
        pool.free.difference_update(indexes)
        items = [by_item[findings[i].device or ""] for i in indexes]
        owners = ", ".join(sorted({r.owner for r in items}))
        pool.add(
            f"checklist:{name}",
            indexes,
            f"checklist {name}: {plural(len(items), 'item')} not satisfied: {', '.join(r.item_id for r in items)}",
            category=CauseCategory.CONFIGURATION,
            owner=owners,
        )
    claim_by_rule(pool, None)
    return tuple(sorted(pool.causes, key=lambda c: (RANK[c.severity], c.key)))
