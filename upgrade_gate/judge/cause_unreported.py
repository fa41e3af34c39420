"""Evidence that a tool could not give is the cause, not the change it seems to make.

Part of `judge.causes`, right after the failed probes (`cause_evidence`). A probe can run, exit 0 and
still not give one fact: it printed `N/A` where a value belongs, or a value the snapshot builder
refused (`EvidenceIssue`), or it did not list the device at all. The fact is then absent in the
candidate, and the diff reads that as a change ("compute partition SPX -> absent", "unique_id is no
longer reported": a board swap). Read that way, the cause that leads is wrong (a black-box test,
2026-12-07: nine such cases led with the change). Two claims, each a root cause:

1. An evidence issue of the candidate (`evidence.missing` at the issue's subject) owns every finding
   about the same fact: the same path or one under it (`nics[name=ionic_3]` owns
   `nics[name=ionic_3].netdev`); a subject naming a GPU by index (`gpus[3].unique_id`) owns the findings
   of that GPU, matched by identity as the rules match it, on the same field.
2. A finding whose candidate value is absent, where the candidate records why (`na_reasons`: "amd-smi
   static printed N/A for compute_partition", "no /sys/bus/pci/devices/<bdf>/infiniband entry"), is
   claimed by one cause per reason: "not reported on GPU 3: amd-smi static printed N/A ...".

Both only regroup: every finding keeps its rule and severity, and the verdict is the judge's.
"""

from __future__ import annotations

import re

from upgrade_gate.judge.cause_groups import Pool
from upgrade_gate.judge.cause_text import owner_of, plural
from upgrade_gate.model import CauseCategory, Finding, Gpu, Snapshot

_GPU_INDEX = re.compile(r"^gpus\[(?P<index>\d+)\](?P<rest>.*)$")
_GPU_PATH = re.compile(r"^gpus\[[^\]]+\](?P<rest>.*)$")
_NIC_PATH = re.compile(r"^nics\[name=(?P<name>[^\]]+)\]\.(?P<field>[a-z_]+)")
_SECTION_PATH = re.compile(r"^(?P<section>software|host)\.(?P<field>[a-z_]+)$")
_EVIDENCE = "evidence.missing"


def claim_unreported(pool: Pool, candidate: Snapshot | None) -> None:
    """Claims 1 and 2 of the module docstring."""
    if candidate is None:
        return
    _claim_issues(pool, candidate)
    _claim_absent(pool, candidate)


def _under(path: str, subject: str) -> bool:
    return path == subject or path.startswith((subject + ".", subject + "["))


def _claim_issues(pool: Pool, candidate: Snapshot) -> None:
    subjects = {issue.subject for issue in candidate.evidence_issues}
    if not subjects:
        return
    gpus = {g.index: g for g in candidate.gpus}
    for i in sorted(pool.free):
        f = pool.findings[i]
        if i not in pool.free or f.rule != _EVIDENCE or f.path not in subjects:
            continue
        subject = f.path
        by_index = _GPU_INDEX.match(subject)
        gpu = gpus.get(int(by_index["index"])) if by_index else None

        def same_fact(
            g: Finding, subject: str = subject, gpu: Gpu | None = gpu, by_index: re.Match[str] | None = by_index
        ) -> bool:
            if g.rule == _EVIDENCE or not g.path:
                return False
            if _under(g.path, subject):
                return True
            if gpu is None or by_index is None or pool.gpu_of(g) != gpu:
                return False
            rest = _GPU_PATH.match(g.path)
            return rest is not None and (by_index["rest"] == "" or _under(rest["rest"], by_index["rest"]))

        pool.free.discard(i)
        taken = [i, *pool.take(same_fact)]
        headline = f.message
        if len(taken) > 1:
            headline += f"; it explains {plural(len(taken) - 1, 'other finding')}"
        pool.add(
            f"evidence.issue:{subject}",
            taken,
            headline,
            category=CauseCategory.EVIDENCE,
            owner=owner_of(_EVIDENCE),
            next_step=f.hint,
        )


def _reason(pool: Pool, f: Finding, candidate: Snapshot) -> tuple[str, str] | None:
    """(field, why the candidate lacks it) for a finding about a candidate value it recorded as absent."""
    path = f.path or ""
    if path.startswith("gpus["):
        gpu = pool.gpu_of(f)
        rest = _GPU_PATH.match(path)
        if gpu is None or rest is None or not any(gpu is g for g in candidate.gpus):
            return None
        field = rest["rest"].lstrip(".")
        why = gpu.na_reasons.get(field) or gpu.na_reasons.get(field.split(".")[0])
        return (field, why) if field and why else None
    nic = _NIC_PATH.match(path)
    if nic is not None:
        found = next((n for n in candidate.nics if n.name == nic["name"]), None)
        why = found.na_reasons.get(nic["field"]) if found is not None else None
        return (nic["field"], why) if why else None
    section = _SECTION_PATH.match(path)
    if section is not None:
        reasons = (candidate.software if section["section"] == "software" else candidate.host).na_reasons
        why = reasons.get(section["field"])
        return (section["field"], why) if why else None
    return None


def _claim_absent(pool: Pool, candidate: Snapshot) -> None:
    groups: dict[str, list[tuple[int, str]]] = {}
    for i in sorted(pool.free):
        f = pool.findings[i]
        if f.actual is not None or f.expected is None:
            continue
        found = _reason(pool, f, candidate)
        if found is not None:
            groups.setdefault(found[1], []).append((i, found[0]))
    for why, members in sorted(groups.items()):
        indexes = [i for i, _ in members]
        pool.free.difference_update(indexes)
        fields = ", ".join(dict.fromkeys(name for _, name in members))
        where = pool.gpus_text(indexes)
        nics = sorted({m["name"] for i in indexes if (m := _NIC_PATH.match(pool.findings[i].path or ""))})
        if nics:
            where += f" on {plural(len(nics), 'NIC')} ({', '.join(nics[:4])}{', ...' if len(nics) > 4 else ''})"
        pool.add(
            f"evidence.unreported:{why}",
            indexes,
            f"{fields} not reported{where}: {why} (the baseline had a value; read as missing evidence, not a change)",
            category=CauseCategory.EVIDENCE,
            owner=owner_of(_EVIDENCE),
        )
