"""Structural diff of two snapshots as the project's own `Change` records.

This is the only module that imports deepdiff (docs/style.md guideline 1, enforced by import-linter); nothing
outside it sees a deepdiff object. deepdiff is imported inside `diff_snapshots`, so importing the judge
does not pay for it.

Design decisions:
- Both snapshots are first turned into a *view*: nested dicts keyed by identity, so deepdiff compares
  the same device with itself whatever order the tools listed them in. GPUs are keyed by the label of
  `identity.match_gpus` (serial, else unique id, else BDF), NICs by RDMA device name, PCIe links and
  SR-IOV functions by BDF, XGMI links by their BDF pair, measurements by key, phases by number,
  probes by name. A label becomes a bracketed path segment: `gpus[serial=ABC].firmware.SMC`,
  `nics[name=ionic_0].ports[port=1].state`, `measurements[key=mesh/all_reduce/busbw/1024].median`.
- Values that differ on every run are left out of the view: `taken_at`, `tool_version`, probe and
  phase durations, the samples of a measurement (the view holds its unit, settings and sample count,
  what decides comparability; run-to-run noise would make every median a "change", and the bandwidth
  rules judge the samples) and dmesg events (the dmesg rule judges those).
- Subtrees that are equal on both sides are pruned before deepdiff sees them (plain `==` on dicts
  is C-fast; deepdiff's per-node bookkeeping is not): the result is the same, the cost is that of
  the differences. This keeps the judge linear and cheap at fleet scale.
- Changes are sorted by path, so the same pair of snapshots always gives the same list. The path
  grammar (how a keyed item becomes `[kind=key]`, and how rules read a path's item back) lives in
  `judge.paths`, which imports nothing heavy, so rules can use it without importing this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from upgrade_gate import codec
from upgrade_gate.judge.identity import match_gpus
from upgrade_gate.judge.paths import render_path
from upgrade_gate.judge.rules.facts import comparable_cmdline
from upgrade_gate.model import Change, ChangeOp, Gpu, Measurement, Snapshot, measurements_of


def diff_snapshots(baseline: Snapshot, candidate: Snapshot) -> tuple[Change, ...]:
    """Every difference between two snapshots of a node, sorted by path."""
    from deepdiff import DeepDiff
    from deepdiff.helper import NotPresent

    left, right = prune_equal(*snapshot_views(baseline, candidate))
    tree = DeepDiff(left, right, view="tree", ignore_order=False, verbose_level=2)
    changes: list[Change] = []
    for report_type, levels in tree.items():
        for level in levels:
            path = render_path(level.path(output_format="list"))
            before = None if isinstance(level.t1, NotPresent) else level.t1
            after = None if isinstance(level.t2, NotPresent) else level.t2
            if report_type.endswith("_added"):
                op = ChangeOp.ADDED
            elif report_type.endswith("_removed"):
                op = ChangeOp.REMOVED
            else:
                op = ChangeOp.CHANGED
            changes.append(Change(op=op, path=path, baseline=before, candidate=after))
    return tuple(sorted(changes, key=lambda c: (c.path, c.op.value)))


def prune_equal(left: dict[str, Any], right: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both dicts without the keys whose values are equal on both sides (recursively)."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for key in left.keys() | right.keys():
        if key not in right:
            a[key] = left[key]
        elif key not in left:
            b[key] = right[key]
        elif left[key] != right[key]:
            lv, rv = left[key], right[key]
            if isinstance(lv, dict) and isinstance(rv, dict):
                lv, rv = prune_equal(lv, rv)
            a[key], b[key] = lv, rv
    return a, b


def snapshot_views(baseline: Snapshot, candidate: Snapshot) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity-keyed plain views the diff compares, without the items equal on both sides."""
    pairs = match_gpus(baseline.gpus, candidate.gpus)
    left = _sections(baseline, {p.label: p.baseline for p in pairs if p.baseline is not None})
    right = _sections(candidate, {p.label: p.candidate for p in pairs if p.candidate is not None})
    if not (baseline.host.captured and candidate.host.captured):
        del left["host"], right["host"]  # a side that predates host facts has nothing to compare (rules.host)
    out_left: dict[str, Any] = {}
    out_right: dict[str, Any] = {}
    for section in left:
        lv, rv = left[section], right[section]
        if section in _SINGLE:
            if lv != rv:
                out_left[section], out_right[section] = codec.to_jsonable(lv), codec.to_jsonable(rv)
            continue
        lj: dict[str, Any] = {}
        rj: dict[str, Any] = {}
        for key in lv.keys() | rv.keys():
            if key in lv and key in rv and lv[key] == rv[key]:
                continue  # equal objects: compared in C, never converted
            if key in lv:
                lj[key] = _json(section, lv[key])
            if key in rv:
                rj[key] = _json(section, rv[key])
        if lj or rj:
            out_left[section], out_right[section] = lj, rj
    return out_left, out_right


_SINGLE = frozenset({"node", "software", "host"})


def _sections(snap: Snapshot, gpus: dict[str, Gpu]) -> dict[str, Any]:
    return {
        "node": snap.node,
        "software": snap.software,
        # compared as rules.host compares it (snapshots older than the builder's stripping carry BOOT_IMAGE=)
        "host": replace(snap.host, kernel_cmdline=comparable_cmdline(snap.host.kernel_cmdline)),
        "gpus": gpus,
        "gpu_links": {f"a={link.a},b={link.b}": link for link in snap.gpu_links},
        "pcie": {str(link.bdf): link for link in snap.pcie},
        "nics": {nic.name: nic for nic in snap.nics},
        "sriov": {str(f.bdf): f for f in snap.sriov},
        "measurements": _measurement_views(measurements_of(snap)),
        "phases": {str(p.phase): {"name": p.name, "status": p.status.value, "reason": p.reason} for p in snap.phases},
        "probes": {
            p.name: {"ok": p.ok, "reason": p.reason, "timed_out": p.timed_out, "missing": p.missing}
            for p in snap.probes
        },
    }


def _json(section: str, value: Any) -> Any:
    if section == "gpu_links":
        return {"link_type": value.link_type.value, "hops": value.hops, "weight": value.weight}
    if section in ("pcie", "sriov"):
        return _without(codec.to_jsonable(value), "bdf")
    if section == "nics":
        return _nic_view(codec.to_jsonable(value))
    if section == "gpus":
        return codec.to_jsonable(value)
    return value  # already plain (measurements, phases, probes)


def _without(data: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in keys}


def _nic_view(data: dict[str, Any]) -> dict[str, Any]:
    out = _without(data, "name", "ports")
    out["ports"] = {str(p["port"]): _without(p, "port") for p in data["ports"]}
    return out


def _measurement_views(measurements: tuple[Measurement, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in measurements:
        view = {"unit": m.unit, "settings": dict(m.settings), "n_samples": len(m.samples)}
        key = m.key
        n = 2
        while key in out:  # the same key twice (snapshot and phase): keep both, distinguishably
            key = f"{m.key}#{n}"
            n += 1
        out[key] = view
    return out
