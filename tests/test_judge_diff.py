"""The snapshot diff: identity-keyed paths, sorted, deepdiff kept inside the diff module."""

from __future__ import annotations

from tests.judge_scenarios import GPU_BDFS, SERIALS, lose_vf, mi300x_snapshot, reverse_order, set_firmware, upgraded
from upgrade_gate.judge.diff import diff_snapshots, diff_views_deepdiff, prune_equal, snapshot_views
from upgrade_gate.judge.identity import MatchKind, match_gpus, rocr_uuid
from upgrade_gate.judge.paths import render_path
from upgrade_gate.model import Change, ChangeOp, Gpu, GpuSerial, Snapshot, replace


def test_diff_identical_snapshots_is_empty() -> None:
    snap = mi300x_snapshot()
    assert diff_snapshots(snap, snap) == ()


def test_diff_names_gpus_by_serial_and_sorts_by_path() -> None:
    base = mi300x_snapshot()
    cand = set_firmware(lose_vf(base), "PLDM_BUNDLE", "01.25.17.07")
    changes = diff_snapshots(base, cand)
    assert all(isinstance(c, Change) for c in changes)
    assert [c.path for c in changes] == sorted(c.path for c in changes)
    fw = next(c for c in changes if c.path == f"gpus[serial={SERIALS[3]}].firmware.PLDM_BUNDLE")
    assert (fw.op, fw.baseline, fw.candidate) == (ChangeOp.CHANGED, "01.25.03.12", "01.25.17.07")
    paths = {c.path for c in changes}
    assert "sriov[bdf=0000:66:00.0].numvfs" in paths
    assert "nics[name=ionic_2].sriov_numvfs" in paths


def test_diff_of_reversed_order_changes_only_indices() -> None:
    base = mi300x_snapshot()
    changes = diff_snapshots(base, reverse_order(base))
    assert {c.path.rsplit(".", 1)[1] for c in changes} == {"index"}
    first = next(c for c in changes if c.path == f"gpus[serial={SERIALS[0]}].index")
    assert (first.baseline, first.candidate) == (0, 7)


def test_diff_keeps_measurement_noise_out_but_reports_settings() -> None:
    base, cand = mi300x_snapshot(seed=1), mi300x_snapshot(seed=2)
    assert diff_snapshots(base, cand) == ()
    phases = tuple(
        replace(p, measurements=tuple(replace(m, settings={**m.settings, "iters": "50"}) for m in p.measurements))
        if p.phase == 2
        else p
        for p in cand.phases
    )
    changes = diff_snapshots(base, replace(cand, phases=phases))
    assert "measurements[key=mesh/all_reduce/avg_busbw].settings.iters" in {c.path for c in changes}


def test_diff_reports_added_and_removed_nic_ports() -> None:
    base = mi300x_snapshot()
    nics = tuple(replace(n, ports=()) if n.name == "ionic_5" else n for n in base.nics)
    changes = diff_snapshots(base, replace(base, nics=nics))
    removed = [c for c in changes if c.op is ChangeOp.REMOVED]
    assert [c.path for c in removed] == ["nics[name=ionic_5].ports[port=1]"]
    assert removed[0].baseline["state"] == "PORT_ACTIVE"  # type: ignore[index]


def test_diff_software_change_is_a_plain_change() -> None:
    changes = diff_snapshots(mi300x_snapshot(), upgraded())
    rocm = next(c for c in changes if c.path == "software.rocm_version")
    assert (rocm.baseline, rocm.candidate, rocm.expected) == ("6.1.3", "6.2.0", False)


def test_render_path_brackets_keys_only_under_keyed_collections() -> None:
    assert render_path(["gpus", "serial=A", "firmware", "SMC"]) == "gpus[serial=A].firmware.SMC"
    assert render_path(["nics", "ionic_0", "ports", "1", "state"]) == "nics[name=ionic_0].ports[port=1].state"
    assert render_path(["node", "labels", "pool"]) == "node.labels.pool"


def _gpu(index: int, bdf: str | None, serial: str | None = None, uid: str | None = None) -> Gpu:
    return Gpu(index=index, bdf=bdf, serial=GpuSerial(serial) if serial else None, unique_id=uid)  # type: ignore[arg-type]


def test_identity_prefers_serial_then_unique_id_then_bdf() -> None:
    base = (_gpu(0, "0000:05:00.0", "S0"), _gpu(1, "0000:15:00.0", None, "0xAB"), _gpu(2, "0000:65:00.0"))
    cand = (_gpu(0, "0000:05:00.0", "S0"), _gpu(1, "0000:15:00.0", None, "0xab"), _gpu(2, "0000:65:00.0"))
    kinds = {p.label: p.kind for p in match_gpus(base, cand)}
    assert kinds == {
        "serial=S0": MatchKind.SERIAL,
        "unique_id=0xab": MatchKind.UNIQUE_ID,
        "bdf=0000:65:00.0": MatchKind.BDF,
    }
    assert not MatchKind.BDF.verified


