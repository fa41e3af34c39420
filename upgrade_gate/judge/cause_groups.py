"""Cause groups of measured and per-rule findings, and the pool every claim takes findings from.

Part of `judge.causes` (see its docstring for the order of claims): claims 4-6 live here, bandwidth
families (a drop, or "not comparable"), firmware/VBIOS, and one cause per rule for the rest, with
`Pool`, the findings of one node and which are still free.

Device-level causes name the device in their headline (index, BDF, serial: `Pool.gpus_text`) when the
finding's own message does not; routing is by component: a GPU's PCIe link goes to the platform
(hardware), a NIC's to the network on-call, as the checklists name them.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from upgrade_gate.judge.cause_text import category_of, devices_text, drop_text, owner_of, plural, size_text
from upgrade_gate.judge.identity import match_gpus
from upgrade_gate.judge.plan import lost
from upgrade_gate.judge.rules.bandwidth import PLAUSIBLE
from upgrade_gate.model import (
    Cause,
    CauseCategory,
    Finding,
    Gpu,
    NodeName,
    RuleId,
    Severity,
    Snapshot,
    measurements_of,
)
from upgrade_gate.parse.common import digits

RANK = {Severity.BLOCK: 0, Severity.WARN: 1, Severity.INFO: 2}
FIRMWARE_PATH = re.compile(r"gpus\[[^\]]*\]\.(?:firmware\.(?P<block>.+)|(?P<vbios>vbios))$")
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_GPU_LABEL = re.compile(r"^gpus\[(?P<label>[^\]]+)\]")
_METRIC = re.compile(r"measurements\[key=(?P<key>.+)\]")
_SIZE = re.compile(r"^(?P<family>.+)/busbw(?:_inplace)?/(?P<bytes>\d+)$")
_CURVE = re.compile(r"^.+/busbw(?:_inplace)?$")  # a whole sweep's finding (`judge.curves`: its level moved)
MORE_SHOWN = 4  # a per-rule cause lists this many of its other findings' messages under its headline
_PHASE_OF_SCOPE = {"mesh": 2, "rail": 4, "cluster": 5}
_SCOPE_WORDS = {"mesh": "intra-node", "cluster": "multi-node", "rail": "RDMA"}


@dataclass(slots=True)
class Pool:
    """The findings of one node (or the fleet), which are still free to be claimed, and the causes so far."""

    node: NodeName
    findings: Sequence[Finding]
    free: set[int] = field(default_factory=set)
    causes: list[Cause] = field(default_factory=list)
    baseline: Snapshot | None = None
    candidate: Snapshot | None = None
    _gpus: dict[str, Gpu] | None = None

    def gpu_of(self, f: Finding) -> Gpu | None:
        """The GPU a finding is about (its path's pair label, or its device's BDF), candidate side first."""
        label = _GPU_LABEL.match(f.path or "")
        key = label["label"] if label is not None else f"bdf={f.device}" if f.device and _BDF.match(f.device) else None
        if key is None:
            return None  # not about a GPU: no matching needed (most findings of a fleet)
        if self._gpus is None:
            self._gpus = gpu_labels(self.baseline, self.candidate)
        return self._gpus.get(key)

    def gpus_text(self, indexes: Sequence[int]) -> str:
        """ " on GPU 3 (0000:75:00.0, serial 6924...)" for the GPUs `indexes` are about; "" when none is known."""
        gpus = {g.index: g for i in indexes if (g := self.gpu_of(self.findings[i])) is not None}
        total = len(self.candidate.gpus) if self.candidate is not None else 0
        return devices_text([gpus[k] for k in sorted(gpus)], total)

    def take(self, keep: Callable[[Finding], bool]) -> list[int]:
        """Claim every free finding `keep` accepts, in report order."""
        taken = [i for i in sorted(self.free) if keep(self.findings[i])]
        self.free.difference_update(taken)
        return taken

    def add(
        self,
        key: str,
        indexes: Sequence[int],
        headline: str,
        *,
        category: CauseCategory | None = None,
        owner: str | None = None,
        next_step: str | None = None,
        details: tuple[str, ...] = (),
    ) -> None:
        """Record a cause over `indexes` (severity: the worst of them; INFO when it owns none)."""
        found = [self.findings[i] for i in indexes]
        severity = min((f.severity for f in found), key=RANK.__getitem__, default=Severity.INFO)
        rules = tuple(sorted({f.rule for f in found}))
        first = rules[0] if rules else RuleId("evidence.missing")
        self.causes.append(
            Cause(
                key=key,
                node=self.node,
                severity=severity,
                headline=headline,
                category=category if category is not None else category_of(first),
                owner=owner if owner is not None else owner_of(first),
                rules=rules,
                findings=tuple(sorted(indexes)),
                next_step=next_step,
                details=details,
            )
        )


def gpu_labels(baseline: Snapshot | None, candidate: Snapshot | None) -> dict[str, Gpu]:
    """Pair label (`serial=X`, as in finding paths) and `bdf=B` -> the GPU, candidate side first."""
    out: dict[str, Gpu] = {}
    if baseline is None and candidate is None:
        return out
    pairs = match_gpus(baseline.gpus if baseline else (), candidate.gpus if candidate else ())
    for pair in pairs:
        gpu = pair.candidate or pair.baseline
        if gpu is not None:
            out[pair.label] = gpu
    for gpu in (*(baseline.gpus if baseline else ()), *(candidate.gpus if candidate else ())):
        if gpu.bdf is not None:
            out[f"bdf={gpu.bdf}"] = gpu
    return out


# --------------------------------------------------------------------------- 4. bandwidth


def _metric_key(f: Finding) -> str | None:
    if not (f.rule.startswith(("bandwidth.", "metric.")) or f.rule == "fleet.odd_one_out") or f.path is None:
        return None
    match = _METRIC.fullmatch(f.path)
    return match["key"] if match else None


def _family(key: str) -> str:
    size = _SIZE.match(key)
    if size:
        return size["family"]
    parts = key.split("/")
    if parts[0] in ("mesh", "cluster") and len(parts) >= 2:
        return "/".join(parts[:2])
    return "/".join(parts[:-1]) or key


def claim_bandwidth(pool: Pool, candidate: Snapshot | None) -> None:
    families: dict[str, list[int]] = {}
    for i in sorted(pool.free):
        key = _metric_key(pool.findings[i])
        if key is not None:
            families.setdefault(_family(key), []).append(i)
    if not families:
        return  # the usual node: no bandwidth finding, nothing to read in its measurements

    sized: dict[str, frozenset[int]] | None = None  # the candidate's sizes per family, read once per node

    def sizes_of(family: str) -> set[int]:  # read the measurements only for a headline that needs them
        nonlocal sized
        if sized is None:
            sized = _sizes(tuple(map(_KEY, measurements_of(candidate))) if candidate is not None else ())
        return set(sized.get(family, ()))

    for family, indexes in sorted(families.items()):
        scope = family.split("/")[0]
        phase = _PHASE_OF_SCOPE.get(scope)
        category = CauseCategory.FABRIC if scope in ("rail", "cluster") else CauseCategory.DRIVER
        step = rerun_phase(pool.node, phase) if phase is not None else None
        odd = [i for i in indexes if pool.findings[i].rule == "fleet.odd_one_out"]
        apart = [i for i in indexes if pool.findings[i].rule == "bandwidth.not_comparable"]
        notes = [i for i in indexes if _not_judged(pool.findings[i])]
        floors = [i for i in indexes if pool.findings[i].rule == "bandwidth.threshold"]
        worse = [i for i in indexes if i not in apart and i not in odd and i not in notes]
        owner = owner_of("bandwidth.regression" if scope != "rail" else "nic.port_state")
        broken = [i for i in apart if pool.findings[i].expected == PLAUSIBLE]
        if broken:  # a sample no run measures: the cause of every other finding of its family
            pool.free.difference_update(indexes)
            f = pool.findings[broken[0]]
            pool.add(
                f"bandwidth.broken:{family}",
                indexes,
                f"{_metric_words(family)}: broken evidence, {f.message}"
                + (f" (and {plural(len(broken) - 1, 'other metric')})" if len(broken) > 1 else ""),
                category=CauseCategory.EVIDENCE,
                next_step=step,
            )
            continue
        if len(worse) > len(floors) or odd:
            group = sorted(worse + odd)
            pool.free.difference_update(group)
            basis = "vs its baseline" if worse else "below its class"
            regressions = [pool.findings[i] for i in worse if pool.findings[i].rule == "bandwidth.regression"]
            shown = regressions or [pool.findings[i] for i in (worse or odd)]
            headline = _drop_headline(family, shown, sizes_of(family), basis)
            if regressions and all(f.severity is Severity.WARN for f in regressions):
                headline += "; inconclusive: the phase should re-measure it"
            pool.add(f"bandwidth:{family}", group, headline, category=category, owner=owner, next_step=step)
        elif floors:  # CVF's absolute floor alone: say so, not a drop "vs its baseline"
            pool.free.difference_update(floors)
            shown = [pool.findings[i] for i in floors]
            pool.add(
                f"bandwidth.threshold:{family}",
                floors,
                _floor_headline(family, shown),
                category=category,
                owner=owner,
                next_step=step,
            )
        if notes:
            pool.free.difference_update(notes)
            pool.add(
                f"bandwidth.not_judged:{family}",
                notes,
                f"{_metric_words(family)}: {plural(len(notes), 'curve')} with values under two printed steps "
                "(nothing comparable there), not judged",
                category=CauseCategory.EVIDENCE,
            )
        if apart:
            pool.free.difference_update(apart)
            pool.add(
                f"bandwidth.not_comparable:{family}",
                apart,
                f"{_metric_words(family)} not comparable with the baseline at {plural(len(apart), 'metric')}"
                + _settings_text(pool.findings[apart[0]]),
                category=CauseCategory.CONFIGURATION,
                next_step=step,
            )


def _not_judged(f: Finding) -> bool:
    """bandwidth.regression's note on values under two printed steps (no numbers: nothing was compared)."""
    return f.rule == "bandwidth.regression" and f.severity is Severity.INFO and f.expected is None and f.actual is None


