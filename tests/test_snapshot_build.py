"""Bundle -> snapshot on fake nodes: the same capture code as a real node, faults recorded, never dropped."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.cli.main import run
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import Faults, build_fake_node, faults, mi300x_node
from upgrade_gate.fakenode.spec import NodeSpec
from upgrade_gate.model import ProbeStatus, Snapshot
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.io import load_snapshot

BDFS = [f"0000:{b}:00.0" for b in ("05", "15", "65", "75", "85", "95", "e5", "f5")]


def _snapshot(
    tmp_path: Path,
    faults_: Faults = Faults(),
    *,
    spec_fn: Callable[[NodeSpec], NodeSpec] | None = None,
    timeout: float | None = None,
) -> Snapshot:
    spec = mi300x_node("gpu-node-01", seed=1)
    if spec_fn is not None:
        spec = spec_fn(spec)
    node = build_fake_node(tmp_path / "node", spec, faults_)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node="gpu-node-01",
        host_root=node.host_root,
        timeout=timeout,
        output_check=parser_check(),
    )
    return build_snapshot(bundle)


def _probe(snap: Snapshot, name: str) -> ProbeStatus:
    return next(p for p in snap.probes if p.name == name)


def test_snapshot_healthy_fake_node_has_8_gpus_with_index_bdf_serial(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    assert [g.index for g in snap.gpus] == list(range(8))
    assert [g.bdf for g in snap.gpus] == BDFS
    assert all(g.serial and g.unique_id and g.gfx_target == "gfx942" for g in snap.gpus)
    assert len({g.serial for g in snap.gpus}) == 8
    assert all(p.ok for p in snap.probes), [p for p in snap.probes if not p.ok]
    assert snap.software.rocm_version and snap.software.kernel and snap.software.driver_version
    assert len(snap.gpu_links) == 28 and all(link.link_type == "XGMI" for link in snap.gpu_links)
    assert len(snap.nics) == 8 and all(n.bdf and n.fw_ver and n.ports for n in snap.nics)
    assert all(n.ports[0].roce_v2 for n in snap.nics)


def test_snapshot_reversed_enumeration_reverses_index_to_bdf(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, spec_fn=faults.reverse_enumeration)
    assert [g.bdf for g in snap.gpus] == BDFS[::-1]


def test_snapshot_amdsmi_missing_falls_back_to_rocmsmi_and_records_it(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, Faults(tools={"amd-smi": faults.missing()}))
    assert not _probe(snap, "amdsmi_static").ok
    assert _probe(snap, "amdsmi_static").missing
    fallback = _probe(snap, "rocmsmi")
    assert fallback.ok and "amdsmi_static" in fallback.fallback_for
    assert all(g.serial for g in snap.gpus), "serials come from the rocm-smi fallback"


def test_snapshot_rocminfo_hang_is_recorded_and_order_is_flagged(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, Faults(tools={"rocminfo": faults.hang()}), timeout=1.0)
    probe = _probe(snap, "rocminfo")
    assert not probe.ok and probe.timed_out and "timed out" in (probe.reason or "")
    assert snap.gpus and all("index" in g.na_reasons for g in snap.gpus)


def test_snapshot_garbage_lspci_is_unparseable_not_empty(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, Faults(tools={"lspci": faults.garbage()}))
    probe = _probe(snap, "lspci")
    assert not probe.ok and "unparseable" in (probe.reason or "")
    assert snap.pcie == ()


def test_snapshot_nonzero_ibv_devinfo_keeps_nics_from_rdma_link(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, Faults(tools={"ibv_devinfo": faults.nonzero(2, "ibv_devinfo: no device")}))
    probe = _probe(snap, "ibv_devinfo")
    assert not probe.ok and probe.exit_code == 2
    assert len(snap.nics) == 8 and all("ports" in n.na_reasons for n in snap.nics)


def test_snapshot_cli_capture_then_snapshot_is_schema_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = build_fake_node(tmp_path / "node", mi300x_node("gpu-node-01", seed=1))
    bundle = tmp_path / "bundle.tar.gz"
    monkeypatch.setenv("PATH", str(node.bin_dir))  # the process environment is the CLI's real input
    rc = run(["capture", "--out", str(bundle), "--node", "gpu-node-01", "--host-root", str(node.host_root)])
    monkeypatch.undo()
    assert rc == 0
    out = tmp_path / "snap.json"
    assert run(["snapshot", str(bundle), "--out", str(out)]) == 0
    snap = load_snapshot(out)
    assert len(snap.gpus) == 8 and all(g.bdf and g.serial for g in snap.gpus)
    assert json.loads(out.read_text())["schema_version"] == "2"  # CAPTURE_VERSION: what gate reads fastest


def test_snapshot_cli_bad_bundle_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    assert run(["snapshot", str(bad)]) == 3
    assert "manifest.json" in capsys.readouterr().err


def test_snapshot_cli_needs_bundle_or_local() -> None:
    assert run(["snapshot"]) == 2