def test_identity_never_pairs_a_slot_whose_ids_differ() -> None:
    pairs = match_gpus((_gpu(0, "0000:05:00.0", "OLD"),), (_gpu(0, "0000:05:00.0", "NEW"),))
    assert [(p.label, p.baseline is not None, p.candidate is not None) for p in pairs] == [
        ("serial=OLD", True, False),
        ("serial=NEW", False, True),
    ]


def test_identity_ignores_placeholder_and_duplicate_serials() -> None:
    # rocm-smi prints serial "0" on parts without a FRU; two GPUs sharing one id identify nothing.
    base = (_gpu(0, "0000:05:00.0", "0"), _gpu(1, "0000:15:00.0", "DUP"), _gpu(2, "0000:65:00.0", "DUP"))
    pairs = match_gpus(base, base)
    assert {p.kind for p in pairs} == {MatchKind.BDF}


def test_rocr_uuid_is_rocminfo_form_of_unique_id() -> None:
    assert rocr_uuid(_gpu(0, str(GPU_BDFS[0]), uid="0x28246CE5673B4AA0")) == "GPU-28246ce5673b4aa0"
    assert rocr_uuid(_gpu(0, None, uid="N/A")) is None


def _with_deepdiff(base: Snapshot, cand: Snapshot) -> tuple[Change, ...]:
    """The reference: deepdiff over the same pruned views (what `diff_snapshots` ran before issue 14)."""
    changes = diff_views_deepdiff(*prune_equal(*snapshot_views(base, cand)))
    return tuple(sorted(changes, key=lambda c: (c.path, c.op.value)))


def test_diff_direct_walk_agrees_with_deepdiff_on_every_kind_of_change() -> None:
    base = mi300x_snapshot()
    gpus = list(base.gpus)
    cases = {
        "identical": base,
        "upgrade": upgraded(),
        "reordered": reverse_order(base),
        "vf lost + firmware": set_firmware(lose_vf(base), "PLDM_BUNDLE", "01.25.17.07"),
        "gpu removed": replace(base, gpus=tuple(gpus[1:])),
        "gpu added back twice": replace(base, gpus=(*gpus, replace(gpus[0], bdf=gpus[0].bdf))),
        "type change (int -> float)": replace(base, gpus=(replace(gpus[0], numa_node=1.0), *gpus[1:])),  # type: ignore[arg-type]
        "value to None": replace(base, gpus=(replace(gpus[0], numa_node=None), *gpus[1:])),
        "software": replace(base, software=replace(base.software, rocm_version="6.4.0", kernel=None)),
        "nic port": replace(base, nics=(replace(base.nics[0], ports=base.nics[0].ports[1:]), *base.nics[1:])),
        "phases dropped": replace(upgraded(), phases=()),
        "measurement settings": replace(
            base,
            measurements=tuple(
                replace(m, settings={**m.settings, "iters": "99"}, samples=m.samples[:2]) for m in base.measurements
            ),
        ),
    }
    for name, cand in cases.items():
        for a, b in ((base, cand), (cand, base)):
            assert diff_snapshots(a, b) == _with_deepdiff(a, b), name


def test_diff_host_and_probe_views_are_skipped_only_when_equal() -> None:
    """Equal host facts and probe lists build no views (the usual fleet node); a difference in either is
    still a change, and a cmdline differing only by BOOT_IMAGE= still is none (compared as rules.host)."""
    base = mi300x_snapshot()
    host = replace(base.host, captured=True, kernel_cmdline="ro quiet amd_iommu=on")
    base = replace(base, host=host)
    assert diff_snapshots(base, replace(base, host=replace(host))) == ()
    booted = replace(base, host=replace(host, kernel_cmdline="BOOT_IMAGE=/vmlinuz-6.8 ro quiet amd_iommu=on"))
    assert diff_snapshots(base, booted) == ()
    tuned = replace(base, host=replace(host, kernel_cmdline="ro quiet amd_iommu=on iommu=pt"))
    assert [(c.path, c.candidate) for c in diff_snapshots(base, tuned)] == [
        ("host.kernel_cmdline", "ro quiet amd_iommu=on iommu=pt")
    ]
    hung = replace(base.probes[0], ok=False, reason="timed out", timed_out=True)
    changed = diff_snapshots(base, replace(base, probes=(hung, *base.probes[1:])))
    assert [c.path for c in changed] == [f"probes[name={hung.name}].{f}" for f in ("ok", "reason", "timed_out")]