_CVF_FLOOR = re.compile(r"PHASE\d_BW_THRESHOLD")


def _floor_headline(family: str, shown: Sequence[Finding]) -> str:
    """`RDMA ionic_6 bandwidth not shown above or below PHASE4_BW_THRESHOLD 380: median 381.87 (5 samples)`."""
    first = min(shown, key=lambda f: RANK[f.severity])
    name = _CVF_FLOOR.search(first.message)
    if not (isinstance(first.expected, int | float) and isinstance(first.actual, int | float) and name):
        return f"{_metric_words(family)}: {first.message}"  # no measurement, another unit: the finding says it
    state = "below" if first.severity is Severity.BLOCK else "not shown above or below"
    more = f" (and {plural(len(shown) - 1, 'metric')})" if len(shown) > 1 else ""
    what = "" if first.severity is Severity.BLOCK else "; the phase should re-measure it"
    return f"{_metric_words(family)} {state} {name.group(0)} {first.expected:g}: median {first.actual:g}{more}{what}"


_KEY = operator.attrgetter("key")


@functools.lru_cache(maxsize=16)
def _sizes(keys: tuple[str, ...]) -> dict[str, frozenset[int]]:
    """Sweep family -> the message sizes measured: a pure function of the key list, which a fleet's nodes
    share (parsed once, not ~190 keys a node with a finding; callers only read the map)."""
    out: dict[str, set[int]] = {}
    for key in keys:
        match = _SIZE.match(key)
        if match:
            out.setdefault(match["family"], set()).add(int(match["bytes"]))
    return {family: frozenset(found) for family, found in out.items()}


