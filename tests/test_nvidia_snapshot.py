"""NVIDIA nodes through the same capture and snapshot code (issue 30): a fake 8x H100 node whose nvidia-smi
prints the real formats, captured with the NVIDIA catalogue, mapped onto the vendor-neutral model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode.nvidia import (
    DRIVER_550,
    H100_BUSES,
    NvidiaNodeSpec,
    build_nvidia_node,
    h100_node,
    reverse_order,
)
from upgrade_gate.model import IssueKind, LinkType, Snapshot, replace
from upgrade_gate.parse.nvidia_dmesg import load_nvidia_patterns
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.io import load_snapshot, write_snapshot
from upgrade_gate.snapshot.nvidia import parse_whole_node
from upgrade_gate.vendors import NVIDIA

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
BDFS = [f"0000:{bus:02x}:00.0" for bus in H100_BUSES]


def _snapshot(tmp_path: Path, spec: NvidiaNodeSpec, *, module_version: str | None = None) -> Snapshot:
    node = build_nvidia_node(tmp_path / spec.name, spec)
    if module_version is not None:
        (node.host_root / "sys/module/nvidia/version").write_text(module_version + "\n", encoding="utf-8")
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node=spec.name,
        host_root=node.host_root,
        output_check=parser_check(),
        probes=probe_catalogue(node.host_root, vendor=NVIDIA),
    )
    return build_snapshot(bundle, node_class="h100-8gpu")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return _snapshot(tmp_path_factory.mktemp("h100"), h100_node("gpu-node-01", seed=1))


def test_nvidia_snapshot_gpus_carry_index_bdf_serial_uuid_firmware(healthy: Snapshot) -> None:
    assert [g.index for g in healthy.gpus] == list(range(8))
    assert [g.bdf for g in healthy.gpus] == BDFS
    assert len({g.serial for g in healthy.gpus}) == 8 and all(g.serial for g in healthy.gpus)
    assert all(g.unique_id and g.unique_id.startswith("GPU-") for g in healthy.gpus)
    gpu = healthy.gpus[0]
    assert gpu.product_name == "NVIDIA H100 80GB HBM3" and gpu.gfx_target == "Hopper" and gpu.device_id == "0x2330"
    assert gpu.firmware == {
        "inforom.img": "G520.0205.00.02",
        "inforom.oem": "2.1",
        "inforom.ecc": "7.16",
        "gsp": DRIVER_550.version,
    }
    assert gpu.vbios == "96.00.51.00.0E" and gpu.vram_total_mib == 81559 and gpu.numa_node == 0
    assert gpu.compute_partition == "MIG Disabled" and gpu.memory_partition is None
    assert "memory_partition" in gpu.na_reasons


def test_nvidia_snapshot_links_are_nvlink_with_their_count(healthy: Snapshot) -> None:
    assert len(healthy.gpu_links) == 28
    assert {(link.link_type, link.weight) for link in healthy.gpu_links} == {(LinkType.NVLINK, 18)}


def test_nvidia_snapshot_software_probes_and_kernel_table(healthy: Snapshot) -> None:
    assert healthy.software.driver_version == DRIVER_550.version
    assert healthy.software.rocm_version is None and "no ROCm" in healthy.software.na_reasons["rocm_version"]
    assert all(p.ok for p in healthy.probes), [p for p in healthy.probes if not p.ok]
    assert {p.name for p in healthy.probes} >= {"nvidia_smi", "nvidia_smi_topo", "nvidia_smi_nvlink", "dmesg"}
    assert not any(p.name.startswith(("rocm", "amdsmi")) for p in healthy.probes)
    assert healthy.event_patterns == load_nvidia_patterns().digest and healthy.events == ()
    assert healthy.evidence_issues == () and len(healthy.nics) == 8


def test_nvidia_snapshot_is_schema_valid(healthy: Snapshot, tmp_path: Path) -> None:
    write_snapshot(healthy, tmp_path / "s.json")
    assert load_snapshot(tmp_path / "s.json") == healthy


def test_nvidia_snapshot_reversed_order_moves_index_not_identity(tmp_path: Path, healthy: Snapshot) -> None:
    snap = _snapshot(tmp_path, reverse_order(h100_node("gpu-node-01", seed=1)))
    assert [g.bdf for g in snap.gpus] == BDFS[::-1]
    assert [g.unique_id for g in snap.gpus] == [g.unique_id for g in healthy.gpus][::-1]


def test_nvidia_snapshot_board_without_serial_is_none_with_reason(tmp_path: Path) -> None:
    spec = h100_node("gpu-node-02", seed=2)
    spec = replace(spec, gpus=tuple(replace(g, serial="0000000000000") for g in spec.gpus))
    snap = _snapshot(tmp_path, spec)
    assert all(g.serial is None for g in snap.gpus)
    assert "board without a serial" in snap.gpus[0].na_reasons["serial"]


def test_nvidia_snapshot_driver_disagreement_is_a_conflict(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, h100_node("gpu-node-03", seed=3), module_version="570.158.01")
    assert snap.software.driver_version == "570.158.01"  # the loaded module's own file first
    issue = next(i for i in snap.evidence_issues if i.subject == "software.driver_version")
    assert issue.kind is IssueKind.CONFLICT and issue.values["nvidia_smi"] == DRIVER_550.version


def test_nvidia_snapshot_refuses_a_document_missing_attached_gpus() -> None:
    # The real telegraf A100 document: attached_gpus 4, one <gpu> (the fixture's author kept one).
    text = (FIXTURES / "a100-sxm4-80gb-mig-q-x-driver535-telegraf.xml").read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="lists 1 of 4 attached GPUs"):
        parse_whole_node(text)