def _metric_words(family: str) -> str:
    parts = family.split("/")
    scope = _SCOPE_WORDS.get(parts[0], parts[0])
    if parts[0] in ("mesh", "cluster") and len(parts) > 1:
        return f"{scope} {parts[1]} bus bandwidth"
    return f"{scope} {'/'.join(parts[1:]) or parts[0]} bandwidth"


def _drop_headline(family: str, shown: Sequence[Finding], all_sizes: set[int], basis: str) -> str:
    drops = []
    hit: set[int] = set()
    for f in shown:
        if isinstance(f.expected, int | float) and isinstance(f.actual, int | float) and f.expected:
            drops.append(abs(float(f.expected) - float(f.actual)) / abs(float(f.expected)))
        key = _metric_key(f) or ""
        size = _SIZE.match(key)
        if size:
            hit.add(int(size["bytes"]))
        elif _CURVE.match(key):  # the curve's level moved: every size it measured, not the odd size beside it
            hit |= all_sizes
    text = f"{_metric_words(family)} {drop_text(drops)} {basis}"
    if hit:
        span = size_text(min(hit)) if len(hit) == 1 else f"{size_text(min(hit))} to {size_text(max(hit))}"
        if all_sizes and hit >= all_sizes:
            text += f" at every size, {span}"
        else:
            text += f" at {len(hit)} of {len(all_sizes | hit)} sizes, {span}"
    if len(shown) > 1 and not hit:
        text += f" ({plural(len(shown), 'metric')})"
    return text


def _settings_text(f: Finding) -> str:
    if isinstance(f.expected, dict) and isinstance(f.actual, dict):
        keys = sorted(k for k in f.expected.keys() | f.actual.keys() if f.expected.get(k) != f.actual.get(k))
        if keys:
            return ": settings differ, " + ", ".join(f"{k} {f.expected.get(k)} -> {f.actual.get(k)}" for k in keys)
    return f": {f.message}"


# --------------------------------------------------------------------------- 5. firmware, 6. the rest


def claim_firmware(pool: Pool) -> None:
    def is_firmware(f: Finding) -> bool:
        if f.rule in ("firmware.unplanned", "vbios.unplanned"):
            return True
        return f.rule == "fleet.odd_one_out" and f.path is not None and FIRMWARE_PATH.search(f.path) is not None

    taken = pool.take(is_firmware)
    if not taken:
        return
    unread = [i for i in taken if lost(pool.findings[i].actual)]  # "N/A", an error text, nothing: no version
    if unread:
        shown = sorted({_show(pool.findings[i].actual) for i in unread})
        pool.add(
            "firmware.unreadable",
            unread,
            f"firmware unreadable{pool.gpus_text(unread)}: the candidate holds {', '.join(map(repr, shown[:3]))} "
            "where a version belongs; re-capture the node",
            category=CauseCategory.EVIDENCE,
        )
        taken = [i for i in taken if i not in unread]
        if not taken:
            return
    blocks: dict[str, set[tuple[str, str]]] = {}
    for i in taken:
        f = pool.findings[i]
        match = FIRMWARE_PATH.search(f.path or "")
        name = (match["block"] or "VBIOS") if match else "firmware"
        blocks.setdefault(name, set()).add((_show(f.expected), _show(f.actual)))
    parts = []
    for name, moves in sorted(blocks.items()):
        parts.append(f"{name} {' / '.join(f'{a} -> {b}' for a, b in sorted(moves))}" if len(moves) == 1 else name)
    baseline = any(pool.findings[i].rule != "fleet.odd_one_out" for i in taken)
    where = "outside the plan" if baseline else "from its class"
    pool.add(
        "firmware",
        taken,
        f"firmware moved {where}{pool.gpus_text(taken)}: {len(blocks)} block(s), {', '.join(parts)}",
        category=CauseCategory.FIRMWARE,
        owner=owner_of("firmware.unplanned"),
    )


def _show(value: object) -> str:
    return "absent" if value is None else str(value)


def claim_by_rule(pool: Pool, candidate: Snapshot | None) -> None:
    tools = {p.name: p.argv[0] for p in candidate.probes if p.argv} if candidate is not None else {}
    groups: dict[str, list[int]] = {}
    for i in sorted(pool.free):
        f = pool.findings[i]
        key = str(f.rule)
        if f.rule == "evidence.missing" and f.device in tools:
            key = f"evidence:{tools[f.device]}"
        elif f.rule == "evidence.missing" and f.path and f.path.startswith("phases["):
            key = f"evidence:{f.path}"
        elif f.rule == "fleet.odd_one_out":
            key = f"fleet.odd_one_out:{(f.path or '').split('[')[0].split('.')[0]}"
        elif f.rule.startswith("software."):
            key = str(f.rule)
        elif f.rule == "pcie.downgrade" and pool.gpu_of(f) is not None:
            key = "pcie.downgrade:gpu"  # a GPU's link is the platform's; a NIC's stays the network's
        groups.setdefault(key, []).append(i)
    for key, indexes in sorted(groups.items()):
        pool.free.difference_update(indexes)
        found = [pool.findings[i] for i in indexes]
        first = min(found, key=lambda f: RANK[f.severity])
        headline = first.message + _unnamed_gpus(pool, indexes, first)
        if len(found) > 1:
            headline += f" (and {len(found) - 1} more like it)"
        if key.startswith("evidence:") and not key.startswith("evidence:phases") and len(found) > 1:
            headline = f"{key.split(':', 1)[1]}: {plural(len(found), 'probe')} failed, e.g. {first.message}"
        others = [f.message for f in found if f is not first]
        details = tuple(others[:MORE_SHOWN])
        if len(others) > MORE_SHOWN:
            details += (f"... and {len(others) - MORE_SHOWN} more (--verbose lists them)",)
        gpu_link = key == "pcie.downgrade:gpu"
        pool.add(
            key,
            indexes,
            headline,
            category=CauseCategory.HARDWARE if gpu_link else None,
            owner=owner_of("device.missing") if gpu_link else None,
            next_step=_rule_step(pool.node, first),
            details=details,
        )


def _unnamed_gpus(pool: Pool, indexes: Sequence[int], first: Finding) -> str:
    """The GPUs of a per-rule cause, when its first message does not name them by BDF already."""
    text = pool.gpus_text(indexes)
    gpu = pool.gpu_of(first)
    if not text or (gpu is not None and gpu.bdf is not None and str(gpu.bdf) in first.message):
        return ""
    return text


def rerun_phase(node: NodeName, phase: int) -> str:
    """The command that re-runs one CVF phase on one node (phases 4-5 need a partner node)."""
    peer = " --peer PEER" if phase in (4, 5) else ""
    return f"on {node}: upgrade-gate validate --phases {phase} --node {node}{peer} --out {node}.json"


def _rule_step(node: NodeName, f: Finding) -> str | None:
    if f.hint:
        return f.hint
    if f.rule in ("phase.failed", "evidence.missing") and f.path and f.path.startswith("phases[phase="):
        phase = f.path.removeprefix("phases[phase=").removesuffix("]")
        return rerun_phase(node, int(phase)) if digits(phase) else None
    if f.rule == "evidence.missing" and f.path and f.path.startswith("probes["):
        return f"fix the probe, then re-capture on {node}: upgrade-gate capture --node {node} --out {node}.tar.gz"
    return None
